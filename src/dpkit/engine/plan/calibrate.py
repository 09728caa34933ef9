"""Calibration: each measurement's sensitivity, fixed-point grid, noise and event.

Everything here is a function of public parameters (bounds, contribution bounds, the budget
share): never of the data. See :mod:`dpkit.engine.plan` for the sensitivities under add/remove
of one privacy unit, the budget split and the partition-selection and top-k mechanisms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np
from sqlglot import exp

from dpkit import events as ev
from dpkit.engine import sql as dsql
from dpkit.engine.plan.fixed import (
    fixed_point_exponent,
    grid_bound,
    round_half_away,
    row_exponent,
    shift_round,
)
from dpkit.engine.plan.model import (
    DIAG_KINDS,
    GAUSSIAN,
    GAUSSIAN_THRESHOLD,
    LAPLACE,
    QUANTILE_BINS,
    SELECTION_WEIGHT,
    TOP_K_WEIGHT,
    AggPlan,
    Measure,
    PlanError,
)
from dpkit.engine.tables import TableMeta, type_class
from dpkit.mechanisms.accuracy import dgauss_norm, dgauss_upper_sum
from dpkit.mechanisms.plan import discrete_gaussian_plan, discrete_laplace_plan


def measure_weights(spec: dsql.QuerySpec, agg_plans: list[AggPlan], measures: list[Measure],
                    weights: Mapping[str, Any] | None) -> dict[str, float]:
    """Per measurement key, its weight in the budget split.

    ``weights`` maps output names (the result's value columns, case-insensitive) to positive
    numbers; outputs not named weigh 1. A measurement takes the largest weight among the
    outputs that use it (a measurement shared by two outputs is measured once). The selection
    measurements weigh 1 unless named by the reserved names ``"top_k"`` and
    ``"partition_selection"`` (when no output has that name). A measurement's share of the
    query's epsilon (or rho) is its weight over the sum of all weights.
    """
    if weights is not None and not isinstance(weights, Mapping):
        raise PlanError(f"weights must be a dict of output name -> number, e.g. "
                        f"weights={{'n': 1, 'avg_age': 3}} (got {weights!r})")
    weights = weights or {}
    by_name = {o.name.lower(): o for o in spec.outputs}
    valid = [o.name for o in spec.outputs if o.kind != "group"]
    special = {TOP_K_WEIGHT: "topk", SELECTION_WEIGHT: "select"}
    present = {x.kind for x in measures}
    valid += [n for n, kind in special.items() if kind in present and n not in by_name]
    given: dict[str, float] = {}
    for name, w in weights.items():
        if not isinstance(name, str):
            raise PlanError(f"weights are keyed by output names (got {name!r}); valid names: "
                            f"{', '.join(valid)}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (
            math.isfinite(w) and w > 0
        ):
            raise PlanError(f"weights[{name!r}] must be a finite number > 0 (got {w!r}); "
                            f"e.g. weights={{'{name}': 2}}")
        o = by_name.get(name.lower())
        if o is None and not (name.lower() in special and special[name.lower()] in present):
            raise PlanError(f"weights names {name!r}, which is not an output of this query; "
                            f"valid names: {', '.join(valid)}")
        if o is not None and o.kind == "group":
            raise PlanError(f"weights names {name!r}, a GROUP BY column; weights apply to "
                            f"aggregates (valid names: {', '.join(valid)})")
        given[name.lower()] = float(w)
    out: dict[str, float] = {}
    for o in spec.outputs:
        if o.kind == "group":
            continue
        w = given.get(o.name.lower(), 1.0)
        keys: list[str] = []
        if o.kind == "agg":
            assert o.index is not None
            keys = list(agg_plans[o.index].measures.values())
        else:
            assert o.expr is not None
            for n in o.expr.walk():
                if isinstance(n, exp.Column) and n.name.startswith("__a") and \
                        n.name[3:].isdigit():
                    keys.extend(agg_plans[int(n.name[3:])].measures.values())
        for key in keys:
            out[key] = max(out.get(key, 0.0), w)
    for x in measures:
        for name, kind in special.items():
            if x.kind == kind and name in given and name not in by_name:
                out[x.key] = given[name]
        out.setdefault(x.key, 1.0)
    return out


def dlap_scale(l1: int, epsilon: float) -> float:
    try:
        return discrete_laplace_plan(sensitivity=int(l1), epsilon=epsilon).scale
    except ValueError as exc:
        raise PlanError(str(exc)) from None


def dgauss_sigma2(l2: float, rho: float) -> float:
    try:
        return discrete_gaussian_plan(sensitivity=l2, rho=rho).sigma2
    except ValueError as exc:
        raise PlanError(str(exc)) from None


def calibrate_measure(mm: Measure, *, table: TableMeta, m: int, l0: int, noise: str,
                      share_eps: float, share_rho: float, q_delta: float,
                      grouped: bool) -> None:
    """Fill in sensitivity, fixed point, noise parameters and the event of one measurement.

    ``m``: rows per unit; ``l0``: groups one unit touches; ``share_eps`` / ``share_rho``: this
    measurement's share of the query's budget; ``q_delta``: the partition-selection delta.
    """
    if mm.kind == "quant":
        calibrate_quantile(mm, table=table, m=m, l0=l0, noise=noise, share_eps=share_eps,
                           share_rho=share_rho)
        return
    if mm.kind == "select":
        calibrate_selection(mm, l0=l0, noise=noise, share_eps=share_eps, share_rho=share_rho,
                            q_delta=q_delta)
        return
    if mm.kind in ("rows", "nonnull", "distinct", *DIAG_KINDS):
        # COUNT(DISTINCT col): each of a unit's (at most m) kept rows adds or removes at most
        # one distinct value in its group, so the counts move by at most m in total; the
        # diagnostics are counts of at most m rows per unit too (ddrop clips each unit's
        # dropped rows at m), summed over every group: one unit moves each by at most m
        mm.f, mm.bound, mm.l1, mm.l2 = 0, 1, m, float(m)
    elif mm.kind == "units":
        mm.f, mm.bound, mm.l1, mm.l2 = 0, 1, l0, sqrt_up(l0)
    elif mm.kind in ("sum", "csum"):
        sum_sensitivity(mm, m=m)
    elif mm.kind == "csq":
        half = (mm.hi - mm.lo) / 2.0
        if not half < 1e150:  # its square would overflow a float (an internal error before)
            raise PlanError(
                f"VAR/STDDEV: the range of the argument, [{mm.lo:g}, {mm.hi:g}], is too wide to "
                f"square; divide the expression by a constant (and scale the answer back); "
                f"nothing was charged")
        magnitude = half ** 2
        mm.f = fixed_point_exponent(magnitude, m, share_eps)
        mm.bound = grid_bound(magnitude, mm.f)
        mm.l1 = m * mm.bound
        mm.l2 = float(m * mm.bound)
    add_noise(mm, noise=noise, share_eps=share_eps, share_rho=share_rho, grouped=grouped)


def sum_sensitivity(mm: Measure, *, m: int) -> None:
    """Per-row integer range and sensitivity of a fixed-point sum (``sum``) or centred sum.

    Every row contributes round(clamp(x)·2^f) in [lo_g, hi_g] (exact: scaling by a power of two
    is exact and rounding is monotone); the centred sum subtracts ``center``.
    """
    # row integers: shift_round(round(clamp(x)·2^F), F - f), monotone in x, so every row's
    # integer lies in [lo_g, hi_g] exactly
    big = row_exponent(mm.lo, mm.hi)
    lo_g = shift_round(round_half_away(Fraction(mm.lo) * Fraction(2) ** big), big - mm.f)
    hi_g = shift_round(round_half_away(Fraction(mm.hi) * Fraction(2) ** big), big - mm.f)
    mm.lo_int, mm.hi_int = lo_g, hi_g
    if mm.kind == "sum":
        mm.bound = max(abs(lo_g), abs(hi_g), 1)
    else:
        mm.center = round_half_away(Fraction((mm.lo + mm.hi) / 2.0) * Fraction(2) ** mm.f)
        mm.bound = max(abs(lo_g - mm.center), abs(hi_g - mm.center), 1)
    mm.l1 = m * mm.bound
    mm.l2 = float(m * mm.bound)


def add_noise(mm: Measure, *, noise: str, share_eps: float, share_rho: float,
              grouped: bool) -> None:
    """Noise of an integer measurement of known sensitivity: discrete Laplace of scale
    ``l1/ε_i`` (ε_i-DP) or discrete Gaussian for ``ρ_i``-zCDP at L2 sensitivity ``l2``."""
    if noise == LAPLACE:
        mm.noise = LAPLACE
        mm.epsilon = share_eps
        mm.scale = dlap_scale(mm.l1, share_eps)
        mm.event = ev.DiscreteLaplace(mm.scale, mm.l1)
        return
    mm.noise = GAUSSIAN
    mm.rho = share_rho
    sens = mm.l2
    if not grouped and sens >= 1:
        sens = float(math.floor(sens))
    mm.l2 = sens
    mm.sigma2 = dgauss_sigma2(sens, share_rho)
    # zCDP holds for a scalar or a vector release alike (CKS 2020); the mechanism reports
    # DiscreteGaussian for a scalar, ZCDP for a vector; either is at most what is charged.
    mm.event = ev.ZCDP(rho_up(sens, mm.sigma2))


def calibrate_quantile(mm: Measure, *, table: TableMeta, m: int, l0: int, noise: str,
                       share_eps: float, share_rho: float) -> None:
    """Quantiles: the exponential mechanism over public candidates, ``ε_i / L0`` per group
    (rank scores move by at most ``m·max(q, 1-q)``); event ``SelfComposed(Exponential, L0)``."""
    assert mm.q is not None
    mm.candidates = quantile_candidates(mm.lo, mm.hi, column_class(table, mm.column))
    mm.quant_sensitivity = m * max(mm.q, 1.0 - mm.q)
    eps_q = share_eps if noise == LAPLACE else math.sqrt(8.0 * share_rho)
    mm.epsilon = eps_q
    mm.quant_epsilon = eps_q / l0
    mm.noise = "exponential"
    mm.event = (ev.Exponential(mm.quant_epsilon) if l0 == 1
                else ev.SelfComposed(ev.Exponential(mm.quant_epsilon), l0))


def calibrate_selection(mm: Measure, *, l0: int, noise: str, share_eps: float,
                        share_rho: float, q_delta: float) -> None:
    """Private partition selection: noisy distinct-unit counts and a threshold that a group of
    one unit passes with probability at most ``q_delta`` in total (see the package docs)."""
    mm.f, mm.bound, mm.l1, mm.l2 = 0, 1, l0, sqrt_up(l0)
    mm.delta = q_delta
    if noise == GAUSSIAN:
        mm.noise = GAUSSIAN_THRESHOLD
        mm.rho = share_rho
        mm.sigma2 = dgauss_sigma2(mm.l2, share_rho)
        mm.threshold = gaussian_threshold(mm.sigma2, l0, q_delta)
        mm.event = ev.Composed((ev.ZCDP(rho_up(mm.l2, mm.sigma2)),
                                ev.ApproxDP(0.0, q_delta)))
        return
    eps_s = share_eps
    mm.noise = "threshold"
    mm.epsilon = eps_s
    mm.scale = dlap_scale(l0, eps_s)
    qd = math.exp(-1.0 / mm.scale)
    # L0 · q^(T-1) / (1+q) <= delta
    t_minus_1 = math.ceil(mm.scale * math.log(l0 / (q_delta * (1.0 + qd))))
    mm.threshold = 1 + max(t_minus_1, 1)
    mm.event = ev.ApproxDP(l0 / mm.scale, q_delta)


def sqrt_up(n: int) -> float:
    """``sqrt(n)`` rounded up to a float: the L2 sensitivity ``sqrt(L0)`` of distinct-unit
    counts. ``math.sqrt`` is correctly rounded, so for many ``n`` (3, 6, 11, ...) it is below
    the root, and noise calibrated to it would be charged a ``rho`` below its true cost."""
    r = math.sqrt(n)
    if Fraction(r) ** 2 < n:
        r = math.nextafter(r, math.inf)
    return r


def rho_up(sensitivity: float, sigma2: float) -> float:
    """``sensitivity² / (2 sigma2)`` rounded up to a float (never below the exact value)."""
    exact = Fraction(sensitivity) ** 2 / (2 * Fraction(sigma2))
    rho_up = float(exact)
    if Fraction(rho_up) < exact:
        rho_up = math.nextafter(rho_up, math.inf)
    return rho_up


# A computed tail is trusted only with this relative margin (float sums of exponentials).
TAIL_MARGIN = 1.0 + 1e-6


def dgauss_upper_tail(a: int, sigma2: float) -> float:
    """``P(Z >= a)`` for the discrete Gaussian ``P(Z = x) ∝ exp(-x²/(2 sigma2))``, ``a >= 0``,
    from the exact sums (``Σ_{x>=a} e^{-x²/(2σ²)} / Σ_x e^{-x²/(2σ²)}``), times ``1 + 1e-6``
    so that float rounding can only overstate it."""
    if a <= 0:
        return 1.0
    return min(1.0, dgauss_upper_sum(int(a), sigma2) / dgauss_norm(sigma2) * TAIL_MARGIN)


def gaussian_selection_delta(threshold: int, sigma2: float, l0: int) -> float:
    """δ of Gaussian thresholding: the probability that at least one of the ``l0`` groups made
    of one unit alone (distinct-unit count 1) shows: ``1 - (1 - P(Z >= T - 1))^l0`` with
    independent discrete Gaussian noise ``Z`` (``<= l0·P(Z >= T-1)``)."""
    p = dgauss_upper_tail(threshold - 1, sigma2)
    if p >= 1.0:
        return 1.0
    return min(1.0, -math.expm1(l0 * math.log1p(-p)))


def gaussian_threshold(sigma2: float, l0: int, delta: float) -> int:
    """Smallest ``T >= 2`` with :func:`gaussian_selection_delta` ``(T) <= delta``.

    **Gaussian partition selection** (Wilson et al. 2020, §3; Google's Gaussian thresholding).
    Each candidate group's number of distinct units gets independent discrete Gaussian noise of
    variance ``sigma2``; a group is shown iff ``count + Z >= T``. Neighbours ``D ⊂ D'`` differ by
    one unit touching at most ``l0`` groups. On the groups both have, the counts differ by at most
    1 in at most ``l0`` coordinates (L2 sensitivity ``√l0``), so that part is the discrete
    Gaussian mechanism: ``ρ = l0/(2 sigma2)``-zCDP, hence ``(ε, δ_g(ε))``-DP for its whole curve
    (CKS 2020). The groups only ``D'`` has are made of that unit alone (count 1) and show with
    probability ``p = 1 - (1 - P(Z >= T-1))^l0 <= δ``. For any output set ``S``:
    ``P_D'(S) <= (1-p)(e^ε P_D(S) + δ_g) + p``, and, ``S`` holding only outputs without new
    groups, ``P_D(S) <= min(1, e^ε P_c(S) + δ_g)`` with ``P_D'(S) = (1-p) P_c(S)``; both give
    ``P(S) - e^ε P'(S) <= δ_g + p - p·δ_g``. So the selection is ``(ε, δ_g(ε) + δ)``-DP: exactly
    what the event ``Composed(ZCDP(ρ), ApproxDP(0, δ))`` states under basic composition.
    """
    if not (0 < delta < 1):
        raise PlanError(f"partition selection needs 0 < delta < 1 (got {delta!r})")
    sigma = math.sqrt(sigma2)
    # continuous guess: l0·P(N >= T-1) ~ delta
    from scipy import special

    guess = 1 + sigma * math.sqrt(2.0) * float(special.erfcinv(2.0 * delta / l0))
    t = max(2, math.floor(guess) - 3)
    while gaussian_selection_delta(t, sigma2, l0) > delta:
        t += 1
    while t > 2 and gaussian_selection_delta(t - 1, sigma2, l0) <= delta:
        t -= 1
    return t


def calibrate_topk(mm: Measure, score: Measure, *, m: int, noise: str, share_eps: float,
                    share_rho: float, level: float) -> None:
    """Top-k groups by noisy max: ``k`` rounds of the exponential mechanism (peeling).

    **Scores** are the exact per-group values of the ordering aggregate (negated for ASC):
    ``COUNT(*)``/``COUNT(col)`` (rows kept by contribution bounding), ``COUNT(DISTINCT unit)``,
    or ``SUM(col)`` as fixed-point integers shifted right by ``s`` bits (``floor(S/2^s)``, so
    that scores stay exact float64 values; a shift moves a difference ``|S-S'| <= Δ`` to at most
    ``floor(Δ/2^s) + 1``), clipped to ``±2^52`` (1-Lipschitz, monotone).

    **Sensitivity, L∞, independent of how many groups a unit touches.** Under add/remove of one
    unit (the curator's relation), the unit's (bounded) rows are added to or removed from the
    groups they fall in; each group's count moves by at most ``m`` (``max_rows_per_unit``; 1 for
    distinct units) and its sum by at most ``m·B`` (every row's integer in ``[lo_g, hi_g]``,
    ``B = max(|lo_g|, |hi_g|)``). The exponential mechanism's guarantee needs only a bound on
    each score's change (``max_r |q_r(D) - q_r(D')| <= Δ``), not on the number of scores that
    change. All counts move in the same direction (adding a unit never lowers a count), and so
    do sums when ``lo >= 0`` (or ``hi <= 0``): then the scores are **monotone** and each round
    selects ``r`` with probability ``∝ exp(ε_r q_r / Δ)`` (McSherry-Talwar 2007; Dwork-Roth
    2014, Thm 3.10 remark); otherwise ``∝ exp(ε_r q_r / (2Δ))``. Each round is ε_r-DP and
    ε_r-bounded-range (its loss ``(ε_r/Δ)(q_r - q'_r) - ln(Z/Z')`` varies by at most ``ε_r``
    over the outputs in both cases).

    **k rounds** (peeling: remove the winner, repeat) equal in law the one-shot Gumbel top-k
    (Durfee-Rogers 2019) and compose to ``SelfComposed(Exponential(ε_r), k)``: ``k·ε_r``-DP,
    ``k·ε_r²/8``-zCDP (Cesar-Rogers 2021). ``ε_r = ε_sel / k`` with Laplace noise,
    ``√(8 ρ_sel / k)`` with Gaussian noise (so the rounds cost exactly the share ``ρ_sel``).

    **Utility**: in each round the best remaining score is at least the true k-th best; with
    probability ``>= 1 - β/k`` the winner is within ``u = c·(Δ/ε_r)(ln K + ln(k/β))`` of it
    (Dwork-Roth Thm 3.11, ``c = 1`` monotone, 2 otherwise; ``K`` candidates). A union bound over
    the rounds: every selected group's score is within ``u`` of the true k-th best score with
    probability ``>= 1 - β`` (``β = 1 - level``). With a shift ``s > 0`` the bound on the
    unshifted aggregate is ``(u + 1)·2^s`` (``2^s·floor(S/2^s) ∈ (S - 2^s, S]``).
    """
    assert mm.k >= 1
    mm.noise = "topk"
    if score.kind in ("rows", "nonnull"):
        delta_int, monotone = m, True
    elif score.kind in ("units", "select"):
        delta_int, monotone = 1, True
    elif score.kind == "sum":
        delta_int = m * max(abs(score.lo_int), abs(score.hi_int), 1)
        monotone = score.lo_int >= 0 or score.hi_int <= 0
    else:  # pragma: no cover - top_k_request only admits COUNT/SUM orderings
        raise PlanError(f"cannot rank groups by {score.label} with noisy max")
    shift = max(0, delta_int.bit_length() - 11)
    mm.score_shift = shift
    mm.score_sensitivity = float((delta_int >> shift) + 1 if shift else delta_int)
    mm.f = score.f if score.kind == "sum" else 0
    mm.monotonic = monotone
    mm.l1 = int(mm.score_sensitivity)
    if noise == LAPLACE:
        mm.epsilon = share_eps
        mm.round_epsilon = share_eps / mm.k
    else:
        mm.rho = share_rho
        mm.round_epsilon = math.sqrt(8.0 * share_rho / mm.k)
        mm.epsilon = mm.round_epsilon * mm.k
    mm.event = (ev.Exponential(mm.round_epsilon) if mm.k == 1
                else ev.SelfComposed(ev.Exponential(mm.round_epsilon), mm.k))


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def top_k_utility(mm: Measure, candidates: int, level: float) -> float:
    """``u`` (native units of the ordering aggregate) such that, with probability ``>= level``,
    every selected group's score is within ``u`` of the true k-th best (see
    :func:`calibrate_topk`)."""
    k = max(1, min(mm.k, candidates))
    c = 1.0 if mm.monotonic else 2.0
    beta = 1.0 - level
    u = c * mm.score_sensitivity / mm.round_epsilon * (math.log(max(candidates, 1))
                                                        + math.log(k / beta))
    # the scores are floor(S / 2^s): a shifted score within u of the k-th best shifted score
    # puts S within (u + 1)·2^s of the k-th best S (floor loses less than one step)
    if mm.score_shift:
        u += 1.0
    return math.ldexp(u * (2 ** mm.score_shift), -mm.f)


def column_class(table: TableMeta, ref: str | None) -> str:
    assert ref is not None
    alias, col = ref.split(".", 1)
    if alias == dsql.EXPR_SOURCE:  # an expression's clamped value: a DOUBLE
        return "float"
    return type_class(table.column(col).type)


def quantile_candidates(lo: float, hi: float, cls: str) -> np.ndarray:
    """Public candidates for quantiles: the integers in [lo, hi] for integer columns with at most
    ``QUANTILE_BINS + 1`` of them, else ``QUANTILE_BINS + 1`` equally spaced points."""
    if cls in ("int", "bool"):
        ilo, ihi = math.ceil(lo), math.floor(hi)
        if ihi - ilo <= QUANTILE_BINS and ihi > ilo:
            return np.arange(ilo, ihi + 1, dtype=np.float64)
    return np.linspace(lo, hi, QUANTILE_BINS + 1)


# ------------------------------------------------------------------------------ SQL


def plan_event(events: list[ev.Event]) -> ev.Event:
    """The query's event: the measurements' events composed, with every zCDP part (Gaussian
    measurements, the noise of Gaussian partition selection) merged into one ``ZCDP(Σρ)``.

    zCDP composes by adding ρ (Bun-Steinke 2016), so the merged event is exact for the zCDP
    accountant and lets the ``approx`` accountant convert the Gaussian parts once, at the
    query's whole δ share, instead of each part at a fraction of it.
    """
    flat: list[ev.Event] = []
    for e in events:
        if isinstance(e, ev.Composed):
            flat.extend(e.events)
        else:
            flat.append(e)
    rhos = [e.rho for e in flat if isinstance(e, ev.ZCDP)]
    rest = [e for e in flat if not isinstance(e, ev.ZCDP)]
    if len(rhos) > 1:
        total = Fraction(0)
        for r in rhos:
            total += Fraction(r)
        up = float(total)
        if Fraction(up) < total:
            up = math.nextafter(up, math.inf)
        flat = [ev.ZCDP(up), *rest]
    return flat[0] if len(flat) == 1 else ev.Composed(tuple(flat))

