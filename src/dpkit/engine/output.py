"""Answers written to files: CSV, Parquet, JSON and Excel, the format read from the extension.

Everything that can make a write fail is checked by :func:`check_output_path` **before** the
query is charged (a folder that does not exist, no permission, an unknown extension, ``.xlsx``
without openpyxl): a write that fails after the charge spends budget on an answer nobody sees.
CSV and Parquet go through DuckDB (no pandas needed); JSON is written by the standard library;
Excel needs the optional openpyxl (``pip install 'dpkit[xlsx]'``).

======================  =========  ============================================================
extension               format     what is in the file
======================  =========  ============================================================
``.csv``                CSV        a header and one line per row; NaN and None as empty fields
``.parquet``, ``.pq``   Parquet    the columns with their types; NaN as NULL
``.json``               JSON       ``{"columns": [...], "rows": [{...}, ...], "about": {...}}``
``.xlsx``               Excel      sheet ``result`` (header + rows), sheet ``about``
======================  =========  ============================================================

``about`` holds what the answer was (the query, epsilon and delta spent, the CI level, the
ledger row): a file that travels alone still says what it cost.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMATS", "check_output_path", "output_format", "write_columns"]

FORMATS: dict[str, str] = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet",
                           ".json": "json", ".xlsx": "xlsx"}


def output_format(path: str | Path) -> str:
    """The format of an output file from its extension; a clear error for any other."""
    suffix = Path(path).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is None:
        raise ValueError(f"cannot tell the format of {str(path)!r} from its extension "
                         f"({suffix or 'none'}): name the file .csv, .parquet, .json or .xlsx "
                         f"(nothing was charged)")
    if fmt == "xlsx":
        _openpyxl()
    return fmt


def _openpyxl() -> Any:
    try:
        import openpyxl
    except ImportError:
        raise ImportError("writing .xlsx needs openpyxl: pip install 'dpkit[xlsx]' (or "
                          "pip install openpyxl), or write .csv / .parquet / .json instead "
                          "(nothing was charged)") from None
    return openpyxl


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
    output_format(target)
    return target


def write_columns(data: Mapping[str, Any], path: str | Path, fmt: str | None = None,
                  about: Mapping[str, Any] | None = None) -> None:
    """Write columns (name -> array, in order) to ``path``. ``fmt``: ``"csv"``, ``"parquet"``,
    ``"json"`` or ``"xlsx"``; default: from the extension (:data:`FORMATS`; an unknown one
    writes CSV, as before: :func:`check_output_path` is where a command refuses it, before the
    charge). ``about``: what the answer was (the query, its cost), kept in JSON and Excel."""
    target = Path(path)
    if fmt is None:
        fmt = FORMATS.get(target.suffix.lower(), "csv")
    if fmt in ("parquet", "csv"):
        _write_duckdb(data, target, fmt)
    elif fmt == "json":
        doc = {"columns": list(data), "rows": _records(data), "about": _plain(dict(about or {}))}
        target.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    elif fmt == "xlsx":
        _write_xlsx(data, target, about or {})
    else:
        raise ValueError(f"fmt must be one of csv, parquet, json, xlsx (got {fmt!r})")


def _write_duckdb(data: Mapping[str, Any], target: Path, fmt: str) -> None:
    import duckdb

    con = duckdb.connect()
    try:
        # contiguous copies: DuckDB cannot scan arrays with negative strides (reversed views)
        con.register("__result", {c: np.ascontiguousarray(v) for c, v in data.items()})
        literal = "'" + str(target).replace("'", "''") + "'"
        options = "PARQUET" if fmt == "parquet" else "CSV, HEADER"
        con.execute(f"COPY __result TO {literal} (FORMAT {options})")
    finally:
        con.close()


def _plain(v: Any) -> Any:
    """A JSON/Excel-ready Python value: numpy scalars unwrapped, NaN and inf as None."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)  # dates, decimals: their text


def _records(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    cols = {c: list(np.asarray(v, dtype=object)) for c, v in data.items()}
    n = len(next(iter(cols.values()))) if cols else 0
    return [{c: _plain(v[i]) for c, v in cols.items()} for i in range(n)]


def _write_xlsx(data: Mapping[str, Any], target: Path, about: Mapping[str, Any]) -> None:
    openpyxl = _openpyxl()
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "result"
    sheet.append(list(data))
    for row in _records(data):
        sheet.append(list(row.values()))
    info = book.create_sheet("about")
    for k, v in about.items():
        v = _plain(v)
        info.append([str(k), v if isinstance(v, (int, float, str)) or v is None
                     else json.dumps(v)])
    # openpyxl stores a text starting with '=' as a formula: a released key such as
    # '=HYPERLINK(...)' (keys come from the data) would run in the analyst's spreadsheet
    for ws in (sheet, info):
        for cells in ws.iter_rows():
            for cell in cells:
                if cell.data_type == "f":
                    cell.data_type = "s"
    book.save(target)
