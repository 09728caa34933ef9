"""Pictures of answers and budgets, with matplotlib (the optional extra ``plots``).

:func:`plot_panels` draws a query's answer: one panel per aggregate, bars for categorical keys
(several GROUP BY keys are joined into one label), a line for one ordered key (numbers, dates),
each noisy value with its confidence interval as whiskers (a band too, for lines). The
intervals are those of the answer (the exact noise distribution at the stated level); nothing
here reads data or spends budget. :func:`plot_budget` draws each analyst's own spend over time
(its charges composed under the project's accountant), the project's total and its budget.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot, no global state): a notebook
shows the returned figure, a command saves it (``path``; the format from the extension).
Imports nothing from dpkit: callers pass arrays.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Panel", "check_plot_path", "plot_budget", "plot_panels"]

_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


@dataclass
class Panel:
    """One aggregate: its noisy values and (optionally) the interval around each."""

    name: str
    values: Any
    low: Any = None
    high: Any = None


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'dpkit[plots]' (or pip install "
                          "matplotlib); nothing was charged") from None
    return Figure


def _shown_in_notebooks(fig: Any) -> Any:
    """A pyplot-free Figure has no rich display of its own unless the inline backend is on:
    give it one, so ``res.plot()`` as a notebook cell's last line shows the picture."""
    def png() -> bytes:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        return buf.getvalue()

    fig._repr_png_ = png
    return fig


def check_plot_path(path: str | Path) -> Path:
    """Refuse a picture that cannot be drawn or written, before anything is charged."""
    target = Path(path).expanduser()
    if target.suffix.lower() not in _SUFFIXES:
        raise ValueError(f"cannot tell the picture format of {str(path)!r}: name it "
                         f"{', '.join(_SUFFIXES)} (nothing was charged)")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"cannot write {target}: the folder {folder} does not exist "
                         f"(nothing was charged)")
    _figure_class()
    return target


def _ordered_axis(keys: Sequence[Any]) -> np.ndarray | None:
    """The x values when there is one key column of numbers or dates (a line reads better
    than bars there); None for categories or several keys."""
    if len(keys) != 1 or len(keys[0]) < 2:
        return None
    k = np.asarray(keys[0])
    if k.dtype.kind in "iufmM":
        return k
    items = [v.item() if isinstance(v, np.generic) else v for v in k]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return np.asarray(items, dtype=float)
    if all(isinstance(v, (date, datetime)) for v in items):
        return np.asarray(items, dtype="datetime64[us]")
    return None


def _whiskers(values: np.ndarray, low: Any, high: Any) -> np.ndarray | None:
    if low is None or high is None:
        return None
    lo = np.asarray(low, dtype=float)
    hi = np.asarray(high, dtype=float)
    below = np.nan_to_num(values - lo, nan=0.0).clip(min=0.0)
    above = np.nan_to_num(hi - values, nan=0.0).clip(min=0.0)
    return np.vstack([below, above])


def _draw(ax: Any, keys: Sequence[Any], names: Sequence[str], p: Panel) -> None:
    values = np.asarray(p.values, dtype=float)
    err = _whiskers(values, p.low, p.high)
    ax.set_ylabel(p.name)
    if len(values) == 0:  # e.g. no group passed private partition selection
        ax.text(0.5, 0.5, "no rows in this answer", transform=ax.transAxes, ha="center")
        return
    x = _ordered_axis(keys)
    if x is not None:
        order = np.argsort(x, kind="stable")
        x, v = x[order], values[order]
        ax.plot(x, v, marker="o", color="C0")
        if err is not None:
            e = err[:, order]
            ax.fill_between(x, v - e[0], v + e[1], color="C0", alpha=0.15, linewidth=0)
            ax.errorbar(x, v, yerr=e, fmt="none", ecolor="C0", capsize=3, alpha=0.7)
        ax.set_xlabel(names[0])
    else:
        n = len(values)
        labels = ([" / ".join(str(k[i]) for k in keys) for i in range(n)] if keys
                  else [p.name])
        pos = np.arange(n)
        ax.bar(pos, values, color="C0", alpha=0.8)
        if err is not None:
            ax.errorbar(pos, values, yerr=err, fmt="none", ecolor="black", capsize=4)
        ax.set_xticks(pos, labels, rotation=45 if n > 6 or max(map(len, labels)) > 8 else 0,
                      ha="right" if n > 6 else "center")
        if keys:
            ax.set_xlabel(" / ".join(names))
    ax.axhline(0.0, color="grey", linewidth=0.5)


def plot_panels(keys: Sequence[Any], names: Sequence[str], panels: Sequence[Panel], *,
                title: str = "", path: str | Path | None = None, ax: Any = None) -> Any:
    """The figure of an answer: ``keys`` (the group columns' arrays, named ``names``), one
    panel per aggregate. ``ax``: draw the first panel into this matplotlib Axes instead.
    ``path``: also save the figure there. Returns the Figure."""
    if not panels:
        raise ValueError("nothing to plot: the answer has no aggregate column")
    if ax is not None:
        _draw(ax, keys, names, panels[0])
        return ax.figure
    Figure = _figure_class()
    n = len(panels)
    fig = Figure(figsize=(6.4, 2.2 + 2.4 * n), layout="constrained")
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    for a, p in zip(axes, panels, strict=True):
        _draw(a, keys, names, p)
    if title:
        fig.suptitle(title, fontsize="medium")
    if path is not None:
        fig.savefig(Path(path), dpi=120)
    return _shown_in_notebooks(fig)


def plot_budget(times: Sequence[str], analysts: Sequence[str], own: Sequence[float | None],
                project: Sequence[float], *, epsilon: float, title: str = "",
                path: str | Path | None = None, caps: Mapping[str, float] | None = None) -> Any:
    """Spend over time: for each analyst a step line of its own running spend (and its cap,
    dotted, from ``caps``), the project's running total (dashed) and its epsilon budget (a
    horizontal line). ``times``: ISO 8601 (the ledger's). Returns the Figure; ``path``: also
    save it."""
    Figure = _figure_class()
    when = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in times]
    fig = Figure(figsize=(7.0, 4.0), layout="constrained")
    ax = fig.subplots()
    for name in dict.fromkeys(analysts):
        idx = [i for i, a in enumerate(analysts) if a == name]
        ys = [np.nan if own[i] is None else own[i] for i in idx]
        xs = [when[i] for i in idx]
        # from nothing spent before its first charge to its total at the last charge of all
        ax.step([when[0], *xs, when[-1]], [0.0, *ys, ys[-1]], where="post", label=name)
        color = ax.lines[-1].get_color()
        ax.plot(xs, ys, "o", color=color)
        if caps and caps.get(name) is not None:
            ax.axhline(caps[name], color=color, linestyle=":", linewidth=1,
                       label=f"{name}'s cap")
    if when:
        ax.step(when, project, where="post", color="black", linestyle="--",
                label="project total")
    ax.axhline(epsilon, color="red", linewidth=1, label=f"budget (epsilon {epsilon:g})")
    ax.set_ylim(0, epsilon * 1.08)
    ax.set_ylabel("epsilon spent")
    ax.set_xlabel("time (UTC)")
    ax.legend(loc="upper left", fontsize="small")
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator()  # seconds to years apart: ticks that read at any span
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    if title:
        ax.set_title(title, fontsize="medium")
    if path is not None:
        fig.savefig(Path(path), dpi=120)
    return _shown_in_notebooks(fig)
