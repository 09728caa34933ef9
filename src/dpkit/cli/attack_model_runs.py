"""What ``dpkit attack inversion`` and ``dpkit attack membership-model`` run: the experiments
of :mod:`dpkit.attacks.model_experiments` as summary tables (and PNGs), like
:mod:`dpkit.cli.attack_runs` for the attacks on aggregates."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dpkit.cli.attack_runs import AttackSummary

__all__ = ["attack_inversion", "attack_membership_model"]


def _eps(e: float) -> str:
    return "∞" if math.isinf(e) else f"{e:g}"


def attack_inversion(
    *,
    epsilons: Sequence[float] = (1.0, 3.0, 8.0),
    methods: Sequence[str] = ("white-box", "black-box"),
    train_rows: int = 4000,
    steps: int = 300,
    samples: int = 20,
    tv: float = 0.02,
    seed: int | None = None,
    plot_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> AttackSummary:
    """Model inversion of every MNIST digit, non-private MLP vs DP-SGD at ``epsilons``; writes
    ``attack_inversion_<train_rows>.png`` (class means, then each model's reconstructions)
    into ``plot_dir``."""
    from dpkit.attacks.model_experiments import inversion_study

    if plot_dir is not None:  # fail before training when the extra is missing
        from dpkit.attacks.model_plots import plot_inversion_grid
    study = inversion_study(epsilons=epsilons, methods=methods, train_rows=train_rows,
                            white_steps=steps, black_steps=steps, samples=samples, tv=tv,
                            seed=seed, log=log)
    rows = [[r["model"], r["method"], r["test_accuracy"], r["confidence"], r["ssim_mean"],
             r["corr_mean"], r["nearest_corr"], r["holdout_corr"], r["nearest_distance"],
             f"{round(10 * r['mean_match'])}/10"] for r in study.rows]
    files: list[Path] = []
    if plot_dir is not None:
        assert study.class_means is not None
        grid: dict[str, Any] = {"training class means": study.class_means}
        grid.update(study.images)
        first = next(iter(study.nearest))
        grid[f"nearest training row to\n{first}"] = study.nearest[first]
        path = Path(plot_dir) / f"attack_inversion_{train_rows}.png"
        files.append(plot_inversion_grid(grid, path, title="Model inversion on MNIST-5k"))
    return AttackSummary(
        title=f"Model inversion (MNIST-5k, {train_rows} training rows, one reconstruction per "
              "digit, means over digits)",
        columns=["model", "attack", "test acc", "p(class)", "SSIM to mean", "corr to mean",
                 "max corr to a training row", "max corr to a held-out row", "L2 to nearest row",
                 "own mean closest"],
        rows=rows, files=files,
        notes=["SSIM / correlation with the mean of the class's training rows: what the model "
               "reveals about the class (population statistics, not a privacy breach by "
               "itself); nearest training row: how close it comes to one person's example",
               "the class means themselves have correlation 1 with the mean and ~0.89 with "
               "their nearest training row"],
    )


def attack_membership_model(
    *,
    datasets: Sequence[str] = ("mnist", "adult"),
    epsilons: Sequence[float] = (1.0, 3.0, 8.0),
    population: int | None = None,
    shadow_models: int | None = None,
    seed: int | None = None,
    plot_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> AttackSummary:
    """LiRA (online / offline / threshold) on MNIST-5k (MLP) and Adult (logistic regression),
    non-private vs dpkit's private estimators at ``epsilons``; beside each, the DP bound at the
    same FPR and the one-run audit's lower bound on ε for the first target model. Writes
    ``attack_lira.png`` into ``plot_dir``."""
    from dpkit.attacks.model_experiments import lira_study

    if plot_dir is not None:
        from dpkit.attacks.model_plots import plot_lira
    panels: dict[str, Any] = {}
    rows: list[list[Any]] = []
    for ds in datasets:
        reports = lira_study(ds, epsilons=epsilons, population=population,
                             shadow_models=shadow_models, seed=seed, log=log)
        panels["MNIST-5k MLP" if ds == "mnist" else "Adult logistic regression"] = reports
        for rep in reports:
            s = rep.summary()
            rows.append([ds, rep.run.label, s["test_accuracy"], s["online_auc"],
                         s["online_tpr@0.001"], s["online_tpr@0.01"], s["offline_tpr@0.01"],
                         s["threshold_tpr@0.01"], s["dp_bound@0.001"], s["dp_bound@0.01"],
                         s["one_run_epsilon_lower"], _eps(s["epsilon"])])
    files = [plot_lira(panels, Path(plot_dir) / "attack_lira.png")] if plot_dir else []
    K, N = next(iter(panels.values()))[0].run.membership.shape
    return AttackSummary(
        title="Membership inference on models (LiRA, leave-one-model-out)",
        columns=["data", "model", "test acc", "AUC", "TPR@0.1%", "TPR@1%", "offline TPR@1%",
                 "threshold TPR@1%", "DP bound@0.1%", "DP bound@1%", "one-run ε ≥", "model ε"],
        rows=rows, files=files,
        notes=["TPR/AUC: online LiRA pooled over every (target model, example) pair; DP bound: "
               "min(e^ε FPR + δ, 1 - e^-ε (1 - δ - FPR)), 1 for the non-private model",
               "one-run ε ≥: Steinke-Nasr-Jagielski lower bound (95%) from the first target "
               "model's training run alone (its examples are the canaries)",
               f"first data set: {K} models on random halves of {N} rows"],
    )
