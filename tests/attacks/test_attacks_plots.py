"""The PNG writers (matplotlib is an optional extra: skipped without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from dpkit.attacks import membership as mia
from dpkit.attacks import plots

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(p: Path) -> bool:
    return p.exists() and p.read_bytes()[:8] == PNG and p.stat().st_size > 5000


def test_plots_write_pngs(tmp_path: Path) -> None:
    a = plots.plot_recovery({"lp": [(0, 1.0), (4, 0.98), (64, 0.55)]}, tmp_path / "r.png",
                            n=256, queries=1024, points={"curator": (1024, 0.5)},
                            predictions={"lsq, predicted": [(1, 1.0), (64, 0.57)]})
    roc = mia.roc_curve([1.0, 2.0, 3.0, 0.5], [0.0, 1.0, -1.0, 0.2])
    b = plots.plot_roc({"toy": roc}, tmp_path / "sub" / "roc.png", epsilon=1.0, delta=1e-5)
    c = plots.plot_one_run(tmp_path / "one.png", guesses=(10, 100), accuracies=(1.0,))
    assert all(_is_png(p) for p in (a, b, c))
