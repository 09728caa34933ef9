"""Benchmark: linkage attacks on ANJANA's k-anonymous / l-diverse / t-close Adult vs dpkit's DP.

    python benchmarks/linkage_bench.py            # ANJANA + anonymeter venvs, 3 seeds (~10 min)
    python benchmarks/linkage_bench.py --seeds 1 --no-anonymeter --no-anjana   # dpkit only (~30 s)

Setup. Adult train (30,162 rows, ``?`` dropped) is the private table; quasi-identifiers age,
education, marital_status, race, sex, native_country with the hierarchies of
``dpkit.attacks.deidentify.ADULT_HIERARCHIES``; sensitive attribute ``occupation`` (14 values;
``--sensitive income`` for the binary one). De-identified releases: ANJANA 1.2.3
(``k_anonymity``, ``l_diversity``, ``t_closeness``, suppression limit 10%), run in its own venv
``/work/main/benchmarks/.venvs/anjana`` (``python3 -m venv ... && pip install anjana``: it pins
numpy 2.0.2 and pandas 2.3.3, so it cannot share dpkit's environment), next to dpkit's own
Datafly (the same algorithm; the benchmark checks that both suppress the same rows at the same
levels). DP releases: dpkit MST synthetic data at eps = 1 and 3 (delta = 1e-9) and one curator
count query per target (``SELECT occupation, COUNT(*) ... WHERE <target's QIs> GROUP BY
occupation`` at eps = 1 per query). Targets: ``--targets`` members (train rows) and as many
non-members (test rows), the same for every release within a seed; ``--seeds`` repeats.

Independent measurement: anonymeter 1.1.0 (its own venv ``/work/main/benchmarks/.venvs/
anonymeter``: numpy < 1.27) on ori = 5,000 train rows, control = 5,000 test rows: singling out
(multivariate, 3 columns), linkability (10 neighbours; (age, sex, race) vs (education,
marital_status, native_country)), inference of the sensitive column from the QIs. For a
generalised release, ori and control are generalised to the release's levels first (so the
attacker compares like with like); for the raw table (``syn`` = the train split itself) and
the synthetic data they are used as they are. Results: ``benchmarks/results/linkage.json``;
figure: ``--plot``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
VENVS = Path("/work/main/benchmarks/.venvs")
ANJANA_PY = VENVS / "anjana" / "bin" / "python"
ANON_PY = VENVS / "anonymeter" / "bin" / "python"
RESULTS = ROOT / "results" / "linkage.json"
QIS = ["age", "education", "marital_status", "race", "sex", "native_country"]


def _anjana_run(inp: str, hier: str, out: str, kind: str, k: str, param: str, supp: str,
                sensitive: str) -> None:
    """Inside ANJANA's venv: one release, timed, written as CSV (+ .json with the seconds)."""
    import pandas as pd
    from anjana.anonymity import k_anonymity, l_diversity, t_closeness

    df = pd.read_csv(inp)[[*QIS, sensitive]]
    raw = json.loads(Path(hier).read_text())
    hs = {q: {int(j): pd.Series(v) for j, v in lv.items()} for q, lv in raw.items()}
    t0 = time.perf_counter()
    if kind == "k":
        rel = k_anonymity(df, [], QIS, int(k), float(supp), hs)
    elif kind == "l":
        rel = l_diversity(df, [], QIS, sensitive, int(k), int(param), float(supp), hs)
    else:
        rel = t_closeness(df, [], QIS, sensitive, int(k), float(param), float(supp), hs)
    seconds = time.perf_counter() - t0
    rel = rel.drop(columns=[c for c in rel.columns if c == "index"])
    rel.to_csv(out, index=False)
    Path(out + ".json").write_text(json.dumps({"seconds": seconds}))


