"""Fifth red-team pass (FINDINGS.md L), outside the service: the owner's ledger commands."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import dpkit as dp
from dpkit.cli import main
from dpkit.engine.sql import QueryError


def _rolled_back(tmp_path: Path) -> tuple[Path, str]:
    """A project whose ledger lost its last charge together with its head file (an older
    ledger.sqlite copied back, the head deleted); and the head kept before that."""
    folder = tmp_path / "p.dpkit"
    with dp.Curator.create(folder, epsilon=3.0, source=dp.noise.seeded(0)) as cur:
        cur.add_table("t", pd.DataFrame({"x": [1.0, 2.0, 3.0]}), bounds={"x": (0, 5)})
        cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=1.0)
    shutil.copy(folder / "ledger.sqlite", tmp_path / "older.sqlite")
    with dp.Curator.open(folder) as cur:
        cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=1.0)
        seq, digest = cur.ledger.head()
    shutil.copy(tmp_path / "older.sqlite", folder / "ledger.sqlite")
    for extra in ("ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.head"):
        (folder / extra).unlink(missing_ok=True)
    return folder, f"{seq}:{digest}"


def test_l2_restore_head_without_a_kept_head_says_what_it_reopens(tmp_path: Path) -> None:
    """L2: without --expected-head the command took the rolled-back end (the last charge's
    epsilon open again) and said only "no kept head was given to check". It now names the
    newest row's time and the double spend a lost row would be."""
    folder, _ = _rolled_back(tmp_path)
    out = CliRunner().invoke(main, ["restore-head", str(folder)])
    assert out.exit_code == 0, out.output
    flat = "".join(out.output.split())  # rich wraps at CI's width
    assert "epsilonspent1" in flat and "doublespend" in flat and "Itsnewestrow:" in flat


def test_l2_a_refusal_is_one_line_and_a_bad_hash_a_usage_error(tmp_path: Path) -> None:
    """L2: the kept head catches the rollback (exit 2, one line, not a traceback); a hash of
    64 non-hex characters was a TypeError from compare_digest (a traceback)."""
    folder, kept = _rolled_back(tmp_path)
    runner = CliRunner()
    caught = runner.invoke(main, ["restore-head", str(folder), "--expected-head", kept])
    assert caught.exit_code == 2 and "truncated" in caught.output
    assert "Traceback" not in caught.output
    odd = runner.invoke(main, ["restore-head", str(folder), "--expected-head",
                               "2:" + "\u00e9" * 64])
    assert odd.exit_code == 2 and "SEQ:HASH" in odd.output
    assert not (folder / "ledger.head").exists()  # nothing restored by either


def test_l3_a_csv_column_type_does_not_follow_one_unit(tmp_path: Path) -> None:
    """L3: D, a CSV whose `code` holds numbers; D', one unit more whose code is "A12". The
    analyst's table metadata said BIGINT on D and VARCHAR on D' (DuckDB's sniffer): one
    person's value, released exactly. Now an undeclared column is VARCHAR on both, `x`
    (bounds) DOUBLE."""
    rows = "uid,code,x\n" + "".join(f"{i},{100 + i % 7},{i % 50}\n" for i in range(200))
    seen = {}
    for name, extra in {"D": "", "D1": "999,A12,3\n"}.items():
        (tmp_path / f"{name}.csv").write_text(rows + extra)
        with dp.Curator.create(tmp_path / f"{name}.dpkit", epsilon=3.0) as cur:
            cur.add_table("t", str(tmp_path / f"{name}.csv"), privacy_unit="uid",
                          max_rows_per_unit=1, bounds={"x": (0, 50)})
            token = cur.add_analyst("a")
        with dp.Curator.open(tmp_path / f"{name}.dpkit", token=token) as cur:
            seen[name] = {c.name: c.type for c in cur.tables()["t"].columns}
    assert seen["D"] == seen["D1"]
    assert seen["D"] == {"uid": "VARCHAR", "code": "VARCHAR", "x": "DOUBLE"}


