"""Synthetic records: the released histogram (factorization or MWEM) rounded to records,
or MST's records (:mod:`.synthetic_mst`) beyond the product-grid cap.

**What it protects.** The records are post-processing of one differentially private release of
the table's histogram over the public product grid of the requested columns (see
:mod:`.plan`): ε-DP or ρ-zCDP for add/remove one privacy unit. No record is a real row; what they
preserve is what the release measured (the k-way marginals), approximately.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit import noise as _noise
from dpkit.engine.families.finish import rmse_note, split
from dpkit.engine.families.job import Context, Job
from dpkit.engine.families.synthetic_mst import mst_frame, values_in_cells
from dpkit.engine.ledger import Entry
from dpkit.engine.results import write_columns
from dpkit.release import mwem, synthetic_records

__all__ = ["SyntheticData", "finish_synthetic"]


@dataclass
class SyntheticData:
    """Synthetic records released by :meth:`Curator.synthetic`, and what they cost.

    ``data``: one array per requested column, in order (values: declared keys, or for numeric
    columns a value drawn uniformly within its grid cell); :meth:`to_pandas`,
    :meth:`write` (Parquet or CSV, no pandas needed). Post-processing of a private release:
    any use of it costs no further privacy.
    """

    data: Any
    columns: list[str]
    method: str
    event: ev.Event
    epsilon: float
    delta: float
    ledger_seq: int
    query: str
    level: float
    insecure: bool = False
    notes: list[str] = field(default_factory=list)
    split: list[dict[str, Any]] = field(default_factory=list)
    histogram: np.ndarray | None = None
    remaining: float | None = None
    #: what bounding did, as DP estimates (:mod:`.diagnostics`), and when it may mislead
    diagnostics: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.data[self.columns[0]]) if self.columns else 0

    def to_pandas(self) -> Any:
        """A pandas DataFrame of the records (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - pandas is a test dependency
            raise ImportError("to_pandas() needs pandas: pip install pandas; or use "
                              "write(path) for Parquet/CSV") from exc
        return pd.DataFrame({c: self.data[c] for c in self.columns})

    def write(self, path: str | Path) -> None:
        """Write the records as Parquet (``.parquet``/``.pq``) or CSV (anything else)."""
        write_columns({c: self.data[c] for c in self.columns}, path)

    def to_parquet(self, path: str | Path) -> None:
        write_columns({c: self.data[c] for c in self.columns}, path, fmt="parquet")

    def to_csv(self, path: str | Path) -> None:
        write_columns({c: self.data[c] for c in self.columns}, path, fmt="csv")

    def __repr__(self) -> str:
        flag = " INSECURE (seeded noise)" if self.insecure else ""
        return (f"SyntheticData({len(self.data)} records of {', '.join(self.columns)} by "
                f"{self.method}, epsilon {self.epsilon:.4g}{flag})")


def _histogram(ctx: Context, job: Job, x: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The released histogram (non-negative reals) and the notes on how it was measured."""
    if job.plan is not None:
        rel = job.plan.answer(x, level=job.level, source=ctx.source)
        hist = np.maximum(np.asarray(rel.details["x_hat"], dtype=np.float64), 0.0)
        return hist, [*job.notes, rmse_note(job)]
    eps_m = job.family_privacy()["epsilon"]
    rho_m = job.details.get("mwem_rho")
    rel = mwem(x, job.details["workload"], epsilon=eps_m if rho_m is None else None,
               rho=rho_m, rounds=int(job.details["rounds"]), contributions=job.contributions,
               source=ctx.source)
    if rel.event != job.family_event:  # pragma: no cover - guards the planning
        raise RuntimeError("MWEM ran with another event than the one charged")
    return np.asarray(rel.value, dtype=np.float64), [
        *job.notes, f"MWEM: {job.details['rounds']} rounds, estimated "
                    f"{float(rel.details['total']):.1f} records"]


def finish_synthetic(ctx: Context, job: Job, x: np.ndarray, entry: Entry,
                     remaining: float) -> SyntheticData:
    hist: np.ndarray | None = None
    if job.details.get("method") == "mst":
        frame, notes, _total = mst_frame(ctx, job, x)
    else:
        hist, notes = _histogram(ctx, job, x)
        frame = _dense_frame(ctx, job, hist)
    eps_cost = float(entry.view["epsilon_cost"])
    return SyntheticData(
        data=frame, columns=[a.column for a in job.axes], method=str(job.details["method"]),
        event=job.event, epsilon=eps_cost, delta=float(entry.view.get("delta_cost") or 0.0),
        ledger_seq=entry.seq, query=job.query, level=job.level, insecure=ctx.insecure,
        notes=notes, split=split(job, eps_cost), histogram=hist, remaining=remaining)


def _dense_frame(ctx: Context, job: Job, hist: np.ndarray) -> dict[str, np.ndarray]:
    """Records from a released product-grid histogram: largest-remainder counts per cell,
    shuffled, numeric values uniform within their cells."""
    counts = synthetic_records(hist, job.details.get("rows"))
    cells = np.repeat(np.arange(counts.size), counts)
    order = _noise.permutation(cells.size, source=ctx.source) if cells.size else cells
    cells = cells[order]
    idx = np.unravel_index(cells, tuple(a.size for a in job.axes)) if cells.size else [
        np.zeros(0, dtype=np.int64) for _ in job.axes]
    return {a.column: values_in_cells(a, np.asarray(ii, dtype=np.int64), ctx.source)
            for a, ii in zip(job.axes, idx, strict=True)}
