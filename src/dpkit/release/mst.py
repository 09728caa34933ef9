"""MST: synthetic records over many columns from 1-way and tree-selected 2-way marginals
(McKenna, Miklau, Sheldon 2021, "Winning the NIST Contest").

The data are records over ``d`` attributes with public finite domains (sizes ``shape``), given
sparsely: ``cells`` (one row of value indices per distinct record) and ``counts``. Nothing here
needs the product domain, so any number of columns works: the largest object is one 2-way table.

Algorithm (budget split in three equal parts, as in MST):

1. **measure** every 1-way marginal with exact integer noise (discrete Gaussian under zCDP,
   discrete Laplace under pure DP), then **compress** each domain: values whose noisy count is
   below 3 noise standard deviations are merged into one "rare" value (post-processing);
2. **select** ``d - 1`` pairs forming a maximum spanning tree, Kruskal-style: each round the
   exponential mechanism picks a pair joining two components, scored by the L1 distance between
   the pair's true (compressed) 2-way table and its estimate under independence from step 1;
3. **measure** the selected 2-way tables (compressed domains) with the same kind of noise;
4. **fit** a consistent tree model and **sample** records from it
   (:mod:`dpkit.release.marginal_models`: exact on a tree, no inference library); records in a
   rare value get an original value in proportion to the clipped noisy 1-way counts.

**Guarantee.** Neighbouring relation: add/remove one privacy unit with at most ``contributions``
records (``c``). One unit moves every marginal (compressed or not) by at most ``c`` in L1 and L2,
and every selection score by at most ``c``. ``rho=``: ρ-zCDP, the event
``Composed([SelfComposed(DiscreteGaussian(σ1², c), d), SelfComposed(Exponential(ε_s), d-1),
SelfComposed(DiscreteGaussian(σ2², c), d-1)])`` with each part at most ρ/3 (the exponential
mechanism is ε-bounded-range, hence ε²/8-zCDP: Cesar-Rogers 2021); (ε, δ) follows by the CKS
conversion (the caller converts). ``epsilon=``: ε-DP, discrete Laplace and ε/3 per part.
Scores are computed exactly on the integer grid ``2**-20`` (the independence estimate is rounded
onto it), so the stated sensitivity holds exactly.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import Composed, DiscreteGaussian, Event, Exponential, SelfComposed
from dpkit.mechanisms import validate as v
from dpkit.mechanisms.exponential import exponential
from dpkit.mechanisms.plan import discrete_laplace_plan
from dpkit.mechanisms.release import Release
from dpkit.noise import Source
from dpkit.release.marginal_models import (
    ConditionalTreeModel,
    Measurement,
    TreeModel,
    fit_conditional,
    fit_tree,
    sample_conditional,
    sample_tree,
)
from dpkit.release.mwem import synthetic_records
from dpkit.release.noise_plan import sigma2_for

__all__ = ["MAX_PAIR_CELLS", "MSTSetup", "check_target", "mst", "mst_event", "mst_setup"]

#: the largest 2-way table MST measures (product of two column domains)
MAX_PAIR_CELLS = 1 << 22
_GRID = 1 << 20  # selection scores are exact multiples of 2**-20


@dataclass(frozen=True)
class MSTSetup:
    """Everything MST fixes before reading data (public): noise, selection ε, the event."""

    shape: tuple[int, ...]
    contributions: int
    kind: str  # "gaussian" (zCDP) or "laplace" (pure DP)
    one_way: float  # sigma2 or scale of the 1-way measurements
    two_way: float  # same for the 2-way measurements
    select_epsilon: float
    event: Event

    def variance(self, parameter: float) -> float:
        """Variance of one noisy cell (continuous approximation: σ², or 2·scale²)."""
        return parameter if self.kind == "gaussian" else 2.0 * parameter * parameter


def _noise_event(kind: str, c: int, budget: float) -> tuple[Event, float]:
    if kind == "laplace":
        lap = discrete_laplace_plan(sensitivity=c, epsilon=budget)
        return lap.event, lap.scale
    s2 = sigma2_for(c * c, budget)
    return DiscreteGaussian(s2, c), s2


def _selection_epsilon(kind: str, budget: float) -> float:
    """The largest ε whose exponential mechanism costs at most ``budget`` (ε, or ρ = ε²/8)."""
    if kind == "laplace":
        return budget
    eps = math.sqrt(8.0 * budget)
    while Fraction(eps) ** 2 / 8 > Fraction(budget):
        eps = math.nextafter(eps, 0.0)
    return eps


def mst_setup(shape: Any, *, epsilon: float | None = None, rho: float | None = None,
              contributions: int = 1) -> MSTSetup:
    """Validate the arguments and fix the noise and the event (no data read)."""
    dims = tuple(int(v.check_positive_int(k, "domain size")) for k in shape)
    if not dims:
        raise ValueError("MST needs at least one attribute")
    for a, b in itertools.combinations(range(len(dims)), 2):
        if dims[a] * dims[b] > MAX_PAIR_CELLS:
            raise ValueError(
                f"attributes {a} and {b} have a {dims[a]} x {dims[b]} table, more than "
                f"{MAX_PAIR_CELLS} cells: use coarser grids (bins=) or fewer keys")
    c = v.check_positive_int(contributions, "contributions")
    if (epsilon is None) == (rho is None):
        raise ValueError("pass exactly one of epsilon= (pure DP) or rho= (zCDP)")
    kind = "laplace" if epsilon is not None else "gaussian"
    budget = v.check_epsilon(epsilon) if epsilon is not None else v.check_rho(rho)
    d = len(dims)
    part = budget / 3.0 if d > 1 else budget
    ev1, p1 = _noise_event(kind, c, part / d)
    events: list[Event] = [SelfComposed(ev1, d)]
    p2, eps_s = 0.0, 0.0
    if d > 1:
        ev2, p2 = _noise_event(kind, c, part / (d - 1))
        eps_s = _selection_epsilon(kind, part / (d - 1))
        events += [SelfComposed(Exponential(eps_s), d - 1), SelfComposed(ev2, d - 1)]
    event: Event = Composed(tuple(events)) if len(events) > 1 else events[0]
    return MSTSetup(shape=dims, contributions=c, kind=kind, one_way=p1, two_way=p2,
                    select_epsilon=eps_s, event=event)


def check_target(shape: tuple[int, ...], target: int | None) -> None:
    """Refuse a ``target`` that is not an attribute index, or whose 3-way tables
    ``(a, b, target)`` would exceed :data:`MAX_PAIR_CELLS`."""
    if target is None:
        return
    d = len(shape)
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or not (
            0 <= int(target) < d) or d < 2:
        raise ValueError(f"target must be an attribute index in [0, {d}) of at least two "
                         f"attributes (got {target!r})")
    big = sorted(k for i, k in enumerate(shape) if i != target)[-2:]
    if len(big) == 2 and big[0] * big[1] * shape[target] > MAX_PAIR_CELLS:
        raise ValueError(
            f"with the target, the largest 3-way table has {big[0] * big[1] * shape[target]} "
            f"cells, more than {MAX_PAIR_CELLS}: use coarser grids (bins=) or no target")


def mst_event(shape: Any, *, epsilon: float | None = None, rho: float | None = None,
              contributions: int = 1) -> Event:
    """The event :func:`mst` reports for these arguments, without data (charge it first).

    >>> type(mst_event((3, 4, 2), rho=0.5)).__name__
    'Composed'
    """
    return mst_setup(shape, epsilon=epsilon, rho=rho, contributions=contributions).event


def _noisy(setup: MSTSetup, x: np.ndarray, parameter: float, src: Source) -> np.ndarray:
    """``x`` (integers) plus exact integer noise, as floats."""
    if setup.kind == "laplace":
        z = noise.discrete_laplace(parameter, x.size, source=src)
    else:
        z = noise.discrete_gaussian(parameter, x.size, source=src)
    return (x.reshape(-1) + z).astype(np.float64).reshape(x.shape)


@dataclass(frozen=True)
class _Compressed:
    """One attribute's compression: ``code[value]`` (rare values share the last code)."""

    code: np.ndarray
    size: int
    rare: np.ndarray  # the original values merged (empty: none)
    rare_weights: np.ndarray  # clipped noisy counts of the rare values


