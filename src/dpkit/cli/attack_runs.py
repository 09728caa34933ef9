"""What ``dpkit attack …`` runs: plain functions returning a summary table (and PNG paths).

Each function takes keyword arguments with defaults that reproduce ``docs/attacks.md``, draws
all randomness from ``dpkit.noise`` (``seed=None``: the secure source; an int: a reproducible,
INSECURE seeded source), and returns an :class:`AttackSummary` the CLI prints with rich
(:mod:`dpkit.cli.attack`; ``benchmarks/attacks_bench.py`` calls these functions too).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.attacks import differencing as dif
from dpkit.attacks import membership as mia
from dpkit.attacks import oracles as orc
from dpkit.attacks import reconstruction as rec
from dpkit.noise import Source

__all__ = [
    "AttackSummary",
    "attack_audit",
    "attack_average",
    "attack_difference",
    "attack_membership",
    "attack_one_run",
    "attack_reconstruct",
    "attack_side_channels",
]


@dataclass
class AttackSummary:
    """A titled table of results, the files written, and notes for the reader."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]

    def table(self) -> Any:
        """A ``rich.table.Table`` of the rows."""
        from rich.table import Table

        t = Table(title=self.title)
        for c in self.columns:
            t.add_column(c)
        for r in self.rows:
            t.add_row(*[_fmt(v) for v in r])
        return t

    def fit_table(self) -> Any:
        """The rows as a table that fits the terminal (what the commands print): split into
        parts that repeat the leading text columns, never cutting a number (a plain rich table
        in 80 columns printed ``0.…`` for every figure of ``dpkit attack membership-model``)."""
        from dpkit.engine.display import Col, FitTable

        cols = []
        leading = True  # the leading text columns name a row: every part repeats them
        for j, name in enumerate(self.columns):
            cells = [_fmt(r[j]) for r in self.rows]
            text = any(not isinstance(r[j], int | float) for r in self.rows)
            leading = leading and (text or j == 0)
            cols.append(Col(name, cells, justify="left" if text else "right", key=leading,
                            flex=text and not leading))
        return FitTable(cols, title=self.title)

    def __rich__(self) -> Any:
        return self.fit_table()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _source(seed: int | None) -> Source | None:
    return None if seed is None else noise.seeded(int(seed))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# --------------------------------------------------------------------------- reconstruct
