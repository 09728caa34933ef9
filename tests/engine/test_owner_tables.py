"""Loading tables, as the owner: a replace that would drop the privacy unit is refused in the
library as on the command line (``drop_privacy_unit=True`` does it on purpose), and text
values are cut to a public bound at load (``max_text_length``, default 1,000 characters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

import dpkit as dp
from dpkit.engine.load import MAX_TEXT_LENGTH

LONG = "z" * 5000


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"pid": [1, 1, 2, 3], "s": ["a", LONG, "b", "é" * 1500],
                         "x": [1.0, 2.0, 3.0, 4.0]})


def _stored_lengths(cur: dp.Curator, name: str) -> list[int]:
    """The longest stored value of ``s`` (read as the owner, from the data file itself)."""
    rel = cur.tables()[name].relation
    path = cur.path / "data.duckdb"
    cur.close()
    with duckdb.connect() as con:
        con.execute(f"ATTACH '{path}' AS dpdata (READ_ONLY)")
        return [int(r[0]) for r in con.execute(f"SELECT length(s) FROM {rel}").fetchall()]


def test_a_replace_keeps_the_privacy_unit_unless_dropped_on_purpose(tmp_path: Path) -> None:
    """Before, ``add_table(..., replace=True)`` without ``privacy_unit`` silently made a
    user-level table record level (only ``dpkit add-table --replace`` refused it)."""
    with dp.Curator.create(tmp_path / "p.dpkit", epsilon=1.0) as cur:
        cur.add_table("t", _frame(), privacy_unit="pid", max_rows_per_unit=2)
        rows = len(cur.ledger.entries())
        with pytest.raises(ValueError, match="drop_privacy_unit=True") as info:
            cur.add_table("t", _frame(), replace=True, bounds={"x": (0, 5)})
        assert "privacy_unit='pid'" in str(info.value) and "max_rows_per_unit=2" in str(
            info.value) and "Nothing was loaded" in str(info.value)
        assert len(cur.ledger.entries()) == rows and cur.tables()["t"].privacy_unit == "pid"
        kept = cur.add_table("t", _frame(), replace=True, privacy_unit="pid",
                             max_rows_per_unit=2, bounds={"x": (0, 5)})
        assert kept.privacy_unit == "pid" and kept.bounds == {"x": (0.0, 5.0)}
        with pytest.raises(ValueError, match="keep one"):
            cur.add_table("t", _frame(), replace=True, privacy_unit="pid",
                          max_rows_per_unit=2, drop_privacy_unit=True)
        assert cur.add_table("t", _frame(), replace=True,
                             drop_privacy_unit=True).privacy_unit is None
        assert cur.add_table("t", _frame(), replace=True, public=True).public  # said so


def test_text_is_cut_at_load_to_a_public_bound(tmp_path: Path) -> None:
    with dp.Curator.create(tmp_path / "p.dpkit", epsilon=1.0) as cur:
        meta = cur.add_table("t", _frame(), privacy_unit="pid", max_rows_per_unit=2)
        assert meta.max_text_length == MAX_TEXT_LENGTH == 1000
        assert "text cut at 1000 characters" in meta.summary()
        assert cur.add_table("u", _frame(), max_text_length=10).max_text_length == 10
        assert cur.add_table("n", _frame(), max_text_length=None).max_text_length is None
        assert cur.add_public_table("p", _frame()).max_text_length is None  # public: as given
        for bad in (0, -1, 2.5, True, "1000"):
            with pytest.raises(ValueError, match="max_text_length"):
                cur.add_table("bad", _frame(), max_text_length=bad)
        with pytest.raises(ValueError, match="domain of 's' has a key longer"):
            cur.add_table("bad", _frame(), domains={"s": ["a", LONG]})
        assert "bad" not in cur.tables()
    with dp.Curator.open(tmp_path / "p.dpkit") as cur:  # recorded in the ledger
        assert {n: m.max_text_length for n, m in cur.tables().items()} == {
            "t": 1000, "u": 10, "n": None, "p": None}
        assert max(_stored_lengths(cur, "t")) == 1000  # 'é' * 1500: characters, not bytes
    for name, longest in (("u", 10), ("n", 5000), ("p", 5000)):
        with dp.Curator.open(tmp_path / "p.dpkit") as cur:
            assert max(_stored_lengths(cur, name)) == longest, name


def test_the_command_line_takes_both_options(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dpkit.cli import main

    csv = tmp_path / "t.csv"
    _frame().to_csv(csv, index=False)
    project = tmp_path / "p.dpkit"
    run: Any = lambda *a: CliRunner().invoke(main, [str(x) for x in a])  # noqa: E731
    assert run("init", project, "--epsilon", 1).exit_code == 0
    out = run("add-table", project, "t", csv, "--privacy-unit", "pid", "--max-rows-per-unit",
              2, "--max-text-length", 100)
    assert out.exit_code == 0 and "text cut at 100 characters" in out.output, out.output
    refused = run("add-table", project, "t", csv, "--replace", "--max-rows-per-unit", 1)
    assert refused.exit_code != 0 and "--drop-privacy-unit" in refused.output
    done = run("add-table", project, "t", csv, "--replace", "--drop-privacy-unit",
               "--max-text-length", "none")
    assert done.exit_code == 0, done.output
    with dp.Curator.open(project) as cur:
        t = cur.tables()["t"]
        assert t.privacy_unit is None and t.max_text_length is None
    bad = run("add-table", project, "v", csv, "--max-text-length", "lots")
    assert bad.exit_code == 2 and "--max-text-length" in bad.output


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")
def test_an_opened_source_is_read_through_its_descriptors(tmp_path: Path) -> None:
    """``OpenedSource`` (what the service loads: ``dpkit.server.paths.opened``): read through
    ``/proc/self/fd/N``, never its name, whose suffixes still tell the format and compression;
    a folder's files all load; the declarations record the name; never a view."""
    import gzip
    import os

    from dpkit.engine.tables import OpenedSource

    (tmp_path / "a.csv").write_text("g,x\na,1\nb,2\n")
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(b"g,x\nc,3\n"))
    with duckdb.connect(str(tmp_path / "s.duckdb")) as con:
        con.execute("CREATE TABLE t AS SELECT 'd' AS g, 4 AS x")
        con.execute("CREATE TABLE u AS SELECT 1 AS y")
    fds = [os.open(tmp_path / n, os.O_RDONLY) for n in ("a.csv", "b.csv.gz", "s.duckdb")]
    paths = [f"/proc/self/fd/{fd}" for fd in fds]
    try:
        # renamed away after the open: a read by name would find nothing
        for n in ("a.csv", "b.csv.gz", "s.duckdb"):
            os.rename(tmp_path / n, tmp_path / f"{n}.gone")
        with dp.Curator.create(tmp_path / "p.dpkit", epsilon=1.0) as cur:
            cur.add_public_table("two", OpenedSource(str(tmp_path / "ds.csv"), (paths[0],)))
            cur.add_public_table("gz", OpenedSource(str(tmp_path / "b.csv.gz"), (paths[1],)))
            cur.add_public_table("db", OpenedSource(str(tmp_path / "s.duckdb"), (paths[2],),
                                                    "t"))
            cur.add_public_table("both", OpenedSource(str(tmp_path / "ds.csv"),
                                                      (paths[0], paths[0])))
            with pytest.raises(ValueError, match="opened files are copied"):
                cur.add_public_table("v", OpenedSource("x.csv", (paths[0],)), copy=False)
            with pytest.raises(ValueError, match=r"holds no \.csv file"):
                cur.add_public_table("none", OpenedSource("empty.csv", ()))
            assert cur.tables()["gz"].source == str(tmp_path / "b.csv.gz")
            rels = {n: cur.tables()[n].relation for n in ("two", "gz", "db", "both")}
        with duckdb.connect() as con:
            con.execute(f"ATTACH '{tmp_path / 'p.dpkit' / 'data.duckdb'}' AS dpdata (READ_ONLY)")
            got = {n: con.execute(f"SELECT list(g ORDER BY g) FROM {r}").fetchall()[0][0]
                   for n, r in rels.items()}
        assert got == {"two": ["a", "b"], "gz": ["c"], "db": ["d"], "both": ["a", "a", "b", "b"]}
    finally:
        for fd in fds:
            os.close(fd)


def test_each_front_end_names_its_own_replace(tmp_path: Path) -> None:
    """The third first-hour walk: ``dpkit add-table`` of a name taken said *pass replace=True*
    (the Python keyword); the command line says ``--replace`` (and ``POST /v1/tables`` says
    ``"replace": true``: tests/server/test_table_registration.py)."""
    from click.testing import CliRunner

    from dpkit.cli import main

    (tmp_path / "t.csv").write_text("pid,x\n1,2\n")
    project = str(tmp_path / "p.dpkit")
    with dp.Curator.create(project, epsilon=1.0) as cur:
        cur.add_table("t", _frame(), privacy_unit="pid", max_rows_per_unit=2)
        with pytest.raises(ValueError, match="pass replace=True"):
            cur.add_table("t", _frame(), privacy_unit="pid", max_rows_per_unit=2)
    out = CliRunner().invoke(main, ["add-table", project, "t", str(tmp_path / "t.csv"),
                                    "--privacy-unit", "pid", "--max-rows-per-unit", "2"])
    text = "".join(out.output.split())
    assert out.exit_code != 0 and "pass--replacetoloaditagain" in text, out.output
    assert "replace=True" not in text
