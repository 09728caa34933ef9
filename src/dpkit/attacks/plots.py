"""Pictures of the attacks (matplotlib, the optional extra ``dpkit[plots]``).

Every function writes one PNG and returns its path. matplotlib is imported only when a plot is
drawn, through its object-oriented API (``matplotlib.figure.Figure``), so no global backend or
pyplot state is touched and nothing needs a display.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.attacks.membership import ROC, dp_tpr_bound

__all__ = ["new_figure", "plot_one_run", "plot_recovery", "plot_roc", "roc_axes", "save_figure"]


def new_figure(width: float = 6.0, height: float = 4.2) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plots need matplotlib: pip install 'dpkit[plots]' (or pip install matplotlib)"
        ) from exc
    return Figure(figsize=(width, height), dpi=110)


def save_figure(fig: Any, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p, format="png")
    return p


def roc_axes(ax: Any, lo: float) -> None:
    """Log-log ROC axes from ``lo`` (where an attack's low-FPR region shows) to 1."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, 1)
    ax.set_ylim(lo, 1.05)
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")


def plot_recovery(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: str | Path,
    *,
    n: int,
    queries: int,
    points: Mapping[str, tuple[float, float]] | None = None,
    predictions: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    title: str | None = None,
) -> Path:
    """Recovery rate against the noise level, one line per attack/oracle.

    ``curves``: ``{label: [(noise level, recovery rate), …]}``; ``points``: single results
    drawn as stars, ``{label: (noise scale, rate)}`` (e.g. the curator); ``predictions``:
    analytic curves drawn as thin dashed lines without markers. Marks ``sqrt(n)`` (where
    Dinur-Nissim's guarantee ends), 60% and the 50% of guessing.
    """
    fig = new_figure(6.4, 6.0)
    ax = fig.add_subplot(1, 1, 1)
    for label, pts in curves.items():
        xs = [max(x, 0.5) for x, _ in pts]  # log axis: draw exact answers at 1/2
        ax.plot(xs, [100 * y for _, y in pts], marker="o", label=label)
    for label, pts in (predictions or {}).items():
        ax.plot([max(x, 0.5) for x, _ in pts], [100 * y for _, y in pts], color="black",
                linestyle="--", linewidth=1, label=label)
    for label, (x, y) in (points or {}).items():
        ax.plot([max(x, 0.5)], [100 * y], marker="*", markersize=14, linestyle="none",
                label=label)
    ax.axhline(60, color="grey", linestyle="-.", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.axvline(math.sqrt(n), color="grey", linestyle="--", linewidth=1)
    ax.text(math.sqrt(n), 98, r" $\sqrt{n}$", color="grey", va="top")
    ax.axvline(4 * math.sqrt(n), color="grey", linestyle="--", linewidth=0.6)
    ax.text(4 * math.sqrt(n), 98, r" $4\sqrt{n}$", color="grey", va="top")
    ax.axhline(50, color="grey", linestyle=":", linewidth=1)
    ax.set_ylim(40, 102)
    ax.set_xlabel("noise bound / scale per answer (0 drawn at 1/2)")
    ax.set_ylabel("secrets recovered (%)")
    ax.set_title(title or f"Reconstruction, n = {n} people, {queries} subset-sum queries")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8, ncol=1)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_roc(
    rocs: Mapping[str, ROC],
    path: str | Path,
    *,
    epsilon: float | None = None,
    delta: float = 0.0,
    title: str | None = None,
) -> Path:
    """ROC curves on log-log axes (the low-FPR region is what matters), with the (ε, δ)-DP
    bound ``TPR <= e^ε FPR + δ`` when ``epsilon`` is given, and the diagonal."""
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    lo = 1e-4
    grid = np.logspace(math.log10(lo), 0, 200)
    ax.plot(grid, grid, color="grey", linestyle=":", linewidth=1, label="random guess")
    if epsilon is not None:
        ax.plot(grid, np.maximum(dp_tpr_bound(grid, epsilon=epsilon, delta=delta), lo),
                color="black", linestyle="--", linewidth=1.2,
                label=f"DP bound (ε = {epsilon:g}{f', δ = {delta:g}' if delta else ''})")
    for label, roc in rocs.items():
        f = np.maximum(roc.fpr, lo)
        t = np.maximum(roc.tpr, lo)
        # operating points joined by straight lines: a randomised test between two
        # thresholds reaches every point of the segment (drawn on log axes it bends)
        ax.plot(f, t, marker="." if f.size < 50 else None, label=f"{label} (AUC {roc.auc:.2f})")
    roc_axes(ax, lo)
    ax.set_title(title or "Membership inference")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return save_figure(fig, path)


def plot_one_run(
    path: str | Path,
    *,
    accuracies: Sequence[float] = (1.0, 0.95, 0.9, 0.8),
    guesses: Sequence[int] = (10, 30, 100, 300, 1000, 3000, 10000),
    confidence: float = 0.95,
) -> Path:
    """The one-run audit's certified ε against the number of guesses, for several guess
    accuracies (Steinke-Nasr-Jagielski 2023; pure DP, ``canaries = guesses``)."""
    from dpkit.attacks.one_run import one_run_epsilon

    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    for acc in accuracies:
        ys = [one_run_epsilon(canaries=r, guesses=r, correct=math.floor(acc * r),
                              confidence=confidence) for r in guesses]
        ax.plot(guesses, ys, marker="o", label=f"{100 * acc:g}% of guesses right")
    ax.set_xscale("log")
    ax.set_xlabel("guesses r (one run)")
    ax.set_ylabel(f"certified ε lower bound ({100 * confidence:g}%)")
    ax.set_title("Auditing with one run: what r guesses can certify")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return save_figure(fig, path)
