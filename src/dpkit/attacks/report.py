"""An audit report per mechanism: does each dpkit mechanism keep its stated ε?

For every mechanism in :data:`CASES`, :func:`audit_mechanisms` runs it as a black box (one call
per output, through its public function) on a neighbouring pair chosen to be its worst case,
and certifies a lower bound on ε (:func:`~dpkit.attacks.audit_vector.audit_black_box`). A lower
bound **above** the claimed ε is a privacy bug (or, with probability at most
``1 - confidence``, a false alarm); a lower bound close to the claim shows the analysis is tight
and the audit has power. The test suite checks both sides.

Worst-case pairs (add/remove one unit, sensitivity 1):

* counts and sums (``geometric``, ``laplace``, ``gaussian``, ``discrete_gaussian``): value 0 vs 1;
* ``randomized_response``: the unit's bit 0 vs 1;
* ``histogram``: one extra record in one bin (a vector output, audited through projections);
* ``exponential`` / ``report_noisy_max``: scores ``(1, 0, …, 0)`` vs ``(0, 1, …, 1)`` over 16
  candidates, where the winner's probability ratio approaches ``e^ε`` (the normaliser moves
  against the numerator);
* ``above_threshold``: one query 0 vs 1 against threshold 1/2 (a weak pair: the threshold's
  noise hides most of the change, so only a small lower bound is expected).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dpkit.attacks.audit import AuditResult
from dpkit.attacks.audit_vector import audit_black_box
from dpkit.noise import Source

__all__ = ["CASES", "AuditCase", "MechanismAudit", "audit_mechanisms", "to_markdown"]


@dataclass(frozen=True)
class AuditCase:
    """One mechanism, its claim, and its worst-case neighbouring pair."""

    name: str
    epsilon: float
    delta: float
    run: Callable[[Any, Source | None], Any]  # run(dataset, source) -> Release
    d0: Any
    d1: Any


def _cases() -> list[AuditCase]:
    from dpkit import mechanisms as m

    eps = 1.0
    k = 16
    top0 = [1.0] + [0.0] * (k - 1)
    top1 = [0.0] + [1.0] * (k - 1)
    return [
        AuditCase("geometric", eps, 0.0,
                  lambda d, s: m.geometric(d, sensitivity=1, epsilon=eps, source=s), 0, 1),
        AuditCase("laplace", eps, 0.0,
                  lambda d, s: m.laplace(d, sensitivity=1.0, epsilon=eps, source=s), 0.0, 1.0),
        AuditCase("gaussian", eps, 1e-5,
                  lambda d, s: m.gaussian(d, sensitivity=1.0, epsilon=eps, delta=1e-5, source=s),
                  0.0, 1.0),
        AuditCase("discrete_gaussian", eps, 1e-5,
                  lambda d, s: m.discrete_gaussian(d, sensitivity=1, epsilon=eps, delta=1e-5,
                                                   source=s), 0, 1),
        AuditCase("randomized_response", eps, 0.0,
                  lambda d, s: m.randomized_response(d, epsilon=eps, source=s), [0], [1]),
        AuditCase("histogram", eps, 0.0,
                  lambda d, s: m.histogram(d, categories=["a", "b", "c"], epsilon=eps, source=s),
                  ["a", "b"], ["a", "b", "c"]),
        AuditCase("exponential", eps, 0.0,
                  lambda d, s: m.exponential(list(range(k)), d, sensitivity=1.0, epsilon=eps,
                                             source=s), top0, top1),
        AuditCase("report_noisy_max", eps, 0.0,
                  lambda d, s: m.report_noisy_max(d, sensitivity=1.0, epsilon=eps, source=s),
                  top0, top1),
        AuditCase("above_threshold", eps, 0.0,
                  lambda d, s: m.above_threshold(d, 0.5, sensitivity=1.0, epsilon=eps, source=s),
                  [0.0], [1.0]),
    ]


#: The audited mechanisms (built lazily so importing this module stays cheap).
CASES: tuple[str, ...] = (
    "geometric", "laplace", "gaussian", "discrete_gaussian", "randomized_response", "histogram",
    "exponential", "report_noisy_max", "above_threshold",
)


@dataclass(frozen=True)
class MechanismAudit:
    """One row of the report. ``passed``: no certified evidence that the claim is false."""

    name: str
    epsilon: float
    delta: float
    epsilon_lower: float
    epsilon_estimate: float
    best_test: str
    trials: int
    confidence: float
    audit: AuditResult

    @property
    def passed(self) -> bool:
        return self.epsilon_lower <= self.epsilon

    @property
    def tightness(self) -> float:
        """``epsilon_lower / epsilon``: how much of the claim the audit could confirm."""
        return self.epsilon_lower / self.epsilon


def audit_mechanisms(
    *,
    trials: int = 5000,
    confidence: float = 0.95,
    names: Sequence[str] | None = None,
    selection_fraction: float = 0.25,
    source: Source | None = None,
) -> list[MechanismAudit]:
    """Audit each mechanism (all of :data:`CASES`, or ``names``) with ``trials`` runs per side.

    About 1 ms per run: 5000 trials take ~10 s per mechanism. ``selection_fraction``: the share
    of runs used to pick each test (a quarter finds the singleton sets that selection
    mechanisms need). ``source`` (tests) seeds the mechanisms' noise; by default they use the
    secure source, as in production.
    """
    cases = {c.name: c for c in _cases()}
    chosen = list(names) if names is not None else list(CASES)
    unknown = [n for n in chosen if n not in cases]
    if unknown:
        raise ValueError(f"unknown mechanisms {unknown}; choose from {', '.join(CASES)}")
    rows = []
    for name in chosen:
        case = cases[name]

        def run(d: Any, c: AuditCase = case) -> Any:
            return c.run(d, source)

        res = audit_black_box(run, case.d0, case.d1,
                              trials=trials, delta=case.delta, confidence=confidence,
                              selection_fraction=selection_fraction)
        rows.append(MechanismAudit(
            name=name, epsilon=case.epsilon, delta=case.delta,
            epsilon_lower=res.epsilon_lower, epsilon_estimate=res.epsilon_estimate,
            best_test=res.best_test, trials=trials, confidence=confidence, audit=res,
        ))
    return rows


def to_markdown(rows: Sequence[MechanismAudit]) -> str:
    """The report as a Markdown table."""
    lines = [
        "| mechanism | claimed ε | δ | certified ε ≥ | point estimate | verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        verdict = "ok" if r.passed else "**VIOLATION**"
        lines.append(f"| {r.name} | {r.epsilon:g} | {r.delta:g} | {r.epsilon_lower:.3f} | "
                     f"{r.epsilon_estimate:.3f} | {verdict} |")
    return "\n".join(lines)
