"""The linkage experiment on Adult: k-anonymous / l-diverse / t-close releases vs dpkit's DP ones.

:func:`run_linkage` de-identifies Adult's train split (:func:`~dpkit.attacks.deidentify.anonymize`
for each k, l, t, or releases made elsewhere, e.g. by ANJANA, passed as ``releases=``), makes
dpkit MST synthetic data at each ε and, optionally, answers one DP count query per target from
the curator; then attacks each release with the same targets (half members of the train split,
half people of the test split) and returns one :class:`LinkageRow` per release.

Guarantees of the DP releases (record level: add/remove one row of Adult): the synthetic data
at ``epsilon=eps, delta=1e-9`` is (eps, 1e-9)-DP (MST under zCDP, converted); each curator
answer is ``curator_epsilon``-DP, and the targets' queries compose to their sum. The
de-identified releases have no such guarantee.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.attacks.deidentify import ADULT_HIERARCHIES, anonymize, infer_levels, validate
from dpkit.attacks.linkage import (
    ADULT_QIS,
    ADULT_SENSITIVE,
    Targets,
    adult_frames,
    curator_counts,
    pick_targets,
    release_counts,
    score,
    synthetic_counts,
)
from dpkit.noise import Source

__all__ = ["METRICS", "LinkageRow", "adult_curator", "attack_release", "run_linkage"]

METRICS = ("linked", "inference", "homogeneity", "background")


@dataclass(frozen=True)
class LinkageRow:
    """Success rates of every attack on one release, for members and for non-members."""

    release: str  # "k-anonymity", "l-diversity", "t-closeness", "dp synthetic", "dp curator"
    param: str  # "k=2", "eps=1", ...
    members: dict[str, float]
    non_members: dict[str, float]
    suppressed: int | None = None
    targets: int = 0  # per group
    extra: dict[str, Any] = field(default_factory=dict)


def _rates(ok: Mapping[str, np.ndarray], member: np.ndarray) -> tuple[dict[str, float],
                                                                     dict[str, float]]:
    return ({m: float(ok[m][member].mean()) for m in METRICS},
            {m: float(ok[m][~member].mean()) for m in METRICS})


def attack_release(release: str, param: str, counts: np.ndarray, targets: Targets,
                   domain: Sequence[Any], *, fallback: Any, min_group: int = 2,
                   background: int = 1, suppressed: int | None = None) -> LinkageRow:
    """Score ``counts`` (one row per target) into a :class:`LinkageRow`."""
    ok = score(counts, targets, domain, min_group=min_group, background=background,
               fallback=fallback)
    mem, non = _rates(ok, targets.member)
    return LinkageRow(release, param, mem, non, suppressed, int(targets.member.sum()))


def adult_curator(train: Any, path: Path, *, epsilon: float, columns: Sequence[str],
                  source: Source | None = None) -> Any:
    """A curator over ``train``'s ``columns`` with Adult's public domains, record-level."""
    from dpkit.engine import Curator
    from dpkit.learn.adult import CATEGORIES

    doms = {c.replace("-", "_"): v for c, v in CATEGORIES.items()
            if c.replace("-", "_") in columns}
    if "income" in columns:
        doms["income"] = ["<=50K", ">50K"]
    cur = Curator.create(path, epsilon=epsilon, delta=1e-6, source=source)
    bounds = {"age": (17, 90)} if "age" in columns else {}
    cur.add_table("adult", train[list(columns)], bounds=bounds, domains=doms)
    return cur


@dataclass(frozen=True)
class _Setup:
    """What every release is attacked with: the targets and the adversary's settings."""

    targets: Targets
    qis: tuple[str, ...]
    sensitive: str
    domain: list[str]
    mode: str  # the population's most common value: the guess when a group is missing
    min_group: int
    background: int

    def row(self, release: str, param: str, counts: np.ndarray, targets: Targets | None = None,
            suppressed: int | None = None, levels: dict[str, int] | None = None) -> LinkageRow:
        tg = self.targets if targets is None else targets
        r = attack_release(release, param, counts, tg, self.domain, fallback=self.mode,
                           min_group=self.min_group, background=self.background,
                           suppressed=suppressed)
        if levels is None:
            return r
        return LinkageRow(r.release, r.param, r.members, r.non_members, r.suppressed,
                          r.targets, {"levels": levels})


def _deidentified(train: Any, st: _Setup, *, ks: Sequence[int], ls: Sequence[int],
                  ts: Sequence[float], supp_level: float) -> list[LinkageRow]:
    rows = []
    jobs = ([("k-anonymity", f"k={k}", {"k": k}) for k in ks]
            + [("l-diversity", f"k=2,l={v}", {"k": 2, "l": v}) for v in ls]
            + [("t-closeness", f"k=2,t={v}", {"k": 2, "t": v}) for v in ts])
    for name, param, kw in jobs:
        rel = anonymize(train, st.qis, st.sensitive, supp_level=supp_level, **kw)
        c = release_counts(rel.frame, st.targets, rel.levels, st.sensitive, st.domain)
        rows.append(st.row(name, param, c, suppressed=rel.suppressed, levels=rel.levels))
    return rows