def attack_reconstruct(
    *,
    n: int = 256,
    queries: int = 1024,
    noise_levels: Sequence[float] = (0, 4, 16, 64, 128),
    noise_kind: str = "uniform",
    subsets: str = "random",
    attack: str = "lp",
    known_bound: bool = False,
    curator_epsilon: float | None = 1.0,
    seed: int | None = None,
    plot_dir: str | Path | None = None,
) -> AttackSummary:
    """Dinur-Nissim reconstruction of ``n`` secret bits from ``queries`` subset-sum answers.

    One row per noise level of a naive system with fresh ``noise_kind`` noise (``uniform``
    ``±E``, ``laplace`` or ``gaussian`` of scale ``E``), plus, with ``curator_epsilon``, the
    dpkit curator holding that total budget: the attacker spends it evenly over ``queries``
    questions, then asks once more to show the refusal (about 0.03-0.1 s per curator query).
    ``attack``: ``"lp"`` (L1 decoding, or Dinur-Nissim's program with ``known_bound``),
    ``"lsq"`` (least squares; with uniform noise a note gives its analytic prediction),
    ``"lsq-box"`` (least squares in ``[0, 1]^n``) or ``"exhaustive"`` (``n <= 20``).
    ``plot_dir``: write ``attack_recovery.png`` there.
    """
    if known_bound and attack != "lp":
        raise ValueError(f"known_bound is for attack='lp' only (got attack={attack!r})")
    src = _source(seed)
    rows: list[list[Any]] = []
    curve = []
    predicted: list[str] = []
    for level in noise_levels:
        people = rec.make_population(n, source=src)
        oracle = orc.NoisyOracle(people, scale=float(level), noise=noise_kind, source=src)
        bound = float(math.floor(level)) if known_bound and noise_kind == "uniform" else None
        res = rec.reconstruct(oracle, people.qid, queries=queries, subsets=subsets,
                              attack=attack, noise_bound=bound, source=src)
        rate = rec.recovery_rate(res.guess, people.secret)
        curve.append((float(level), rate))
        rows.append([f"{noise_kind} noise, scale {level:g}", res.answered, 0, _pct(rate)])
        if attack == "lsq" and noise_kind == "uniform" and res.matrix is not None \
                and res.matrix.shape[0] >= n:
            var = rec.uniform_noise_variance(math.floor(level))
            predicted.append(f"{level:g}: {_pct(rec.lsq_predicted_rate(res.matrix, var))}")
    files = []
    notes = [f"n = {n} people, {queries} {subsets} subsets, {attack} attack"
             + (" told the noise bound" if known_bound else "")]
    if predicted:
        notes.append("least squares predicted (Phi(0.5 / (sigma sqrt(diag (A^T A)^-1)))): "
                     + ", ".join(predicted))
    if curator_epsilon is not None:
        people = rec.make_population(n, source=src)
        with tempfile.TemporaryDirectory(prefix="dpkit-attack-") as tmp:
            cur = orc.curator_for(people, Path(tmp) / "target.dpkit",
                                  epsilon=float(curator_epsilon), source=src)
            try:
                oracle_c = orc.CuratorOracle(cur, epsilon=float(curator_epsilon) / queries)
                res = rec.reconstruct(oracle_c, people.qid, queries=queries, subsets=subsets,
                                      attack=attack, source=src)
                extra = orc.CuratorOracle(cur, epsilon=float(curator_epsilon) / queries)
                extra.ask(rec.random_subsets(people.qid, 1, source=src))
            finally:
                cur.close()
        rate = rec.recovery_rate(res.guess, people.secret)
        rows.append([f"dpkit curator, total ε = {curator_epsilon:g}", res.answered,
                     res.refused + extra.refused, _pct(rate)])
        notes.append(f"the curator answered {res.answered} queries at ε = "
                     f"{curator_epsilon / queries:.3g} each and refused "
                     f"{extra.refused} more beyond its budget")
    if plot_dir is not None:
        from dpkit.attacks.plots import plot_recovery

        files.append(plot_recovery({f"{attack} attack, {noise_kind} noise": curve},
                                   Path(plot_dir) / "attack_recovery.png", n=n,
                                   queries=queries))
    return AttackSummary(
        title="Reconstruction attack (Dinur-Nissim)",
        columns=["system", "answered", "refused", "recovered"],
        rows=rows, files=files, notes=notes,
    )


