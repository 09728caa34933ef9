"""What an analyst gets back: noisy values, their confidence intervals, and what they cost.

A :class:`Result` is a small column table. For every aggregate output ``name`` there are three
columns: ``name`` (the private value), ``name_ci_low`` and ``name_ci_high`` (a confidence interval
at ``level`` from the exact noise distribution; for AVG/VAR/STDDEV a conservative interval from
the intervals of their parts; for quantiles two more exponential mechanisms aimed ``t`` ranks
below and above the target, see :func:`dpkit.engine.noisy_quantiles.quantiles`). Group
columns come first.

Intervals cover the aggregate of the **bounded** data: rows beyond ``max_rows_per_unit`` dropped,
values clamped into their bounds. They say nothing about the bias bounding may introduce.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit.engine.output import check_output_path, write_columns

__all__ = ["BudgetStatus", "HistoryItem", "Preview", "Result", "check_output_path", "json_safe",
           "write_columns"]


@dataclass
class Result:
    """A private answer: columns of values and intervals, its event, and the epsilon it cost."""

    columns: list[str]
    data: dict[str, np.ndarray]
    kinds: dict[str, str]  # column -> "group" | "value" | "ci_low" | "ci_high" | "expr"
    query: str
    event: ev.Event
    epsilon: float  # what the ledger charged (increase of the composed epsilon)
    delta: float  # delta spent by private partition selection (0 with public keys)
    level: float
    split: list[dict[str, Any]]
    insecure: bool = False
    ledger_seq: int | None = None
    notes: list[str] = field(default_factory=list)
    remaining: float | None = None
    # top-k groups by noisy max: k, candidates, rounds, round_epsilon, sensitivity,
    # utility_bound (native units; every group shown is within it of the true k-th best with
    # probability >= level), note
    selection: dict[str, Any] | None = None
    # what bounding did, as DP estimates (dpkit.engine.diagnose): rows_read, rows_dropped,
    # clamped:<column>, each with estimate, ci_low, ci_high, share, share_low, share_of_budget
    diagnostics: dict[str, dict[str, Any]] = field(default_factory=dict)
    # when the answer may mislead (a dropped or clamped share above 5% at 95% confidence)
    warnings: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ access

    def __len__(self) -> int:
        return 0 if not self.columns else len(self.data[self.columns[0]])

    def __getitem__(self, column: str) -> np.ndarray:
        if column not in self.data:
            raise KeyError(f"no column {column!r}; columns: {', '.join(self.columns)}")
        return self.data[column]

    def rows(self) -> Iterator[tuple[Any, ...]]:
        for i in range(len(self)):
            yield tuple(_py(self.data[c][i]) for c in self.columns)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows()]

    def value(self, column: str | None = None) -> Any:
        """The single value of a one-row result (first aggregate if ``column`` is None)."""
        if len(self) != 1:
            raise ValueError(f"value() needs a one-row result (this one has {len(self)} rows)")
        if column is None:
            column = next(c for c in self.columns if self.kinds[c] in ("value", "expr"))
        return _py(self.data[column][0])

    def ci(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        return self.data[f"{column}_ci_low"], self.data[f"{column}_ci_high"]

    def to_pandas(self) -> Any:
        """A pandas DataFrame (needs pandas): value columns plus ``_ci_low``/``_ci_high``."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover
            raise ImportError("to_pandas() needs pandas: pip install pandas (or "
                              "'dpkit[dataframes]'); to_arrow() needs nothing more") from exc
        return pd.DataFrame({c: self.data[c] for c in self.columns})

    def to_arrow(self) -> Any:
        import pyarrow as pa

        return pa.table({c: self.data[c] for c in self.columns})

    def about(self) -> dict[str, Any]:
        """What this answer was and what it cost (kept in JSON and Excel files)."""
        return {"query": self.query, "epsilon": self.epsilon, "delta": self.delta,
                "level": self.level, "ledger_seq": self.ledger_seq,
                "remaining": self.remaining, "insecure": self.insecure,
                "event": self.event.to_dict()}

    def write(self, path: str | Path) -> Path:
        """Write the answer (values and interval columns) to ``path``: ``.csv``, ``.parquet``,
        ``.json`` or ``.xlsx`` (openpyxl), the format from the extension; returns the path.

        The answer is already paid for, so check a path before asking the query with
        :func:`dpkit.engine.output.check_output_path` (the ``--output`` flag does).
        """
        target = check_output_path(path)
        write_columns({c: self.data[c] for c in self.columns}, target, about=self.about())
        return target

    def plot(self, path: str | Path | None = None, *, column: str | None = None,
             ax: Any = None) -> Any:
        """A chart of the answer (needs matplotlib: ``pip install 'dpkit[plots]'``): bars for
        categorical keys, a line for ordered (numeric or date) keys, each value with its
        interval as whiskers; one panel per aggregate (or only ``column``). Returns the
        matplotlib Figure; ``path``: also save it (PNG, SVG, PDF from the extension)."""
        from dpkit.engine.plots import Panel, plot_panels

        values = [c for c in self.columns if self.kinds[c] in ("value", "expr")]
        if column is not None:
            if column not in values:
                raise KeyError(f"no aggregate {column!r} to plot; aggregates: "
                               f"{', '.join(values)}")
            values = [column]
        keys = [self.data[c] for c in self.columns if self.kinds[c] == "group"]
        names = [c for c in self.columns if self.kinds[c] == "group"]
        panels = []
        for c in values:
            lo, hi = (self.ci(c) if f"{c}_ci_low" in self.data else (None, None))
            panels.append(Panel(name=c, values=self.data[c], low=lo, high=hi))
        title = f"epsilon {self.epsilon:.3g}, {int(self.level * 100)}% CI" + (
            "; INSECURE seeded noise" if self.insecure else "")
        return plot_panels(keys, names, panels, title=title, path=path, ax=ax)

    # ------------------------------------------------------------------ display

    def __repr__(self) -> str:
        flag = " INSECURE (seeded noise)" if self.insecure else ""
        head = (f"Result({len(self)} rows, epsilon {self.epsilon:.4g}"
                + (f", delta {self.delta:.3g}" if self.delta else "")
                + f", {int(self.level * 100)}% CI{flag})")
        lines = [head, "  " + " | ".join(self.columns)]
        for r in list(self.rows())[:20]:
            lines.append("  " + " | ".join(_fmt(v) for v in r))
        if len(self) > 20:
            lines.append(f"  ... {len(self) - 20} more rows")
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)

    def table(self, title: str | None = None) -> Any:
        """A table for the console: each aggregate and its interval, split over several tables
        (the group keys repeated) when the console is too narrow, never cutting a number."""
        from dpkit.engine.display import Col, FitTable

        cols: list[Col] = []
        for unit, c in enumerate(self.columns):
            kind = self.kinds[c]
            if kind not in ("group", "value", "expr"):
                continue
            cells = [_cell(_py(v), group=kind == "group") for v in self.data[c]]
            if kind == "group":
                numeric = all(_is_number(_py(v)) for v in self.data[c])
                cols.append(Col(c, cells, justify="right" if numeric else "left", key=True,
                                flex=not numeric and any(len(x) > 16 for x in cells)))
                continue
            cols.append(Col(c, cells, unit=unit))
            # an output over aggregates (a ratio, POWER(AVG(x), 2)) has its interval too
            if kind == "value" or f"{c}_ci_low" in self.data:
                lo, hi = self.ci(c)
                ci = ["n/a" if _isnan(_py(a)) else f"[{_fmt(_py(a))}, {_fmt(_py(b))}]"
                      for a, b in zip(lo, hi, strict=True)]
                cols.append(Col(f"{int(self.level * 100)}% CI", ci, unit=unit, style="dim"))
        cap = f"epsilon spent {self.epsilon:.4g}"
        if self.delta:
            cap += f", delta {self.delta:.3g}"
        if self.remaining is not None:
            cap += f"; remaining {self.remaining:.4g}"
        if self.insecure:
            cap += "; INSECURE seeded noise (tests only)"
        return FitTable(cols, title=title, caption=cap)

    def __rich__(self) -> Any:
        return self.table()


