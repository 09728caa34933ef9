"""Empirical privacy auditing: a statistically certified lower bound on a mechanism's epsilon.

If a mechanism ``M`` is (ε, δ)-DP then for *every* set of outputs ``S`` and neighbouring inputs
``D0, D1``::

    P[M(D0) ∈ S] <= e^ε P[M(D1) ∈ S] + δ      so      ε >= ln((P0(S) - δ) / P1(S)).

Run ``M`` many times on ``D0`` and on ``D1``; for a test set ``S`` bound ``P0(S)`` from below and
``P1(S)`` from above with exact Clopper-Pearson intervals; the ratio gives a lower bound on ε that
holds with the stated confidence. A lower bound above the claimed ε is a privacy bug (or a
false alarm, with probability at most ``1 - confidence``); a lower bound far below it on the
worst-case pair means the mechanism adds more noise than it needs (or the test sets are weak).

Procedure (all choices are made before looking at the data they are certified on):

1. **Split.** The first ``selection_fraction`` of each sample (in the order given, which must be
   the order of independent draws) picks the tests; the rest certifies them. Choosing tests on
   data independent of the certification data keeps the Clopper-Pearson bounds valid.
2. **Candidate tests** from the selection part: threshold sets ``{o >= t}`` and ``{o <= t}`` for
   numeric outputs (t over the distinct values, or ``max_thresholds`` quantiles), and for
   discrete outputs (few distinct values, or non-numeric ones) the singletons ``{o = v}`` and the
   likelihood-ratio-ordered prefixes (the Neyman-Pearson sets); each in both directions
   (D0 against D1 and D1 against D0).
3. **Selection.** Each candidate is scored by the bound it certifies on the selection part
   itself (same Clopper-Pearson level), which penalises sets seen only a few times; the best
   ``max_tests`` distinct ones are kept.
4. **Certification** with a Bonferroni correction: each of the ``T`` kept tests uses a
   one-sided Clopper-Pearson lower bound for ``P_a(S)`` and upper bound for ``P_b(S)`` at level
   ``(1 - confidence) / (2T)`` each, so *all* ``2T`` bounds hold at once with probability at
   least ``confidence``, and the reported maximum is a valid lower bound.

References: Ding, Wang, Wang, Zhang, Kifer 2018 ("Detecting violations of differential
privacy"); Jagielski, Ullman, Oprea 2020 ("Auditing differentially private machine learning");
Clopper-Pearson 1934.

>>> import numpy as np
>>> import dpkit as dp
>>> from dpkit.attacks.audit import empirical_epsilon
>>> # two coins that differ: heads with probability 0.6 vs 0.4 (true epsilon ln 1.5 = 0.405)
>>> src = dp.noise.seeded(7)
>>> a = dp.noise.bernoulli(0.6, 200_000, source=src).astype(int)
>>> b = dp.noise.bernoulli(0.4, 200_000, source=src).astype(int)
>>> r = empirical_epsilon(a, b, confidence=0.99)
>>> 0.35 < r.epsilon_lower < 0.405
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

__all__ = ["AuditResult", "audit", "clopper_pearson", "empirical_epsilon"]


@dataclass(frozen=True)
class AuditResult:
    """The certified lower bound and the test that achieved it.

    ``epsilon_lower`` holds with probability at least ``confidence`` (over the draws) if the
    samples are independent draws; it is 0 when no test shows any evidence. ``epsilon_estimate``
    is the plain point estimate ``ln((p0_hat - delta) / p1_hat)`` of the best test on the
    certification data (not a bound: for information only).
    """

    epsilon_lower: float
    best_test: str
    epsilon_estimate: float
    p_lower: float
    p_upper: float
    counts: tuple[int, int]
    sizes: tuple[int, int]
    tests: int
    confidence: float
    delta: float
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def __repr__(self) -> str:
        return (
            f"AuditResult(epsilon_lower={self.epsilon_lower:.4f} at confidence "
            f"{self.confidence:g}, best_test={self.best_test!r}, "
            f"epsilon_estimate={self.epsilon_estimate:.4f}, counts={self.counts}, "
            f"sizes={self.sizes}, tests={self.tests})"
        )


def clopper_pearson(
    k: np.ndarray | float, n: np.ndarray | int, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """One-sided exact binomial bounds: ``(lower, upper)`` with ``P(p < lower) <= alpha`` and
    ``P(p > upper) <= alpha`` each (Clopper-Pearson 1934). ``k`` may be real-valued (used only to
    *predict* bounds during test selection)."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    k, n = np.broadcast_arrays(k, n)
    lower = np.zeros(k.shape)
    upper = np.ones(k.shape)
    pos = k > 0
    if np.any(pos):
        lower[pos] = special.betaincinv(k[pos], n[pos] - k[pos] + 1, alpha)
    below = k < n
    if np.any(below):
        upper[below] = special.betaincinv(k[below] + 1, n[below] - k[below], 1.0 - alpha)
    return np.nan_to_num(lower, nan=0.0), np.nan_to_num(upper, nan=1.0)