FORMS = ["SELECT DP_CDF(age, 8) FROM t WHERE w = 'w1'",
         "SELECT DP_QUANTILES(age, 0.1, 0.5, 0.9) FROM t WHERE s IS NULL",
         "SELECT DP_RANGES(age, (0, 17), (18, 64), (65, 89)) FROM t",
         "SELECT COUNT(*) FILTER (WHERE age BETWEEN 0 AND 17) AS k, "
         "COUNT(*) FILTER (WHERE age BETWEEN 18 AND 89) AS a FROM t",
         "SELECT DP_MARGINALS(w, s, age) FROM t WHERE age > 3"]


def test_previews_of_the_release_forms_price_what_they_charge_on_d_and_d_prime(
        tmp_path: Path) -> None:
    """Checked safe: a release form's preview costs what its query charges (epsilon and
    delta), and the previews are the same on D and D' = D plus one unit of 20 rows out of
    bounds, with a new key and NULLs (no row read)."""
    import numpy as np

    base = pd.DataFrame({"uid": np.arange(200), "age": np.arange(200) % 90 * 1.0,
                         "w": [f"w{i % 3}" for i in range(200)],
                         "s": [f"s{i % 2}" for i in range(200)]})
    extra = pd.DataFrame({"uid": [10**6] * 20, "age": [1e9] * 20, "w": ["zz"] * 20,
                          "s": [None] * 20})
    options: list[dict[str, Any]] = [{"epsilon": 0.3, "noise": "gaussian", "delta": 1e-7},
                                     {"accuracy": 20.0}]
    previews = {}
    for name, frame in {"D": base, "D1": pd.concat([base, extra])}.items():
        with dp.Curator.create(tmp_path / name, epsilon=1000, delta=1e-3, accountant="approx",
                               source=dp.noise.seeded(1)) as cur:
            cur.add_table("t", frame, privacy_unit="uid", max_rows_per_unit=2,
                          bounds={"age": (0, 89)},
                          domains={"w": ["w0", "w1", "w2"], "s": ["s0", "s1"]})
            seen = []
            for sql in FORMS:
                for o in options:
                    p = cur.preview(sql, **o)
                    seen.append((p.cost, p.delta, [x["halfwidth"] for x in p.outputs]))
                    r = cur.sql(sql, **o)
                    assert p.cost == pytest.approx(float(r.epsilon), rel=1e-12), (sql, o)
                    assert p.delta == pytest.approx(float(r.delta), rel=1e-12, abs=1e-300)
            previews[name] = seen
    assert previews["D"] == previews["D1"]


def test_l6_after_charge_runs_between_the_charge_and_the_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """L6's hook: it sees the answer's own ledger row and runs before any row is read; a
    hook that fails changes nothing (the charge stands, the answer comes)."""
    from dpkit.engine import charge, query_methods
    from dpkit.engine.ledger import Entry

    order: list[str] = []
    read = query_methods.read_exact

    def reading(*args: Any) -> Any:
        order.append("read")
        return read(*args)

    monkeypatch.setattr(query_methods, "read_exact", reading)
    with dp.Curator.create(tmp_path / "p.dpkit", epsilon=3.0) as cur:
        cur.add_table("t", pd.DataFrame({"x": [1.0, 2.0]}), bounds={"x": (0, 5)})

        def seen(entry: Entry) -> None:
            order.append(f"charged {entry.seq} of {cur.ledger.head()[0]}")

        with charge.after_charge(seen):
            res = cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        assert order == [f"charged {res.ledger_seq} of {res.ledger_seq}", "read"]

        def broken(entry: Entry) -> None:
            raise RuntimeError("a hook's own failure")

        with charge.after_charge(broken):
            assert cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5).ledger_seq is not None
        cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)  # outside: no hook
        assert len(order) == 4


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "v.csv"
    path.write_text("uid,code,x,ward\n" + "".join(
        f"{i},{100 + i % 7},{i % 50},{'AB'[i % 2]}\n" for i in range(60)))
    return path