def _compress(y: np.ndarray, sd: float) -> _Compressed:
    keep = y >= 3.0 * sd
    if keep.all():
        return _Compressed(np.arange(y.size), y.size, np.zeros(0, np.int64), np.zeros(0))
    code = np.empty(y.size, dtype=np.int64)
    k = int(keep.sum())
    code[keep] = np.arange(k)
    code[~keep] = k
    rare = np.nonzero(~keep)[0]
    return _Compressed(code, k + 1, rare, np.maximum(y[rare], 0.0))


def _table(codes: np.ndarray, counts: np.ndarray, attrs: tuple[int, ...],
           sizes: list[int]) -> np.ndarray:
    """The exact (integer) marginal on ``attrs`` of the coded records."""
    shape = tuple(sizes[a] for a in attrs)
    flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), shape)
    return np.bincount(flat, weights=counts, minlength=math.prod(shape)).astype(
        np.int64).reshape(shape)


def _select(setup: MSTSetup, codes: np.ndarray, counts: np.ndarray, sizes: list[int],
            ones: list[Measurement], src: Source) -> list[tuple[int, int]]:
    """Kruskal with the exponential mechanism: ``d - 1`` pairs, each joining two components."""
    d = len(sizes)
    base = fit_tree(sizes, ones, [])  # independence estimate from the 1-way measurements
    scores: dict[tuple[int, int], float] = {}
    for a, b in itertools.combinations(range(d), 2):
        est = np.outer(base.nodes[a], base.nodes[b]) / base.total
        est_grid = np.rint(est * _GRID).astype(np.int64)
        true = _table(codes, counts, (a, b), sizes)
        # integer arithmetic on the 2**-20 grid: the score moves by <= c exactly
        scores[(a, b)] = float(np.abs(true * _GRID - est_grid).sum()) / _GRID
    comp = list(range(d))

    def find(i: int) -> int:
        while comp[i] != i:
            i = comp[i]
        return i

    chosen: list[tuple[int, int]] = []
    for _ in range(d - 1):
        cands = [e for e in scores if find(e[0]) != find(e[1])]
        pick = exponential(cands, [scores[e] for e in cands],
                           sensitivity=float(setup.contributions),
                           epsilon=setup.select_epsilon, source=src)
        a, b = pick.value
        comp[find(a)] = find(b)
        chosen.append((a, b))
    return chosen


