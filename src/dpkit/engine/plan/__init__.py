"""From a validated query to an aggregation plan: measurements, sensitivities, budget split, SQL.

A plan is computed from public information only (the query text, the table's declarations, the
privacy parameters): never from the data. It lists the **measurements**, the integer-valued
aggregates that receive noise, each with its per-unit sensitivity, its share of the budget, the
noise that will be added and the event that will be charged. Analyst-facing aggregates are
functions of measurements:

==========================  ======================================================================
``COUNT(*)``                ``rows``: number of (bounded) rows
``COUNT(col)``              ``nonnull``: rows where ``col`` is not NULL/NaN
``COUNT(DISTINCT unit)``    ``units``: distinct privacy units
``SUM(col)``                ``sum``: Σ round(clamp(col)·2^f) (fixed point, integers)
``AVG(col)``                ``mid + csum / nonnull`` with ``csum`` = Σ round((clamp(col) − mid)·2^f)
``VAR``/``STDDEV``          ``csq / nonnull − (csum / nonnull)²`` with ``csq`` = Σ round((…)²·2^f)
``MEDIAN``/``QUANTILE``     exponential mechanism over a public grid of candidates (per group)
``MIN``/``MAX``             the 1st/99th percentile, as above
==========================  ======================================================================

**Contribution bounding** (user-level privacy). Let ``m`` = ``max_rows_per_unit`` and
``g`` = ``max_groups_per_unit`` (default ``m``). Inside the one SQL statement, after ``WHERE``,
each unit keeps at most ``g`` groups (``DENSE_RANK`` over a keyed hash of the group key, only when
``g < m``) and then at most ``m`` rows (``ROW_NUMBER`` over a keyed hash of the row's relevant
columns). The hash key is a fresh secret per query, drawn from :mod:`dpkit.noise`; the choice of
rows depends only on the unit's own rows, so bounding is a stable transformation. Then, under
add/remove of one unit, with ``L0 = min(g, m)`` groups touched (1 without GROUP BY):

* ``rows``, ``nonnull``: L1 = L2 = m;   ``units``: L1 = L0, L2 = √L0;
* ``sum``: L1 = L2 = m·B where ``B = ceil(max(|lo|, |hi|)·2^f)`` bounds every row's integer
  ``round(clamp(x)·2^f)`` (multiplying by a power of two is exact in floating point and rounding is
  monotone, so the bound holds *exactly*: no floating-point sum attack, Casacuberta et al. 2022);
  ``csum``/``csq`` are additionally clipped to ``[-B, B]`` in integers;
* quantiles: each row moves a rank score by at most ``max(q, 1−q)``; per group sensitivity
  ``m·max(q, 1−q)``, at most L0 groups affected, so each group's exponential mechanisms get
  ``ε_i / L0`` in total (event ``SelfComposed(Exponential(ε_i/L0), L0)``). Per group that total is
  split (``QUANTILE_CI_SHARE``) between the point estimate (half) and the two interval ends (a
  quarter each); three exponential mechanisms of ``ε_a + ε_b + ε_c = ε`` compose to ε-DP (basic
  composition) and to ``Σ ε²/8 <= ε²/8``-zCDP, so the charged ``Exponential(ε)`` covers them.

**Budget split**: each measurement gets a share of the query's epsilon (Laplace noise:
``ε_i = ε·w_i/Σw``, basic composition is exact for pure DP) or of its ρ (Gaussian noise), equal
by default; ``weights={"n": 1, "avg_age": 3}`` weighs the measurements of the named outputs
(:func:`measure_weights`). Private partition selection, when the group keys are not public, and
top-k selection take one more share each (weight 1, or ``"partition_selection"`` /
``"top_k"`` in ``weights``); partition selection also spends ``delta``.

**Partition selection** (Korolova et al. 2009; Wilson et al. 2020): the number of distinct units
per group gets discrete Laplace noise of scale ``s = L0/ε_sel``; a group is released iff its
noisy count is at least ``T = 1 + ceil(s·ln(L0 / (δ (1+q))))`` with ``q = e^{-1/s}``, so that a
group made of a single unit appears with probability ``L0·q^{T-1}/(1+q) <= δ`` in total. Event:
``ApproxDP(ε_sel, δ)``. With ``noise="gaussian"``: discrete Gaussian noise of L2 sensitivity
``√L0`` and the threshold of :func:`gaussian_threshold`; event
``Composed(ZCDP(ρ_sel), ApproxDP(0, δ))`` (accountant ``approx``; zCDP cannot express δ).

**Top-k groups** (``ORDER BY <COUNT/SUM> [DESC|ASC] LIMIT k``, no HAVING/OFFSET): ``k`` rounds of
the exponential mechanism on the exact per-group scores (peeling = one-shot Gumbel top-k,
Durfee-Rogers 2019), monotone with L∞ sensitivity ``m`` for counts; see
:func:`~dpkit.engine.plan.calibrate.calibrate_topk`. Event
``SelfComposed(Exponential(ε_sel/k), k)``.

**Modules** (floors inside the package; imports go down only): :mod:`.model` (the plan as
data, parameter limits), :mod:`.fixed` (fixed-point arithmetic and its SQL), :mod:`.calibrate`
(sensitivities, noise, events, budget weights), :mod:`.compile` (the one bounded-aggregate SQL
statement, as passes), :mod:`.build` (QuerySpec -> Plan, as passes: the state in
:mod:`.planning`, the request's passes in :mod:`.request`, the measurements' in
:mod:`.measures`). Callers import the names below from the package:
``from dpkit.engine import plan as dplan``.
"""

