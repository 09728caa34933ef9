"""Answers of the release families that say when they mislead (issue 14, item 4).

A family counts the rows that fall in a cell of its public grid after each unit is cut to
``m = max_rows_per_unit`` rows: rows beyond the cap and rows in no cell (a key outside a declared
domain, NULL or NaN) are silently left out, and numbers outside the declared bounds are clamped
into the end cells: the answer describes the bounded rows only. So every release
also measures, with :data:`~dpkit.engine.plan.DIAGNOSTICS_SHARE` of its budget (as SQL answers
do, :mod:`dpkit.engine.diagnose`), three whole-release counts:

* ``rows_read`` (``K``): rows counted in the histogram (after the cap);
* ``rows_dropped`` (``D``, user level only): rows the per-unit cap dropped, each unit's
  drops counted up to ``m`` (a floor of what was dropped);
* ``rows_outside`` (``O``): rows with a value outside the declared bounds (clamped into an
  end cell), a key outside a declared domain, NULL or NaN (in no cell), each unit's counted
  up to ``m`` (a floor).

**Privacy.** Neighbouring relation: add or remove one privacy unit with all its rows. Each
count is a sum over units of a per-unit term in ``[0, m]`` that depends on that unit's rows
only (the cap's choice is keyed by the unit's own rows), so each has sensitivity ``m`` (1 at
record level). Each is released with discrete Laplace noise at ``ε·s/n`` (ε-DP) or discrete
Gaussian noise at ``ρ·s/n`` (ρ-zCDP; ``(ε, δ)`` targets converted to the largest ρ meeting
them), ``s`` the share and ``n`` the number of counts. The family itself is planned at
``(1 - s)`` of the target, and the job's event is the composition of both parts (basic
composition; zCDP parts merged into one ``ZCDP(Σρ)``): the ledger sees one charge for the
budget asked. The counts are read in the same charged read (``K``: the exact histogram's total;
``D`` and ``O``: a second statement, :func:`~.histogram.diagnostics_statement`); shares and
warnings are post-processing of the noisy counts.

**Warnings** (as :mod:`dpkit.engine.diagnose`): the dropped share ``D / (D + K)`` and the
outside share ``O / (O + K + D)`` (clamped rows are in ``K`` too, so this understates
the share: a conservative figure) are bounded below from each count's interval at
:data:`~dpkit.engine.diagnose.WARN_LEVEL`; a warning is issued when that lower bound exceeds
:data:`~dpkit.engine.diagnose.WARN_SHARE` (5%): a false warning has probability at most 5%.
``diagnostics=False`` measures nothing and gives the family the whole budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpkit import events as ev
from dpkit import noise as _noise
from dpkit.accounting import zcdp
from dpkit.engine.diagnose import WARN_LEVEL, WARN_SHARE
from dpkit.engine.plan import DIAGNOSTICS_SHARE
from dpkit.mechanisms.plan import (
    discrete_gaussian_halfwidth,
    discrete_gaussian_plan,
    discrete_laplace_halfwidth,
    discrete_laplace_plan,
)

__all__ = ["DiagCount", "attach", "family_budget", "plan_counts", "summarise"]


@dataclass(frozen=True)
class DiagCount:
    """One diagnostic count: its name, what it counts, its noise and its event."""

    name: str
    what: str
    share: float  # of the release's budget
    epsilon: float | None  # Laplace
    rho: float | None  # Gaussian
    scale: float  # discrete Laplace scale (Laplace)
    sigma2: float  # discrete Gaussian variance parameter (Gaussian)
    event: ev.Event

    def halfwidth(self, level: float) -> int:
        if self.rho is not None:
            return int(discrete_gaussian_halfwidth(self.sigma2, level)[0])
        return int(discrete_laplace_halfwidth(self.scale, level)[0])


def _rho_total(privacy: Any) -> float | None:
    """The target as zCDP ρ (None for pure-DP Laplace targets)."""
    if privacy.rho is not None:
        return float(privacy.rho)
    if privacy.delta is not None:
        return float(zcdp.epsilon_to_rho(privacy.epsilon, privacy.delta))
    return None


def family_budget(privacy: Any, share: float) -> dict[str, float | None]:
    """The family's own privacy arguments: ``(1 - share)`` of the target (``share`` 0: the
    target unchanged), as ``epsilon=`` (Laplace) or ``rho=`` (Gaussian)."""
    if share == 0.0:
        return dict(privacy.kwargs)
    rho = _rho_total(privacy)
    if rho is not None:
        return {"epsilon": None, "rho": rho * (1.0 - share), "delta": None}
    return {"epsilon": float(privacy.epsilon) * (1.0 - share), "rho": None, "delta": None}


def _rho_up(sensitivity: int, sigma2: float) -> float:
    exact = Fraction(sensitivity) ** 2 / (2 * Fraction(sigma2))
    r = float(exact)
    return math.nextafter(r, math.inf) if Fraction(r) < exact else r


def plan_counts(privacy: Any, *, m: int, record_level: bool) -> list[DiagCount]:
    """The diagnostic counts of a release at ``privacy`` (public: no row read)."""
    names = [("rows_read", "rows read after bounding")]
    if not record_level:
        names.append(("rows_dropped", f"rows dropped by the per-unit cap (at most {m} counted "
                                      f"per unit)"))
    names.append(("rows_outside", "rows outside the declared bounds/domains or NULL (in no "
                                  "cell" + (f"; at most {m} counted per unit)"
                                            if not record_level else ")")))
    share = DIAGNOSTICS_SHARE / len(names)
    rho = _rho_total(privacy)
    out = []
    for name, what in names:
        if rho is None:
            eps = float(privacy.epsilon) * share
            scale = discrete_laplace_plan(sensitivity=m, epsilon=eps).scale
            out.append(DiagCount(name, what, share, eps, None, scale, 0.0,
                                 ev.DiscreteLaplace(scale, m)))
        else:
            sigma2 = discrete_gaussian_plan(sensitivity=m, rho=rho * share).sigma2
            out.append(DiagCount(name, what, share, None, rho * share, 0.0, sigma2,
                                 ev.ZCDP(_rho_up(m, sigma2))))
    return out


def compose(family: ev.Event, counts: list[DiagCount]) -> ev.Event:
    """The release's one event: the family's and the counts' composed, zCDP parts merged into
    one ``ZCDP(Σρ)`` (exact for zCDP; lets an 'approx' ledger convert once at the release's
    whole δ share)."""
    flat: list[ev.Event] = []
    for e in [family, *[c.event for c in counts]]:
        flat.extend(e.events if isinstance(e, ev.Composed) else [e])
    rhos = [Fraction(e.rho) for e in flat if isinstance(e, ev.ZCDP)]
    rest = [e for e in flat if not isinstance(e, ev.ZCDP)]
    if len(rhos) > 1:
        total = sum(rhos, Fraction(0))
        up = float(total)
        up = math.nextafter(up, math.inf) if Fraction(up) < total else up
        flat = [ev.ZCDP(up), *rest]
    return flat[0] if len(flat) == 1 else ev.Composed(tuple(flat))


def _noisy(c: DiagCount, exact: int, source: Any) -> int:
    if c.rho is not None:
        z = _noise.discrete_gaussian(Fraction(c.sigma2), 1, source=source)
    else:
        z = _noise.discrete_laplace(Fraction(c.scale), 1, source=source)
    return int(exact) + int(z[0])


def summarise(counts: list[DiagCount], values: dict[str, int], *, level: float, m: int,
              ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``(diagnostics, warnings)`` from the noisy counts ``values`` (post-processing only)."""
    out: dict[str, dict[str, Any]] = {}
    lows: dict[str, float] = {}
    highs: dict[str, float] = {}
    for c in counts:
        v = values[c.name]
        h = c.halfwidth(level)
        out[c.name] = {"estimate": v, "ci_low": v - h, "ci_high": v + h,
                       "share_of_budget": c.share, "epsilon": c.epsilon, "rho": c.rho,
                       "what": f"diagnostics: {c.what}"}
        w = c.halfwidth(WARN_LEVEL)
        lows[c.name], highs[c.name] = max(v - w, 0.0), max(v + w, 0.0)
    pos = {k: max(e["estimate"], 0) for k, e in out.items()}
    k_high = max(highs["rows_read"], 1.0)
    warnings: list[str] = []
    if "rows_dropped" in out:
        d = out["rows_dropped"]
        d["share"] = pos["rows_dropped"] / max(pos["rows_dropped"] + pos["rows_read"], 1)
        d["share_low"] = lows["rows_dropped"] / (lows["rows_dropped"] + k_high)
        _warn(warnings, d, f"rows were dropped by the per-unit cap (max_rows_per_unit={m}; "
                           f"each unit's drops counted up to {m}, so this is a floor)",
              "the data owner can raise the table's max_rows_per_unit (or filter the rows first)")
    o = out["rows_outside"]
    total = pos["rows_outside"] + pos["rows_read"] + pos.get("rows_dropped", 0)
    o["share"] = pos["rows_outside"] / max(total, 1)
    o["share_low"] = lows["rows_outside"] / (lows["rows_outside"] + k_high
                                             + highs.get("rows_dropped", 0.0))
    _warn(warnings, o, "rows lay outside the declared bounds/domains of the columns or were "
                       "NULL (in no cell, not counted)",
          "the data owner can widen the declared bounds or domains (`dpkit suggest-bounds` "
          "estimates bounds), or filter NULLs with where=")
    return out, warnings


def _warn(warnings: list[str], e: dict[str, Any], what: str, fix: str) -> None:
    if e["share_low"] > WARN_SHARE:
        warnings.append(
            f"about {100 * e['share']:.0f}% of {what} (at least {100 * e['share_low']:.1f}% "
            f"with 95% confidence; warned above {100 * WARN_SHARE:g}%): the answer describes "
            f"the bounded data and may be biased; {fix}")


def attach(res: Any, counts: list[DiagCount], exact: dict[str, int], *, level: float, m: int,
           source: Any) -> Any:
    """Noise the exact counts (charged with the release), put ``diagnostics`` and
    ``warnings`` on the answer ``res`` and return it."""
    values = {c.name: _noisy(c, exact.get(c.name, 0), source) for c in counts}
    res.diagnostics, res.warnings = summarise(counts, values, level=level, m=m)
    return res
