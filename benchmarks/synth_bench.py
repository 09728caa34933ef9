"""Benchmark: synthetic data over all 15 columns of UCI Adult, dpkit MST vs smartnoise-synth MST.

    python benchmarks/synth_bench.py         # eps 1 and 3: dpkit 5 seeds, smartnoise 2 (~20 min)
    python benchmarks/synth_bench.py --seeds 1 --no-peer   # dpkit only, one seed (seconds)

Setup, the same for both: Adult train (``../shared/data/adult.data.gz``, rows with ``?`` dropped:
30,162) and test (15,060); record-level privacy; categorical domains from ``adult.names``; numeric
columns (age, fnlwgt, education-num, capital-gain, capital-loss, hours-per-week) binned on dpkit's
public grid over declared bounds (the same bin edges are given to smartnoise as categories, since
it bins by itself otherwise). dpkit: ``cur.synthetic("adult", all columns, epsilon=eps,
delta=1e-9)`` (chosen automatically: MST, the product grid has ~1e17 cells), timed end to end
(DuckDB read, charge, MST, records). smartnoise-synth 1.0.8 (its own venv
``/work/main/benchmarks/.venvs/synth``, RECIPES.md section 8): ``Synthesizer.create("mst",
epsilon=eps, delta=1e-9).fit(binned, preprocessor_eps=0.0, categorical_columns=all)`` then
``.sample(n)``, timed fit + sample (its preprocessing reads the categories from the data; it
spends no budget on them).

Measured per run: (a) the average total-variation distance over all 105 two-way marginals
(binned), at eps = 1; (b) accuracy on the Adult test split of a logistic regression (one-hot
of the binned columns) trained on the synthetic data at eps = 3, next to the same model trained
on the real train split. Results: ``benchmarks/results/synth.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
DATA = Path(os.environ.get("DPKIT_DATA", REPO / ".." / "shared" / "data"))
if not DATA.exists() and "DPKIT_DATA" not in os.environ:  # a git worktree one level deeper
    DATA = REPO / ".." / ".." / "shared" / "data"
PEER_PY = Path("/work/main/benchmarks/.venvs/synth/bin/python")
RESULTS = ROOT / "results" / "synth.json"
NAMES = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
         "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
         "hours_per_week", "native_country", "income"]
BOUNDS = {"age": (17, 90), "fnlwgt": (0, 1_500_000), "education_num": (1, 16),
          "capital_gain": (0, 99_999), "capital_loss": (0, 4_500), "hours_per_week": (1, 99)}
DELTA = 1e-9


def _peer(inp: str, out: str, epsilon: float) -> None:
    """Runs inside the smartnoise venv: fit MST on the binned CSV, write the sample, time it."""
    import pandas as pd
    from snsynth import Synthesizer

    df = pd.read_csv(inp, dtype=str)
    t0 = time.perf_counter()
    synth = Synthesizer.create("mst", epsilon=epsilon, delta=DELTA)
    synth.fit(df, preprocessor_eps=0.0, categorical_columns=list(df.columns))
    sample = synth.sample(len(df))
    seconds = time.perf_counter() - t0
    sample.to_csv(out, index=False)
    Path(out + ".json").write_text(json.dumps({"seconds": seconds}))


def _domains() -> dict[str, list[str]]:
    """The categorical domains as documented in adult.names (public)."""
    doms: dict[str, list[str]] = {}
    for line in (DATA / "adult.names").read_text().splitlines():
        if ":" in line and not line.startswith("|") and line.rstrip().endswith("."):
            key, vals = line.split(":", 1)
            name = key.strip().replace("-", "_")
            if name in NAMES and name not in BOUNDS:
                doms[name] = [v.strip() for v in vals.strip().rstrip(".").split(",")]
    doms["income"] = ["<=50K", ">50K"]
    return doms


def _load(name: str) -> Any:
    import pandas as pd

    df = pd.read_csv(DATA / name, header=None, names=NAMES, skipinitialspace=True,
                     comment="|", na_values="?")
    df = df.dropna().reset_index(drop=True)
    df["income"] = df["income"].str.rstrip(".")
    for c in BOUNDS:
        df[c] = df[c].astype("int64")
    return df


def _bins(cur: Any) -> dict[str, Any]:
    """dpkit's public grid per numeric column (the edges used for both libraries)."""
    from dpkit.engine.families.axes import categorical_axis

    meta = cur.tables["adult"] if not callable(cur.tables) else cur.tables()["adult"]
    return {c: categorical_axis(meta, c, bins=None, bounds=None).edges() for c in BOUNDS}


def _binned(df: Any, edges: dict[str, Any]) -> Any:
    import numpy as np

    out = df.copy()
    for c, e in edges.items():
        v = np.clip(df[c].to_numpy(dtype=float), e[0], e[-1] - 1e-9)
        out[c] = np.searchsorted(e, v, side="right") - 1
    return out.astype(str)


def _tvd(real: Any, syn: Any) -> float:
    import itertools

    tv = []
    for a, b in itertools.combinations(NAMES, 2):
        p = real.groupby([a, b]).size() / len(real)
        q = syn.groupby([a, b]).size() / len(syn)
        tv.append(0.5 * p.sub(q, fill_value=0.0).abs().sum())
    return float(sum(tv) / len(tv))


