"""``dpkit attack memorization``: canary exposure of a character-level LM, with and without DP.

The command (registered on the ``attack`` group by :mod:`dpkit.cli.attack`) and the function
behind it, :func:`attack_memorization`, which returns the same
:class:`~dpkit.cli.attack_runs.AttackSummary` as the other attacks. The library (torch
included) is imported when the command runs, so ``dpkit --help`` stays fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from dpkit.cli.options import console

__all__ = ["attack_memorization", "memorization_command"]


def _numbers(text: str, what: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated numbers (got {text!r})") from None


def attack_memorization(*, epsilons: Sequence[float] = (8.0, 3.0, 1.0), baseline: bool = True,
                        unit: str = "record", writers: int | None = None,
                        insertions: Sequence[int] = (0, 1, 4, 16, 64), repeats: int = 2,
                        lines: int = 2000, epochs: int | None = None, pattern: str = "DDD-DDD",
                        prefix: str = "{name}'s code is ", secrets: Sequence[str] = (),
                        method: str = "pruned", beam: int = 16, seed: int | None = None,
                        plot: str | Path | None = None) -> Any:
    """Run :func:`dpkit.attacks.memorization.experiment.run`; a summary table (and a PNG).

    ``unit``: the DP models' privacy unit, ``"record"`` (one line), ``"user"`` (one writer: all
    copies of a canary) or ``"both"``.
    """
    from dpkit import noise
    from dpkit.attacks.memorization import experiment
    from dpkit.attacks.memorization.model import TrainConfig
    from dpkit.cli.attack_runs import AttackSummary

    eps: list[float | None] = ([None] if baseline else []) + [float(e) for e in epsilons]
    if not eps:
        raise ValueError("nothing to train: give --epsilon values or keep the non-private "
                         "baseline")
    units = {"record": ("record",), "user": ("user",), "both": ("record", "user")}.get(unit)
    if units is None:
        raise ValueError(f"unit must be 'record', 'user' or 'both' (got {unit!r})")
    cfg = TrainConfig() if epochs is None else TrainConfig(epochs=int(epochs))
    res = experiment.run(epsilons=eps, units=units, writers=writers, insertions=insertions,
                         repeats=repeats, lines=lines,
                         pattern=pattern, prefix=prefix, secrets=secrets, config=cfg,
                         method=method, beam=beam,
                         source=None if seed is None else noise.seeded(int(seed)))
    notes = [f"{len(res.models[0].canaries)} canaries, candidate space |R| = {res.size:,} "
             f"(pattern {pattern!r}), full exposure {math.log2(res.size):.2f} "
             f"bits, chance: mean {experiment.CHANCE:.2f}, 95% of never-seen canaries below "
             f"{experiment.CHANCE_95:.2f}; {lines} corpus lines dealt to {res.writers} writers, "
             "each canary's copies by one writer"]
    for m in res.models:
        if m.epsilon is not None:
            why = ("a canary inserted r times is r lines: only the group guarantee rε covers it"
                   if m.unit == "record" else "all r copies of a canary are one writer's: ε "
                   "covers them together")
            notes.append(f"{m.label}: PLD ε = {m.epsilon:.3f} at δ = {m.delta:g} for "
                         f"{m.neighbours} neighbours (noise multiplier "
                         f"{m.noise_multiplier:.3f}); {why}")
    if seed is not None:
        notes.append(f"seed {seed}: reproducible, INSECURE noise")
    summary = AttackSummary("Canary exposure and extraction (Carlini et al. 2019)",
                            list(experiment.MemorizationResult.COLUMNS), res.rows(),
                            notes=notes)
    if plot is not None:
        summary.files.append(experiment.plot(res, plot))
    return summary


@click.command("memorization")
@click.option("--epsilon", "epsilons", default="8,3,1", show_default=True,
              help="Comma-separated ε of the DP-SGD models (δ = 1e-5).")
@click.option("--no-baseline", is_flag=True, help="Skip the non-private model.")
@click.option("--unit", type=click.Choice(["record", "user", "both"]), default="record",
              show_default=True, help="Privacy unit of the DP models: one line (record), one "
              "writer with all its lines, a canary's copies included (user), or both.")
@click.option("--writers", type=int, default=None,
              help="Writers the corpus lines are dealt to (default lines // 2).")
@click.option("--insertions", default="0,1,4,16,64", show_default=True,
              help="Comma-separated times each canary is inserted (0: control).")
@click.option("--repeats", default=2, show_default=True, help="Canaries per insertion count.")
@click.option("--lines", default=2000, show_default=True, help="Lines of generated corpus.")
@click.option("--epochs", type=int, default=None, help="Training epochs (default 20).")
@click.option("--pattern", default="DDD-DDD", show_default=True,
              help="The secret's layout, D = one digit (at most 7 D: exact exposure).")
@click.option("--prefix", default="{name}'s code is ", show_default=True,
              help="Text before the secret; {name} gives each canary its own.")
@click.option("--secret", "secrets", multiple=True, help="A secret to plant (repeatable).")
@click.option("--method", type=click.Choice(["pruned", "enumerate", "both"]), default="pruned",
              show_default=True, help="Exact rank by shortest-path search or enumeration.")
@click.option("--seed", type=int, default=None, help="Reproducible INSECURE noise.")
@click.option("--plot", type=click.Path(path_type=Path), default=None,
              help="Write the exposure figure to this PNG (needs dpkit[plots]).")
def memorization_command(epsilons: str, no_baseline: bool, unit: str, writers: int | None,
                         insertions: str, repeats: int,
                         lines: int, epochs: int | None, pattern: str, prefix: str,
                         secrets: tuple[str, ...], method: str, seed: int | None,
                         plot: Path | None) -> None:
    """Canaries in a text corpus: how much a language model exposes them, with and without DP."""
    counts = _numbers(insertions, "--insertions")
    if any(c != int(c) for c in counts):
        raise ValueError(f"--insertions must be whole numbers (got {insertions!r})")
    summary = attack_memorization(
        epsilons=_numbers(epsilons, "--epsilon"), baseline=not no_baseline, unit=unit,
        writers=writers,
        insertions=[int(c) for c in counts], repeats=repeats, lines=lines, epochs=epochs,
        pattern=pattern, prefix=prefix, secrets=secrets, method=method, seed=seed, plot=plot)
    console.print(summary)  # fits the terminal
    for note in summary.notes:
        console.print(f"[dim]- {note}[/]")
    for path in summary.files:
        console.print(f"wrote {path}")
