"""Workloads: every structured shortcut agrees with the explicit matrix it stands for."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.release import workloads as wl


def _cases() -> list[wl.Workload]:
    return [
        wl.identity(9),
        wl.prefix(33),
        wl.all_ranges(17),
        wl.ranges([(0, 3), (2, 9), (5, 5), (0, 9)], 10),
        wl.marginals((3, 4, 2), [(0,), (1, 2), ()]),
        wl.marginals((2, 3, 2), 2),
        wl.counting([[0, 2, 5], [1], [3, 4, 5, 6]], 7),
        wl.from_matrix([[0.5, -1.0, 2.0], [1.0, 1.0, 0.0]]),
    ]


def _explicit(W: wl.Workload) -> np.ndarray:
    """W built entry by entry from its definition (not from the code under test)."""
    n = W.domain_size
    if isinstance(W, wl.PrefixWorkload):
        return np.tril(np.ones((n, n)))
    if isinstance(W, wl.RangeWorkload):
        out = np.zeros((W.num_queries, n))
        for j, (a, b) in enumerate(zip(W.lo, W.hi, strict=True)):
            out[j, a : b + 1] = 1.0
        return out
    if isinstance(W, wl.MarginalWorkload):
        rows = []
        cells = list(np.ndindex(*W.dims))
        for t in W.attribute_sets:
            for key in np.ndindex(*[W.dims[a] for a in t]):
                rows.append([all(c[a] == k for a, k in zip(t, key, strict=True)) for c in cells])
        return np.array(rows, dtype=np.float64)
    if isinstance(W, wl.IdentityWorkload):
        return np.eye(n)
    return W.dense()


@pytest.mark.parametrize("W", _cases(), ids=lambda w: w.name)
def test_structured_operations_match_the_matrix(W: wl.Workload) -> None:
    D = _explicit(W)
    assert D.shape == W.shape
    n = W.domain_size
    x = (np.arange(n) * 7 % 5).astype(np.float64)
    X = np.stack([x, x[::-1]], axis=1)
    np.testing.assert_allclose(W.matvec(x), D @ x, atol=1e-12)
    np.testing.assert_allclose(W.matvec(X), D @ X, atol=1e-12)
    np.testing.assert_allclose(W.dense(), D, atol=0)
    G = D.T @ D
    np.testing.assert_allclose(W.gram(), G, atol=1e-9)
    V = (np.arange(3 * n).reshape(3, n) % 7) - 3.0
    np.testing.assert_allclose(W.gram_matmul(V), V @ G, atol=1e-9)
    B = np.cos(np.arange(n * n).reshape(n, n))
    sigma = B @ B.T
    np.testing.assert_allclose(
        W.query_variances(sigma), np.diag(D @ sigma @ D.T), rtol=1e-9, atol=1e-8
    )
    R = np.sin(np.arange(n * 5).reshape(n, 5))
    cm = W.query_coefficient_max(R)
    assert cm is not None
    np.testing.assert_allclose(cm, np.abs(D @ R).max(axis=1), atol=1e-12)
    sv = np.linalg.svd(D, compute_uv=False)
    assert W.nuclear_norm() == pytest.approx(sv.sum(), rel=1e-6, abs=1e-6)
    assert W.max_row_norm() == pytest.approx(np.sqrt((D * D).sum(axis=1)).max())
    assert W.max_column_norm() == pytest.approx(np.sqrt((D * D).sum(axis=0)).max())


def test_keys_identify_definitions() -> None:
    assert wl.prefix(10).key == wl.prefix(10).key
    assert wl.prefix(10).key != wl.prefix(11).key
    assert wl.prefix(10).key != wl.all_ranges(10).key
    assert wl.from_matrix(np.eye(3)).key == wl.from_matrix(np.eye(3)).key
    assert wl.from_matrix(np.eye(3)).key != wl.from_matrix(2 * np.eye(3)).key


def test_large_workloads_stay_implicit() -> None:
    W = wl.all_ranges(1024)  # 524,800 queries
    assert W.num_queries == 1024 * 1025 // 2
    x = np.ones(1024)
    ans = W.matvec(x)
    assert ans.max() == 1024 and ans.min() == 1
    assert W.gram()[0, 0] == 1024  # cell 0 is in 1024 intervals


def test_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="inside"):
        wl.ranges([(3, 2)], 5)
    with pytest.raises(ValueError, match="outside"):
        wl.counting([[0, 7]], 5)
    with pytest.raises(ValueError, match="attribute"):
        wl.marginals((2, 2), [(0, 2)])
    with pytest.raises(ValueError, match="2-d"):
        wl.from_matrix([1, 2, 3])
    with pytest.raises(ValueError, match=">= 1"):
        wl.prefix(0)
