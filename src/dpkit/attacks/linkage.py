"""Linkage attacks on de-identified releases, and the same questions asked of DP releases.

The adversary holds the quasi-identifiers (QIs) of target people from an outside source (a voter
roll: "Rebecca, 55, female, born in the US") and wants their sensitive value (here Adult's
``occupation``). From any release it reads, per target, how many records of its QI group carry
each sensitive value (:func:`release_counts`, :func:`synthetic_counts`, :func:`curator_counts`),
then :func:`score` asks three questions of those counts:

* **linkage / inference**: guess the group's most common value (the population's most common
  value when the target's group is not in the release);
* **homogeneity** (Machanavajjhala et al. 2007): the group has at least ``min_group`` records
  and all carry one value, so the adversary is *certain*; success = certain and right;
* **background knowledge**: the adversary also knows ``background`` values the target does
  *not* have (the most frequent wrong ones in its group, the worst case of that much
  knowledge), crosses them out, and is certain when one value is left; success = certain and
  right.

Every rate is reported separately for **members** (targets whose row is in the data) and
**non-members** (people of the same population who are not): what a release lets one learn about
non-members is inference from population statistics, which no privacy definition claims to stop
(DP included); the gap between the two is what the release gives away about the people in it.
A DP release bounds that gap: any event's probability changes by at most a factor ``e^ε``
(plus δ) when one person's row is added or removed.
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.attacks.deidentify import ADULT_HIERARCHIES, Hierarchy, generalise
from dpkit.noise import Source, permutation

__all__ = ["ADULT_QIS", "ADULT_SENSITIVE", "SYNTHETIC_LEVELS", "Targets", "adult_frames",
           "curator_counts", "pick_targets", "release_counts", "score", "synthetic_counts"]

ADULT_QIS: tuple[str, ...] = ("age", "education", "marital_status", "race", "sex",
                              "native_country")
ADULT_SENSITIVE = "occupation"
#: How the adversary groups records of synthetic data and of curator answers: 5-year age bands
#: (a synthetic age is drawn uniformly in its grid cell, so exact ages match by chance), the
#: other QIs exact.
SYNTHETIC_LEVELS: dict[str, int] = {"age": 1}
_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
            "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
            "hours_per_week", "native_country", "income"]


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas is in the test and dataframes extras
        raise ImportError("the linkage attacks need pandas: pip install 'dpkit[dataframes]'"
                          ) from exc
    return pd


def adult_frames(directory: str | Path | None = None) -> tuple[Any, Any]:
    """Adult's train and test splits as DataFrames (``?`` rows dropped: 30,162 / 15,060 rows).

    Column names use ``_`` (``marital_status``); numbers are int64. Raises
    ``FileNotFoundError`` naming where to put the files when they are absent.
    """
    from dpkit.learn.adult import data_dir

    pd = _pandas()
    d = Path(directory) if directory is not None else data_dir()
    if d is None or not (d / "adult.data.gz").exists():
        raise FileNotFoundError("adult.data.gz / adult.test.gz not found: pass the folder, or "
                                "set DPKIT_DATA to the folder holding them")
    out = []
    for name in ("adult.data.gz", "adult.test.gz"):
        with gzip.open(d / name, "rt") as fh:
            rows = [[c.strip() for c in r] for r in csv.reader(fh)]
        rows = [r for r in rows if len(r) == len(_COLUMNS) and "?" not in r]
        df = pd.DataFrame(rows, columns=_COLUMNS)
        for c in ("age", "fnlwgt", "education_num", "capital_gain", "capital_loss",
                  "hours_per_week"):
            df[c] = df[c].astype("int64")
        df["income"] = df["income"].str.rstrip(".")
        out.append(df)
    return out[0], out[1]


@dataclass(frozen=True)
class Targets:
    """The adversary's auxiliary data: target QIs, their true sensitive values, membership."""

    qi: Any  # DataFrame of the targets' exact quasi-identifiers
    truth: np.ndarray  # their sensitive values (the answer key; the adversary never reads it)
    member: np.ndarray  # bool: is the target's row in the released data

    def __len__(self) -> int:
        return len(self.truth)


def pick_targets(members: Any, others: Any, n: int, quasi_identifiers: Sequence[str],
                 sensitive: str, *, source: Source | None = None) -> Targets:
    """``n`` random rows of ``members`` (the released data) and ``n`` of ``others``."""
    for df, what in ((members, "members"), (others, "others")):
        missing = [c for c in (*quasi_identifiers, sensitive) if c not in df.columns]
        if missing:
            raise ValueError(f"column(s) {missing} not in {what} (columns: {list(df.columns)})")
    if n < 1 or n > min(len(members), len(others)):
        raise ValueError(f"n must be in [1, {min(len(members), len(others))}] (got {n})")
    pd = _pandas()
    parts = [df.iloc[permutation(len(df), source=source)[:n]] for df in (members, others)]
    both = pd.concat(parts, ignore_index=True)
    member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    return Targets(both[list(quasi_identifiers)].reset_index(drop=True),
                   both[sensitive].to_numpy(dtype=object), member)


def _group_counts(records: Any, keys: Any, qis: list[str], sensitive: str,
                  domain: Sequence[Any]) -> np.ndarray:
    """Counts of each ``domain`` value among ``records`` sharing each key row's QIs."""
    pd = _pandas()
    tab = records.groupby([*qis, sensitive], sort=False).size().unstack(fill_value=0)
    tab = tab.reindex(columns=list(domain), fill_value=0)
    idx = pd.MultiIndex.from_frame(keys[qis]) if len(qis) > 1 else pd.Index(keys[qis[0]])
    return tab.reindex(idx, fill_value=0).to_numpy(dtype=float)


