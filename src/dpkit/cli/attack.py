"""``dpkit attack ...``: why DP is needed, and checks that dpkit keeps its promises.

Click wrappers over :mod:`dpkit.cli.attack_runs`, imported when a command runs (it pulls in the
attacks, numpy and scipy; ``dpkit --help`` stays fast).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from dpkit.cli import attack_linkage
from dpkit.cli.attack_memorization import memorization_command
from dpkit.cli.attack_models import model_commands
from dpkit.cli.options import console, err_console

__all__ = ["attack"]

_SEED = click.option(
    "--seed", type=int, default=None, help="Reproducible INSECURE noise (default: CSPRNG)."
)
_PLOTS = click.option(
    "--plots",
    "plot_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Write PNG figures to this folder (needs matplotlib: pip install 'dpkit[plots]').",
)


@click.group("attack")
def attack() -> None:
    """Run attacks against naive systems and against the dpkit curator."""


def _show(summary: Any) -> None:
    console.print(summary)  # fits the terminal
    for note in summary.notes:
        console.print(f"[dim]- {note}[/]")
    for path in summary.files:
        console.print(f"wrote {path}")


def _attacks() -> Any:
    from dpkit.cli import attack_runs

    return attack_runs


@attack.command("reconstruct")
@click.option("--n", "n", default=256, show_default=True, help="People (one secret bit each).")
@click.option("--queries", default=1024, show_default=True, help="Subset-sum questions asked.")
@click.option(
    "--noise",
    "noise_levels",
    default="0,4,16,64,128",
    show_default=True,
    help="Comma-separated noise magnitudes E of the naive system.",
)
@click.option(
    "--noise-kind", type=click.Choice(["uniform", "laplace", "gaussian"]), default="uniform"
)
@click.option("--subsets", type=click.Choice(["random", "hashed"]), default="random")
@click.option(
    "--attack",
    "attack_kind",
    type=click.Choice(["lp", "lsq", "lsq-box"]),
    default="lp",
    show_default=True,
    help="lp: L1 linear program (or Dinur-Nissim LP with --known-bound); lsq: least squares "
    "(with its predicted success rate); lsq-box: least squares within [0, 1].",
)
@click.option("--known-bound", is_flag=True,
              help="LP attack: the attacker knows the noise bound E (Dinur-Nissim LP).")
@click.option(
    "--curator-epsilon",
    type=float,
    default=1.0,
    show_default=True,
    help="Also attack a dpkit curator with this total budget (0: skip).",
)
@_SEED
@_PLOTS
def attack_reconstruct(
    n: int,
    queries: int,
    noise_levels: str,
    noise_kind: str,
    subsets: str,
    attack_kind: str,
    known_bound: bool,
    curator_epsilon: float,
    seed: int | None,
    plot_dir: Path | None,
) -> None:
    """Dinur-Nissim reconstruction: recover secret bits from noisy subset sums."""
    levels = tuple(float(x) for x in noise_levels.split(",") if x.strip())
    _show(
        _attacks().attack_reconstruct(
            n=n,
            queries=queries,
            noise_levels=levels,
            noise_kind=noise_kind,
            subsets=subsets,
            attack=attack_kind,
            known_bound=known_bound,
            curator_epsilon=curator_epsilon or None,
            seed=seed,
            plot_dir=plot_dir,
        )
    )


@attack.command("difference")
@click.option("--n", "n", default=200, show_default=True)
@click.option("--targets", default=20, show_default=True, help="People the attacker targets.")
@click.option("--threshold", default=5, show_default=True, help="Low-count suppression level.")
@click.option("--curator-epsilon", type=float, default=1.0, show_default=True)
@_SEED
def attack_difference(
    n: int, targets: int, threshold: int, curator_epsilon: float, seed: int | None
) -> None:
    """Differencing attack: two innocent-looking counts that differ by one person."""
    _show(
        _attacks().attack_difference(
            n=n, targets=targets, threshold=threshold, curator_epsilon=curator_epsilon, seed=seed
        )
    )


@attack.command("average")
@click.option("--n", "n", default=200, show_default=True)
@click.option("--scale", default=8.0, show_default=True, help="Noise scale of the naive system.")
@click.option("--curator-epsilon", type=float, default=1.0, show_default=True)
@_SEED
def attack_average(n: int, scale: float, curator_epsilon: float, seed: int | None) -> None:
    """Averaging attack: ask the same question again until fresh noise averages away."""
    _show(_attacks().attack_average(n=n, scale=scale, curator_epsilon=curator_epsilon, seed=seed))


@attack.command("membership")
@click.option("--epsilon", type=float, default=1.0, show_default=True)
@click.option("--kind", type=click.Choice(["aggregate", "model", "both"]), default="both")
@_SEED
@_PLOTS
def attack_membership(epsilon: float, kind: str, seed: int | None, plot_dir: Path | None) -> None:
    """Membership inference on a released count and on a trained model (LiRA)."""
    _show(_attacks().attack_membership(epsilon=epsilon, kind=kind, seed=seed, plot_dir=plot_dir))


@attack.command("audit")
@click.option("--trials", default=5000, show_default=True, help="Runs per neighbouring input.")
@click.option("--confidence", default=0.95, show_default=True)
@_SEED
def attack_audit(trials: int, confidence: float, seed: int | None) -> None:
    """Empirical-epsilon audit of every mechanism: the certified lower bound vs the claim."""
    _show(_attacks().attack_audit(trials=trials, confidence=confidence, seed=seed))


@attack.command("one-run")
@click.option("--canaries", type=int, required=True)
@click.option("--guesses", type=int, required=True)
@click.option("--correct", type=int, required=True)
@click.option("--delta", type=float, default=0.0, show_default=True)
@click.option("--confidence", default=0.95, show_default=True)
def attack_one_run(
    canaries: int, guesses: int, correct: int, delta: float, confidence: float
) -> None:
    """One-run audit calculator (Steinke-Nasr-Jagielski 2023): the epsilon guesses prove."""
    _show(
        _attacks().attack_one_run(
            canaries=canaries,
            guesses=guesses,
            correct=correct,
            delta=delta,
            confidence=confidence,
        )
    )


@attack.command("side-channels")
@click.argument("project", type=click.Path(path_type=Path))
@click.option("--table", default=None, help="The private table to fuzz (if there are several).")
@click.option("--queries", default=2000, show_default=True, help="D/D' comparisons to run.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the queries, datasets and (insecure, throwaway) noise.")
@click.option("--units", default=200, show_default=True,
              help="Units of the table's rows copied into the throwaway D / D' projects.")
@click.option("--neighbours", default=None,
              help="Comma-separated neighbour kinds (default: add, remove, add_extreme, "
              "change_extreme, add_many, add_duplicates, add_nulls).")
@click.option("--accountants", default="approx,pld,zcdp", show_default=True)
@click.option("--max-findings", type=int, default=None, help="Stop after this many findings.")
@click.option("--via", type=click.Choice(["curator", "service"]), default="curator",
              show_default=True,
              help="Ask the Python curator, or the HTTP service as an analyst sees it (status, "
              "problem bodies, headers, JSON keys; needs the [server] extra and httpx).")
@click.option("--families", default=None,
              help="Comma-separated query families to draw (default: all; e.g. fit for model "
              "training alone): sql, filter, cdf, dp_cdf, synthetic, fit, ranges, quantiles, "
              "marginals.")
def attack_side_channels(project: Path, table: str | None, queries: int, seed: int, units: int,
                         neighbours: str | None, accountants: str,
                         max_findings: int | None, via: str, families: str | None) -> None:
    """Fuzz the curator for side channels on your own project's table (owner only).

    Copies a sample of the table's rows into throwaway D and D' projects (D' = D with one unit
    added, removed or given extreme values), runs the same random queries on both and reports
    anything but noisy values that differs. Spends nothing from PROJECT's budget.
    """
    _show(
        _attacks().attack_side_channels(
            project=project, table=table, queries=queries, seed=seed, units=units,
            neighbours=neighbours, accountants=accountants, max_findings=max_findings,
            via=via, families=families, progress=_fuzz_progress(units),
        )
    )


def _fuzz_progress(units: int) -> Callable[[int, int], None]:
    """A line on stderr at each tenth of the run: 400 comparisons took 92 s in the
    researcher's walk with nothing on screen (the default 2,000 take minutes more), the first
    20 s of them making the throwaway projects."""
    err_console.print(f"[dim]fuzzing: copying {units} units into throwaway D and D' projects "
                      f"(one per neighbour kind and accountant)[/]")
    start = time.perf_counter()
    shown = {"tenth": 0}

    def show(done: int, total: int) -> None:
        tenth = done * 10 // max(total, 1)
        if tenth > shown["tenth"] and done < total:
            shown["tenth"] = tenth
            err_console.print(f"[dim]fuzzing: {done} of {total} D/D' comparisons, "
                              f"{time.perf_counter() - start:.0f} s[/]")

    return show


attack.add_command(attack_linkage.linkage)
# the memorization attack lives in its own module (its options and run function together)
attack.add_command(memorization_command)
for _command in model_commands:  # inversion, membership-model (cli/attack_models.py)
    attack.add_command(_command)
