"""Declarations that accept any value: a JSON/YAML file, repeatable options, errors by line."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from dpkit.cli import main
from dpkit.cli.options import parse_domains
from dpkit.cli.project import add_table as cli_add_table
from dpkit.engine import Curator, read_declaration
from dpkit.engine.declare import DeclarationError

WARDS = ["A", "B, annex", 'C "east"', " D"]


def _data() -> dict[str, Any]:
    n = 400
    return {"pid": np.arange(n) // 2, "ward": np.array([WARDS[i % 4] for i in range(n)],
                                                         dtype=object),
            "age": (np.arange(n) * 7) % 90}


def _csv(tmp_path: Path) -> Path:
    import duckdb

    path = tmp_path / "visits.csv"
    con = duckdb.connect()
    con.register("d", _data())
    con.execute(f"COPY d TO '{path}' (HEADER)")
    con.close()
    return path


def _declaration(tmp_path: Path, doc: Any, name: str = "decl.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2) if not isinstance(doc, str) else doc)
    return path


GOOD = {"privacy_unit": "pid", "max_rows_per_unit": 2, "bounds": {"age": [0, 90]},
        "domains": {"ward": WARDS}, "not_null": ["age"], "description": "visits"}


def test_a_declaration_file_declares_any_value(project: Any, tmp_path: Path) -> None:
    cur = project(epsilon=5.0)
    cur.close()
    cli_add_table(cur.path, "visits", str(_csv(tmp_path)), console=Console(file=io.StringIO()),
                  declare=_declaration(tmp_path, GOOD))
    with Curator.open(cur.path) as c:
        meta = c.tables()["visits"]
        res = c.sql("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward", epsilon=1.0)
    assert sorted(res["ward"]) == sorted(WARDS)  # every key, commas, quotes, spaces kept
    assert meta.max_rows_per_unit == 2 and meta.bounds == {"age": (0.0, 90.0)}
    # the same file from Python
    cur2 = project(epsilon=5.0)
    cur2.add_table("visits", _data(), **read_declaration(tmp_path / "decl.json"))
    assert list(cur2.tables()["visits"].domains["ward"]) == WARDS


def test_yaml_declaration(project: Any, tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    text = ("privacy_unit: pid\nmax_rows_per_unit: 2\nbounds:\n  age: [0, 90]\n"
            "domains:\n  ward: [A, 'B, annex', 'C \"east\"', ' D']\n")
    decl = read_declaration(_declaration(tmp_path, text, "decl.yaml"))
    assert decl["domains"]["ward"] == WARDS and decl["bounds"]["age"] == (0.0, 90.0)
    bad = _declaration(tmp_path, text.replace("age: [0, 90]", "age: [90, 0]"), "bad.yaml")
    with pytest.raises(DeclarationError, match=r"bad\.yaml, line 4: .*low < high"):
        read_declaration(bad)
    with pytest.raises(DeclarationError, match=r"line 2: not valid YAML"):
        read_declaration(_declaration(tmp_path, "a: 1\n b: [\n", "broken.yml"))


@pytest.mark.parametrize("text, line, match", [
    ('{\n  "privacy_unit": "pid",\n  "max_rows_per_unit": 2,\n  "bounds": {"age": [0 90]}\n}',
     4, "not valid JSON"),
    ('{\n  "privacy_unit": "pid",\n  "max_rows": 2\n}', 3, "unknown key 'max_rows'"),
    ('{\n  "privacy_unit": "pid",\n  "bounds": {\n    "cost": [0, 10],\n    "age": [0]\n  }\n}',
     5, "pair"),
    ('{\n  "domains": {\n    "ward": "A,B"\n  }\n}', 3, "non-empty list"),
    ('{\n  "privacy_unit": "pid",\n\n  "max_rows_per_unit": 0\n}', 4, "whole number"),
    ('[1, 2]', 1, "object of keys"),
])
def test_an_invalid_declaration_names_the_line(tmp_path: Path, text: str, line: int,
                                               match: str) -> None:
    path = _declaration(tmp_path, text)
    with pytest.raises(DeclarationError, match=match) as info:
        read_declaration(path)
    assert f"{path}, line {line}:" in str(info.value)


def test_a_column_error_from_add_table_says_where_it_was_declared(project: Any,
                                                                  tmp_path: Path) -> None:
    cur = project(epsilon=5.0)
    cur.close()
    doc = ('{\n  "privacy_unit": "pid",\n  "bounds": {\n    "ward": [0, 1]\n  },\n'
           '  "max_rows_per_unit": 1\n}')  # the cap last: "ward" stays on line 4
    with pytest.raises(ValueError, match=r"decl\.json, line 4"):
        cli_add_table(cur.path, "visits", str(_csv(tmp_path)),
                      console=Console(file=io.StringIO()), declare=_declaration(tmp_path, doc))
    with pytest.raises(ValueError, match="both in the --declare file and on the command line"):
        cli_add_table(cur.path, "visits", str(_csv(tmp_path)), bounds={"age": (0, 50)},
                      console=Console(file=io.StringIO()), declare=_declaration(tmp_path, GOOD))


def test_repeatable_domain_options_keep_commas(project: Any, tmp_path: Path) -> None:
    assert parse_domains(('ward=A,"B, annex"',), ("ward=C, with comma",)) == {
        "ward": ["A", "B, annex", "C, with comma"]}
    assert parse_domains(("ward=A", "ward=B")) == {"ward": ["A", "B"]}
    cur = project(epsilon=5.0)
    cur.close()
    args = ["add-table", str(cur.path), "visits", str(_csv(tmp_path)), "--privacy-unit", "pid",
            "--max-rows-per-unit", "1", "--domain", 'ward=A,"B, annex"',
            "--domain-value", 'ward=C "east"', "--domain-value", "ward= D"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    with Curator.open(cur.path) as c:
        assert list(c.tables()["visits"].domains["ward"]) == WARDS


def test_a_file_may_ask_for_max_rows_per_unit_auto(tmp_path: Path) -> None:
    f = tmp_path / "auto.json"
    f.write_text('{"privacy_unit": "pid", "max_rows_per_unit": "auto"}')
    assert read_declaration(f)["max_rows_per_unit"] == "auto"
    f.write_text('{"privacy_unit": "pid", "max_rows_per_unit": "many"}')
    with pytest.raises(DeclarationError, match="line 1"):
        read_declaration(f)


@pytest.mark.parametrize("value, ok", [(200, True), (None, True), (0, False), (-3, False),
                                       (2.5, False), (True, False), ("200", False)])
def test_a_file_sets_max_text_length_as_the_flag_does(tmp_path: Path, value: Any,
                                                      ok: bool) -> None:
    """Before, ``max_text_length`` was an unknown key in a declaration file; now it takes what
    ``--max-text-length`` / ``add_table`` take (null: not cut), refused with the same text and
    the file's line."""
    path = _declaration(tmp_path, {"privacy_unit": "pid", "max_rows_per_unit": 2,
                                   "max_text_length": value})
    if ok:
        assert read_declaration(path)["max_text_length"] == value
        return
    with pytest.raises(DeclarationError) as info:
        read_declaration(path)
    text = str(info.value)
    assert f"{path}, line 4: max_text_length must be a whole number of characters >= 1" in text
    assert f"or null for no bound (got {value!r}); the default is 1000" in text


