"""A compressed CSV named otherwise, with no header line (the researcher's hour: ``add-table``
refused UCI Adult's ``adult.data.gz`` as shipped): ``--format csv`` / ``source_format=``
says the format, ``--column-names`` / ``column_names=`` names the columns; the refusal of a
name it cannot read says which flag fixes it. Tiny generated files, not the shared data."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

import dpkit as dp
from dpkit.cli import main
from dpkit.engine.curator import Curator

ROWS = "39,Male,<=50K\n50,Female,>50K\n38,Male,<=50K\n53,Female,>50K\n"
NAMES = ["age", "sex", "income"]


def _gz(path: Path, text: str) -> Path:
    with gzip.open(path, "wt") as f:
        f.write(text)
    return path


def _project(tmp_path: Path) -> Curator:
    return Curator.create(tmp_path / "p.dpkit", epsilon=1.0, source=dp.noise.seeded(1))


def test_a_gzipped_headerless_csv_loads_with_its_format_and_names(tmp_path: Path) -> None:
    cur = _project(tmp_path)
    data = _gz(tmp_path / "adult.data.gz", ROWS)
    with pytest.raises(ValueError, match="--format csv") as err:
        cur.add_table("a", data)
    assert "--column-names" in str(err.value) and "source_format='csv'" in str(err.value)
    meta = cur.add_table("a", data, source_format="csv", column_names=NAMES,
                         bounds={"age": (17, 90)}, types={"age": "BIGINT"})
    assert [c.name for c in meta.columns] == NAMES  # the first line is a row, not a header
    assert {c.name: c.type for c in meta.columns}["age"] == "BIGINT"
    rows = cur._backend.query_public(f"SELECT COUNT(*), SUM(age) FROM {meta.relation}")
    assert rows == [(4, 180)]  # all four lines, none taken for a header
    # .csv.gz: told by its name, header and all
    named = _gz(tmp_path / "b.csv.gz", "age,sex,income\n" + ROWS)
    assert [c.name for c in cur.add_table("b", named).columns] == NAMES


def test_wrong_names_and_formats_are_refused_before_loading(tmp_path: Path) -> None:
    cur = _project(tmp_path)
    data = _gz(tmp_path / "adult.data.gz", ROWS)
    with pytest.raises(ValueError, match="gives 2 names and the file's first line has 3"):
        cur.add_table("a", data, source_format="csv", column_names=["age", "sex"])
    with pytest.raises(ValueError, match="differ only by case"):
        cur.add_table("a", data, source_format="csv", column_names=["age", "AGE", "x"])
    with pytest.raises(ValueError, match="source_format must be one of csv, parquet, json"):
        cur.add_table("a", data, source_format="xlsx")
    with pytest.raises(ValueError, match="names a CSV's columns"):
        cur.add_table("a", data, source_format="parquet", column_names=NAMES)
    with pytest.raises(TypeError, match="file path"):
        cur.add_table("a", {"age": [1, 2]}, column_names=["age"])
    assert cur.tables() == {} and cur.ledger.entries("charge") == []


def test_add_table_command_takes_format_and_column_names(tmp_path: Path) -> None:
    _project(tmp_path).close()
    data = str(_gz(tmp_path / "adult.data.gz", ROWS))
    project = str(tmp_path / "p.dpkit")
    r = CliRunner().invoke(main, ["add-table", project, "a", data])
    flat = "".join(r.output.split())  # rich wraps long paths mid-word
    assert r.exit_code != 0 and "--formatcsv" in flat and "--column-namesa,b,c" in flat
    r = CliRunner().invoke(main, ["add-table", project, "a", data, "--format", "csv",
                                  "--column-names", "age, sex,income", "--bounds", "age=17:90",
                                  "--domain", "sex=Male,Female"])
    assert r.exit_code == 0, r.output
    with Curator.open(project) as cur:
        assert [c.name for c in cur.tables()["a"].columns] == NAMES