def _tvd1(real: Any, syn: Any) -> float:
    tv = [0.5 * (real[c].value_counts(normalize=True)
                 .sub(syn[c].value_counts(normalize=True), fill_value=0.0).abs().sum())
          for c in NAMES]
    return float(sum(tv) / len(tv))


def _accuracy(train: Any, test: Any) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import OneHotEncoder

    feats = [c for c in NAMES if c != "income"]
    enc = OneHotEncoder(handle_unknown="ignore")
    X = enc.fit_transform(train[feats])
    y = (train["income"] == ">50K").to_numpy()
    if y.all() or not y.any():
        return float(((test["income"] == ">50K") == y[0]).mean())
    model = LogisticRegression(max_iter=2000).fit(X, y)
    return float((model.predict(enc.transform(test[feats])) == (test["income"] == ">50K")).mean())


def _dpkit_run(train: Any, epsilon: float, workdir: Path,
               target: str | None = None) -> tuple[Any, float, str]:
    import dpkit as dp
    from dpkit.engine import Curator

    cur = Curator.create(workdir / f"p{time.time_ns()}.dpkit", epsilon=100.0, delta=1e-6)
    cur.add_table("adult", train, bounds=BOUNDS, domains=_domains())
    t0 = time.perf_counter()
    syn = cur.synthetic("adult", NAMES, epsilon=epsilon, delta=DELTA, target=target)
    seconds = time.perf_counter() - t0
    assert dp is not None
    return syn.to_pandas(), seconds, syn.method + (f" target={target}" if target else "")


def _peer_run(binned: Any, epsilon: float, workdir: Path) -> tuple[Any, float]:
    import pandas as pd

    inp, out = workdir / "real.csv", workdir / "peer.csv"
    binned.to_csv(inp, index=False)
    subprocess.run([str(PEER_PY), __file__, "--peer-run", str(inp), str(out), str(epsilon)],
                   check=True, capture_output=True, text=True)
    seconds = json.loads(Path(str(out) + ".json").read_text())["seconds"]
    return pd.read_csv(out, dtype=str), float(seconds)


def _summary(xs: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "min": min(xs), "max": max(xs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="dpkit repeats per epsilon")
    p.add_argument("--peer-seeds", type=int, default=2,
                   help="smartnoise repeats per epsilon (about 4 minutes each on 2 cores)")
    p.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 3.0])
    p.add_argument("--no-peer", action="store_true", help="dpkit only")
    p.add_argument("--json", type=Path, default=RESULTS)
    p.add_argument("--peer-run", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.peer_run:
        _peer(args.peer_run[0], args.peer_run[1], float(args.peer_run[2]))
        return
    if not (DATA / "adult.data.gz").exists():
        sys.exit(f"Adult not found under {DATA} (set DPKIT_DATA)")
    train, test = _load("adult.data.gz"), _load("adult.test.gz")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        probe = _dpkit_run(train.head(100), 1.0, work)  # warm-up (imports, scipy) + the grid
        del probe
        from dpkit.engine import Curator

        cur = Curator.create(work / "grid.dpkit", epsilon=1.0, delta=1e-6)
        cur.add_table("adult", train, bounds=BOUNDS, domains=_domains())
        edges = _bins(cur)
        real_b, test_b = _binned(train, edges), _binned(test, edges)
        real_acc = _accuracy(real_b, test_b)
        for eps in args.epsilons:
            for seed in range(args.seeds):
                for target, lib in ((None, "dpkit"), ("income", "dpkit target=income")):
                    syn, sec, method = _dpkit_run(train, eps, work, target)
                    syn_b = _binned(syn, edges)
                    runs.append({"library": lib, "method": method, "epsilon": eps,
                                 "seed": seed, "seconds": sec, "tvd2": _tvd(real_b, syn_b),
                                 "tvd1": _tvd1(real_b, syn_b),
                                 "accuracy": _accuracy(syn_b, test_b)})
                    print(json.dumps(runs[-1]), flush=True)
                if args.no_peer or not PEER_PY.exists() or seed >= args.peer_seeds:
                    continue
                peer, psec = _peer_run(real_b, eps, work)
                runs.append({"library": "smartnoise-synth", "method": "mst", "epsilon": eps,
                             "seed": seed, "seconds": psec, "tvd2": _tvd(real_b, peer),
                             "tvd1": _tvd1(real_b, peer),
                             "accuracy": _accuracy(peer, test_b)})
                print(json.dumps(runs[-1]), flush=True)
    summary: dict[str, Any] = {}
    for lib in sorted({r["library"] for r in runs}):
        for eps in args.epsilons:
            rs = [r for r in runs if r["library"] == lib and r["epsilon"] == eps]
            if rs:
                summary[f"{lib} eps={eps:g}"] = {
                    k: _summary([r[k] for r in rs])
                    for k in ("seconds", "tvd2", "tvd1", "accuracy")}
    out = {"real_accuracy": real_acc, "delta": DELTA, "rows": len(train), "test_rows": len(test),
           "summary": summary, "runs": runs, "note": "2-core machine shared with other jobs"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))
    print(json.dumps({"real_accuracy": real_acc, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