def test_l3_types_declared_in_python_and_the_refusal_names_the_fix(tmp_path: Path) -> None:
    """L3: types= reads a column as declared; a domain's keys give their type; a text
    column compared with a number is refused before the charge, naming --types; a type
    DuckDB does not know, or a column the file lacks, is refused before the load."""
    with dp.Curator.create(tmp_path / "p", epsilon=3.0, source=dp.noise.seeded(0)) as cur:
        meta = cur.add_table("t", str(_csv(tmp_path)), privacy_unit="uid", max_rows_per_unit=1,
                             types={"CODE": "integer"}, domains={"ward": ["A", "B"]})
        assert {c.name: c.type for c in meta.columns} == {
            "uid": "VARCHAR", "code": "INTEGER", "x": "VARCHAR", "ward": "VARCHAR"}
        cur.sql("SELECT COUNT(*) AS n FROM t WHERE code = 101", epsilon=0.5)
        with pytest.raises(QueryError, match="--types x=BIGINT"):
            cur.sql("SELECT COUNT(*) AS n FROM t WHERE x > 3", epsilon=0.5)
        with pytest.raises(ValueError, match="not a DuckDB type"):
            cur.add_table("u", str(_csv(tmp_path)), types={"code": "INTEGR"})
        with pytest.raises(ValueError, match="no column 'cod'"):
            cur.add_table("u", str(_csv(tmp_path)), types={"cod": "INTEGER"})
        with pytest.raises(ValueError, match="carries its own types"):
            cur.add_table("u", pd.DataFrame({"a": [1]}), types={"a": "INTEGER"})
        assert cur.budget().spent == pytest.approx(0.5)
        sniffed = cur.add_table("s", str(_csv(tmp_path)), types="infer")
        assert {c.name: c.type for c in sniffed.columns}["code"] == "BIGINT"


def test_l3_types_on_the_command_line_and_in_a_declaration_file(tmp_path: Path) -> None:
    """L3: --types col=TYPE,... (DECIMAL(10,2) keeps its comma) and a declaration file's
    "types" read the columns as declared; --types infer keeps the sniffer's."""
    import json

    csv, project = _csv(tmp_path), tmp_path / "p"
    runner = CliRunner()
    assert runner.invoke(main, ["init", str(project), "--epsilon", "1"]).exit_code == 0
    out = runner.invoke(main, ["add-table", str(project), "t", str(csv), "--privacy-unit",
                               "uid", "--max-rows-per-unit", "1",
                               "--types", "code=SMALLINT,x=DECIMAL(10,2)"])
    assert out.exit_code == 0, out.output
    (tmp_path / "d.json").write_text(json.dumps({"types": {"uid": "BIGINT"}}))
    out = runner.invoke(main, ["add-table", str(project), "f", str(csv), "--declare",
                               str(tmp_path / "d.json")])
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["add-table", str(project), "i", str(csv), "--types", "infer"])
    assert out.exit_code == 0, out.output
    with dp.Curator.open(project) as cur:
        types = {n: {c.name: c.type for c in m.columns} for n, m in cur.tables().items()}
    assert types["t"] == {"uid": "VARCHAR", "code": "SMALLINT", "x": "DECIMAL(10,2)",
                          "ward": "VARCHAR"}
    assert types["f"]["uid"] == "BIGINT" and types["f"]["code"] == "VARCHAR"
    assert types["i"]["code"] == "BIGINT"
    bad = runner.invoke(main, ["add-table", str(project), "b", str(csv), "--types", "code"])
    assert bad.exit_code == 2 and "column=TYPE" in "".join(bad.output.split())


