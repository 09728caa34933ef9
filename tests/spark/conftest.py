"""One local Spark session for the Spark backend's tests (``local[2]``, no UI, 4 shuffle
partitions), and the generated table both engines load. Without pyspark or Java the tests skip
with the reason, unless ``DPKIT_REQUIRE_EXTRAS=1`` (CI), where they fail."""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpkit as dp


def _require(reason: str) -> None:
    if os.environ.get("DPKIT_REQUIRE_EXTRAS"):
        pytest.fail(f"{reason}; CI runs the Spark tests (pip install -e '.[test]', Java 17)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _require("pyspark is not installed (extra [spark])")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _require("no Java runtime (pyspark needs Java 17+)")
    from dpkit.engine.backend_spark import local_session

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pyspark on pandas 3
        session = local_session()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def generated_rows(n: int = 3000, seed: int = 11) -> dict[str, Any]:
    """Rows with what breaks engines apart: NULLs and NaN, duplicate rows, extreme values,
    -0.0, many groups (60 keys plus NULL), units with 1 to ~40 rows."""
    src = dp.noise.seeded(seed)
    heavy = dp.noise.uniform_int(8, n, source=src) == 0  # an eighth of rows: 10 heavy units
    uid = np.where(heavy, dp.noise.uniform_int(10, n, source=src),
                   10 + dp.noise.uniform_int(n // 2, n, source=src)).astype(np.int64)
    keys = np.array([f"k{i:02d}" for i in range(60)], dtype=object)
    g = keys[dp.noise.uniform_int(60, n, source=src)]
    x = (dp.noise.uniform_float01(n, source=src) * 200.0 - 50.0)
    k = dp.noise.uniform_int(11, n, source=src).astype(np.int64) - 5
    h = np.array(["a", "b", "c"], dtype=object)[dp.noise.uniform_int(3, n, source=src)]
    g[::37] = None
    x[::23] = np.nan
    x[5::97] = 1e300
    x[6::97] = -1e300
    x[7::97] = -0.0
    x_null = np.zeros(n, dtype=bool)
    x_null[::29] = True
    k_null = np.zeros(n, dtype=bool)
    k_null[3::31] = True
    cols = {"uid": uid, "g": g, "h": h, "x": x, "k": k}
    # duplicate rows: the first 200 rows again
    cols = {c: np.concatenate([v, v[:200]]) for c, v in cols.items()}
    x_null = np.concatenate([x_null, x_null[:200]])
    k_null = np.concatenate([k_null, k_null[:200]])
    return {"cols": cols, "x_null": x_null, "k_null": k_null}


@pytest.fixture(scope="session")
def parquet_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated rows as one Parquet file (explicit NULLs beside NaN), read by both."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = generated_rows()
    c = data["cols"]
    table = pa.table({
        "uid": pa.array(c["uid"], pa.int64()),
        "g": pa.array(list(c["g"]), pa.string()),
        "h": pa.array(list(c["h"]), pa.string()),
        "x": pa.array(c["x"], pa.float64(), mask=data["x_null"]),
        "k": pa.array(c["k"], pa.int64(), mask=data["k_null"]),
    })
    path = tmp_path_factory.mktemp("spark_data") / "rows.parquet"
    pq.write_table(table, path)
    return path