def _decompress(records: np.ndarray, comps: list[_Compressed], src: Source) -> np.ndarray:
    """Coded records back to original value indices; a rare code becomes one of its values,
    in proportion to their clipped noisy counts (controlled rounding, then shuffled)."""
    out = np.empty_like(records)
    for i, cp in enumerate(comps):
        inverse = np.zeros(cp.size, dtype=np.int64)
        inverse[cp.code] = np.arange(cp.code.size)  # rare values overwrite each other: fixed below
        out[:, i] = inverse[records[:, i]]
        if cp.rare.size == 0:
            continue
        where = np.nonzero(records[:, i] == cp.size - 1)[0]
        if where.size == 0:
            continue
        w = cp.rare_weights if cp.rare_weights.sum() > 0 else np.ones(cp.rare.size)
        vals = np.repeat(cp.rare, synthetic_records(w, where.size))
        out[where[noise.permutation(where.size, source=src)], i] = vals
    return out


def mst(cells: Any, counts: Any, shape: Any, *, epsilon: float | None = None,
        rho: float | None = None, contributions: int = 1, rows: int | None = None,
        target: int | None = None, source: Source | None = None) -> Release[np.ndarray]:
    """Synthetic records by MST (see the module docstring for the algorithm and guarantee).

    ``cells``: int array ``(k, d)``, the distinct records' value indices; ``counts``: their
    multiplicities (the sparse histogram); ``shape``: the public domain sizes. ``rows``: how many
    records to output (public; default the private estimate of the number of records).
    ``value``: int64 records ``(rows, d)``; ``details``: ``edges`` (the selected pairs),
    ``total`` (the estimated number of records), ``model`` (the fitted
    :class:`~dpkit.release.marginal_models.TreeModel`, on compressed domains), ``compressed``
    (domain sizes after compression).

    ``target`` (public: an attribute index, e.g. the label a model will be trained to
    predict): each selected pair ``(a, b)`` is measured together with the target, as the
    3-way table ``(a, b, target)`` (same sensitivity, same event), and the model is a tree per
    target value (:func:`~dpkit.release.marginal_models.fit_conditional`), so every attribute's
    relation to the target is kept, not only its tree neighbours'.

    >>> import numpy as np, dpkit as dp
    >>> cells = np.array([[0, 0, 1], [1, 1, 0], [2, 1, 1]])
    >>> r = mst(cells, [50, 30, 20], (3, 2, 2), rho=2.0, source=dp.noise.seeded(1))
    >>> r.value.shape[1], len(r.details["edges"])
    (3, 2)
    """
    setup = mst_setup(shape, epsilon=epsilon, rho=rho, contributions=contributions)
    check_target(setup.shape, target)
    d = len(setup.shape)
    codes0 = np.asarray(cells, dtype=np.int64).reshape(-1, d)
    # no occupied cell is a dataset like any other (a curator's WHERE may match no row): the
    # marginals are then zero counts plus noise, never an error after the charge
    cnt = (np.zeros(0, dtype=np.int64) if np.size(counts) == 0
           else v.check_integers(counts, "counts"))
    if cnt.shape != (codes0.shape[0],) or np.any(cnt < 0):
        raise ValueError("counts must be one non-negative integer per row of cells")
    if codes0.size and (codes0.min() < 0 or np.any(codes0.max(axis=0) >= np.array(setup.shape))):
        raise ValueError("cells must hold value indices inside the domain sizes")
    if rows is not None:
        v.check_positive_int(rows, "rows")
    src = v.resolve_source(v.check_source(source))
    var1 = setup.variance(setup.one_way)
    comps, ones = [], []
    for i, k in enumerate(setup.shape):
        x = np.bincount(codes0[:, i], weights=cnt, minlength=k).astype(np.int64)
        y = _noisy(setup, x, setup.one_way, src)
        cp = _compress(y, math.sqrt(var1))
        comps.append(cp)
        members = np.bincount(cp.code, minlength=cp.size).astype(np.float64)
        ones.append(Measurement((i,), np.bincount(cp.code, weights=y, minlength=cp.size),
                                members * var1))
    codes = np.stack([cp.code[codes0[:, i]] for i, cp in enumerate(comps)], axis=1) \
        if codes0.size else codes0
    sizes = [cp.size for cp in comps]
    edges = _select(setup, codes, cnt, sizes, ones, src) if d > 1 else []
    pairs = sorted((min(e), max(e)) for e in edges)
    measured = [_measure_pair(setup, codes, cnt, sizes, e, target, src) for e in pairs]
    model: TreeModel | ConditionalTreeModel
    if target is None:
        model = fit_tree(sizes, ones + measured, pairs)
    else:
        model = fit_conditional(sizes, target, ones + measured, pairs)
    n_out = int(rows) if rows is not None else max(1, round(model.total))
    coded = (sample_tree(model, n_out, source=src) if isinstance(model, TreeModel)
             else sample_conditional(model, n_out, source=src))
    records = _decompress(coded, comps, src)
    return Release(value=records, event=setup.event, ci=None, level=0.95,
                   insecure=src.insecure, details=_details(setup, model, sizes))


def _measure_pair(setup: MSTSetup, codes: np.ndarray, cnt: np.ndarray, sizes: list[int],
                  pair: tuple[int, int], target: int | None, src: Source) -> Measurement:
    """The noisy table of a selected pair, with the target as a third attribute when given
    (one unit still moves it by at most ``c`` in L1 and L2: same noise, same event)."""
    attrs = pair if target is None or target in pair else (*pair, target)
    return Measurement(attrs, _noisy(setup, _table(codes, cnt, attrs, sizes), setup.two_way, src),
                       np.asarray(setup.variance(setup.two_way)))


def _details(setup: MSTSetup, model: TreeModel | ConditionalTreeModel,
             sizes: list[int]) -> dict[str, Any]:
    return {
        "mechanism": "MST (McKenna-Miklau-Sheldon 2021), exact tree fit",
        "neighbouring": f"add/remove one unit of <= {setup.contributions} records",
        "edges": list(model.edges),
        "total": model.total,
        "model": model,
        "compressed": list(sizes),
        "noise": (setup.kind, setup.one_way, setup.two_way),
        "selection_epsilon": setup.select_epsilon,
    }
