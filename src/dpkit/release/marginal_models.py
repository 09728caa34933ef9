"""A tree-structured graphical model fitted to noisy marginals, and records sampled from it.

This is the post-processing half of MST (:mod:`dpkit.release.mst`): it never sees data, only
noisy measurements, so nothing here spends privacy.

**Why no general inference library.** MST measures every 1-way marginal and the 2-way marginals
on the edges of a spanning tree. On a tree, any set of *locally consistent* marginals (each
edge's table sums to the tables of its two end nodes) is realised exactly by the distribution
``P(x) = prod_edges mu_ab(x_a, x_b) / prod_nodes mu_a(x_a)^(deg(a) - 1)`` (junction-tree
theorem: a tree is its own junction tree). So an exact consistent fit needs no message passing
or mirror descent (``mbi``'s ``FactoredInference``): it is enough to

1. estimate the number of records ``n`` and each node's marginal by inverse-variance weighting
   of every measurement that sums to it (the node's own noisy 1-way table and the row / column
   sums of the noisy 2-way tables at its edges), then project each onto
   ``{mu >= 0, sum mu = n}`` (Euclidean projection on the scaled simplex);
2. fit each edge table to its two fitted node marginals by iterative proportional fitting
   started from the clipped noisy 2-way measurement (the KL projection of the measurement on
   the tables with those margins), which makes the model consistent to ``1e-10 n`` (rows
   exactly, columns to that tolerance);
3. sample records ancestrally from a root (parent first, then each child from
   ``mu_pc(v, .) / mu_p(v)``), with *controlled rounding*: the ``m`` records whose parent has
   value ``v`` get children in the numbers ``m · P(c | v)`` rounded by largest remainder (then
   shuffled among those records), so the records' tables match the model up to rounding instead
   of up to sampling noise.

With a ``target`` attribute (:func:`fit_conditional`), every clique also holds the target:
for each target value ``y`` the other attributes form a tree whose tables are the slices at
``y`` of the measured 3-way tables ``(a, b, target)``, fitted and sampled as above (a
tree-augmented naive Bayes model: a tree plus one vertex joined to all is still chordal, so
the fit stays exact per slice).

Randomness (only the shuffles) comes from :mod:`dpkit.noise`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpkit import noise
from dpkit.noise import Source
from dpkit.release.mwem import synthetic_records

__all__ = [
    "ConditionalTreeModel",
    "Measurement",
    "TreeModel",
    "fit_conditional",
    "fit_tree",
    "ipf",
    "project_simplex",
    "sample_conditional",
    "sample_tree",
]

#: IPF stops when every margin is within this fraction of the total of its target
IPF_TOLERANCE = 1e-10
IPF_MAX_ITERATIONS = 5000


@dataclass(frozen=True)
class Measurement:
    """A noisy table over ``attrs`` (one node or an edge ``(a, b)``, ``a < b``): ``values`` has
    the shape of the attributes' (compressed) domains; ``variance`` per cell (an array of the
    same shape, or a scalar)."""

    attrs: tuple[int, ...]
    values: np.ndarray
    variance: np.ndarray


@dataclass(frozen=True)
class TreeModel:
    """Consistent marginals of a tree-structured model: ``nodes[i]`` sums to ``total``;
    ``edges[k] = (a, b)`` with ``tables[k]`` of shape ``(len(nodes[a]), len(nodes[b]))``,
    rows summing to ``nodes[a]`` and columns to ``nodes[b]``."""

    nodes: list[np.ndarray]
    edges: list[tuple[int, int]]
    tables: list[np.ndarray]
    total: float

    def consistency_error(self) -> float:
        """Largest absolute gap between an edge table's margins and its node marginals."""
        gap = 0.0
        for (a, b), t in zip(self.edges, self.tables, strict=True):
            gap = max(gap, float(np.max(np.abs(t.sum(axis=1) - self.nodes[a]))),
                      float(np.max(np.abs(t.sum(axis=0) - self.nodes[b]))))
        return gap