# --------------------------------------------------------------------------- difference
def attack_difference(
    *,
    n: int = 200,
    targets: int = 20,
    threshold: int = 5,
    scale: float = 2.0,
    repeats: int = 500,
    curator_epsilon: float | None = 1.0,
    seed: int | None = None,
) -> AttackSummary:
    """Differencing ("everyone" minus "everyone but the target") against each kind of system.

    Rows: exact answers; low-count suppression (``threshold``); fresh Laplace noise of
    ``scale`` (one pair, then ``repeats`` averaged pairs); sticky noise (repeats of one text,
    then ``repeats`` rewrites); the dpkit curator (total ``curator_epsilon`` spread over the
    ``2 targets`` questions).
    """
    src = _source(seed)
    people = rec.make_population(n, source=src)
    tg = list(range(min(int(targets), n)))
    q, s = people.qid, people.secret
    cases: list[tuple[str, str, orc.Oracle, int, bool]] = [
        ("exact answers", "one pair", orc.ExactOracle(people), 1, False),
        (f"suppress counts < {threshold}", "one pair",
         orc.SuppressionOracle(people, threshold=threshold), 1, False),
        (f"fresh Laplace noise (scale {scale:g})", "one pair",
         orc.NoisyOracle(people, scale=scale, noise="laplace", source=src), 1, False),
        (f"fresh Laplace noise (scale {scale:g})", f"{repeats} repeats averaged",
         orc.NoisyOracle(people, scale=scale, noise="laplace", source=src), repeats, False),
    ]
    sticky = orc.StickyNoiseOracle(people, scale=scale, noise="laplace", source=src)
    cases += [
        (f"sticky noise (scale {scale:g})", f"{repeats} repeats averaged", sticky, repeats,
         False),
        (f"sticky noise (scale {scale:g})", f"{repeats} rewrites averaged", sticky, repeats,
         True),
        (f"suppression + sticky noise (scale {scale:g})", f"{repeats} rewrites averaged",
         orc.SuppressionOracle(people, threshold=threshold, scale=scale, source=src), repeats,
         True),
    ]
    rows: list[list[Any]] = []
    for system, how, oracle, k, rw in cases:
        before = oracle.asked
        rate = dif.differencing_success(oracle, q, s, tg, repeats=k, rewrite=rw)
        rows.append([system, how, oracle.asked - before, _pct(rate)])
    if curator_epsilon is not None:
        with tempfile.TemporaryDirectory(prefix="dpkit-attack-") as tmp:
            cur = orc.curator_for(people, Path(tmp) / "target.dpkit",
                                  epsilon=float(curator_epsilon), source=src)
            try:
                oracle_c = orc.CuratorOracle(cur, epsilon=float(curator_epsilon) / (2 * len(tg)))
                rate = dif.differencing_success(oracle_c, q, s, tg)
            finally:
                cur.close()
        rows.append([f"dpkit curator, total ε = {curator_epsilon:g}", "one pair each",
                     oracle_c.asked, _pct(rate)])
    return AttackSummary(
        title="Differencing attack: one person's secret from two large counts",
        columns=["system", "attack", "queries", "targets recovered"],
        rows=rows,
        notes=[f"{len(tg)} targets among n = {n}; guessing gives ~50%"],
    )


# --------------------------------------------------------------------------- average
def attack_average(
    *,
    n: int = 200,
    scale: float = 8.0,
    repeats: Sequence[int] = (1, 10, 100, 1000),
    questions: int = 10,
    curator_epsilon: float | None = 1.0,
    seed: int | None = None,
) -> AttackSummary:
    """Averaging repeated answers: mean absolute error of the averaged answer vs repeats.

    Columns: fresh noise (repeats of one text), sticky noise (repeats of one text), sticky
    noise (rewritten texts), and the dpkit curator (a budget of ``curator_epsilon`` per
    question, a tenth of it per answer: after ten answers per question it refuses, so the error
    stops falling). Each error is the mean over ``questions`` random subset queries.
    """
    src = _source(seed)
    people = rec.make_population(n, source=src)
    qs = rec.random_subsets(people.qid, int(questions), source=src)
    truth = orc.ExactOracle(people).ask(qs)
    fresh = orc.NoisyOracle(people, scale=scale, noise="laplace", source=src)
    sticky = orc.StickyNoiseOracle(people, scale=scale, noise="laplace", source=src)
    top = int(max(repeats))
    series: dict[str, list[np.ndarray]] = {"fresh": [], "sticky": [], "rewrites": []}
    for qr in qs:
        series["fresh"].append(fresh.ask([qr] * top))
        series["sticky"].append(sticky.ask([qr] * top))
        series["rewrites"].append(sticky.ask(dif.rewrites(qr, top)))
    cur_answers: list[np.ndarray] | None = None
    if curator_epsilon is not None:
        # One project whose budget gives each question `curator_epsilon`; the attacker asks
        # round after round of all questions at a tenth of that per answer until refused.
        with tempfile.TemporaryDirectory(prefix="dpkit-attack-") as tmp:
            cur = orc.curator_for(people, Path(tmp) / "target.dpkit",
                                  epsilon=float(curator_epsilon) * len(qs), source=src)
            try:
                oracle_c = orc.CuratorOracle(cur, epsilon=float(curator_epsilon) / 10.0)
                a = oracle_c.ask(list(qs) * top).reshape(top, len(qs))
            finally:
                cur.close()
        cur_answers = [col[np.isfinite(col)] for col in a.T]

    def err(answers: list[np.ndarray], r: int) -> float:
        e = [abs(float(np.mean(a[:r])) - t) if a[:r].size else math.nan
             for a, t in zip(answers, truth, strict=True)]
        return float(np.nanmean(e)) if not all(math.isnan(x) for x in e) else math.nan

    rows = []
    for r in repeats:
        row: list[Any] = [r, err(series["fresh"], r), err(series["sticky"], r),
                          err(series["rewrites"], r)]
        if cur_answers is not None:
            row.append(err(cur_answers, r) if any(a.size for a in cur_answers) else math.nan)
        rows.append(row)
    cols = ["repeats", "fresh noise", "sticky noise", "sticky, rewritten"]
    if cur_answers is not None:
        cols.append("dpkit curator")
    return AttackSummary(
        title=f"Averaging attack: mean |error| of the averaged answer (noise scale {scale:g})",
        columns=cols, rows=rows,
        notes=["fresh noise falls as 1/sqrt(repeats); sticky noise only with rewritten texts; "
               "the curator stops answering when its budget is spent"],
    )