@dataclass
class Preview:
    """What a query would cost and how accurate it would be (nothing spent, no data read)."""

    query: str
    epsilon: float  # the query's own epsilon parameter
    cost: float  # the increase of the composed epsilon it would cause
    remaining: float
    delta: float
    level: float
    split: list[dict[str, Any]]
    outputs: list[dict[str, Any]]  # per output column: name, halfwidth (or None) and a note
    event: ev.Event
    notes: list[str] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)  # weights= as given (output -> w)

    @property
    def affordable(self) -> bool:
        return self.cost <= self.remaining * (1 + 1e-9) + 1e-12

    def __repr__(self) -> str:
        lines = [f"Preview(cost epsilon {self.cost:.4g} of {self.remaining:.4g} remaining"
                 + (f", delta {self.delta:.3g}" if self.delta else "")
                 + (f", weights {self.weights}" if self.weights else "") + ")"]
        for o in self.outputs:
            hw = o.get("halfwidth")
            lines.append(f"  {o['name']}: " + (f"±{hw:.4g}" if hw is not None else o["note"]))
        return "\n".join(lines)

    def table(self) -> Any:
        """The expected interval half-width per output, and the cost (fits the console)."""
        from dpkit.engine.display import Col, FitTable

        hws = [o.get("halfwidth") for o in self.outputs]
        caption = (f"would spend epsilon {self.cost:.4g} (remaining {self.remaining:.4g})"
                     + (f", delta {self.delta:.3g}" if self.delta else "")
                     + ("" if self.affordable else " - NOT affordable")
                     + ("; budget weights " + ", ".join(f"{k}={v:g}" for k, v in
                                                       self.weights.items())
                        if self.weights else "; budget split equally"))
        return FitTable([
            Col("output", [str(o["name"]) for o in self.outputs], justify="left", key=True),
            Col(f"{int(self.level * 100)}% CI half-width",
                ["-" if hw is None else f"±{_fmt(hw)}" for hw in hws]),
            Col("note", [str(o.get("note", "")) for o in self.outputs], justify="left",
                flex=True, style="dim"),
        ], title=f"preview: {self.query}", caption=caption)

    def __rich__(self) -> Any:
        return self.table()


