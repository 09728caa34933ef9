"""De-identification to attack: hierarchies; k-anonymity, l-diversity, t-closeness by Datafly.

Nothing here is private in the DP sense: these are the *baselines* that
:mod:`dpkit.attacks.linkage` breaks. The releases in the benchmark are made with ANJANA
(``benchmarks/linkage_bench.py``, in its own venv: it pins numpy 2.0 and pandas 2.3); this
module holds the same algorithm so that tests and ``dpkit attack linkage`` run without it:

**Datafly with suppression** (Sweeney 2002; ANJANA's ``k_anonymity``): while the rows in
equivalence classes that fail the requirement are more than ``supp_level`` percent of the table,
generalise the quasi-identifier with the most distinct values one level up its hierarchy; then
suppress the failing classes. Requirements per class (equivalence class = rows with equal
generalised quasi-identifiers): at least ``k`` rows; with ``l``, at least ``l`` distinct
sensitive values (distinct l-diversity); with ``t``, total variation distance (the earth mover's
distance under the equal ground distance of a categorical attribute) at most ``t`` between the
class's sensitive distribution and the whole table's.

A :class:`Hierarchy` lists, per level, the label of every domain value (level 0: the value
itself), in the parallel-array form ANJANA reads (:meth:`Hierarchy.to_anjana`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ADULT_HIERARCHIES", "Deidentified", "Hierarchy", "anonymize", "generalise",
           "infer_levels", "validate"]


@dataclass(frozen=True)
class Hierarchy:
    """Generalisation levels of one quasi-identifier: ``levels[j][value]`` is its label at j.

    Level 0 is the identity; the top level maps every value to ``"*"``. Labels at level j+1
    must be a function of labels at level j (a tree), which :meth:`check` verifies.
    """

    name: str
    levels: tuple[Mapping[Any, str], ...]

    @property
    def height(self) -> int:
        """The highest level (``"*"`` everywhere)."""
        return len(self.levels)

    def label(self, value: Any, level: int) -> Any:
        """``value`` at ``level`` (0: unchanged); unknown values raise with the domain named."""
        if level == 0:
            return value
        try:
            return self.levels[level - 1][value]
        except KeyError:
            raise ValueError(f"{self.name}: value {value!r} is not in the hierarchy's domain; "
                             "extend the hierarchy or clean the column") from None

    def check(self) -> None:
        """Raise when a level is not a coarsening of the level below it."""
        below: Mapping[Any, Any] = {v: v for v in self.levels[0]}
        for j, level in enumerate(self.levels, start=1):
            parent: dict[Any, str] = {}
            for v, lab in level.items():
                if parent.setdefault(below[v], lab) != lab:
                    raise ValueError(f"{self.name}: level {j} splits the class {below[v]!r}")
            below = level

    def to_anjana(self) -> dict[int, list[Any]]:
        """ANJANA's form: ``{0: domain, 1: labels, ...}`` as parallel lists."""
        domain = list(self.levels[0])
        out: dict[int, list[Any]] = {0: domain}
        for j, level in enumerate(self.levels, start=1):
            out[j] = [level[v] for v in domain]
        return out


def _bins(values: Sequence[int], width: int, start: int) -> dict[Any, str]:
    out = {}
    for v in values:
        lo = start + (v - start) // width * width
        out[v] = f"[{lo}-{lo + width})"
    return out


def _groups(domain: Sequence[str], groups: Mapping[str, Sequence[str]]) -> dict[Any, str]:
    back = {v: g for g, vs in groups.items() for v in vs}
    return {v: back.get(v, v) for v in domain}