from dpkit.engine.plan.bounding import bounding_ctes
from dpkit.engine.plan.build import PLAN_PASSES, Planning, build_plan, top_k_request
from dpkit.engine.plan.calibrate import (
    dgauss_upper_tail,
    gaussian_selection_delta,
    gaussian_threshold,
    measure_weights,
    ordinal,
    quantile_candidates,
    top_k_utility,
)
from dpkit.engine.plan.compile import (
    COMPILE_PASSES,
    CompiledSQL,
    SqlState,
    compile_sql,
)
from dpkit.engine.plan.fixed import (
    FIXED_PREFIX,
    clamp_sql,
    fixed_column_name,
    fixed_column_sql,
    round_half_away,
    row_exponent,
    shift_round,
    unit_rows_column_name,
)
from dpkit.engine.plan.keys import FILL_MAX_KEYS, can_fill_keys, literal_sql
from dpkit.engine.plan.model import (
    DIAG_KINDS,
    DIAGNOSTICS_SHARE,
    GAUSSIAN,
    GAUSSIAN_THRESHOLD,
    LAPLACE,
    MAX_KEYS,
    MAX_QUERY_EPSILON,
    MAX_TOP_K,
    MIN_QUERY_EPSILON,
    MIN_QUERY_RHO,
    NOISES,
    QUANTILE_BINS,
    QUANTILE_CI_SHARE,
    SELECTION_WEIGHT,
    TOP_K_WEIGHT,
    AggPlan,
    KeyProduct,
    Measure,
    Plan,
    PlanError,
    check_delta,
    check_epsilon,
)

__all__ = [
    "COMPILE_PASSES", "DIAGNOSTICS_SHARE", "DIAG_KINDS", "FILL_MAX_KEYS", "FIXED_PREFIX",
    "GAUSSIAN", "GAUSSIAN_THRESHOLD",
    "LAPLACE", "MAX_KEYS", "MAX_QUERY_EPSILON", "MAX_TOP_K", "MIN_QUERY_EPSILON",
    "MIN_QUERY_RHO", "NOISES", "PLAN_PASSES", "QUANTILE_BINS", "QUANTILE_CI_SHARE",
    "SELECTION_WEIGHT", "TOP_K_WEIGHT", "AggPlan", "CompiledSQL", "KeyProduct", "Measure",
    "Plan", "PlanError", "Planning", "SqlState", "bounding_ctes", "build_plan", "can_fill_keys",
    "check_delta", "check_epsilon", "clamp_sql", "compile_sql", "dgauss_upper_tail",
    "fixed_column_name", "fixed_column_sql", "gaussian_selection_delta",
    "gaussian_threshold", "literal_sql", "measure_weights", "ordinal", "quantile_candidates",
    "round_half_away", "row_exponent", "shift_round", "top_k_request", "top_k_utility",
    "unit_rows_column_name",
]