def test_l3_an_undeclared_csv_column_in_an_average_names_the_declaration(
        tmp_path: Path) -> None:
    """L3: AVG over a CSV column of numbers left undeclared (VARCHAR now) is refused before
    the charge with the flags that type it; a frame's text column keeps the plain refusal."""
    with dp.Curator.create(tmp_path / "p", epsilon=3.0, source=dp.noise.seeded(0)) as cur:
        cur.add_table("t", str(_csv(tmp_path)))
        with pytest.raises(QueryError, match=r"--bounds x=LOW:HIGH --replace.*--types x=BIGINT"):
            cur.sql("SELECT AVG(x) AS a FROM t", epsilon=0.5)
        cur.add_table("f", pd.DataFrame({"x": ["1", "2"]}))
        with pytest.raises(QueryError, match="not a number") as caught:
            cur.sql("SELECT AVG(x) AS a FROM f", epsilon=0.5)
        assert "--types" not in str(caught.value)
        cur.sql("SELECT COUNT(*) AS n FROM f WHERE x IN (1, 2)", epsilon=0.5)  # under TRY
        assert cur.budget().spent == pytest.approx(0.5)


def test_l3_a_csv_read_by_format_gets_the_same_refusal(tmp_path: Path) -> None:
    """L3: a CSV whose name does not say so (``adult.data``, ``source_format="csv"``) is a
    text file too: its source says how it was read, and a text column compared with a number
    is refused naming --types, as for a ``.csv`` (it was DuckDB's bare binder error)."""
    data = tmp_path / "v.data"
    data.write_text(_csv(tmp_path).read_text())
    with dp.Curator.create(tmp_path / "p", epsilon=3.0, source=dp.noise.seeded(0)) as cur:
        meta = cur.add_table("t", str(data), source_format="csv", privacy_unit="uid",
                             max_rows_per_unit=1)
        assert meta.source.endswith("(read as csv)")
        with pytest.raises(QueryError, match="--types x=BIGINT"):
            cur.sql("SELECT COUNT(*) AS n FROM t WHERE x > 3", epsilon=0.5)
        assert cur.budget().spent == 0


def test_l3_types_infer_in_a_file_and_per_column_on_the_line_is_one_clear_refusal(
        tmp_path: Path) -> None:
    """A declaration file's "types": "infer" with --types col=TYPE: which did the owner mean?
    One red line (exit 1 or 2), never a traceback, and nothing loaded."""
    import json

    csv, project = _csv(tmp_path), tmp_path / "p"
    runner = CliRunner()
    assert runner.invoke(main, ["init", str(project), "--epsilon", "1"]).exit_code == 0
    (tmp_path / "d.json").write_text(json.dumps({"types": "infer"}))
    out = runner.invoke(main, ["add-table", str(project), "t", str(csv), "--declare",
                               str(tmp_path / "d.json"), "--types", "code=VARCHAR"])
    assert out.exit_code != 0 and isinstance(out.exception, SystemExit), out.output
    assert "keepone" in "".join(out.output.split()), out.output  # rich may wrap the line
    with dp.Curator.open(project) as cur:
        assert "t" not in cur.tables()


def test_l6_an_answer_whose_budget_cannot_be_read_at_its_charge_never_reads_it_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """L6: the budget an answer carries is read at its charge; when that read fails the answer
    says the budget is unavailable instead of falling back to a read after the scan (which
    counts other charges made during it: the scan's clock)."""
    pytest.importorskip("fastapi")
    from dpkit.server import views

    with dp.Curator.create(tmp_path / "p.dpkit", epsilon=3.0) as cur:
        cur.add_table("t", pd.DataFrame({"x": [1.0, 2.0]}), bounds={"x": (0, 5)})

        def failing(c: Any) -> Any:
            raise OSError("the ledger could not be read")

        monkeypatch.setattr(views, "budget_json", failing)
        with views.charged_budget(cur) as box:
            res = cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        assert "unavailable" in box["budget"]
        assert views.result_json(res, cur, box.get("budget"))["budget"] == box["budget"]
