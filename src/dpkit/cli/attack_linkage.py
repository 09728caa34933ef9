"""``dpkit attack linkage``: linkage, homogeneity and background-knowledge attacks on Adult.

k-anonymous, l-diverse and t-close releases (dpkit's Datafly, the algorithm ANJANA uses) against
dpkit's MST synthetic data and curator count queries, the same targets for all; see
:mod:`dpkit.attacks.linkage_run`. Needs Adult (``DPKIT_DATA`` or ``../shared/data``) and pandas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dpkit.cli.options import console

__all__ = ["linkage"]


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--{what} takes comma-separated integers (got {text!r})") from None


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--{what} takes comma-separated numbers (got {text!r})") from None


@click.command("linkage")
@click.option("--k", "ks", default="2,5,10,25,50", show_default=True,
              help="Comma-separated k of the k-anonymous releases (each >= 2).")
@click.option("--l", "ls", default="2,3", show_default=True,
              help="Comma-separated l of the (k=2) l-diverse releases ('' for none).")
@click.option("--t", "ts", default="0.3,0.2", show_default=True,
              help="Comma-separated t of the (k=2) t-close releases ('' for none).")
@click.option("--epsilons", default="1,3", show_default=True,
              help="Epsilons of dpkit's MST synthetic data.")
@click.option("--targets", default=500, show_default=True,
              help="Targets per group (members of the release, and non-members).")
@click.option("--curator-epsilon", type=float, default=1.0, show_default=True,
              help="Epsilon of each curator count query (0: skip the curator).")
@click.option("--curator-targets", default=50, show_default=True,
              help="Targets per group asked of the curator (one query each).")
@click.option("--sensitive", default="occupation", show_default=True,
              help="The sensitive column the adversary wants (occupation or income).")
@click.option("--qis", default="age,education,marital_status,race,sex,native_country",
              show_default=True, help="Comma-separated quasi-identifiers the adversary knows.")
@click.option("--background", default=1, show_default=True,
              help="Values the background-knowledge adversary knows the target does not have.")
@click.option("--supp-level", type=float, default=10.0, show_default=True,
              help="Largest share of rows (percent) the de-identification may suppress.")
@click.option("--data", "data_dir", type=click.Path(path_type=Path), default=None,
              help="Folder with adult.data.gz / adult.test.gz (default: DPKIT_DATA or "
                   "../shared/data).")
@click.option("--seed", type=int, default=None,
              help="Reproducible INSECURE targets and noise (default: CSPRNG).")
@click.option("--plot", "plot", type=click.Path(path_type=Path), default=None,
              help="Write the figure to this PNG (needs matplotlib: pip install 'dpkit[plots]').")
def linkage(ks: str, ls: str, ts: str, epsilons: str, targets: int, curator_epsilon: float,
            curator_targets: int, sensitive: str, qis: str, background: int,
            supp_level: float, data_dir: Path | None,
            seed: int | None, plot: Path | None) -> None:
    """Linkage attacks on k-anonymity, l-diversity and t-closeness vs DP releases of Adult."""
    from dpkit.attacks.linkage_run import run_linkage

    k_list = _ints(ks, "k")
    if not k_list:
        raise ValueError("--k needs at least one k >= 2")
    rows = run_linkage(
        ks=k_list, ls=_ints(ls, "l"), ts=_floats(ts, "t"), epsilons=_floats(epsilons, "epsilons"),
        n_targets=targets, curator_epsilon=curator_epsilon or None,
        curator_targets=curator_targets, supp_level=supp_level, sensitive=sensitive,
        quasi_identifiers=tuple(q.strip() for q in qis.split(",") if q.strip()),
        background=background, data=data_dir, source=_source(seed))
    console.print(_table(rows, sensitive))
    console.print("[dim]- members: targets whose row is in the release's data; non-members: "
                  "people of the same population who are not. What a release tells about "
                  "non-members is inference from population statistics, which DP does not "
                  "claim to stop; the member - non-member gap is what it gives away.[/]")
    if plot is not None:
        from dpkit.attacks.linkage_plot import plot_linkage

        console.print(f"wrote {plot_linkage(rows, plot)}")


def _source(seed: int | None) -> Any:
    if seed is None:
        return None
    from dpkit.noise import seeded

    return seeded(seed)


def _table(rows: Any, sensitive: str) -> Any:
    from rich.table import Table

    t = Table(title=f"Linkage attacks on Adult ({sensitive}): share of targets, "
                    "members / non-members")
    t.add_column("release", no_wrap=True)
    for c in ("supp.", "linked", "best guess", "homogeneity", "background"):
        t.add_column(c)
    for r in rows:
        cells = [f"{r.members[m]:.3f}/{r.non_members[m]:.3f}"
                 for m in ("linked", "inference", "homogeneity", "background")]
        t.add_row(f"{r.release} {r.param}", "" if r.suppressed is None else str(r.suppressed),
                  *cells)
    return t