# --------------------------------------------------------------------------- membership
def _mia_row(label: str, roc: mia.ROC, eps_claim: float | None, delta: float = 0.0) -> list[Any]:
    b = (mia.dp_tpr_bound([1e-3, 1e-2], epsilon=eps_claim, delta=delta)
         if eps_claim is not None else [1.0, 1.0])
    return [label, roc.auc, roc.tpr_at(1e-3), roc.tpr_at(1e-2), float(b[0]), float(b[1])]


def _mia_on_count(epsilon: float, trials: int, src: Source | None,
                  plot_dir: str | Path | None) -> tuple[list[list[Any]], list[Path]]:
    """Membership inference on a released count: exact vs ε-DP geometric (rows, figure)."""
    from dpkit import mechanisms

    base = 100

    def exact(member: bool, size: int) -> np.ndarray:
        return np.full(size, base + int(member), dtype=np.float64)

    def private(member: bool, size: int) -> np.ndarray:
        # `size` independent runs of the scalar count release: geometric noise is drawn
        # per coordinate with scale sensitivity / epsilon (its documented calibration).
        return np.asarray(mechanisms.geometric(np.full(size, base + int(member)),
                                               sensitivity=1, epsilon=epsilon,
                                               source=src).value, dtype=np.float64)

    r_exact = mia.aggregate_membership(exact, trials=trials, member_mean=base + 1,
                                       nonmember_mean=base, audit=False)
    r_dp = mia.aggregate_membership(private, trials=trials, member_mean=base + 1,
                                    nonmember_mean=base)
    rows = [_mia_row("count, exact", r_exact.roc, None),
            _mia_row(f"count, ε = {epsilon:g} geometric", r_dp.roc, epsilon)]
    files: list[Path] = []
    if plot_dir is not None:
        from dpkit.attacks.plots import plot_roc

        files.append(plot_roc({"exact count": r_exact.roc,
                               f"ε = {epsilon:g} noisy count": r_dp.roc},
                              Path(plot_dir) / "attack_roc_aggregate.png", epsilon=epsilon,
                              title="Membership inference on a released count"))
    return rows, files