def _anonymeter_run(folder: str, sensitive: str, n_attacks: str) -> None:
    """Inside anonymeter's venv: the three risks for ori/control/syn CSVs in ``folder``."""
    import pandas as pd
    from anonymeter.evaluators import (
        InferenceEvaluator,
        LinkabilityEvaluator,
        SinglingOutEvaluator,
    )

    d = Path(folder)
    ori, control, syn = (pd.read_csv(d / f"{n}.csv") for n in ("ori", "control", "syn"))
    n = int(n_attacks)
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    # max_attempts: on a k-anonymous release no 3-column predicate singles anyone out, and
    # anonymeter's default (10^7 random tries) then runs for hours; 10^5 keeps it to seconds
    ev: Any = SinglingOutEvaluator(ori=ori, syn=syn, control=control, n_attacks=n, n_cols=3,
                                   max_attempts=100_000, seed=0).evaluate(mode="multivariate")
    out["singling_out"] = _risk(ev)
    ev = LinkabilityEvaluator(ori=ori, syn=syn, control=control, n_attacks=n, n_neighbors=10,
                              aux_cols=(["age", "sex", "race"],
                                        ["education", "marital_status", "native_country"])
                              ).evaluate(n_jobs=1)
    out["linkability"] = _risk(ev)
    ev = InferenceEvaluator(ori=ori, syn=syn, control=control, aux_cols=QIS, secret=sensitive,
                            n_attacks=n).evaluate(n_jobs=1)
    out["inference"] = _risk(ev)
    out["seconds"] = time.perf_counter() - t0
    (d / "risks.json").write_text(json.dumps(out))


def _risk(ev: Any) -> dict[str, float]:
    r, res = ev.risk(), ev.results()
    return {"risk": float(r.value), "ci_low": float(r.ci[0]), "ci_high": float(r.ci[1]),
            "attack_rate": float(res.attack_rate.value),
            "control_rate": float(res.control_rate.value)}


