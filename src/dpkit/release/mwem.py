"""MWEM: private multiplicative weights with the exponential mechanism (Hardt-Ligett-McSherry
2012), releasing a synthetic histogram that answers a whole workload of counting queries.

Algorithm (for ``T`` rounds, starting from the uniform distribution ``p_0`` over the domain and
a private estimate ``n̂`` of the number of records):

1. **select** a badly answered query with the exponential mechanism, score
   ``|q·x − n̂ q·p_{t−1}|`` (sensitivity ``c``: one unit moves ``x`` by ``c`` in L1 and a counting
   query's entries lie in [0, 1]) — event ``Exponential(ε_sel)``;
2. **measure** it: ``m_t = q·x + z`` with exact discrete Laplace (ε) or discrete Gaussian (ρ)
   noise — event ``DiscreteLaplace(s, c)`` / ``DiscreteGaussian(σ², c)`` (scalar queries);
3. **update** by multiplicative weights on every measurement so far (``passes`` sweeps):
   ``p ← p · exp(q (m − n̂ q·p) / (2 n̂))``, normalised.

Output: ``n̂ · p_T`` (the last distribution, as HLM's experiments use; ``output="average"`` gives
the average of ``p_1 … p_T`` that their Theorem 2.2 analyses — measured here, the last one has
about half the error). The whole run is one event:
``Composed([total, SelfComposed(Composed([Exponential, measurement]), T)])``, pure ε-DP with
``epsilon=`` (ε split: a fraction ``total_fraction`` for ``n̂``, the rest evenly over rounds and
half/half between selection and measurement), ρ-zCDP with ``rho=`` (the exponential mechanism is
ε-bounded-range, hence ε²/8-zCDP: Cesar-Rogers 2021).

Exactness: queries with entries in {0, 1} are used as they are; others are scaled by 2**16 and
rounded to integers (the rounded query is the one measured and used). Scores are computed on a
2**-20 grid so that neighbouring scores differ by at most the stated sensitivity, exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import (
    Composed,
    DiscreteGaussian,
    Event,
    Exponential,
    SelfComposed,
)
from dpkit.mechanisms import validate as v
from dpkit.mechanisms.exponential import exponential
from dpkit.mechanisms.plan import discrete_laplace_plan
from dpkit.mechanisms.release import Release
from dpkit.noise import Source
from dpkit.release.noise_plan import sigma2_for
from dpkit.release.workloads import Workload, from_matrix

__all__ = ["mwem", "mwem_event", "synthetic_records"]

_SCORE_GRID = 2.0**20
#: MWEM keeps the workload dense: at most this many matrix entries.
MAX_ENTRIES = 20_000_000


def _measurement(kind: str, sens: int, budget: float) -> tuple[Event, float, str]:
    """(event, noise parameter, kind) for a scalar integer query of sensitivity ``sens``:
    ε-DP discrete Laplace for ``kind == "laplace"``, ρ-zCDP discrete Gaussian otherwise."""
    if kind == "laplace":
        lap = discrete_laplace_plan(sensitivity=sens, epsilon=budget)
        return lap.event, lap.scale, kind
    sigma2 = sigma2_for(sens * sens, budget)
    return DiscreteGaussian(sigma2, sens), sigma2, kind


def _draw(kind: str, parameter: float, src: Source) -> int:
    if kind == "laplace":
        return int(noise.discrete_laplace(parameter, 1, source=src)[0])
    return int(noise.discrete_gaussian(parameter, 1, source=src)[0])


@dataclass(frozen=True)
class _Setup:
    rounds: int
    contributions: int
    kind: str
    budget: float
    Mq: np.ndarray
    mult: int
    Qt: np.ndarray
    eps_sel: float
    par_m: float
    par_n: float | None
    event: Event


def _setup(
    Q: np.ndarray,
    *,
    epsilon: float | None,
    rho: float | None,
    rounds: int,
    total: int | None,
    total_fraction: float,
    contributions: int,
) -> _Setup:
    """Everything MWEM fixes before reading data: integer queries, budget split, the event."""
    T = v.check_positive_int(rounds, "rounds")
    c = v.check_positive_int(contributions, "contributions")
    if (epsilon is None) == (rho is None):
        raise ValueError("pass exactly one of epsilon= (pure DP) or rho= (zCDP)")
    kind = "laplace" if epsilon is not None else "gaussian"
    budget = v.check_epsilon(epsilon) if epsilon is not None else v.check_rho(rho)
    if total is not None:
        frac = 0.0
        v.check_positive_int(total, "total")
    else:
        frac = float(total_fraction)
        if not 0.0 < frac < 1.0:
            raise ValueError("total_fraction must lie in (0, 1) when total is not given")
    # integer queries: 0/1 as they are, otherwise scaled by 2**16
    if np.all((Q == 0) | (Q == 1)):
        Mq, mult = Q.astype(np.int64), 1
    else:
        mult = 2**16
        Mq = np.rint(Q * mult).astype(np.int64)
    Qt = Mq / mult  # the queries actually used
    sens = c * int(Mq.max()) if Mq.max() > 0 else c
    events: list[Event] = []
    par_n = None
    if total is None:
        ev_n, par_n, _ = _measurement(kind, c, frac * budget)
        events.append(ev_n)
    per_round = (1.0 - frac) * budget / T
    if kind == "laplace":
        eps_sel = per_round / 2.0
        meas_budget = per_round / 2.0
    else:
        eps_sel = math.sqrt(8.0 * per_round / 2.0)  # ε²/8 = ρ_round / 2
        meas_budget = per_round / 2.0
    ev_m, par_m, _ = _measurement(kind, sens, meas_budget)
    events.append(SelfComposed(Composed((Exponential(eps_sel), ev_m)), T))
    event: Event = Composed(tuple(events)) if len(events) > 1 else events[0]
    return _Setup(rounds=T, contributions=c, kind=kind, budget=budget, Mq=Mq, mult=mult, Qt=Qt,
                  eps_sel=eps_sel, par_m=par_m, par_n=par_n, event=event)


def _dense_counting(workload: Any) -> tuple[Workload, np.ndarray]:
    W = workload if isinstance(workload, Workload) else from_matrix(np.asarray(workload))
    if W.num_queries * W.domain_size > MAX_ENTRIES:
        raise ValueError(
            f"MWEM keeps the workload dense; {W.num_queries} x {W.domain_size} is too large"
        )
    Q = W.dense()
    if np.any(Q < 0) or np.any(Q > 1):
        raise ValueError("MWEM needs counting queries with entries in [0, 1] (sensitivity 1)")
    return W, Q


def mwem_event(
    workload: Any,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    rounds: int = 10,
    total: int | None = None,
    total_fraction: float = 0.05,
    contributions: int = 1,
) -> Event:
    """The event :func:`mwem` will report for these arguments, computed without data (so a
    curator can check and charge its budget before reading any row).

    >>> from dpkit.release import workloads
    >>> type(mwem_event(workloads.prefix(4), epsilon=1.0, rounds=3)).__name__
    'Composed'
    """
    _, Q = _dense_counting(workload)
    return _setup(Q, epsilon=epsilon, rho=rho, rounds=rounds, total=total,
                  total_fraction=total_fraction, contributions=contributions).event


def mwem(
    x: Any,
    workload: Any,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    rounds: int = 10,
    total: int | None = None,
    total_fraction: float = 0.05,
    passes: int = 10,
    output: str = "last",
    contributions: int = 1,
    source: Source | None = None,
) -> Release[np.ndarray]:
    """Synthetic histogram for ``workload`` by MWEM (see the module docstring).

    **Guarantee.** Neighbouring relation: add/remove one unit, which moves the integer
    histogram ``x`` by at most ``contributions`` in L1. ``epsilon=``: ε-DP; ``rho=``: ρ-zCDP.
    ``total`` may give a *public* number of records (then no budget is spent on it).
    The workload must consist of counting queries (entries in [0, 1]).

    ``value``: the synthetic histogram (floats >= 0 summing to ``n̂``); round it with
    :func:`synthetic_records`. ``details``: ``selected`` (query index per round),
    ``measured`` (noisy answers), ``total`` (``n̂``), ``answers`` (the workload on the
    synthetic data).

    >>> import dpkit as dp
    >>> from dpkit.release import workloads
    >>> r = mwem([40, 10, 0, 50], workloads.prefix(4), epsilon=2.0, rounds=3,
    ...          source=dp.noise.seeded(5))
    >>> r.value.shape, type(r.event).__name__
    ((4,), 'Composed')
    """
    W, Q = _dense_counting(workload)
    xs = v.check_integers(x, "x")
    n = W.domain_size
    if xs.shape != (n,):
        raise ValueError(f"x must be the histogram over the workload's {n} cells")
    P = v.check_positive_int(passes, "passes")
    if output not in ("average", "last"):
        raise ValueError(f"output must be 'average' or 'last' (got {output!r})")
    src = v.resolve_source(v.check_source(source))
    setup = _setup(Q, epsilon=epsilon, rho=rho, rounds=rounds, total=total,
                   total_fraction=total_fraction, contributions=contributions)
    # --- the number of records
    if total is None:
        assert setup.par_n is not None
        n_hat = max(1.0, float(int(xs.sum()) + _draw(setup.kind, setup.par_n, src)))
    else:
        n_hat = float(v.check_positive_int(total, "total"))
    true_int = setup.Mq @ xs  # exact integer answers (scaled by mult)
    p = np.full(n, 1.0 / n)
    avg = np.zeros(n)
    selected: list[int] = []
    measured: list[float] = []
    for _ in range(setup.rounds):
        j = _select(setup, p, n_hat, true_int, src)
        selected.append(j)
        measured.append(_measure(setup, true_int, j, src))
        p = _update(setup.Qt, p, n_hat, selected, measured, P)
        avg += p
    final = avg / setup.rounds if output == "average" else p
    hist = n_hat * final
    return Release(
        value=hist,
        event=setup.event,
        ci=None,
        level=0.95,
        insecure=src.insecure,
        details={
            "mechanism": "MWEM (Hardt-Ligett-McSherry 2012)",
            "neighbouring": f"add/remove one unit; x moves by <= {setup.contributions} in L1",
            "selected": selected,
            "measured": measured,
            "total": n_hat,
            "rounds": setup.rounds,
            "answers": W.matvec(hist),
            "selection_epsilon": setup.eps_sel,
            "measurement_noise": (setup.kind, setup.par_m),
            "exact_budget": str(Fraction(setup.budget)),
        },
    )


def _select(setup: _Setup, p: np.ndarray, n_hat: float, true_int: np.ndarray,
            src: Source) -> int:
    """Step 1: a badly answered query by the exponential mechanism (``Exponential(eps_sel)``).
    Scores lie on the 2**-20 grid, so one unit moves each by at most ``c * max(Mq) / mult``."""
    synth = n_hat * (setup.Qt @ p)
    synth_grid = np.rint(synth * _SCORE_GRID) / _SCORE_GRID
    scores = np.abs(synth_grid - true_int / setup.mult)
    pick = exponential(
        list(range(setup.Mq.shape[0])),
        scores,
        sensitivity=float(setup.contributions * setup.Mq.max()) / setup.mult,
        epsilon=setup.eps_sel,
        source=src,
    )
    return int(pick.value)


def _measure(setup: _Setup, true_int: np.ndarray, j: int, src: Source) -> float:
    """Step 2: query ``j``'s exact integer answer plus discrete Laplace / Gaussian noise, back
    on the query's scale (the round's measurement event)."""
    return (int(true_int[j]) + _draw(setup.kind, setup.par_m, src)) / setup.mult


def _update(Qt: np.ndarray, p: np.ndarray, n_hat: float, selected: list[int],
            measured: list[float], passes: int) -> np.ndarray:
    """Step 3 (post-processing): ``passes`` sweeps of multiplicative weights over every
    measurement so far, in log space shifted by its maximum (so ``exp`` never overflows)."""
    for _ in range(passes):
        for i, mi in zip(selected, measured, strict=True):
            q = Qt[i]
            err = mi - n_hat * float(q @ p)
            logw = np.log(np.maximum(p, 1e-300)) + q * err / (2.0 * n_hat)
            logw -= logw.max()
            p = np.exp(logw)
            p /= p.sum()
    return p


def synthetic_records(histogram: Any, total: int | None = None) -> np.ndarray:
    """Integer counts per cell closest to ``histogram`` (largest-remainder rounding of its
    non-negative part to ``total`` records, default its rounded sum): post-processing, so the
    synthetic dataset has the same privacy as the histogram. ``np.repeat(np.arange(N),
    counts)`` lists the synthetic records' cells. A histogram with no positive cell (all its
    noisy counts <= 0) spreads ``total`` records evenly over the cells: the number of records
    asked is kept whatever the noise drew (FINDINGS.md K2).

    >>> synthetic_records([0.4, 1.7, 0.9]).tolist()
    [0, 2, 1]
    >>> synthetic_records([-2.0, 0.0, -0.5], total=4).tolist()
    [2, 1, 1]
    """
    h = np.maximum(np.asarray(histogram, dtype=np.float64), 0.0)
    k = round(float(h.sum())) if total is None else int(total)
    if k < 0:
        raise ValueError("total must be >= 0")
    if h.sum() == 0:
        if k == 0 or h.size == 0:
            return np.zeros(h.shape, dtype=np.int64)
        h = np.ones(h.shape, dtype=np.float64)  # no mass anywhere: no cell is favoured
    target = h * (k / h.sum())
    base = np.floor(target).astype(np.int64)
    rest = k - int(base.sum())
    if rest > 0:
        order = np.argsort(-(target - base), kind="stable")
        base[order[:rest]] += 1
    return base