def _mia_on_model(epsilon: float, population: int, dimension: int, shadow_models: int,
                  src: Source | None,
                  plot_dir: str | Path | None) -> tuple[list[list[Any]], list[Path]]:
    """LiRA and threshold attacks on logistic regression, plain vs (ε, 1e-5)-DP (rows, figure)."""
    X, y = mia.make_classification(population, dimension, source=src)
    plain = mia.lira(X, y, shadow_models=shadow_models, source=src,
                     fit=lambda a, b: mia.fit_logistic(a, b, l2=1e-2, intercept=False))
    private_fit = mia.lira(
        X, y, shadow_models=shadow_models, source=src,
        fit=lambda a, b: mia.fit_logistic(a, b, l2=1e-2, intercept=False, epsilon=epsilon,
                                          delta=1e-5, source=src))
    rows = [_mia_row("model: LiRA", plain.lira, None),
            _mia_row("model: threshold", plain.threshold, None),
            _mia_row(f"DP model (ε = {epsilon:g}): LiRA", private_fit.lira, epsilon, 1e-5)]
    files: list[Path] = []
    if plot_dir is not None:
        from dpkit.attacks.plots import plot_roc

        files.append(plot_roc({"LiRA, plain model": plain.lira,
                               "threshold, plain model": plain.threshold,
                               f"LiRA, ε = {epsilon:g} DP model": private_fit.lira},
                              Path(plot_dir) / "attack_roc_model.png", epsilon=epsilon,
                              delta=1e-5,
                              title=f"Membership inference on logistic regression "
                                    f"({shadow_models} shadow models)"))
    return rows, files


def attack_membership(
    *,
    epsilon: float = 1.0,
    trials: int = 100_000,
    population: int = 200,
    dimension: int = 80,
    shadow_models: int = 64,
    kind: str = "both",
    seed: int | None = None,
    plot_dir: str | Path | None = None,
) -> AttackSummary:
    """Membership inference: on a released count (exact vs ε-DP geometric) and on a trained
    logistic regression (LiRA and threshold, non-private vs (ε, 1e-5)-DP by output
    perturbation). Reports AUC, TPR at FPR 1e-3 / 1e-2 and the DP bound there; writes
    ``attack_roc_aggregate.png`` and ``attack_roc_model.png`` into ``plot_dir``."""
    if kind not in ("aggregate", "model", "both"):
        raise ValueError(f"kind must be 'aggregate', 'model' or 'both' (got {kind!r})")
    src = _source(seed)
    rows: list[list[Any]] = []
    files: list[Path] = []
    bound = mia.dp_tpr_bound([1e-3, 1e-2], epsilon=epsilon)
    if kind in ("aggregate", "both"):
        more_rows, more_files = _mia_on_count(epsilon, trials, src, plot_dir)
        rows += more_rows
        files += more_files
    if kind in ("model", "both"):
        more_rows, more_files = _mia_on_model(epsilon, population, dimension, shadow_models,
                                              src, plot_dir)
        rows += more_rows
        files += more_files
    return AttackSummary(
        title="Membership inference",
        columns=["target", "AUC", "TPR@1e-3", "TPR@1e-2", "DP bound@1e-3", "DP bound@1e-2"],
        rows=rows, files=files,
        notes=[f"DP bound: TPR <= e^ε FPR + δ; at ε = {epsilon:g}: {bound[0]:.4f} at FPR 1e-3, "
               f"{bound[1]:.4f} at 1e-2"],
    )


# --------------------------------------------------------------------------- audits
def attack_audit(
    *,
    trials: int = 5000,
    names: Sequence[str] | None = None,
    confidence: float = 0.95,
    seed: int | None = None,
) -> AttackSummary:
    """The per-mechanism audit report (:func:`dpkit.attacks.report.audit_mechanisms`)."""
    from dpkit.attacks.report import audit_mechanisms

    rows = audit_mechanisms(trials=trials, names=names, confidence=confidence,
                            source=_source(seed))
    return AttackSummary(
        title=f"Empirical ε audit ({trials} runs per side, {100 * confidence:g}% confidence)",
        columns=["mechanism", "claimed ε", "δ", "certified ε ≥", "estimate", "verdict"],
        rows=[[r.name, r.epsilon, r.delta, r.epsilon_lower, r.epsilon_estimate,
               "ok" if r.passed else "VIOLATION"] for r in rows],
    )