def _anjana_releases(train: Any, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    import pandas as pd

    from dpkit.attacks.deidentify import ADULT_HIERARCHIES

    inp, hier = work / "train.csv", work / "hier.json"
    train.to_csv(inp, index=False)
    hier.write_text(json.dumps({q: {str(j): v for j, v in h.to_anjana().items()}
                                for q, h in ADULT_HIERARCHIES.items()}))
    jobs = ([("k", k, "", "k-anonymity", f"k={k}") for k in args.k]
            + [("l", 2, v, "l-diversity", f"k=2,l={v}") for v in args.l]
            + [("t", 2, v, "t-closeness", f"k=2,t={v}") for v in args.t])
    out = []
    for kind, k, param, name, label in jobs:
        path = work / f"anjana_{kind}_{k}_{param}.csv"
        subprocess.run([str(ANJANA_PY), __file__, "--anjana-run", str(inp), str(hier), str(path),
                        kind, str(k), str(param), str(args.supp_level), args.sensitive],
                       check=True, capture_output=True, text=True)
        seconds = json.loads(Path(str(path) + ".json").read_text())["seconds"]
        frame = pd.read_csv(path, dtype={q: str for q in QIS})
        out.append({"kind": name, "param": label, "frame": frame, "seconds": seconds,
                    "k": k, "l": param if kind == "l" else None,
                    "t": param if kind == "t" else None})
        print(f"ANJANA {name} {label}: {len(frame)} rows kept, {seconds:.1f} s", flush=True)
    return out


def _achieved(frame: Any, sensitive: str, overall: Any) -> dict[str, float]:
    """The k, distinct l and t (TVD) a release actually has."""
    if len(frame) == 0:
        return {"k": 0, "l": 0, "t": 1.0}
    g = frame.groupby(QIS)[sensitive]
    tvd = max(0.5 * cls.value_counts(normalize=True).sub(overall, fill_value=0).abs().sum()
              for _, cls in g)
    return {"k": int(g.size().min()), "l": int(g.nunique().min()), "t": float(tvd)}


def _compare(train: Any, rels: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """dpkit's Datafly on the same input: same rows kept and the same levels as ANJANA?"""
    from dpkit.attacks.deidentify import ADULT_HIERARCHIES, anonymize, infer_levels

    overall = train[args.sensitive].value_counts(normalize=True)
    for r in rels:
        kw: dict[str, Any] = {"k": r["k"]}
        if r["l"] is not None:
            kw["l"] = int(r["l"])
        if r["t"] is not None:
            kw["t"] = float(r["t"])
        t0 = time.perf_counter()
        mine = anonymize(train, QIS, args.sensitive, supp_level=args.supp_level, **kw)
        r["dpkit_seconds"] = time.perf_counter() - t0
        r["dpkit_kept"], r["anjana_kept"] = len(mine.frame), len(r["frame"])
        r["dpkit_levels"] = mine.levels
        r["anjana_levels"] = infer_levels(r["frame"], ADULT_HIERARCHIES, QIS) \
            if len(r["frame"]) else None
        r["anjana_achieved"] = _achieved(r["frame"], args.sensitive, overall)
        r["dpkit_achieved"] = _achieved(mine.frame, args.sensitive, overall)
        r["same"] = r["dpkit_levels"] == r["anjana_levels"] and \
            r["dpkit_kept"] == r["anjana_kept"]


def _anonymeter(train: Any, test: Any, rels: list[dict[str, Any]], args: argparse.Namespace,
                work: Path, out: dict[str, Any], save: Any) -> dict[str, Any]:
    from dpkit.attacks.deidentify import ADULT_HIERARCHIES, generalise, infer_levels
    from dpkit.attacks.linkage_run import adult_curator
    from dpkit.noise import seeded

    cols = [*QIS, args.sensitive]
    ori = train[cols].sample(5000, random_state=0).reset_index(drop=True)
    control = test[cols].sample(5000, random_state=1).reset_index(drop=True)
    cases: list[tuple[str, Any, Any, Any]] = [("raw train split (no protection)", train[cols],
                                               ori, control)]
    for r in rels:
        if r["kind"] == "k-anonymity" and r["param"] in ("k=2", "k=10") and len(r["frame"]):
            lv = infer_levels(r["frame"], ADULT_HIERARCHIES, QIS)
            cases.append((f"ANJANA {r['param']}", r["frame"][cols],
                          generalise(ori, lv, ADULT_HIERARCHIES).astype(str),
                          generalise(control, lv, ADULT_HIERARCHIES).astype(str)))
    cur = adult_curator(train, work / "anon.dpkit", epsilon=10.0, columns=cols,
                        source=seeded(7) if args.insecure_seed else None)
    for eps in args.epsilons:
        syn = cur.synthetic("adult", cols, epsilon=eps, delta=1e-9, method="mst").to_pandas()
        cases.append((f"dpkit MST eps={eps:g}", syn, ori, control))
    for label, syn, o, c in cases:
        d = work / f"anon_{len(out)}"
        d.mkdir()
        for name, df in (("ori", o), ("control", c), ("syn", syn)):
            # a generalised release is all labels: write every column as text on all three
            (df.astype(str) if label.startswith("ANJANA") else df).to_csv(
                d / f"{name}.csv", index=False)
        t0 = time.perf_counter()
        done = subprocess.run([str(ANON_PY), __file__, "--anonymeter-run", str(d),
                               args.sensitive, str(args.anon_attacks)], capture_output=True,
                              text=True, timeout=args.anon_timeout)
        if done.returncode:
            out[label] = {"error": done.stderr[-2000:]}
            print(f"anonymeter {label}: failed after {time.perf_counter() - t0:.0f} s")
            continue
        out[label] = json.loads((d / "risks.json").read_text())
        save()
        print(f"anonymeter {label}: " + ", ".join(
            f"{m} {v['risk']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]"
            for m, v in out[label].items() if m != "seconds"), flush=True)
    return out


def _mean_rows(per_seed: list[list[Any]]) -> tuple[list[Any], list[dict[str, Any]]]:
    from dpkit.attacks.linkage_run import METRICS, LinkageRow

    rows, table = [], []
    for i, first in enumerate(per_seed[0]):
        runs = [rs[i] for rs in per_seed]
        mem = {m: statistics.fmean(r.members[m] for r in runs) for m in METRICS}
        non = {m: statistics.fmean(r.non_members[m] for r in runs) for m in METRICS}
        sd = {f"{g}_{m}_sd": statistics.stdev([getattr(r, g)[m] for r in runs])
              if len(runs) > 1 else 0.0 for g in ("members", "non_members") for m in METRICS}
        rows.append(LinkageRow(first.release, first.param, mem, non, first.suppressed,
                               first.targets))
        table.append({"release": first.release, "param": first.param,
                      "suppressed": first.suppressed, "targets": first.targets,
                      "members": mem, "non_members": non, **sd})
    return rows, table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--targets", type=int, default=1000)
    p.add_argument("--curator-targets", type=int, default=100)
    p.add_argument("--k", type=int, nargs="*", default=[2, 5, 10, 25, 50])
    p.add_argument("--l", type=int, nargs="*", default=[2, 3])
    p.add_argument("--t", type=float, nargs="*", default=[0.3, 0.2])
    p.add_argument("--epsilons", type=float, nargs="*", default=[1.0, 3.0])
    p.add_argument("--supp-level", type=float, default=10.0)
    p.add_argument("--sensitive", default="occupation")
    p.add_argument("--anon-attacks", type=int, default=500)
    p.add_argument("--anon-timeout", type=float, default=900.0)
    p.add_argument("--no-anjana", action="store_true")
    p.add_argument("--no-anonymeter", action="store_true")
    p.add_argument("--insecure-seed", action="store_true",
                   help="seeded (insecure) targets and noise, for a reproducible run")
    p.add_argument("--plot", type=Path, default=None)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args()
    _bench(args)


def _bench(args: argparse.Namespace) -> None:
    from dpkit.attacks.linkage import adult_frames
    from dpkit.attacks.linkage_run import run_linkage
    from dpkit.noise import seeded

    train, test = adult_frames()
    out: dict[str, Any] = {"setup": {k: (str(v) if isinstance(v, Path) else v)
                                     for k, v in vars(args).items()},
                           "machine": "2 cores shared with other jobs"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        use_anjana = not args.no_anjana and ANJANA_PY.exists()
        rels = _anjana_releases(train, args, work) if use_anjana else []
        if rels:
            _compare(train, rels, args)
            out["anjana"] = [{k: v for k, v in r.items() if k != "frame"} for r in rels]
        extern = [(r["kind"], r["param"], r["frame"]) for r in rels if len(r["frame"])]
        per_seed = []
        for s in range(args.seeds):
            t0 = time.perf_counter()
            per_seed.append(run_linkage(
                ks=() if rels else args.k, ls=() if rels else args.l,
                ts=() if rels else args.t, epsilons=args.epsilons, n_targets=args.targets,
                curator_targets=args.curator_targets, supp_level=args.supp_level,
                sensitive=args.sensitive, releases=extern, data=(train, test),
                source=seeded(1000 + s) if args.insecure_seed else None, workdir=work))
            print(f"seed {s}: attacks in {time.perf_counter() - t0:.1f} s", flush=True)
        rows, out["attacks"] = _mean_rows(per_seed)
        out["tool"] = "ANJANA 1.2.3" if rels else "dpkit datafly"
        _report(out, rows, args)
        if not args.no_anonymeter and ANON_PY.exists():
            out["anonymeter"] = {}
            _anonymeter(train, test, rels, args, work, out["anonymeter"],
                        lambda: _save(out, args))


def _save(out: dict[str, Any], args: argparse.Namespace) -> None:
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=1, default=str))


def _report(out: dict[str, Any], rows: list[Any], args: argparse.Namespace) -> None:
    for r in out["attacks"]:
        print(f"{r['release']:>22} {r['param']:<14} " + "  ".join(
            f"{m} {r['members'][m]:.3f}±{r[f'members_{m}_sd']:.3f}/"
            f"{r['non_members'][m]:.3f}" for m in ("inference", "homogeneity", "background")))
    _save(out, args)
    print(f"wrote {args.results}")
    if args.plot is not None:
        from dpkit.attacks.linkage_plot import plot_linkage

        print(f"wrote {plot_linkage(rows, args.plot)}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--anjana-run":
        _anjana_run(*sys.argv[2:10])
    elif len(sys.argv) > 1 and sys.argv[1] == "--anonymeter-run":
        _anonymeter_run(*sys.argv[2:5])
    else:
        main()