def _check(ks: Sequence[int], ls: Sequence[int], ts: Sequence[float], epsilons: Sequence[float],
           curator_epsilon: float | None, qis: Sequence[str], min_group: int,
           background: int) -> None:
    """Every parameter check that needs no data, so bad input fails before the data is read."""
    for k in ks:
        validate_k(k)
    for lv in ls:
        if isinstance(lv, bool) or int(lv) != lv or lv < 2:
            raise ValueError(f"l must be an integer >= 2 (got {lv!r})")
    for tv in ts:
        if not 0.0 < tv < 1.0:
            raise ValueError(f"t must be in (0, 1) (got {tv!r})")
    if any(e <= 0 for e in epsilons) or (curator_epsilon is not None and curator_epsilon <= 0):
        raise ValueError("every epsilon must be > 0")
    unknown = [q for q in qis if q not in ADULT_HIERARCHIES]
    if unknown or not qis:
        raise ValueError(f"quasi-identifier(s) {unknown or '(none)'} unknown: choose among "
                         f"Adult's {sorted(ADULT_HIERARCHIES)}")
    if min_group < 1 or background < 0:
        raise ValueError("min_group must be >= 1 and background >= 0")


def run_linkage(*, ks: Sequence[int] = (2, 5, 10, 25, 50), ls: Sequence[int] = (2, 3),
                ts: Sequence[float] = (0.3, 0.2), epsilons: Sequence[float] = (1.0, 3.0),
                n_targets: int = 500, curator_epsilon: float | None = 1.0,
                curator_targets: int = 50, supp_level: float = 10.0,
                sensitive: str = ADULT_SENSITIVE, quasi_identifiers: Sequence[str] = ADULT_QIS,
                min_group: int = 2, background: int = 1,
                releases: Sequence[tuple[str, str, Any]] = (),
                data: tuple[Any, Any] | str | Path | None = None,
                source: Source | None = None, workdir: Path | None = None) -> list[LinkageRow]:
    """Every release attacked with the same targets; see the module docstring.

    ``quasi_identifiers``: what the adversary knows (a subset of :data:`ADULT_QIS`);
    ``min_group`` / ``background``: see :func:`~dpkit.attacks.linkage.score`. ``releases``:
    extra de-identified releases made elsewhere (e.g. by ANJANA), as ``(kind, param, frame)``:
    ``("k-anonymity", "k=2", DataFrame of generalised QIs and sensitive)``; their levels are
    read off their labels. ``data``: ``(train, test)`` frames, or the folder holding Adult
    (default: ``DPKIT_DATA`` or ``../shared/data``). Bad input (k < 2, l < 2, t outside
    (0, 1), epsilons <= 0, unknown quasi-identifiers) is refused before the data is read.
    """
    qis = tuple(quasi_identifiers)
    _check(ks, ls, ts, epsilons, curator_epsilon, qis, min_group, background)
    train, test = data if isinstance(data, tuple) else adult_frames(data)
    validate(train, qis, sensitive, ADULT_HIERARCHIES)
    dom = sorted(str(v) for v in train[sensitive].unique())
    targets = pick_targets(train, test, n_targets, qis, sensitive, source=source)
    st = _Setup(targets, qis, sensitive, dom, str(train[sensitive].mode()[0]), min_group,
                background)
    rows = [st.row("population", "mode", np.zeros((len(targets), len(dom)))),
            *_deidentified(train, st, ks=ks, ls=ls, ts=ts, supp_level=supp_level)]
    for kind, param, frame in releases:
        seen = infer_levels(frame, ADULT_HIERARCHIES, qis)
        c = release_counts(frame, targets, seen, sensitive, dom)
        rows.append(st.row(kind, param, c, suppressed=len(train) - len(frame), levels=seen))
    rows += _dp_rows(train, st, epsilons=epsilons, curator_epsilon=curator_epsilon,
                     curator_targets=curator_targets, source=source, workdir=workdir)
    return rows


def validate_k(k: Any) -> None:
    """k must be an integer >= 2 (k = 1 is the raw table)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
        raise ValueError(f"k must be an integer >= 2 (got {k!r}): k = 1 is the raw table")


def _dp_rows(train: Any, st: _Setup, *, epsilons: Sequence[float],
             curator_epsilon: float | None, curator_targets: int, source: Source | None,
             workdir: Path | None) -> list[LinkageRow]:
    cols = [*st.qis, st.sensitive]
    targets = st.targets
    rows = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        n_cur = min(curator_targets, int(targets.member.sum())) if curator_epsilon else 0
        total = sum(epsilons) + 2 * n_cur * (curator_epsilon or 0.0) + 1.0
        cur = adult_curator(train, Path(tmp) / "linkage.dpkit", epsilon=total, columns=cols,
                            source=source)
        for eps in epsilons:
            syn = cur.synthetic("adult", cols, epsilon=eps, delta=1e-9, method="mst")
            c = synthetic_counts(syn.to_pandas(), targets, st.sensitive, st.domain)
            rows.append(st.row("dp synthetic (MST)", f"eps={eps:g}", c))
        if n_cur:
            half = len(targets) // 2
            pick = np.r_[np.arange(n_cur), half + np.arange(n_cur)]
            sub = Targets(targets.qi.iloc[pick].reset_index(drop=True), targets.truth[pick],
                          targets.member[pick])
            c = curator_counts(cur, "adult", sub, st.sensitive, st.domain,
                               epsilon=float(curator_epsilon or 0.0))
            rows.append(st.row("dp curator count", f"eps={curator_epsilon:g}/query", c, sub))
    return rows