def project_simplex(y: np.ndarray, total: float) -> np.ndarray:
    """The Euclidean projection of ``y`` on ``{mu >= 0, sum mu = total}`` (``total > 0``):
    ``max(y - tau, 0)`` with the threshold ``tau`` found by sorting (Held et al. 1974)."""
    v = np.asarray(y, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - total
    k = np.arange(1, v.size + 1)
    ok = u - css / k > 0
    r = int(np.nonzero(ok)[0][-1]) if ok.any() else 0
    tau = css[r] / (r + 1)
    return np.maximum(v - tau, 0.0)


def ipf(start: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The table closest in KL to ``start`` (> 0 everywhere) with row sums ``rows`` and column
    sums ``cols`` (equal totals), by iterative proportional fitting; rows/columns whose target is
    0 are zero. Ends on a row scaling, so the row sums are exact and the column sums within
    :data:`IPF_TOLERANCE` of the total."""
    t = np.array(start, dtype=np.float64)
    total = max(float(rows.sum()), 1e-300)
    for _ in range(IPF_MAX_ITERATIONS):
        cs = t.sum(axis=0)
        t *= np.divide(cols, cs, out=np.zeros_like(cs), where=cs > 0)[None, :]
        rs = t.sum(axis=1)
        t *= np.divide(rows, rs, out=np.zeros_like(rs), where=rs > 0)[:, None]
        if np.max(np.abs(t.sum(axis=0) - cols)) <= IPF_TOLERANCE * total:
            break
    return t


def _weighted_total(measurements: Sequence[Measurement]) -> float:
    """Inverse-variance weighted average of every measurement's total (at least 1)."""
    num = den = 0.0
    for m in measurements:
        var = float(np.sum(np.broadcast_to(m.variance, m.values.shape)))
        num += float(m.values.sum()) / var
        den += 1.0 / var
    return max(1.0, num / den)


def _node_estimate(i: int, size: int, measurements: Sequence[Measurement]) -> np.ndarray:
    """Node ``i``'s marginal from every measurement that sums to it, inverse-variance weighted
    per cell (a 2-way table summed over the other attribute adds that many variances)."""
    num = np.zeros(size)
    den = np.zeros(size)
    for m in measurements:
        if i not in m.attrs:
            continue
        var = np.broadcast_to(m.variance, m.values.shape)
        if len(m.attrs) == 1:
            y, w = m.values, var
        else:
            axis = 1 if m.attrs[0] == i else 0
            y, w = m.values.sum(axis=axis), var.sum(axis=axis)
        num += y / w
        den += 1.0 / w
    return np.divide(num, den, out=np.zeros(size), where=den > 0)


def fit_tree(sizes: Sequence[int], measurements: Sequence[Measurement],
             edges: Sequence[tuple[int, int]]) -> TreeModel:
    """The consistent tree model of the module docstring from noisy ``measurements`` (each
    node measured at least once; each edge ``(a, b)``, ``a < b``, measured once)."""
    total = _weighted_total(measurements)
    nodes = [project_simplex(_node_estimate(i, k, measurements), total)
             for i, k in enumerate(sizes)]
    tables = []
    by_attrs = {m.attrs: m for m in measurements if len(m.attrs) == 2}
    for a, b in edges:
        y = by_attrs[(a, b)].values
        # the clipped measurement as the IPF start; a floor far below one record keeps every
        # cell reachable, so IPF can meet any margins
        floor = 1e-8 * total / y.size
        tables.append(ipf(np.maximum(y, 0.0) + floor, nodes[a], nodes[b]))
    return TreeModel(nodes=nodes, edges=list(edges), tables=tables, total=total)


def _tree_order(d: int, edges: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(parent, child, edge index) in breadth-first order from the root 0 of each component."""
    adj: dict[int, list[tuple[int, int]]] = {i: [] for i in range(d)}
    for k, (a, b) in enumerate(edges):
        adj[a].append((b, k))
        adj[b].append((a, k))
    seen: set[int] = set()
    order: list[tuple[int, int, int]] = []
    for root in range(d):
        if root in seen:
            continue
        seen.add(root)
        order.append((-1, root, -1))
        queue = [root]
        while queue:
            p = queue.pop(0)
            for c, k in adj[p]:
                if c not in seen:
                    seen.add(c)
                    order.append((p, c, k))
                    queue.append(c)
    return order


def _assign(column: np.ndarray, rows_of: np.ndarray, counts: np.ndarray) -> None:
    """Write values ``0..len(counts)-1``, ``counts[v]`` times each, into ``column[rows_of]``."""
    column[rows_of] = np.repeat(np.arange(counts.size), counts)


def sample_tree(model: TreeModel, rows: int, *, source: Source | None = None) -> np.ndarray:
    """``rows`` records (int64, ``rows x d``: a value index per node) drawn ancestrally from
    ``model`` with controlled rounding (see the module docstring)."""
    d = len(model.nodes)
    out = np.zeros((rows, d), dtype=np.int64)
    if rows == 0:
        return out
    for parent, child, k in _tree_order(d, model.edges):
        # a fresh shuffle per node: which records of a parent value get which child value is
        # independent of everything already drawn (conditional independence given the parent)
        perm = noise.permutation(rows, source=source)
        if parent < 0:
            _assign(out[:, child], perm, synthetic_records(model.nodes[child], rows))
            continue
        a = model.edges[k][0]
        table = model.tables[k] if a == parent else model.tables[k].T
        pv = out[perm, parent]
        order = perm[np.argsort(pv, kind="stable")]
        groups = np.bincount(pv, minlength=table.shape[0])
        start = 0
        for v, m in enumerate(groups.tolist()):
            if m == 0:
                continue
            w = table[v] if table[v].sum() > 0 else model.nodes[child]
            _assign(out[:, child], order[start:start + m], synthetic_records(w, m))
            start += m
    return out


@dataclass(frozen=True)
class ConditionalTreeModel:
    """A tree model per value ``y`` of a ``target`` attribute (tree-augmented naive Bayes
    shape: every clique holds the target). ``slices[y]`` is over all attributes, the target's
    node of size 1; its ``total`` is the estimated number of records with target ``y``."""

    target: int
    slices: list[TreeModel]

    @property
    def total(self) -> float:
        return float(sum(m.total for m in self.slices))

    @property
    def edges(self) -> list[tuple[int, int]]:
        """The tree over the other attributes, plus an edge to the target from each of them
        (the cliques are ``{a, b, target}``)."""
        return self.slices[0].edges


def _slice(m: Measurement, target: int, y: int) -> Measurement | None:
    """Measurement ``m`` restricted to target value ``y`` (None when ``m`` is the target's
    own 1-way table, not used within a slice)."""
    if target not in m.attrs:
        return None
    if len(m.attrs) == 1:
        return None
    axis = m.attrs.index(target)
    keep = tuple(a for a in m.attrs if a != target)
    var = np.broadcast_to(m.variance, m.values.shape)
    return Measurement(keep, np.take(m.values, y, axis=axis), np.take(var, y, axis=axis))


def fit_conditional(sizes: Sequence[int], target: int, measurements: Sequence[Measurement],
                    edges: Sequence[tuple[int, int]]) -> ConditionalTreeModel:
    """For each target value ``y``: :func:`fit_tree` on the slices at ``y`` of the measurements
    that hold the target (3-way tables ``(a, b, target)`` become 2-way tables ``(a, b)``,
    2-way tables ``(a, target)`` become 1-way tables of ``a``). Each slice is a consistent
    tree model (exact on a tree, see the module docstring); the slices' totals estimate the
    target's marginal. ``edges``: the tree over the other attributes."""
    inner = [(a, b) for a, b in edges if target not in (a, b)]
    slice_sizes = [1 if i == target else k for i, k in enumerate(sizes)]
    slices = []
    for y in range(sizes[target]):
        ms = [s for m in measurements if (s := _slice(m, target, y)) is not None]
        slices.append(fit_tree(slice_sizes, ms, inner))
    return ConditionalTreeModel(target=target, slices=slices)


def sample_conditional(model: ConditionalTreeModel, rows: int, *,
                       source: Source | None = None) -> np.ndarray:
    """Records from a :class:`ConditionalTreeModel`: the target's counts by largest remainder
    of its estimated marginal, then each slice's records by :func:`sample_tree`, shuffled."""
    counts = synthetic_records([m.total for m in model.slices], rows)
    parts = []
    for y, (m, k) in enumerate(zip(model.slices, counts.tolist(), strict=True)):
        part = sample_tree(m, k, source=source)
        part[:, model.target] = y
        parts.append(part)
    out = np.concatenate(parts, axis=0)
    return out[noise.permutation(rows, source=source)] if rows else out