def attack_one_run(
    *,
    canaries: int,
    guesses: int,
    correct: int,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> AttackSummary:
    """The Steinke-Nasr-Jagielski one-run lower bound for given counts (a calculator)."""
    from dpkit.attacks.one_run import one_run_epsilon

    eps = one_run_epsilon(canaries=canaries, guesses=guesses, correct=correct, delta=delta,
                          confidence=confidence)
    return AttackSummary(
        title="One-run audit (Steinke, Nasr, Jagielski 2023)",
        columns=["canaries", "guesses", "correct", "δ", "confidence", "ε ≥"],
        rows=[[canaries, guesses, correct, delta, confidence, eps]],
    )


def attack_side_channels(*, project: Path, table: str | None, queries: int, seed: int,
                         units: int, neighbours: str | None, accountants: str,
                         max_findings: int | None, via: str = "curator",
                         families: str | None = None,
                         progress: Callable[[int, int], None] | None = None) -> AttackSummary:
    """The side-channel fuzzer (:mod:`dpkit.attacks.side_channels`) on the owner's project;
    ``via="service"``: through the HTTP service (:func:`dpkit.server.fuzz.fuzz_service`);
    ``families``: comma-separated query families (``fit`` alone: the model training);
    ``progress(done, total)`` after each comparison."""
    from dpkit.attacks import side_channels as sc
    from dpkit.attacks.side_channels.grammar import DRAWN_FAMILIES

    run: Callable[..., sc.Report] = sc.fuzz
    if via == "service":
        import importlib.util

        # only dpkit.server imports FastAPI (pyproject.toml's contracts): look, do not import
        missing = [m for m in ("fastapi", "httpx") if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(f"--via service needs the service's extra and FastAPI's test "
                              f"client ({', '.join(missing)} missing): pip install "
                              f"'dpkit[server]' httpx")
        from dpkit.server.fuzz import fuzz_service as run

    kinds = tuple(k.strip() for k in (neighbours or ",".join(sc.NEIGHBOURS)).split(",")
                  if k.strip())
    accts = tuple(a.strip() for a in accountants.split(",") if a.strip())
    fams = tuple(dict.fromkeys(f.strip() for f in (families or "").split(",") if f.strip()))
    known = set(DRAWN_FAMILIES)
    unknown = sorted(set(fams) - known)
    if unknown:
        raise ValueError(f"--families takes {', '.join(sorted(known))} "
                         f"(got {', '.join(unknown)})")
    rep = run(project, table=table, queries=queries, seed=seed, units=units,
              neighbours=kinds, accountants=accts, max_findings=max_findings,
              progress=progress, **({"families": fams} if fams else {}))
    rows: list[list[Any]] = [["D/D' comparisons", rep.comparisons],
                             ["seconds", round(rep.seconds, 1)]]
    rows += [[f"outcome on D: {k}", v] for k, v in sorted(rep.outcomes.items())]
    # which kinds of request were compared: a researcher asks whether their model's training
    # (fit) was among them, and the summary did not say
    rows += [[f"queries: {k}", v] for k, v in sorted(rep.families.items())]
    causes = rep.by_cause()
    rows += [[f"findings: {c}", len(fs)] for c, fs in sorted(causes.items())]
    rows.append(["findings (total)", len(rep.findings)])
    notes = [f"skipped {s}" for s in rep.skipped]
    pairs = len(kinds) * len(accts) - len(rep.skipped)
    if rep.comparisons < queries and not max_findings and pairs > 0:
        # fuzz runs the same queries on every (neighbour, accountant) pair: a whole number each
        notes.append(f"{rep.comparisons} of the {queries} comparisons asked: "
                     f"{queries // pairs} queries on each of the {pairs} (neighbour kind, "
                     f"accountant) pairs")
    for fs in causes.values():
        notes.append(fs[0].reproducer())
    if rep.outcomes.get("refusal"):
        notes.append("refusals are asked on purpose (undeclared columns, bad options, type "
                     "errors): each must be the same on D and D', and spend nothing")
    if not rep.findings:
        notes.append("no side channel found: only noisy values differed between D and D'")
    where = " through the service" if via == "service" else ""
    return AttackSummary(f"side channels{where} (seed {seed})", ["what", "count"], rows,
                         notes=notes)