def test_a_file_cuts_text_and_drops_the_unit_on_purpose(project: Any, tmp_path: Path) -> None:
    """Both keys reach the load from ``dpkit add-table --declare``: text cut to the file's
    bound, and a replace that makes the table record level without ``--drop-privacy-unit``
    (the file says it); a file and a flag that disagree are refused (keep one)."""
    import duckdb

    cur = project(epsilon=5.0)
    cur.close()
    out = Console(file=io.StringIO())
    src = str(_csv(tmp_path))
    cli_add_table(cur.path, "visits", src, console=out,
                  declare=_declaration(tmp_path, {**GOOD, "max_text_length": 2,
                                                  "domains": {"ward": ["A", "B,", 'C ', " D"]}}))
    with Curator.open(cur.path) as c:
        meta = c.tables()["visits"]
    assert meta.max_text_length == 2
    with duckdb.connect() as con:
        con.execute(f"ATTACH '{cur.path / 'data.duckdb'}' AS dpdata (READ_ONLY)")
        assert con.execute(f"SELECT max(length(ward)) FROM {meta.relation}").fetchone() == (2,)
    with pytest.raises(ValueError, match="max_text_length is 2 in the --declare file and 5"):
        cli_add_table(cur.path, "visits", src, console=out, replace=True, max_text_length=5,
                      declare=_declaration(tmp_path, {"max_text_length": 2}, "t.json"))
    drop = _declaration(tmp_path, {"drop_privacy_unit": True}, "drop.json")
    cli_add_table(cur.path, "visits", src, console=out, replace=True, declare=drop)
    with Curator.open(cur.path) as c:
        assert c.tables()["visits"].privacy_unit is None
    with pytest.raises(DeclarationError, match="drop_privacy_unit must be true or false"):
        read_declaration(_declaration(tmp_path, {"drop_privacy_unit": "yes"}, "bad.json"))