def release_counts(release: Any, targets: Targets, levels: Mapping[str, int], sensitive: str,
                   domain: Sequence[Any],
                   hierarchies: Mapping[str, Hierarchy] | None = None) -> np.ndarray:
    """Per target, the sensitive values in its equivalence class of a generalised release.

    The adversary generalises the target's QIs to the release's ``levels`` (read them with
    :func:`~dpkit.attacks.deidentify.infer_levels` from a release made elsewhere).
    """
    hier = ADULT_HIERARCHIES if hierarchies is None else hierarchies
    qis = list(levels)
    keys = generalise(targets.qi, levels, hier)
    rel = release[[*qis, sensitive]].copy()
    for q in qis:  # a release read back from CSV may hold numbers as text
        rel[q] = rel[q].astype(str)
        keys[q] = keys[q].astype(str)
    return _group_counts(rel, keys, qis, sensitive, domain)


def synthetic_counts(records: Any, targets: Targets, sensitive: str, domain: Sequence[Any],
                     levels: Mapping[str, int] | None = None,
                     hierarchies: Mapping[str, Hierarchy] | None = None) -> np.ndarray:
    """Per target, the sensitive values of synthetic records in its QI group.

    Groups by the targets' QIs at ``levels`` (default :data:`SYNTHETIC_LEVELS`), the same
    grouping applied to the synthetic records.
    """
    hier = ADULT_HIERARCHIES if hierarchies is None else hierarchies
    chosen = dict(SYNTHETIC_LEVELS if levels is None else levels)
    lv = {q: chosen.get(q, 0) for q in targets.qi.columns}
    return release_counts(generalise(records, lv, hier), targets, lv, sensitive, domain, hier)


def _where(row: Mapping[str, Any], levels: Mapping[str, int],
           hierarchies: Mapping[str, Hierarchy]) -> str:
    """The SQL condition selecting a target's QI group (age bands as BETWEEN)."""
    conds = []
    for q, v in row.items():
        j = levels.get(q, 0)
        if j == 0:
            conds.append(f"{q} = {int(v)}" if isinstance(v, (int, np.integer))
                         else f"{q} = '{str(v).replace(chr(39), chr(39) * 2)}'")
            continue
        if q != "age":
            raise ValueError(f"curator_counts generalises only age (got level {j} for {q})")
        lo, hi = hierarchies[q].label(v, j).strip("[)").split("-")
        conds.append(f"{q} BETWEEN {int(lo)} AND {int(hi) - 1}")
    return " AND ".join(conds)


def curator_counts(cur: Any, table: str, targets: Targets, sensitive: str,
                   domain: Sequence[Any], *, epsilon: float,
                   levels: Mapping[str, int] | None = None,
                   hierarchies: Mapping[str, Hierarchy] | None = None) -> np.ndarray:
    """Per target, one DP count query on its QI group, grouped by the sensitive column.

    ``SELECT s, COUNT(*) FROM table WHERE <target's QIs> GROUP BY s`` at ``epsilon`` each
    (each answer ``epsilon``-DP for add/remove one privacy unit of the table, as the curator
    guarantees; one row per person at record level), charged to ``cur``'s ledger (the table
    must declare ``sensitive``'s domain, so every value is released, with noise). Noisy counts
    are rounded and clipped at 0 (post-processing). ``len(targets)`` queries cost
    ``len(targets) * epsilon``: the budget must allow it.
    """
    hier = ADULT_HIERARCHIES if hierarchies is None else hierarchies
    lv = dict(SYNTHETIC_LEVELS if levels is None else levels)
    pos = {v: i for i, v in enumerate(domain)}
    out = np.zeros((len(targets), len(domain)))
    for i, row in enumerate(targets.qi.to_dict("records")):
        res = cur.sql(f"SELECT {sensitive}, COUNT(*) AS n FROM {table} WHERE "
                      f"{_where(row, lv, hier)} GROUP BY {sensitive}", epsilon=epsilon)
        for rec in res.to_pandas()[[sensitive, "n"]].itertuples(index=False):
            if rec[0] in pos:
                out[i, pos[rec[0]]] = max(0.0, float(np.rint(rec[1])))
    return out


def score(counts: np.ndarray, targets: Targets, domain: Sequence[Any], *, min_group: int = 2,
          background: int = 1, fallback: Any = None) -> dict[str, np.ndarray]:
    """Per-target success (bool arrays) of the inference, homogeneity and background attacks.

    ``fallback``: the guess when the target's group is empty (default: the most common value
    overall in ``counts``; pass the population's mode to use public statistics).
    """
    if min_group < 1 or background < 0:
        raise ValueError("min_group must be >= 1 and background >= 0")
    dom = np.asarray(list(domain), dtype=object)
    truth_idx = np.array([list(domain).index(v) if v in set(domain) else -1
                          for v in targets.truth])
    total = counts.sum(axis=1)
    linked = total > 0
    top = counts.argmax(axis=1)
    fb = dom[counts.sum(axis=0).argmax()] if fallback is None else fallback
    guess = np.where(linked, dom[top], fb)
    right = guess == targets.truth
    single = (counts > 0).sum(axis=1) == 1
    homog = linked & (total >= min_group) & single & (top == truth_idx)
    # cross out the `background` most frequent wrong values of each group
    wrong = counts.copy()
    rows = np.arange(len(counts))
    ok = truth_idx >= 0
    wrong[rows[ok], truth_idx[ok]] = -1.0
    order = np.argsort(-wrong, axis=1, kind="stable")[:, :background]
    left = counts.copy()
    if background:
        np.put_along_axis(left, order, 0.0, axis=1)
    bg = (total >= min_group) & ((left > 0).sum(axis=1) == 1) & (left.argmax(axis=1) == truth_idx)
    return {"linked": linked, "inference": right, "homogeneity": homog, "background": bg}
