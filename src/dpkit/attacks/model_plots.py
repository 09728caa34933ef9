"""Pictures of the attacks on models (matplotlib, the optional extra ``dpkit[plots]``): the
model-inversion grid and the LiRA ROC curves beside the DP bound. Each function writes one PNG
through matplotlib's object-oriented API (no pyplot state, no display) and returns its path."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dpkit.attacks.lira import LiraReport
from dpkit.attacks.membership import dp_tpr_bound
from dpkit.attacks.plots import new_figure, roc_axes, save_figure

__all__ = ["plot_inversion_grid", "plot_lira"]


def plot_inversion_grid(
    rows: Mapping[str, np.ndarray],
    path: str | Path,
    *,
    input_shape: Sequence[int] = (28, 28),
    title: str | None = None,
) -> Path:
    """One row of images per entry of ``rows`` (``{label: (columns, d) flat images}``, e.g. the
    training class means, then each model's reconstructions), one column per class, grey
    scale with each image on its own range."""
    if not rows:
        raise ValueError("rows is empty: nothing to draw")
    cols = max(len(v) for v in rows.values())
    fig = new_figure(1.0 * cols + 2.2, 1.0 * len(rows) + 0.5)
    for r, (label, images) in enumerate(rows.items()):
        for c in range(cols):
            ax = fig.add_subplot(len(rows), cols, r * cols + c + 1)
            ax.set_xticks([])
            ax.set_yticks([])
            if c < len(images):
                ax.imshow(np.asarray(images[c]).reshape(tuple(input_shape)), cmap="gray")
            if c == 0:
                ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def plot_lira(
    panels: Mapping[str, Sequence[LiraReport]],
    path: str | Path,
    *,
    variant: str = "online",
) -> Path:
    """LiRA ROC curves on log-log axes, one panel per data set (``{title: reports}``), one
    colour per model kind; each private model's DP bound (``min(e^ε FPR + δ, …)``) dashed in
    its colour, the diagonal dotted."""
    if not panels:
        raise ValueError("panels is empty: nothing to draw")
    fig = new_figure(5.2 * len(panels), 4.6)
    lo = 1e-4
    grid = np.logspace(math.log10(lo), 0, 200)
    colors = ["black", "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for i, (name, reports) in enumerate(panels.items()):
        ax = fig.add_subplot(1, len(panels), i + 1)
        ax.plot(grid, grid, color="grey", linestyle=":", linewidth=1, label="random guess")
        for j, rep in enumerate(reports):
            col = colors[j % len(colors)]
            roc = rep.rocs[variant]
            ax.plot(np.maximum(roc.fpr, lo), np.maximum(roc.tpr, lo), color=col,
                    label=f"{rep.run.label} (AUC {roc.auc:.2f})")
            if rep.run.epsilon is not None:
                b = dp_tpr_bound(grid, epsilon=rep.run.epsilon, delta=rep.run.delta or 0.0)
                ax.plot(grid, np.maximum(b, lo), color=col, linestyle="--", linewidth=0.9)
        roc_axes(ax, lo)
        ax.set_title(f"{name}: {variant} LiRA (dashed: DP bound)", fontsize=9)
        ax.legend(loc="lower right", fontsize=7)
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return save_figure(fig, path)
