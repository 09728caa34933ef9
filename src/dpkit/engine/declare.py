"""Table declarations from a file: JSON or YAML, any value, errors that name the line.

The data owner's declarations (privacy unit, contribution bounds, clamps, public key domains,
NOT NULL columns) are what make a query's sensitivity true, so they deserve a file that can be
reviewed and versioned, and that takes any value: a domain key with a comma in it, a quote, a
leading space. ``dpkit add-table PROJECT NAME SOURCE --declare visits.json`` reads one; in
Python, ``cur.add_table("visits", "visits.csv", **read_declaration("visits.json"))``::

    {
      "privacy_unit": "patient_id",
      "max_rows_per_unit": 3,
      "max_groups_per_unit": 2,
      "bounds": {"age": [0, 120], "cost": [0, 5000]},
      "domains": {"ward": ["A", "B", "annex, north wing"]},
      "not_null": ["age"],
      "public": false,
      "description": "hospital visits, 2024",
      "max_text_length": 200,
      "drop_privacy_unit": false,
      "types": {"patient_id": "BIGINT", "ward": "VARCHAR"}
    }

``"max_rows_per_unit": "auto"`` chooses it privately at load (its cost charged, as
``add_table(max_rows_per_unit="auto")``); a DATE/TIMESTAMP column's bounds are a pair of ISO
dates, ``["2024-01-01", "2024-12-31"]``. ``max_text_length``: a private copy's text values are
cut to this many characters at load (``null``: not cut; default 1,000), as
``--max-text-length``; ``drop_privacy_unit: true``, with a replace, makes a table declared
with a privacy unit record level on purpose, as ``--drop-privacy-unit``. ``types``: how a
CSV/JSON source's columns are read (DuckDB type names; ``"infer"``: the sniffer's types,
which follow the rows), as ``--types``.
YAML (``.yaml``/``.yml``, needs PyYAML: ``pip install 'dpkit[yaml]'``) takes the same keys.
The structure is checked here, before the project is touched: an unknown key, a bound that is
not a pair of numbers (or of dates), a domain that is not a list, a count that is not a
positive integer, each refused with the file and line. What needs the table's columns (does
``age`` exist, is it numeric) is checked by ``add_table`` itself, and :func:`where_declared`
adds the line to those messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpkit.engine.tables import TEXT_LENGTH_ERROR, check_bounds, text_length_ok

__all__ = ["Declaration", "DeclarationError", "read_declaration", "where_declared"]

KEYS = ("privacy_unit", "max_rows_per_unit", "max_groups_per_unit", "bounds", "domains",
        "not_null", "public", "description", "max_text_length", "drop_privacy_unit", "types")


class DeclarationError(ValueError):
    """A declaration file that cannot be used; the message names the file and the line."""


class Declaration(dict[str, Any]):
    """The keyword arguments of ``add_table`` read from a file (a plain dict to ``**``-expand),
    remembering the line each key was declared on."""

    lines: _Lines | None = None


class _Lines:
    """Where each key sits in the file: ``(section, name) -> line`` (1-based)."""

    def __init__(self, path: Path, text: str, lines: dict[tuple[str, ...], int]) -> None:
        self.path, self.text, self.lines = path, text, lines

    def at(self, *key: str) -> str:
        line = self.lines.get(tuple(key)) or self.lines.get(tuple(key[:1])) or 1
        return f"{self.path}, line {line}"


def _json_lines(text: str, data: Any) -> dict[tuple[str, ...], int]:
    """The line of each top-level key and of each key one level down (the JSON module keeps
    no positions: found by scanning the text for ``"key":`` after the enclosing key)."""
    out: dict[tuple[str, ...], int] = {}

    def line_of(key: str, start: int) -> tuple[int, int]:
        m = re.compile(re.escape(json.dumps(key)) + r"\s*:").search(text, start)
        if m is None:
            return 1, start
        return text.count("\n", 0, m.start()) + 1, m.end()

    if not isinstance(data, Mapping):
        return out
    for key, value in data.items():
        line, pos = line_of(str(key), 0)
        out[(str(key),)] = line
        if isinstance(value, Mapping):
            for sub in value:
                out[(str(key), str(sub))] = line_of(str(sub), pos)[0]
    return out


def _yaml_load(path: Path, text: str) -> tuple[Any, dict[tuple[str, ...], int]]:
    try:
        import yaml
    except ImportError:
        raise ImportError(f"{path}: reading YAML needs PyYAML: pip install 'dpkit[yaml]' (or "
                          f"pip install pyyaml), or write the declaration as JSON") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise DeclarationError(f"{path}, line {line}: not valid YAML "
                               f"({getattr(exc, 'problem', None) or exc})") from None
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            lines[(str(k.value),)] = k.start_mark.line + 1
            if isinstance(v, yaml.MappingNode):
                for k2, _ in v.value:
                    lines[(str(k.value), str(k2.value))] = k2.start_mark.line + 1
    return data, lines


def _load(path: Path) -> tuple[Any, _Lines]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DeclarationError(f"declaration file {path} does not exist") from None
    except UnicodeDecodeError:
        raise DeclarationError(f"declaration file {path} is not UTF-8 text") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        data, lines = _yaml_load(path, text)
    elif path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DeclarationError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg}, "
                                   f"column {exc.colno})") from None
        lines = _json_lines(text, data)
    else:
        raise DeclarationError(f"declaration file {path}: name it .json, .yaml or .yml")
    return data, _Lines(path, text, lines)


def _count(value: Any, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DeclarationError(f"{where}: {key} must be a whole number >= 1 (got {value!r})")
    return value


def _names(value: Any, where: str, key: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DeclarationError(f"{where}: {key} must be a list of column names, e.g. "
                               f'["age"] (got {value!r})')
    return list(value)


def _section(data: Mapping[str, Any], key: str, at: _Lines) -> Mapping[str, Any]:
    value = data[key]
    if not isinstance(value, Mapping):
        raise DeclarationError(f"{at.at(key)}: {key} must map column names to values, e.g. "
                               + ('{"age": [0, 120]}' if key == "bounds"
                                  else '{"ward": ["A", "B"]}') + f" (got {value!r})")
    return value


def read_declaration(path: str | Path) -> Declaration:
    """The keyword arguments of :meth:`Curator.add_table` declared in a JSON or YAML file
    (see the module docstring); :class:`DeclarationError` names the line of any problem."""
    target = Path(path).expanduser()
    data, at = _load(target)
    if not isinstance(data, Mapping):
        raise DeclarationError(f"{target}, line 1: a declaration is an object of keys "
                               f"({', '.join(KEYS)}), not a {type(data).__name__}")
    out = Declaration()
    out.lines = at
    for key, value in data.items():
        where = at.at(str(key))
        if key not in KEYS:
            raise DeclarationError(f"{where}: unknown key {key!r}; a declaration takes "
                                   f"{', '.join(KEYS)}")
        if key == "max_rows_per_unit" and value == "auto":
            out[key] = "auto"  # chosen privately at load, its cost charged (engine/bounds.py)
        elif key in ("max_rows_per_unit", "max_groups_per_unit"):
            out[key] = _count(value, where, key)
        elif key == "privacy_unit" or key == "description":
            if not isinstance(value, str) and not (key == "privacy_unit" and value is None):
                raise DeclarationError(f"{where}: {key} must be a string (got {value!r})")
            out[key] = value
        elif key in ("public", "drop_privacy_unit"):
            if not isinstance(value, bool):
                raise DeclarationError(f"{where}: {key} must be true or false (got {value!r})")
            out[key] = value
        elif key == "max_text_length":
            if value is not None and not text_length_ok(value):
                raise DeclarationError(f"{where}: " + TEXT_LENGTH_ERROR.format(
                    got=repr(value), none="null"))
            out[key] = value
        elif key == "not_null":
            out[key] = _names(value, where, key)
        elif key == "types":
            if value != "infer" and not (isinstance(value, Mapping) and all(
                    isinstance(t, str) for t in value.values())):
                raise DeclarationError(f'{where}: types must map column names to DuckDB types, '
                                       f'e.g. {{"code": "VARCHAR"}}, or be "infer" (got '
                                       f'{value!r})')
            out[key] = value if value == "infer" else {str(k): v for k, v in value.items()}
        elif key == "bounds":
            bounds: dict[str, tuple[Any, Any]] = {}
            for col, pair in _section(data, key, at).items():
                try:
                    if _date_pair(pair):  # a DATE/TIMESTAMP range: checked against the column
                        bounds[str(col)] = (pair[0], pair[1])  # type at load
                        continue
                    bounds[str(col)] = check_bounds(pair, str(col))
                except (TypeError, ValueError) as exc:
                    raise DeclarationError(f"{at.at(key, str(col))}: {exc}") from None
            out[key] = bounds
        else:  # domains
            domains: dict[str, list[Any]] = {}
            for col, keys in _section(data, key, at).items():
                if not isinstance(keys, list) or not keys:
                    raise DeclarationError(
                        f"{at.at(key, str(col))}: the domain of {col!r} must be a non-empty "
                        f"list of its values, e.g. [\"A\", \"B, annex\"] (got {keys!r})")
                domains[str(col)] = keys
            out[key] = domains
    return out


def where_declared(declaration: Mapping[str, Any], message: str) -> str:
    """``message`` (an ``add_table`` refusal) with the file and line of the column it names,
    when the declaration file declared that column."""
    at = declaration.lines if isinstance(declaration, Declaration) else None
    if at is None:
        return message
    for key in at.lines:
        if len(key) == 2 and f"'{key[1]}'" in message:
            return f"{message} (declared at {at.at(*key)})"
    return message


def _date_pair(pair: Any) -> bool:
    import datetime as dt

    return (isinstance(pair, list | tuple) and len(pair) == 2
            and all(isinstance(v, str | dt.date) for v in pair))
