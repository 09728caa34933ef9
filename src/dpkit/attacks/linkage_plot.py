"""The linkage figure: attack success by k on de-identified Adult, beside dpkit's DP releases.

matplotlib is imported only when a figure is drawn (``pip install 'dpkit[plots]'``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpkit.attacks.linkage_run import LinkageRow

__all__ = ["plot_linkage"]

_TITLES = {"inference": "best guess right (linkage)",
           "homogeneity": "homogeneity: certain and right",
           "background": "background knowledge (1 value excluded)"}


def plot_linkage(rows: Sequence[LinkageRow], path: str | Path) -> Path:
    """Three panels (inference, homogeneity, background): success on members (solid) and
    non-members (dashed) of the k-anonymous releases by k; l-diverse and t-close releases
    (k = 2) as points beside k = 2; DP releases and the population baseline as horizontal
    lines (members solid, non-members dotted). Returns the PNG's path."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'dpkit[plots]'") from exc
    fig = Figure(figsize=(13.0, 4.2), dpi=110)
    axes = fig.subplots(1, 3)
    kan = [r for r in rows if r.release == "k-anonymity"]
    ks = [int(r.param.split("=")[1]) for r in kan]
    flat = [r for r in rows if r.release.startswith("dp ") or r.release == "population"]
    for ax, metric in zip(axes, _TITLES, strict=True):
        ax.plot(ks, [r.members[metric] for r in kan], "o-", color="C3",
                label="k-anonymous, members")
        ax.plot(ks, [r.non_members[metric] for r in kan], "o--", color="C3", alpha=0.6,
                label="k-anonymous, non-members")
        for marker, kind in (("^", "l-diversity"), ("s", "t-closeness")):
            pts = [r for r in rows if r.release == kind]
            for j, r in enumerate(pts):
                ax.plot([2.0 * (1.06 + 0.06 * j)], [r.members[metric]], marker, color="C4",
                        alpha=1.0 - 0.3 * j, label=f"{kind} {r.param}, members")
        for i, r in enumerate(flat):
            _hline(ax, r, metric, f"C{i % 3}" if r.release != "population" else "k")
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.minorticks_off()
        ax.set_xlabel("k")
        ax.set_title(_TITLES[metric], fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of targets")
    axes[0].legend(fontsize=7, loc="lower left")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p, format="png")
    return p


def _hline(ax: Any, r: LinkageRow, metric: str, color: str) -> None:
    label = "population mode (no release)" if r.release == "population" else \
        f"{r.release} {r.param}, members"
    ax.axhline(r.members[metric], color=color, lw=1.2, label=label)
    if r.release != "population":
        ax.axhline(r.non_members[metric], color=color, lw=1.0, ls=":")
