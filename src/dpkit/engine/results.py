"""What an analyst gets back: noisy values, their confidence intervals, and what they cost.

A :class:`Result` is a small column table. For every aggregate output ``name`` there are three
columns: ``name`` (the private value), ``name_ci_low`` and ``name_ci_high`` (a confidence interval
at ``level`` from the exact noise distribution; for AVG/VAR/STDDEV a conservative interval from
the intervals of their parts; for quantiles two more exponential mechanisms aimed ``t`` ranks
below and above the target, see :func:`dpkit.engine.noisy._quantiles`). Group columns come first.

Intervals cover the aggregate of the **bounded** data: rows beyond ``max_rows_per_unit`` dropped,
values clamped into their bounds. They say nothing about the bias bounding may introduce.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import events as ev

__all__ = ["BudgetStatus", "HistoryItem", "Preview", "Result", "json_safe"]


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
            raise ImportError("to_pandas() needs pandas: pip install pandas") from exc
        return pd.DataFrame({c: self.data[c] for c in self.columns})

    def to_arrow(self) -> Any:
        import pyarrow as pa

        return pa.table({c: self.data[c] for c in self.columns})

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
        """A rich Table: each aggregate as ``value ± half-width`` plus its interval."""
        from rich.table import Table

        t = Table(title=title, title_justify="left")
        shown = [c for c in self.columns if self.kinds[c] in ("group", "value", "expr")]
        for c in shown:
            kind = self.kinds[c]
            t.add_column(c, justify="left" if kind == "group" else "right")
            if kind == "value":
                t.add_column(f"{int(self.level * 100)}% CI", justify="right", style="dim")
        for i in range(len(self)):
            cells: list[str] = []
            for c in shown:
                v = _py(self.data[c][i])
                if self.kinds[c] == "group" and isinstance(v, float) and v.is_integer():
                    v = int(v)  # a whole-number key (a range end, a grid edge) reads as one
                cells.append(_fmt(v))
                if self.kinds[c] == "value":
                    lo = _py(self.data[f"{c}_ci_low"][i])
                    hi = _py(self.data[f"{c}_ci_high"][i])
                    cells.append("n/a" if _isnan(lo) else f"[{_fmt(lo)}, {_fmt(hi)}]")
            t.add_row(*cells)
        cap = f"epsilon spent {self.epsilon:.4g}"
        if self.delta:
            cap += f", delta {self.delta:.3g}"
        if self.remaining is not None:
            cap += f"; remaining {self.remaining:.4g}"
        if self.insecure:
            cap += "; INSECURE seeded noise (tests only)"
        t.caption = cap
        return t

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
        from rich.table import Table

        t = Table(title=f"preview: {self.query}", title_justify="left")
        t.add_column("output")
        t.add_column(f"{int(self.level * 100)}% CI half-width", justify="right")
        t.add_column("note", style="dim")
        for o in self.outputs:
            hw = o.get("halfwidth")
            t.add_row(o["name"], "-" if hw is None else f"±{_fmt(hw)}", o.get("note", ""))
        t.caption = (f"would spend epsilon {self.cost:.4g} (remaining {self.remaining:.4g})"
                     + (f", delta {self.delta:.3g}" if self.delta else "")
                     + ("" if self.affordable else " - NOT affordable")
                     + ("; budget weights " + ", ".join(f"{k}={v:g}" for k, v in
                                                       self.weights.items())
                        if self.weights else "; budget split equally"))
        return t

    def __rich__(self) -> Any:
        return self.table()


def split_table(split: Sequence[dict[str, Any]], title: str = "budget split") -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in ("measurement", "mechanism", "weight", "share", "epsilon / rho", "sensitivity"):
        t.add_column(c)
    for s in split:
        share = (f"rho {s['rho']:.4g}" if s.get("rho") else f"eps {s['epsilon']:.4g}")
        if s.get("delta"):
            share += f", delta {s['delta']:.3g}"
        if s.get("threshold"):
            share += f", threshold {s['threshold']}"
        w = s.get("weight")
        frac = s.get("share")
        t.add_row(s["measurement"], s["mechanism"], "-" if w is None else f"{w:g}",
                  "-" if frac is None else f"{frac:.1%}", share, _fmt(s["sensitivity"]))
    return t


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _py(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


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


def check_output_path(path: str | Path) -> Path:
    """Refuse an output file that cannot be written, before anything is charged: a write that
    fails after the charge would spend budget on an answer nobody sees."""
    target = Path(path).expanduser()
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"cannot write {target}: the folder {folder} does not exist; create it "
                         f"first (nothing was charged)")
    if target.is_dir():
        raise ValueError(f"cannot write {target}: it is a folder; give a file name such as "
                         f"{target / 'answer.csv'} (nothing was charged)")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ValueError(f"cannot write {target}: no write permission (nothing was charged)")
    return target


def write_columns(data: Mapping[str, Any], path: str | Path, fmt: str | None = None) -> None:
    """Write columns (name -> array, in order) as Parquet or CSV with a header, through DuckDB:
    no pandas needed. NaN is written as NULL. ``fmt``: ``"parquet"`` or ``"csv"``; default: from
    the suffix (``.parquet``/``.pq``: Parquet, anything else: CSV)."""
    import duckdb

    target = Path(path)
    if fmt is None:
        fmt = "parquet" if target.suffix.lower() in (".parquet", ".pq") else "csv"
    if fmt not in ("parquet", "csv"):
        raise ValueError(f"fmt must be 'parquet' or 'csv' (got {fmt!r})")
    con = duckdb.connect()
    try:
        # contiguous copies: DuckDB cannot scan arrays with negative strides (reversed views)
        con.register("__result", {c: np.ascontiguousarray(v) for c, v in data.items()})
        literal = "'" + str(target).replace("'", "''") + "'"
        options = "PARQUET" if fmt == "parquet" else "CSV, HEADER"
        con.execute(f"COPY __result TO {literal} (FORMAT {options})")
    finally:
        con.close()


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
    analysts: dict[str, float] = field(default_factory=dict)

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
            "head": {"seq": self.head[0], "hash": self.head[1]},
            "history": [
                {"seq": h.seq, "time": h.time, "analyst": h.analyst, "query": h.query,
                 "epsilon": h.epsilon, "delta": h.delta, "epsilon_spent": h.epsilon_spent,
                 "event": h.event.to_dict()}
                for h in self.history
            ],
        }

    def table(self) -> Any:
        from rich.table import Table

        who = f" (analyst {self.analyst})" if self.analyst else ""
        t = Table(title=f"privacy budget{who}: accountant {self.accountant}",
                  title_justify="left")
        t.add_column("#", justify="right")
        t.add_column("time")
        t.add_column("analyst")
        t.add_column("query", overflow="fold", max_width=60)
        t.add_column("epsilon", justify="right")
        t.add_column("delta", justify="right")
        t.add_column("total spent", justify="right")
        for h in self.history:
            t.add_row(str(h.seq), h.time[:19].replace("T", " "), h.analyst, h.query,
                      f"{h.epsilon:.4g}", f"{h.delta:.3g}" if h.delta else "0",
                      f"{h.epsilon_spent:.4g}")
        t.caption = (f"spent epsilon {self.spent:.4g} of {self.epsilon:g} (remaining "
                     f"{self.remaining:.4g}); delta {self.delta_spent:.3g} of {self.delta:g}; "
                     f"ledger head #{self.head[0]} {self.head[1][:12]}")
        return t

    def __rich__(self) -> Any:
        return self.table()


def json_safe(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with non-finite floats as None (JSON has no inf or NaN)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out