def _adult() -> dict[str, Hierarchy]:
    from dpkit.learn.adult import CATEGORIES

    ages = list(range(17, 91))
    edu = CATEGORIES["education"]
    edu1 = _groups(edu, {
        "Primary": ["Preschool", "1st-4th", "5th-6th", "7th-8th"],
        "Secondary": ["9th", "10th", "11th", "12th"],
        "Some-college/Assoc": ["Some-college", "Assoc-acdm", "Assoc-voc"],
        "Graduate": ["Masters", "Prof-school", "Doctorate"]})
    edu2 = {v: "No-college" if edu1[v] in ("Primary", "Secondary", "HS-grad") else "College"
            for v in edu}
    mar = CATEGORIES["marital-status"]
    mar1 = _groups(mar, {
        "Married": ["Married-civ-spouse", "Married-AF-spouse", "Married-spouse-absent"],
        "Was-married": ["Divorced", "Separated", "Widowed"]})
    race = CATEGORIES["race"]
    nat = CATEGORIES["native-country"]
    regions = {
        "Americas-other": ["Canada", "Puerto-Rico", "Outlying-US(Guam-USVI-etc)", "Cuba",
                           "Honduras", "Jamaica", "Mexico", "Dominican-Republic", "Ecuador",
                           "Haiti", "Columbia", "Guatemala", "Nicaragua", "El-Salvador",
                           "Trinadad&Tobago", "Peru"],
        "Europe": ["England", "Germany", "Greece", "Italy", "Poland", "Portugal", "Ireland",
                   "France", "Hungary", "Scotland", "Yugoslavia", "Holand-Netherlands"],
        "Asia": ["Cambodia", "India", "Japan", "China", "Iran", "Philippines", "Vietnam",
                 "Laos", "Taiwan", "Thailand", "Hong", "South"]}
    nat1 = _groups(nat, regions)
    star = "*"
    hs = [
        Hierarchy("age", (_bins(ages, 5, 15), _bins(ages, 10, 10), _bins(ages, 20, 0),
                          dict.fromkeys(ages, star))),
        Hierarchy("education", (edu1, edu2, dict.fromkeys(edu, star))),
        Hierarchy("marital_status", (mar1, dict.fromkeys(mar, star))),
        Hierarchy("race", ({r: r if r == "White" else "Non-White" for r in race},
                           dict.fromkeys(race, star))),
        Hierarchy("sex", (dict.fromkeys(CATEGORIES["sex"], star),)),
        Hierarchy("native_country", (nat1, {v: "United-States" if v == "United-States"
                                            else "Non-US" for v in nat},
                                     dict.fromkeys(nat, star))),
    ]
    for h in hs:
        h.check()
    return {h.name: h for h in hs}


#: Hierarchies for Adult's quasi-identifiers (column names with ``_``, as the curator uses):
#: age 5 / 10 / 20-year bands, education groups, married / was married / never, White / not,
#: sex suppressed, native country by region then US / non-US. Defined from ``adult.names`` only.
ADULT_HIERARCHIES: dict[str, Hierarchy] = _adult()


@dataclass(frozen=True)
class Deidentified:
    """A de-identified release: the generalised rows and what was done to make them."""

    frame: Any  # pandas DataFrame: generalised quasi-identifiers, the sensitive column
    quasi_identifiers: tuple[str, ...]
    sensitive: str
    levels: dict[str, int]
    suppressed: int
    k: int
    l: int | None = None  # noqa: E741 (the literature's name)
    t: float | None = None
    tool: str = "dpkit datafly"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def min_class(self) -> int:
        """The size of the smallest equivalence class (the k actually achieved)."""
        if len(self.frame) == 0:
            return 0
        return int(self.frame.groupby(list(self.quasi_identifiers), sort=False).size().min())


def validate(frame: Any, quasi_identifiers: Sequence[str], sensitive: str | None,
             hierarchies: Mapping[str, Hierarchy], *, k: int | None = None,
             l: int | None = None, t: float | None = None) -> None:  # noqa: E741
    """Every check on user input, raised before any work is done, each saying what to do."""
    cols = list(frame.columns)
    missing = [q for q in quasi_identifiers if q not in cols]
    if missing:
        raise ValueError(f"quasi-identifier column(s) {missing} not in the table (columns: "
                         f"{cols}); name existing columns")
    if not quasi_identifiers:
        raise ValueError("give at least one quasi-identifier column")
    if sensitive is not None and sensitive not in cols:
        raise ValueError(f"sensitive column {sensitive!r} not in the table (columns: {cols})")
    if sensitive is not None and sensitive in quasi_identifiers:
        raise ValueError(f"{sensitive!r} is both a quasi-identifier and the sensitive column")
    nohier = [q for q in quasi_identifiers if q not in hierarchies]
    if nohier:
        raise ValueError(f"no generalisation hierarchy for {nohier}; pass hierarchies= for them")
    if k is not None and (isinstance(k, bool) or int(k) != k or k < 2):
        raise ValueError(f"k must be an integer >= 2 (got {k!r}): k = 1 is the raw table")
    if l is not None and (isinstance(l, bool) or int(l) != l or l < 2):
        raise ValueError(f"l must be an integer >= 2 (got {l!r})")
    if t is not None and not 0.0 < t < 1.0:
        raise ValueError(f"t must be in (0, 1) (got {t!r})")


