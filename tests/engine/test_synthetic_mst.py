"""Synthetic data beyond the product-grid cap (MST through the curator): automatic choice, one
charge with MST's event, user-level contributions, values uniform within numeric cells, and
refusals that spend nothing."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.accounting import zcdp
from dpkit.engine import Curator
from dpkit.engine.families.axes import MAX_PRODUCT_CELLS, Axis
from dpkit.engine.families.synthetic_mst import values_in_cells
from dpkit.engine.sql import QueryError
from dpkit.release.mst import mst_event

KEYS = {f"k{i}": ["a", "b", "c", "d", "e"] for i in range(5)}
COLUMNS = [*KEYS, "age", "cost"]


def _wide(n: int = 3000, seed: int = 4) -> pd.DataFrame:
    """Five 5-key columns (k1 copies k0 in 90% of rows) and two numeric ones: 5^5 · 11 · 10
    grid cells, far above the cap."""
    src = dp.noise.seeded(seed)
    keys = np.array(KEYS["k0"], dtype=object)
    own = [dp.noise.uniform_int(5, n, source=src) for _ in range(5)]
    copy = dp.noise.uniform_int(10, n, source=src) < 9
    own[1] = np.where(copy, own[0], own[1])
    cols: dict[str, object] = {f"k{i}": keys[o] for i, o in enumerate(own)}
    cols["age"] = dp.noise.uniform_int(101, n, source=src).astype(np.int64)
    cols["cost"] = np.round(dp.noise.uniform_float01(n, source=src) * 1000.0, 3)
    cols["pid"] = np.arange(n, dtype=np.int64) // 2
    return pd.DataFrame(cols)


@pytest.fixture
def wide(project: Callable[..., Curator]) -> tuple[Curator, pd.DataFrame]:
    return _add_wide(project(epsilon=50.0, delta=1e-6, seed=7))


@pytest.fixture(scope="module")
def shared_wide(module_project: Callable[..., Curator]) -> tuple[Curator, pd.DataFrame]:
    """:func:`wide` once for the refusals (tests/engine/conftest.py, module_project)."""
    return _add_wide(module_project(epsilon=50.0, delta=1e-6, seed=7))


def _add_wide(cur: Curator) -> tuple[Curator, pd.DataFrame]:
    df = _wide()
    cur.add_table("wide", df.drop(columns="pid"), bounds={"age": (0, 100), "cost": (0, 1000)},
                  domains=KEYS)
    return cur, df


def _charges(cur: Curator) -> int:
    return len(cur.budget().history)


def _shape() -> tuple[int, ...]:
    return (5, 5, 5, 5, 5, 11, 10)  # age: 101 integers in cells of 10; cost: 10 cells of 100


# the tests comparing the charged event with mst_event switch the diagnostics off (their
# event is then exactly MST's; with them it is MST's composed with three counts')
def test_auto_picks_mst_above_the_cap_and_charges_its_event(
        wide: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = wide
    assert math.prod(_shape()) > MAX_PRODUCT_CELLS
    syn = cur.synthetic("wide", COLUMNS, rho=2.0, diagnostics=False)
    assert syn.method == "mst"
    hist = cur.budget().history
    assert len(hist) == 1 and hist[-1].event == syn.event == mst_event(_shape(), rho=2.0)
    assert zcdp.rho(syn.event) == pytest.approx(2.0)
    frame = syn.to_pandas()
    assert list(frame.columns) == COLUMNS and abs(len(frame) - len(df)) < 100
    for k, keys in KEYS.items():
        assert set(frame[k]) <= set(keys)
    assert frame.age.between(0, 100).all() and frame.cost.between(0, 1000).all()
    # k0 -> k1 dependence (90% copies) is kept: the tree links them at this budget
    assert (frame.k0 == frame.k1).mean() > 0.8
    assert any("k0-k1" in n or "k1-k0" in n for n in syn.notes)


def test_numeric_values_are_uniform_within_cells_not_midpoints(
        wide: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = wide
    frame = cur.synthetic("wide", COLUMNS, rho=2.0).to_pandas()
    assert frame.age.nunique() > 50  # 11 cells: midpoints would give at most 11 values
    assert frame.cost.nunique() > 1000 and frame.age.dtype.kind == "i"


def test_epsilon_alone_is_pure_dp_and_delta_converts(wide: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = wide
    syn = cur.synthetic("wide", COLUMNS, epsilon=1.0, method="mst", rows=200,
                        diagnostics=False)
    assert len(syn) == 200 and syn.event == mst_event(_shape(), epsilon=1.0)
    assert syn.epsilon == pytest.approx(1.0)
    syn2 = cur.synthetic("wide", COLUMNS, epsilon=1.0, delta=1e-7, rows=100,
                         diagnostics=False)
    assert syn2.event == mst_event(_shape(), rho=zcdp.epsilon_to_rho(1.0, 1e-7))


def test_user_level_contributions_scale_the_noise(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0, seed=8)
    cur.add_table("wide", _wide(), privacy_unit="pid", max_rows_per_unit=2,
                  bounds={"age": (0, 100), "cost": (0, 1000)}, domains=KEYS)
    syn = cur.synthetic("wide", COLUMNS, rho=1.0, rows=100, diagnostics=False)
    assert syn.event == mst_event(_shape(), rho=1.0, contributions=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "factorization"}, "method='mst'"),
        ({"method": "mwem"}, "method='mst'"),
        ({"method": "mst", "k": 2}, "leave k out"),
        ({"method": "gan"}, "method must be"),
        ({"rows": 0}, "rows must be"),
    ],
)
def test_refusals_charge_nothing(shared_wide: tuple[Curator, pd.DataFrame],
                                 kwargs: dict[str, object], match: str) -> None:
    cur, _ = shared_wide
    with pytest.raises(QueryError, match=match):
        cur.synthetic("wide", COLUMNS, rho=1.0, **kwargs)  # type: ignore[arg-type]
    assert _charges(cur) == 0


def test_too_large_pair_is_refused_before_the_charge(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0, seed=9)
    n = 50
    big = [f"v{i}" for i in range(3000)]
    cur.add_table("t", pd.DataFrame({"a": big[:n], "b": big[:n]}),
                  domains={"a": big, "b": big})
    with pytest.raises(QueryError, match="coarser grids"):
        cur.synthetic("t", ["a", "b"], rho=1.0)
    assert _charges(cur) == 0


def test_small_grids_keep_the_factorization(wide: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = wide
    syn = cur.synthetic("wide", ["k0", "k1", "age"], epsilon=1.0, rows=50)
    assert syn.method == "factorization"


def test_values_in_cells_cover_each_cell_uniformly() -> None:
    src = dp.noise.seeded(11)
    ax = Axis("age", "int", 3, 0.0, 24.0, 10.0)  # cells 0-9, 10-19, 20-24
    idx = np.repeat(np.arange(3), 5000)
    vals = values_in_cells(ax, idx, src)
    for c, (lo, hi) in enumerate([(0, 9), (10, 19), (20, 24)]):
        v = vals[idx == c]
        assert v.min() == lo and v.max() == hi
        # each integer appears ~5000/width times; 6 sigma of a binomial count: false failure
        # probability < 1e-8 per integer
        counts = np.bincount(v - lo)
        p = 1.0 / (hi - lo + 1)
        assert np.abs(counts - 5000 * p).max() <= 6 * math.sqrt(5000 * p * (1 - p))
    fx = Axis("cost", "float", 4, 0.0, 1000.0, 250.0)
    fv = values_in_cells(fx, np.repeat(np.arange(4), 1000), src)
    cells = np.minimum((fv // 250).astype(int), 3)
    assert (cells == np.repeat(np.arange(4), 1000)).all() and len(np.unique(fv)) == 4000
    keys = Axis("w", "keys", 2, keys=("x", "y"))
    assert values_in_cells(keys, np.array([1, 0, 1]), src).tolist() == ["y", "x", "y"]


def test_cli_synthetic_mst(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dpkit.cli import release as release_commands

    path = tmp_path / "p.dpkit"
    cur = Curator.create(path, epsilon=10.0, delta=1e-6)
    cur.add_table("wide", _wide(n=400).drop(columns="pid"),
                  bounds={"age": (0, 100), "cost": (0, 1000)}, domains=KEYS)
    cur.close()
    out = CliRunner().invoke(release_commands.synthetic,
                             [str(path), "wide", "--columns", ",".join(COLUMNS), "--epsilon",
                              "1", "--rows", "30", "--output", str(tmp_path / "s.csv")])
    assert out.exit_code == 0, (out.output, out.exception)
    assert pd.read_csv(tmp_path / "s.csv").shape == (30, 7)
    assert "MST" in out.output


def test_target_through_the_curator(wide: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = wide
    syn = cur.synthetic("wide", COLUMNS, rho=2.0, target="K0", rows=300,
                        diagnostics=False)
    assert syn.event == mst_event(_shape(), rho=2.0) and len(syn) == 300
    assert any("3-way (with the target k0)" in n for n in syn.notes)
    with pytest.raises(QueryError, match="target must be one of"):
        cur.synthetic("wide", COLUMNS, rho=2.0, target="nope")
    with pytest.raises(QueryError, match="applies to method='mst'"):
        cur.synthetic("wide", ["k0", "k1"], rho=2.0, target="k0")
    assert _charges(cur) == 1


def test_sparse_read_equals_the_dense_histogram(project: Callable[..., Curator]) -> None:
    """The MST job's sparse read holds the same bounded counts as the dense product-grid read
    (same statement, same keyed-hash seed), user level included."""
    from dpkit import noise as _noise
    from dpkit.engine.backend_duckdb import table_relation
    from dpkit.engine.families import SyntheticAsk, Target, histogram
    from dpkit.engine.families.plan import plan

    cur = project(epsilon=50.0, seed=12)
    cur.add_table("wide", _wide(n=600), privacy_unit="pid", max_rows_per_unit=1,
                  bounds={"age": (0, 100), "cost": (0, 1000)}, domains=KEYS)
    ctx = cur._families()
    job = plan(ctx, SyntheticAsk(table="wide", columns=["k0", "k1", "age"], method="mst"),
               Target(rho=1.0))
    seed = int(_noise.uniform_int(2**62, 1, source=dp.noise.seeded(1))[0])
    text = histogram.statement(ctx.backend, job, table_relation(job.meta), seed=seed)
    dense = histogram.read(ctx, job, text).reshape(5, 5, 11)
    sparse = histogram.read_cells(ctx, job, text)
    again = np.zeros_like(dense)
    np.add.at(again, (sparse[:, 0], sparse[:, 1], sparse[:, 2]), sparse[:, 3])
    assert (again == dense).all() and dense.sum() == 300  # one row per unit of 2 rows
    assert _charges(cur) == 0
