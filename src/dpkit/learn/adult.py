"""UCI Adult, encoded from its public domain only (``adult.names``), for tests and benchmarks.

The encoding reads nothing from the rows: categories come from the published attribute list
(one-hot; ``?`` rows dropped, as in the usual 30,162 / 15,060 split) and numeric columns are
scaled to [0, 1] by public bounds (census ranges; capital gain and loss on a log scale), so the
features leak nothing and every row has L2 norm at most ``FEATURE_NORM``.
"""

from __future__ import annotations

import csv
import gzip
import math
import os
from pathlib import Path

import numpy as np

__all__ = ["CATEGORIES", "FEATURE_NORM", "NUMERIC_BOUNDS", "data_dir", "load_adult"]

CATEGORIES: dict[str, list[str]] = {
    "workclass": ["Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                  "State-gov", "Without-pay", "Never-worked"],
    "education": ["Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
                  "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th",
                  "Doctorate", "5th-6th", "Preschool"],
    "marital-status": ["Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"],
    "occupation": ["Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces"],
    "relationship": ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative",
                     "Unmarried"],
    "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    "sex": ["Female", "Male"],
    "native-country": [
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
        "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
        "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
        "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
        "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"],
}
# Public ranges (not read from the rows); values outside are clamped. Log scale for the money.
NUMERIC_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "age": (17.0, 90.0, False),
    "fnlwgt": (0.0, 1.5e6, False),
    "education-num": (1.0, 16.0, False),
    "capital-gain": (0.0, 99999.0, True),
    "capital-loss": (0.0, 4356.0, True),
    "hours-per-week": (1.0, 99.0, False),
}
COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
           "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
           "hours-per-week", "native-country", "income"]
# one 1 per categorical attribute, each numeric feature in [0, 1]
FEATURE_NORM = math.sqrt(len(CATEGORIES) + len(NUMERIC_BOUNDS))


def data_dir() -> Path | None:
    """``$DPKIT_DATA`` or the project's ``../shared/data``; None when Adult is not there."""
    env = os.environ.get("DPKIT_DATA")
    here = Path(__file__).resolve().parents[3] / ".." / "shared" / "data"
    for d in ([Path(env)] if env else []) + [here, Path("/work/shared/data")]:
        if (d / "adult.data.gz").exists():
            return d
    return None


def _encode(rows: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    idx = {c: i for i, c in enumerate(COLUMNS)}
    width = len(NUMERIC_BOUNDS) + sum(len(v) for v in CATEGORIES.values())
    X = np.zeros((len(rows), width))
    y = np.zeros(len(rows), dtype=np.int64)
    for r, row in enumerate(rows):
        j = 0
        for name, (lo, hi, log) in NUMERIC_BOUNDS.items():
            v = min(max(float(row[idx[name]]), lo), hi)
            X[r, j] = (math.log1p(v) - math.log1p(lo)) / (math.log1p(hi) - math.log1p(lo)) \
                if log else (v - lo) / (hi - lo)
            j += 1
        for name, cats in CATEGORIES.items():
            X[r, j + cats.index(row[idx[name]])] = 1.0
            j += len(cats)
        y[r] = 1 if row[idx["income"]].startswith(">50K") else 0
    return X, y


def _read(path: Path) -> list[list[str]]:
    with gzip.open(path, "rt") as fh:
        rows = [[c.strip() for c in line] for line in csv.reader(fh)]
    return [r for r in rows if len(r) == len(COLUMNS) and "?" not in r]


def load_adult(directory: str | Path | None = None) -> tuple[np.ndarray, np.ndarray,
                                                              np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)``: 30,162 / 15,060 rows, 109 public-domain features.

    Raises ``FileNotFoundError`` naming where it looked when the files are absent.
    """
    d = Path(directory) if directory is not None else data_dir()
    if d is None or not (d / "adult.data.gz").exists():
        raise FileNotFoundError("adult.data.gz / adult.test.gz not found: pass the folder, or "
                                "set DPKIT_DATA to the folder holding them")
    Xtr, ytr = _encode(_read(d / "adult.data.gz"))
    Xte, yte = _encode(_read(d / "adult.test.gz"))
    return Xtr, ytr, Xte, yte