def generalise(frame: Any, levels: Mapping[str, int],
               hierarchies: Mapping[str, Hierarchy]) -> Any:
    """``frame`` with each column in ``levels`` replaced by its label at that level."""
    out = frame.copy()
    for q, j in levels.items():
        if j:
            h = hierarchies[q]
            out[q] = [h.label(v, j) for v in frame[q].tolist()]
    return out


def infer_levels(release: Any, hierarchies: Mapping[str, Hierarchy],
                 quasi_identifiers: Sequence[str]) -> dict[str, int]:
    """The level of each quasi-identifier in a release made elsewhere (read off its labels).

    The lowest level whose label set holds every value the release shows, so that an adversary
    can generalise a target's values the same way; a value no level holds raises.
    """
    out = {}
    for q in quasi_identifiers:
        h = hierarchies[q]
        shown = {str(v) for v in release[q].unique()}
        for j in range(h.height + 1):
            labels = {str(v) for v in h.levels[0]} if j == 0 else \
                {str(v) for v in h.levels[j - 1].values()}
            if shown <= labels:
                out[q] = j
                break
        else:
            raise ValueError(f"{q}: the release shows values no level of the hierarchy has")
    return out


def _failing(gen: Any, qis: list[str], sensitive: str, k: int, l: int | None,  # noqa: E741
             t: float | None) -> Any:
    """Boolean array per row: does the row's equivalence class fail k, l or t."""
    import numpy as np
    import pandas as pd

    ids = gen.groupby(qis, sort=False, dropna=False).ngroup().to_numpy()
    codes, _ = pd.factorize(gen[sensitive])
    counts = np.zeros((int(ids.max()) + 1, int(codes.max()) + 1))
    np.add.at(counts, (ids, codes), 1.0)
    size = counts.sum(axis=1)
    bad = size < k
    if l is not None:
        bad |= (counts > 0).sum(axis=1) < l
    if t is not None:
        # EMD under the equal ground distance of a categorical attribute = total variation
        overall = counts.sum(axis=0) / counts.sum()
        tvd = 0.5 * np.abs(counts / size[:, None] - overall).sum(axis=1)
        bad |= tvd > t + 1e-12
    return bad[ids]


def anonymize(frame: Any, quasi_identifiers: Sequence[str], sensitive: str, *, k: int,
              l: int | None = None, t: float | None = None,  # noqa: E741
              supp_level: float = 5.0,
              hierarchies: Mapping[str, Hierarchy] | None = None) -> Deidentified:
    """k-anonymous (optionally l-diverse / t-close) release of ``frame`` by Datafly.

    NOT differentially private: the baseline the linkage attacks break. ``supp_level``: the
    largest share of rows (percent, as ANJANA's) that may be suppressed. Keeps only the
    quasi-identifiers and ``sensitive``. With ``l`` / ``t`` the loop generalises until the
    classes failing any requirement can be suppressed, so a release meets all of them.
    """
    hier = dict(ADULT_HIERARCHIES if hierarchies is None else hierarchies)
    validate(frame, quasi_identifiers, sensitive, hier, k=k, l=l, t=t)
    if not 0.0 <= supp_level <= 100.0:
        raise ValueError(f"supp_level is a percentage in [0, 100] (got {supp_level})")
    qis = list(quasi_identifiers)
    data = frame[[*qis, sensitive]].reset_index(drop=True)
    levels = dict.fromkeys(qis, 0)
    movable = list(qis)
    while True:
        gen = generalise(data, levels, hier)
        bad = _failing(gen, qis, sensitive, k, l, t)
        if bad.sum() * 100.0 / len(data) <= supp_level and not bad.all():
            out = gen.loc[~bad].reset_index(drop=True)
            return Deidentified(out, tuple(qis), sensitive, levels, int(bad.sum()), k, l, t)
        movable = [q for q in movable if levels[q] < hier[q].height]
        if not movable:
            raise ValueError(f"no generalisation meets k={k}, l={l}, t={t} within "
                             f"{supp_level}% suppression; raise supp_level or relax them")
        q = _most_distinct(gen, movable)
        levels[q] += 1


def _most_distinct(gen: Any, movable: list[str]) -> str:
    counts = [gen[q].nunique() for q in movable]
    return movable[counts.index(max(counts))]