def _bound(p_low: np.ndarray, p_up: np.ndarray, delta: float) -> np.ndarray:
    num = p_low - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(num > 0, np.log(np.maximum(num, 1e-300)) - np.log(p_up), -np.inf)
    return out


# ------------------------------------------------------------------------- encoding outputs
def _as_array(sample: Any, name: str) -> np.ndarray:
    arr = np.asarray(sample)
    if arr.ndim != 1:
        if arr.ndim == 0:
            raise ValueError(f"{name} must be a 1-d array of outputs (got a scalar)")
        # rows of a vector output: audit them as categorical tuples
        arr_obj = np.empty(arr.shape[0], dtype=object)
        arr_obj[:] = [tuple(row.ravel().tolist()) for row in arr]
        arr = arr_obj
    if arr.size < 2:
        raise ValueError(f"{name} needs at least 2 outputs (got {arr.size})")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN: map failures to a sentinel value first")
    return arr


def _numeric(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype.kind in "biuf" and b.dtype.kind in "biuf"


class _Tests:
    """Candidate sets: thresholds (numeric only) and sets of discrete codes."""

    def __init__(self) -> None:
        self.kind: list[str] = []  # "ge", "le", "in"
        self.threshold: list[float] = []
        self.members: list[np.ndarray | None] = []
        self.direction: list[int] = []  # 0: D0 vs D1 (P0 lower / P1 upper); 1: reversed
        self.label: list[str] = []

    def add(self, kind: str, threshold: float, members: np.ndarray | None,
            direction: int) -> None:
        self.kind.append(kind)
        self.threshold.append(threshold)
        self.members.append(members)
        self.direction.append(direction)


@dataclass(frozen=True)
class _Codes:
    """The distinct outputs of the selection part, each coded by its index in ``values``;
    an output never seen there gets -1 (it is in no set test)."""

    values: np.ndarray
    numeric: bool
    discrete: bool  # few enough distinct values for set tests (always, for non-numeric ones)
    index: dict[Any, int]  # non-numeric output -> code (numeric ones are found by bisection)

    def of(self, x: np.ndarray) -> np.ndarray:
        if self.numeric:
            pos = np.searchsorted(self.values, x)
            pos = np.minimum(pos, self.values.size - 1)
            return np.where(self.values[pos] == x, pos, -1)
        return np.fromiter((self.index.get(v, -1) for v in x.tolist()), dtype=np.int64,
                           count=x.size)

    def histogram(self, x: np.ndarray) -> np.ndarray:
        """How often each value occurs in ``x``."""
        return np.bincount(self.of(x) + 1, minlength=self.values.size + 1)[1:]


def _describe(kind: str, t: float, members: np.ndarray | None, values: Sequence[Any]) -> str:
    if kind == "ge":
        return f"o >= {t!r}"
    if kind == "le":
        return f"o <= {t!r}"
    assert members is not None
    shown = [values[i] for i in members[:5]]
    more = "" if members.size <= 5 else f", ... ({members.size} values)"
    inner = ", ".join(repr(v) for v in shown)
    return f"o in {{{inner}{more}}}"


def _counts_threshold(sorted_x: np.ndarray, kind: str, t: np.ndarray) -> np.ndarray:
    if kind == "ge":
        return sorted_x.size - np.searchsorted(sorted_x, t, side="left")
    return np.searchsorted(sorted_x, t, side="right")


def empirical_epsilon(
    sample0: Any,
    sample1: Any,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    selection_fraction: float = 0.1,
    max_tests: int = 16,
    max_thresholds: int = 512,
) -> AuditResult:
    """Certified lower bound on ε from outputs of one mechanism on neighbouring inputs.

    ``sample0`` and ``sample1``: outputs of independent runs on ``D0`` and ``D1`` (1-d arrays in
    the order drawn; numeric, boolean, or any hashable labels; a 2-d array is read as one
    vector output per row, compared as a whole). ``delta``: the δ the claim is made at (the
    bound is on ε for (ε, δ)-DP). With probability at least ``confidence`` (over the draws)
    the mechanism is *not* (ε', δ)-DP for any ``ε' < epsilon_lower``.

    See the module docstring for the procedure (split, candidate tests, selection,
    Bonferroni-corrected Clopper-Pearson certification).
    """
    a = _as_array(sample0, "sample0")
    b = _as_array(sample1, "sample1")
    if not 0.0 <= float(delta) < 1.0:
        raise ValueError(f"delta must lie in [0, 1) (got {delta!r})")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie in (0, 1) (got {confidence!r}); e.g. 0.95")
    if not 0.0 < float(selection_fraction) < 1.0:
        raise ValueError(
            f"selection_fraction must lie in (0, 1) (got {selection_fraction!r}); e.g. 0.1"
        )
    if int(max_tests) < 1 or int(max_thresholds) < 2:
        raise ValueError("max_tests must be >= 1 and max_thresholds >= 2")
    delta = float(delta)
    alpha = 1.0 - float(confidence)
    # ---- 1. split: the selection part picks the tests, the held-out part certifies them
    m0 = max(1, int(a.size * selection_fraction))
    m1 = max(1, int(b.size * selection_fraction))
    if a.size - m0 < 1 or b.size - m1 < 1:
        raise ValueError("samples too small to split into selection and certification parts")
    sel = (a[:m0], b[:m1])
    cert = (a[m0:], b[m1:])
    numeric = _numeric(a, b)
    pooled = np.concatenate(sel) if numeric else np.concatenate([sel[0], sel[1]]).astype(object)
    codes = _encode(pooled, numeric, max_thresholds)
    # ---- 2. candidate tests, 3. selection, 4. certification
    tests = _candidates(codes, sel, pooled, max_thresholds)
    chosen, predicted = _select(tests, _frequencies(tests, codes, sel), (m0, m1),
                                alpha / (2.0 * max_tests), delta, max_tests)
    return _certify(tests, codes, cert, chosen, alpha=alpha, delta=delta,
                    confidence=float(confidence),
                    details={"candidates": len(tests.kind), "selection_sizes": (m0, m1)},
                    predicted=predicted)


def _encode(pooled: np.ndarray, numeric: bool, max_thresholds: int) -> _Codes:
    """Codes for the distinct outputs of the selection part (non-numeric ones in order of
    first appearance); numeric outputs are discrete when at most ``max_thresholds`` differ."""
    if numeric:
        values = np.unique(pooled)
        return _Codes(values, True, values.size <= max_thresholds, {})
    values_list: list[Any] = []
    index: dict[Any, int] = {}
    for v in pooled.tolist():
        if v not in index:
            index[v] = len(values_list)
            values_list.append(v)
    values = np.empty(len(values_list), dtype=object)
    values[:] = values_list
    return _Codes(values, False, True, index)


def _candidates(codes: _Codes, sel: tuple[np.ndarray, np.ndarray], pooled: np.ndarray,
                max_thresholds: int) -> _Tests:
    """Step 2, from the selection part only: thresholds (numeric outputs), singletons and
    likelihood-ratio-ordered prefixes (discrete outputs), each in both directions."""
    tests = _Tests()
    values = codes.values
    if codes.numeric:
        thresholds = values if values.size <= max_thresholds else np.unique(
            np.quantile(pooled.astype(np.float64), np.linspace(0, 1, max_thresholds))
        )
        for kind in ("ge", "le"):
            for d in (0, 1):
                for t in thresholds.tolist():
                    tests.add(kind, t, None, d)
    if codes.discrete:
        f0 = (codes.histogram(sel[0]) + 0.5) / (sel[0].size + 1.0)
        f1 = (codes.histogram(sel[1]) + 0.5) / (sel[1].size + 1.0)
        for d in (0, 1):
            ratio = f0 / f1 if d == 0 else f1 / f0
            order = np.argsort(-ratio, kind="stable")
            for i in range(values.size):
                tests.add("in", math.nan, np.array([i]), d)
            for j in range(2, values.size):
                tests.add("in", math.nan, np.sort(order[:j]), d)
    if not tests.kind:
        raise ValueError("no candidate tests could be formed from the samples")
    return tests


def _frequencies(tests: _Tests, codes: _Codes,
                 parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Counts of every candidate set in parts[0] and parts[1]."""
    out = []
    kinds = np.array(tests.kind)
    for x in parts:
        cnt = np.zeros(len(tests.kind), dtype=np.float64)
        if codes.numeric:
            xs = np.sort(x)
            thr = np.array(tests.threshold, dtype=np.float64)
            for kind in ("ge", "le"):
                idx = np.flatnonzero(kinds == kind)
                if idx.size:
                    cnt[idx] = _counts_threshold(xs, kind, thr[idx])
        idx = np.flatnonzero(kinds == "in")
        if idx.size:
            per_value = codes.histogram(x)
            for i in idx.tolist():
                members = tests.members[i]
                assert members is not None
                cnt[i] = per_value[members].sum()
        out.append(cnt)
    return out[0], out[1]


def _select(tests: _Tests, counts: tuple[np.ndarray, np.ndarray], sizes: tuple[int, int],
            alpha_each: float, delta: float, max_tests: int) -> tuple[list[int], np.ndarray]:
    """Step 3: the best ``max_tests`` distinct candidates (their indices) and every candidate's
    predicted bound. A candidate's score is the bound it certifies *on the selection part*
    (``counts``, of sizes ``sizes``) at the certification's Clopper-Pearson level: using the
    selection counts themselves, not frequencies scaled up to the certification size,
    penalises sets with few selection draws, whose ratios are mostly noise."""
    (s0, s1), (m0, m1) = counts, sizes
    direction = np.array(tests.direction)
    low_pred = clopper_pearson(np.where(direction == 0, s0, s1),
                               np.where(direction == 0, m0, m1), alpha_each)[0]
    up_pred = clopper_pearson(np.where(direction == 0, s1, s0),
                              np.where(direction == 0, m1, m0), alpha_each)[1]
    predicted = _bound(low_pred, up_pred, delta)
    order = np.argsort(-predicted, kind="stable")
    chosen: list[int] = []
    seen: set[tuple[Any, ...]] = set()
    for i in order.tolist():
        members = tests.members[i]
        key = (
            tests.kind[i],
            tests.threshold[i] if tests.kind[i] != "in" else None,
            None if members is None else members.tobytes(),
            tests.direction[i],
        )
        if key in seen:
            continue
        seen.add(key)
        chosen.append(i)
        if len(chosen) == max_tests:
            break
    return chosen, predicted


def _certify(tests: _Tests, codes: _Codes, cert: tuple[np.ndarray, np.ndarray],
             chosen: list[int], *, alpha: float, delta: float, confidence: float,
             details: dict[str, Any], predicted: np.ndarray) -> AuditResult:
    """Step 4: every chosen test's bound on the held-out part, Bonferroni-corrected over the
    ``2T`` Clopper-Pearson bounds; the best one is the result."""
    n_cert = (cert[0].size, cert[1].size)
    k0, k1 = _frequencies(tests, codes, cert)
    idx = np.array(chosen)
    dirs = np.array(tests.direction)[idx]
    k_num = np.where(dirs == 0, k0[idx], k1[idx])
    k_den = np.where(dirs == 0, k1[idx], k0[idx])
    n_num_c = np.where(dirs == 0, n_cert[0], n_cert[1])
    n_den_c = np.where(dirs == 0, n_cert[1], n_cert[0])
    alpha_cert = alpha / (2.0 * len(chosen))
    lows = clopper_pearson(k_num, n_num_c, alpha_cert)[0]
    ups = clopper_pearson(k_den, n_den_c, alpha_cert)[1]
    bounds = _bound(lows, ups, delta)
    j = int(np.argmax(bounds))
    i = int(idx[j])
    d = tests.direction[i]
    what = _describe(tests.kind[i], tests.threshold[i], tests.members[i], list(codes.values))
    return AuditResult(
        epsilon_lower=max(0.0, float(bounds[j])),
        best_test=f"P0({what}) vs P1" if d == 0 else f"P1({what}) vs P0",
        epsilon_estimate=_estimate(k_num[j] / n_num_c[j], k_den[j] / n_den_c[j], delta),
        p_lower=float(lows[j]),
        p_upper=float(ups[j]),
        counts=(int(k_num[j]), int(k_den[j])),
        sizes=(n_cert[0], n_cert[1]) if d == 0 else (n_cert[1], n_cert[0]),
        tests=len(chosen),
        confidence=confidence,
        delta=delta,
        details={**details, "predicted_bound": float(predicted[i])},
    )


def _estimate(p_hat_num: float, p_hat_den: float, delta: float) -> float:
    """The point estimate ``ln((p_num - delta) / p_den)`` (information only, not a bound)."""
    if p_hat_num <= delta:
        return -math.inf
    if p_hat_den == 0:
        return math.inf
    return math.log(p_hat_num - delta) - math.log(p_hat_den)


def audit(
    mechanism: Callable[[Any, int], Any],
    d0: Any,
    d1: Any,
    *,
    trials: int,
    delta: float = 0.0,
    confidence: float = 0.95,
    **options: Any,
) -> AuditResult:
    """Run ``mechanism(d, trials)`` (a *vectorised* sampler returning ``trials`` independent
    outputs) on the neighbouring inputs ``d0`` and ``d1`` and certify a lower bound on ε.

    ``options`` are passed to :func:`empirical_epsilon` (``selection_fraction``, ``max_tests``,
    ``max_thresholds``). The caller chooses ``d0, d1``: the bound is only as strong as the pair
    is bad for the mechanism (use the worst case the sensitivity allows).
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 4:
        raise ValueError(f"trials must be an int >= 4 (got {trials!r})")
    out0 = np.asarray(mechanism(d0, trials))
    out1 = np.asarray(mechanism(d1, trials))
    for name, out in (("d0", out0), ("d1", out1)):
        if out.shape[:1] != (trials,):
            raise ValueError(
                f"mechanism({name}, trials) must return {trials} outputs (got shape {out.shape})"
            )
    return empirical_epsilon(out0, out1, delta=delta, confidence=confidence, **options)
