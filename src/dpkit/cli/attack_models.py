"""``dpkit attack inversion`` and ``dpkit attack membership-model``: attacks on trained models.

Click wrappers over :mod:`dpkit.cli.attack_model_runs` (imported when a command runs, so
``dpkit --help`` loads neither torch nor numpy); registered on the ``attack`` group by
:mod:`dpkit.cli.attack` (``model_commands``). ``dpkit attack membership`` stays the attack on
aggregates and on a small logistic regression; ``membership-model`` is LiRA at scale.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from dpkit.cli.options import console, err_console

if TYPE_CHECKING:
    from dpkit.cli.attack_runs import AttackSummary

__all__ = ["model_commands"]

_PLOT = click.option(
    "--plot", "--plots", "plot_dir", type=click.Path(path_type=Path), default=None,
    help="Write the PNG figure into this folder (needs matplotlib: pip install 'dpkit[plots]').")
_SEED = click.option("--seed", type=int, default=None,
                     help="Reproducible INSECURE noise for training and attack (default: CSPRNG).")
_EPS = click.option("--epsilons", default="1,3,8", show_default=True,
                    help="Comma-separated ε of the private models (δ = 1e-5 MNIST, 1e-6 Adult).")


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers (got {text!r})") from None


def _show(summary: AttackSummary) -> None:
    console.print(summary)  # fits the terminal
    for note in summary.notes:
        console.print(f"[dim]- {note}[/]")
    for path in summary.files:
        console.print(f"wrote {path}")


def _threads() -> None:
    """One torch thread: the small models here train faster without thread hand-offs, and the
    machine is usually shared."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


@click.command("inversion")
@click.option("--method", type=click.Choice(["white-box", "black-box", "both"]), default="both",
              show_default=True, help="white-box: gradients of a torch model; black-box: "
              "probabilities only (zeroth-order).")
@_EPS
@click.option("--train-rows", default=4000, show_default=True,
              help="MNIST-5k training rows the models are trained on.")
@click.option("--steps", default=300, show_default=True, help="Optimisation steps per attack.")
@click.option("--samples", default=20, show_default=True,
              help="Black-box: probability queries per step and class (even).")
@click.option("--tv", default=0.02, show_default=True, help="Weight of the total-variation prior.")
@_SEED
@_PLOT
def inversion(method: str, epsilons: str, train_rows: int, steps: int, samples: int, tv: float,
              seed: int | None, plot_dir: Path | None) -> None:
    """Model inversion on MNIST-5k: recover each digit from a classifier, non-private vs DP-SGD."""
    from dpkit.cli.attack_model_runs import attack_inversion

    _threads()
    methods = ("white-box", "black-box") if method == "both" else (method,)
    _show(attack_inversion(epsilons=_floats(epsilons), methods=methods, train_rows=train_rows,
                           steps=steps, samples=samples, tv=tv, seed=seed, plot_dir=plot_dir,
                           log=lambda s: err_console.print(f"[dim]{s}[/]")))


@click.command("membership-model")
@click.option("--data", "dataset", type=click.Choice(["mnist", "adult", "both"]), default="both",
              show_default=True)
@_EPS
@click.option("--population", type=int, default=None,
              help="Rows each model's half is drawn from [default: MNIST 2000, Adult 1000].")
@click.option("--shadows", type=int, default=None,
              help="Models per kind (each is target once) [default: MNIST 16, Adult 64].")
@_SEED
@_PLOT
def membership_model(dataset: str, epsilons: str, population: int | None, shadows: int | None,
                     seed: int | None, plot_dir: Path | None) -> None:
    """LiRA membership inference with shadow models, beside the DP bound and the one-run audit."""
    from dpkit.cli.attack_model_runs import attack_membership_model

    datasets = ("mnist", "adult") if dataset == "both" else (dataset,)
    if "mnist" in datasets:  # Adult's logistic regressions need no torch
        _threads()
    _show(attack_membership_model(datasets=datasets, epsilons=_floats(epsilons),
                                  population=population, shadow_models=shadows, seed=seed,
                                  plot_dir=plot_dir,
                                  log=lambda s: err_console.print(f"[dim]{s}[/]")))


model_commands: tuple[click.Command, ...] = (inversion, membership_model)