def split_table(split: Sequence[dict[str, Any]], title: str = "budget split") -> Any:
    """How a query's budget was split: one line per measurement (fits the console: the
    measurement's text folds, numbers stay whole)."""
    from dpkit.engine.display import Col, FitTable

    shares, weights, fractions = [], [], []
    for s in split:
        share = (f"rho {s['rho']:.4g}" if s.get("rho") else f"eps {s['epsilon']:.4g}")
        if s.get("delta"):
            share += f", delta {s['delta']:.3g}"
        if s.get("threshold"):
            share += f", threshold {s['threshold']}"
        shares.append(share)
        weights.append("-" if s.get("weight") is None else f"{s['weight']:g}")
        fractions.append("-" if s.get("share") is None else f"{s['share']:.1%}")
    return FitTable([
        Col("measurement", [str(s["measurement"]) for s in split], justify="left", flex=True,
            key=True),
        Col("mechanism", [str(s["mechanism"]) for s in split], justify="left", flex=True),
        Col("weight", weights), Col("share", fractions),
        Col("epsilon / rho", shares, justify="left"),
        Col("sensitivity", [_fmt(s["sensitivity"]) for s in split]),
    ], title=title)


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _py(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _cell(v: Any, *, group: bool) -> str:
    if group and isinstance(v, float) and v.is_integer():
        v = int(v)  # a whole-number key (a range end, a grid edge) reads as one
    return _fmt(v)


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "n/a"
        if f != 0 and (abs(f) >= 1e7 or abs(f) < 1e-3):
            return f"{f:.4g}"
        if abs(f) >= 100:
            return f"{f:,.1f}"
        return f"{f:.3f}"
    return str(v)


@dataclass(frozen=True)
class HistoryItem:
    seq: int
    time: str
    analyst: str
    query: str
    event: ev.Event
    epsilon: float  # this charge's own cost
    delta: float
    epsilon_spent: float  # project total after it
    analyst_spent: float | None = None  # this analyst's own total after it (its charges composed)
    details: dict[str, Any] | None = None  # what the charge says it is (a fit: model, label, ...)
    note: dict[str, Any] | None = None  # its ledger note: released besides the answer (a fit's N̂)

    def describe(self) -> str:
        """The query as the history table shows it: a fit says its model and label, and N̂ where
        it released one (its ledger note)."""
        d = self.details or {}
        if d.get("kind") != "fit":
            return self.query
        rows = (self.note or {}).get("rows_estimate")
        return (f"fit {d.get('model')} -> {d.get('label')}"
                + ("" if rows is None else f", noisy row count {rows}")
                + f": {self.query}")


@dataclass
class BudgetStatus:
    """The budget as the ledger sees it: totals, spent, remaining, and every charge."""

    epsilon: float
    delta: float
    accountant: str
    spent: float
    remaining: float
    delta_spent: float
    delta_remaining: float
    history: list[HistoryItem]
    head: tuple[int, str]
    analyst: str | None = None
    rho_spent: float | None = None
    rho_remaining: float | None = None
    analysts: dict[str, float] = field(default_factory=dict)  # analyst -> epsilon cap
    project_remaining: float | None = None  # what the whole project has left
    # analyst -> {"cap", "spent", "remaining"}: own charges composed; remaining is what its next
    # charge may use (its cap's headroom, bounded by the project's)
    per_analyst: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # a constant-work project's delta_t, charged beside every release (None: not constant work)
    timing_delta: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "accountant": self.accountant,
            "spent": self.spent,
            "remaining": self.remaining,
            "delta_spent": self.delta_spent,
            "delta_remaining": self.delta_remaining,
            "rho_spent": self.rho_spent,
            "rho_remaining": self.rho_remaining,
            "analyst": self.analyst,
            "analyst_budgets": self.analysts,
            "project_remaining": self.project_remaining,
            "analysts": {k: json_safe(dict(v)) for k, v in self.per_analyst.items()},
            "head": {"seq": self.head[0], "hash": self.head[1]},
            "timing_delta": self.timing_delta,
            "history": [
                {"seq": h.seq, "time": h.time, "analyst": h.analyst, "query": h.query,
                 "epsilon": h.epsilon, "delta": h.delta, "epsilon_spent": h.epsilon_spent,
                 "analyst_spent": _finite_or_none(h.analyst_spent), "event": h.event.to_dict(),
                 "details": h.details, "note": h.note}
                for h in self.history
            ],
        }

    def table(self) -> Any:
        """The history (with each analyst's own running spend), the totals, and, project-wide,
        one line per analyst: cap, spent, and what its next query may use."""
        from rich.console import Group

        from dpkit.engine.display import Col, FitTable

        who = f" (analyst {self.analyst})" if self.analyst else ""
        h = self.history
        cols = [
            Col("#", [str(x.seq) for x in h], key=True),
            Col("epsilon", [f"{x.epsilon:.4g}" for x in h]),
            Col("delta", [f"{x.delta:.3g}" if x.delta else "0" for x in h]),
            Col("own total", ["n/a" if x.analyst_spent is None or math.isnan(x.analyst_spent)
                              else f"{x.analyst_spent:.4g}" for x in h]),
            Col("project total", [f"{x.epsilon_spent:.4g}" for x in h]),
            Col("analyst", [x.analyst for x in h], justify="left"),
            Col("time (UTC)", [x.time[:16].replace("T", " ") for x in h], justify="left"),
            Col("query", [x.describe() for x in h], justify="left", flex=True),
        ]
        cap = (f"spent epsilon {self.spent:.4g} of {self.epsilon:g} (remaining "
               f"{self.remaining:.4g}"
               + (f"; project remaining {self.project_remaining:.4g}"
                  if self.analyst and self.project_remaining is not None else "")
               + f"); delta {self.delta_spent:.3g} of {self.delta:g}; "
               f"ledger head #{self.head[0]} {self.head[1][:12]}"
               + (f"; each release's delta includes {self.timing_delta:.3g} for constant "
                  f"work's timing-safe sampling" if self.timing_delta else ""))
        t = FitTable(cols, title=f"privacy budget{who}: accountant {self.accountant}",
                     caption=cap)
        if self.analyst or not self.per_analyst:
            return t
        rows = self.per_analyst
        a = FitTable([
            Col("analyst", list(rows), justify="left", key=True),
            Col("cap", ["-" if r.get("cap") is None else f"{r['cap']:g}" for r in rows.values()]),
            Col("spent", [f"{r['spent']:.4g}" for r in rows.values()]),
            Col("remaining", [f"{r['remaining']:.4g}" for r in rows.values()]),
        ], title="per analyst (remaining: what its next query may use)")
        return Group(t, a)

    def plot(self, path: str | Path | None = None) -> Any:
        """Spend over time (needs matplotlib: ``pip install 'dpkit[plots]'``): each analyst's
        own running spend, the project's total and the budget; returns the Figure, and saves
        it to ``path`` if given."""
        from dpkit.engine.plots import plot_budget

        h = self.history
        who = f"analyst {self.analyst}" if self.analyst else "project"
        return plot_budget([x.time for x in h], [x.analyst for x in h],
                           [x.analyst_spent for x in h], [x.epsilon_spent for x in h],
                           epsilon=self.epsilon, path=path, caps=self.analysts,
                           title=f"privacy budget ({who}, accountant {self.accountant})")

    def __rich__(self) -> Any:
        return self.table()

    def __repr__(self) -> str:
        """A few lines, as ``dpkit budget``'s caption reads (``print(cur.budget())``): spent
        and left ε and δ, the number of charges, each analyst's; the detail stays in the
        fields, ``table()`` and ``to_dict()``."""
        who = f" (analyst {self.analyst})" if self.analyst else ""
        n = len(self.history)
        lines = [f"BudgetStatus{who}, accountant {self.accountant}: {n} charge"
                 + ("" if n == 1 else "s") + f", ledger head #{self.head[0]}",
                 f"  epsilon spent {self.spent:.4g} of {self.epsilon:g}, left "
                 f"{self.remaining:.4g}"
                 + (f" (project left {self.project_remaining:.4g})"
                    if self.analyst and self.project_remaining is not None else "")
                 + f"; delta spent {self.delta_spent:.3g} of {self.delta:g}, left "
                 f"{self.delta_remaining:.3g}"]
        if not self.analyst:
            for name, r in self.per_analyst.items():
                cap = r.get("cap")
                lines.append(f"  analyst {name}: spent {_num(r.get('spent'))} of "
                             f"{'no cap' if cap is None else f'{cap:g}'}, next query may "
                             f"use {_num(r.get('remaining'))}")
        return "\n".join(lines)

    __str__ = __repr__


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def json_safe(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with non-finite floats as None (JSON has no inf or NaN)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out
