"""The one charge point: refusals before it spend nothing, failures after it keep the charge.

``engine/charge.py`` charges the ledger and only then reads rows. A failure while reading (or
while adding noise) must keep the charge and say one fixed, row-independent text; an error that
depends on the schema alone must surface in the dry run over empty tables, before the charge.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import pandas as pd
import pytest

from dpkit.engine import Curator
from dpkit.engine.charge import AFTER_CHARGE, ChargedQueryError
from dpkit.engine.sql import QueryError


@pytest.fixture
def cur(project: Callable[..., Curator]) -> Curator:
    c = project(epsilon=100.0, delta=1e-4)
    c.add_table("t", pd.DataFrame({"uid": [1, 2, 3, 4], "x": [1.0, 2.0, 3.0, 4.0],
                                   "s": ["a", "b", "c", "d"]}),
                privacy_unit="uid", max_rows_per_unit=1, bounds={"x": (0, 10)})
    return c


def _spent(cur: Curator) -> float:
    return cur.budget().spent


def test_a_failed_read_keeps_the_charge_and_says_a_fixed_text(
        cur: Curator, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(backend: object, prepared: object) -> None:
        raise duckdb.OutOfMemoryException("Out of Memory Error: row 3 holds 'secret'")

    monkeypatch.setattr("dpkit.engine.query_methods.read_exact", boom)
    before, entries = _spent(cur), len(cur.entries())
    with pytest.raises(ChargedQueryError) as info:
        cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    assert _spent(cur) == pytest.approx(before + 0.5)
    assert len(cur.entries()) == entries + 1
    text = str(info.value)
    assert "secret" not in text and "Memory" not in text
    assert text == AFTER_CHARGE.format(what="query", seq=info.value.entry_seq)


def test_a_failed_noise_step_keeps_the_charge(cur: Curator,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from dpkit.engine import query_methods as dcur

    def boom(*args: object, **kwargs: object) -> None:
        raise ValueError("value is empty")

    monkeypatch.setattr(dcur, "release", boom)
    before = _spent(cur)
    with pytest.raises(ChargedQueryError, match="after its cost was charged"):
        cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    assert _spent(cur) == pytest.approx(before + 0.5)


def test_a_failed_release_read_keeps_the_charge(cur: Curator,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise duckdb.IOException("IO Error: disk full")

    monkeypatch.setattr(cur._backend, "run", boom)
    before = _spent(cur)
    with pytest.raises(ChargedQueryError, match="release could not be completed"):
        cur.cdf("t", "x", epsilon=0.5)
    assert _spent(cur) == pytest.approx(before + 0.5)


@pytest.mark.parametrize("where", [
    "s + 1 = 2",                             # no such function for VARCHAR + INTEGER
    "x LIKE 3",                              # LIKE on a DOUBLE
])
def test_schema_errors_surface_in_the_dry_run_before_the_charge(cur: Curator,
                                                                where: str) -> None:
    before, entries = _spent(cur), len(cur.entries())
    with pytest.raises(QueryError, match="nothing charged") as info:
        cur.sql(f"SELECT COUNT(*) AS n FROM t WHERE {where}", epsilon=0.5)
    assert not isinstance(info.value, ChargedQueryError)
    assert _spent(cur) == before and len(cur.entries()) == entries


def test_postprocessing_errors_name_the_charge(cur: Curator,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An error evaluating HAVING on the noisy table depends on noisy values only: its text is
    kept, with the charge named."""
    from dpkit.engine import noisy

    def fail(*args: object, **kwargs: object) -> None:
        raise QueryError("HAVING/ORDER BY/expressions could not be evaluated on the noisy "
                         "results: Conversion Error")

    monkeypatch.setattr(noisy, "project", fail)
    before = _spent(cur)
    with pytest.raises(ChargedQueryError, match=r"noisy results.*cost stays charged"):
        cur.sql("SELECT COUNT(*) AS n FROM t HAVING COUNT(*) > 1", epsilon=0.5)
    assert _spent(cur) == pytest.approx(before + 0.5)


def test_failures_in_a_row_condition_drop_the_row_instead_of_raising(cur: Curator) -> None:
    """A condition that fails on some rows (text read as a number) is evaluated under TRY: the
    query is answered, and charged, whatever the rows hold."""
    before = _spent(cur)
    res = cur.sql("SELECT COUNT(*) AS n FROM t WHERE CAST(s AS INTEGER) = 1", epsilon=0.5)
    assert res.columns[0] == "n"
    assert _spent(cur) == pytest.approx(before + 0.5)
