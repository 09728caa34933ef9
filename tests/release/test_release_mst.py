"""MST (dpkit.release.mst) and its tree model (dpkit.release.marginal_models): the event and
its budget, exactness of the consistent tree fit, controlled-rounding sampling, the private
selection, domain compression, and refusals.

Statistical checks run on seeded sources; where a check could fail by chance, its probability is
bounded in the test (all below 1e-6)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dpkit as dp
from dpkit.accounting import pure, zcdp
from dpkit.release.marginal_models import (
    Measurement,
    TreeModel,
    fit_tree,
    ipf,
    project_simplex,
    sample_tree,
)
from dpkit.release.mst import MAX_PAIR_CELLS, mst, mst_event


def _chain(n: int = 6000, seed: int = 3) -> np.ndarray:
    """Records over (6, 4, 3, 5): column 1 depends on 0, column 2 on 1, column 3 independent."""
    src = dp.noise.seeded(seed)
    a = dp.noise.uniform_int(6, n, source=src)
    b = (a + dp.noise.uniform_int(2, n, source=src)) % 4
    c = np.minimum(b, 2)
    d = dp.noise.uniform_int(5, n, source=src)
    return np.stack([a, b, c, d], axis=1).astype(np.int64)


def _sparse(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cells, counts = np.unique(X, axis=0, return_counts=True)
    return cells, counts.astype(np.int64)


def _table(X: np.ndarray, i: int, j: int, shape: tuple[int, ...]) -> np.ndarray:
    t = np.zeros((shape[i], shape[j]), dtype=np.int64)
    np.add.at(t, (X[:, i], X[:, j]), 1)
    return t


# ------------------------------------------------------------------ the event and its budget


@pytest.mark.parametrize("d", [1, 2, 5])
def test_event_spends_exactly_the_budget(d: int) -> None:
    shape = tuple(range(2, 2 + d))
    ev = mst_event(shape, rho=0.3, contributions=2)
    assert zcdp.rho(ev) == pytest.approx(0.3, rel=1e-9) and zcdp.rho(ev) <= 0.3 * (1 + 1e-12)
    ev_pure = mst_event(shape, epsilon=1.5)
    assert pure.epsilon(ev_pure) == pytest.approx(1.5, rel=1e-9)


def test_refusals_name_the_problem() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        mst_event((3, 3), epsilon=1.0, rho=0.5)
    with pytest.raises(ValueError, match="exactly one of"):
        mst_event((3, 3))
    with pytest.raises(ValueError, match="coarser grids"):
        mst_event((MAX_PAIR_CELLS, 2), rho=1.0)
    with pytest.raises(ValueError, match="at least one attribute"):
        mst_event((), rho=1.0)
    with pytest.raises(ValueError, match="counts"):
        mst(np.array([[0, 1]]), [-1], (2, 2), rho=1.0, source=dp.noise.seeded(1))
    with pytest.raises(ValueError, match="inside the domain"):
        mst(np.array([[0, 2]]), [1], (2, 2), rho=1.0, source=dp.noise.seeded(1))


# ------------------------------------------------------------------ the tree fit


def test_project_simplex_is_the_euclidean_projection() -> None:
    y = np.array([5.0, -2.0, 1.0, 0.5])
    p = project_simplex(y, 4.0)
    assert p.sum() == pytest.approx(4.0) and (p >= 0).all()
    # KKT: the positive coordinates share one shift, the zero ones lie below it
    shift = (y - p)[p > 0]
    assert np.allclose(shift, shift[0]) and (y[p == 0] <= shift[0]).all()


def test_ipf_meets_both_margins() -> None:
    src = dp.noise.seeded(2)
    start = dp.noise.uniform_float01((5, 7), source=src) + 0.01
    rows = np.array([10.0, 0.0, 3.0, 7.0, 5.0])
    cols = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 4.0])
    t = ipf(start, rows, cols)
    assert np.allclose(t.sum(axis=1), rows, atol=1e-12)
    assert np.allclose(t.sum(axis=0), cols, atol=1e-8) and (t >= 0).all()
    assert (t[1] == 0).all()


def test_tree_fit_is_consistent_with_any_noisy_measurements() -> None:
    """Even wildly noisy (negative, mutually inconsistent) measurements give a model whose edge
    tables sum exactly (to 1e-10 of the total) to its node marginals."""
    src = dp.noise.seeded(4)
    sizes = [3, 4, 2]

    def noisy(*shape: int) -> np.ndarray:
        return (dp.noise.uniform_float01(shape, source=src) - 0.3) * 100.0

    ms = [Measurement((i,), noisy(k), np.asarray(1.0)) for i, k in enumerate(sizes)]
    ms += [Measurement((0, 1), noisy(3, 4), np.asarray(2.0)),
           Measurement((1, 2), noisy(4, 2), np.asarray(2.0))]
    model = fit_tree(sizes, ms, [(0, 1), (1, 2)])
    assert model.consistency_error() <= 1e-10 * model.total * 10
    for nd in model.nodes:
        assert (nd >= 0).all() and nd.sum() == pytest.approx(model.total)


def test_tree_fit_reproduces_the_true_marginals_without_noise() -> None:
    """At rho = 1e9 the discrete Gaussian's sigma² is ~1e-9: every draw is 0 except with
    probability < 1e-100 per cell, so the fit must return the exact marginals."""
    X = _chain()
    shape = (6, 4, 3, 5)
    cells, counts = _sparse(X)
    r = mst(cells, counts, shape, rho=1e9, source=dp.noise.seeded(5))
    model: TreeModel = r.details["model"]
    assert model.total == pytest.approx(len(X))
    for (a, b), t in zip(model.edges, model.tables, strict=True):
        assert np.allclose(t, _table(X, a, b, shape), atol=1e-3)  # far below one record
    for i, k in enumerate(shape):
        assert np.allclose(model.nodes[i], np.bincount(X[:, i], minlength=k), atol=1e-3)
    # the selection found the dependent pairs (scores 0 for independent ones at this rho)
    assert {(0, 1), (1, 2)} <= set(model.edges)
    # controlled rounding: the records' tables on the edges match the model to the rounding
    Y = r.value
    for (a, b), t in zip(model.edges, model.tables, strict=True):
        assert np.abs(_table(Y, a, b, shape) - t).max() <= len(shape)


def test_sampling_rounds_each_conditional_to_within_one() -> None:
    nodes = [np.array([30.0, 70.0]), np.array([50.0, 25.0, 25.0])]
    table = np.array([[20.0, 5.0, 5.0], [30.0, 20.0, 20.0]])
    model = TreeModel(nodes=nodes, edges=[(0, 1)], tables=[table], total=100.0)
    Y = sample_tree(model, 333, source=dp.noise.seeded(6))
    root = np.bincount(Y[:, 0], minlength=2)
    assert np.abs(root - 333 * nodes[0] / 100.0).max() < 1
    for v in range(2):
        got = np.bincount(Y[Y[:, 0] == v, 1], minlength=3)
        want = root[v] * table[v] / table[v].sum()
        assert np.abs(got - want).max() < 1


def test_rare_values_are_compressed_and_restored() -> None:
    """A column with 2 common and 38 rare values: MST measures its 2-way tables on 3 values
    and gives rare records values among the rare ones."""
    src = dp.noise.seeded(8)
    n = 4000
    common = dp.noise.uniform_int(2, n, source=src)
    rare = 2 + dp.noise.uniform_int(38, n, source=src)
    x0 = np.where(np.arange(n) < 3800, common, rare)
    x1 = (x0 % 2) * 2 + dp.noise.uniform_int(2, n, source=src)
    cells, counts = _sparse(np.stack([x0, x1], axis=1))
    r = mst(cells, counts, (40, 4), rho=0.5, rows=3000, source=dp.noise.seeded(9))
    assert r.details["compressed"][0] < 40 and r.details["compressed"][1] == 4
    Y = r.value
    assert Y.shape == (3000, 2) and Y[:, 0].max() < 40 and Y[:, 1].max() < 4
    assert ((Y[:, 0] >= 2).sum()) > 0  # rare records come back with rare values


def test_accuracy_on_a_chain_at_moderate_budget() -> None:
    """rho = 1: sigma² per 2-way cell is 3·3/2 = 4.5, so each 2-way table's L1 noise is about
    24 · 2.1 = 50 on 6000 records; TVD <= 0.05 on the dependent pairs leaves a margin of more
    than 10 noise standard deviations (seeded: reproducible)."""
    X = _chain()
    shape = (6, 4, 3, 5)
    cells, counts = _sparse(X)
    r = mst(cells, counts, shape, rho=1.0, source=dp.noise.seeded(10))
    Y = r.value
    for a, b in itertools.combinations(range(4), 2):
        tvd = 0.5 * np.abs(_table(X, a, b, shape) / len(X) - _table(Y, a, b, shape) / len(Y)).sum()
        assert tvd <= 0.05, (a, b, tvd)


# ------------------------------------------------------------------ with a target attribute


def _labelled(n: int = 8000, seed: int = 12) -> np.ndarray:
    """A label (column 0) that each of three features depends on; the features are
    independent given the label (naive Bayes)."""
    src = dp.noise.seeded(seed)
    y = dp.noise.uniform_int(2, n, source=src)
    cols = [y]
    for _ in range(3):
        flip = dp.noise.uniform_int(10, n, source=src) < 2
        cols.append(np.where(flip, 1 - y, y) * 2 + dp.noise.uniform_int(2, n, source=src))
    return np.stack(cols, axis=1).astype(np.int64)


def test_target_keeps_every_feature_linked_to_it() -> None:
    X = _labelled()
    shape = (2, 4, 4, 4)
    cells, counts = _sparse(X)
    plain = mst(cells, counts, shape, rho=1e9, source=dp.noise.seeded(13))
    tgt = mst(cells, counts, shape, rho=1e9, target=0, source=dp.noise.seeded(13))
    assert tgt.event == plain.event  # same measurements' sensitivity: same cost

    def agree(Y: np.ndarray, j: int) -> float:
        return float(((Y[:, j] // 2) == Y[:, 0]).mean())

    # real agreement is 0.8 per feature; every feature keeps it with the target
    for j in (1, 2, 3):
        assert abs(agree(tgt.value, j) - agree(X, j)) < 0.02
    model = tgt.details["model"]
    assert model.total == pytest.approx(len(X))
    for m in model.slices:
        assert m.consistency_error() <= 1e-9 * max(m.total, 1.0)
    # the 3-way tables are exact at this rho: each slice's edge tables are the data's
    for y, m in enumerate(model.slices):
        for (a, b), t in zip(m.edges, m.tables, strict=True):
            assert np.allclose(t, _table(X[X[:, 0] == y], a, b, shape), atol=1e-3)


def test_target_refusals() -> None:
    cells, counts = _sparse(_labelled(200))
    with pytest.raises(ValueError, match="target must be"):
        mst(cells, counts, (2, 4, 4, 4), rho=1.0, target=4)
    with pytest.raises(ValueError, match="no target"):
        mst(cells, counts, (2048, 2048, 4, 4), rho=1.0, target=3)
