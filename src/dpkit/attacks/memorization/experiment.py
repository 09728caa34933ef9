"""The Secret Sharer experiment: plant canaries, train without and with DP-SGD, measure exposure.

:func:`run` draws ``repeats`` canaries per insertion count (``"ann's code is 281-264"``, one
name per canary so that canaries do not share a prefix), inserts each into the seeded grammar
corpus its number of times (all copies by one writer, the corpus's lines dealt to ``writers``
writers), trains the plain model (``None`` in ``epsilons``) and one DP model per (ε, privacy
unit) on the same lines, and for every model and canary finds the exact rank over the whole
candidate space (:mod:`.exposure`) and tries the extraction attack (greedy and beam decoding
from the prefix). Canaries inserted 0 times are the control: their exposure is what chance
gives (a uniform rank: mean 1/ln 2 = 1.44 bits, ``P(exposure >= t) = 2^-t``, so 95% of them
stay below log2 20 = 4.32 bits).

Every input is checked before anything is trained. Privacy (module :mod:`.model`): a
``"record"`` model is (ε, δ)-DP for add/remove-one-line neighbours, so a canary inserted ``r``
times has only the group guarantee of ``r`` lines; a ``"user"`` model is (ε, δ)-DP for
add/remove-one-writer neighbours, which covers all ``r`` copies at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import noise

from .canaries import CANARY_NAMES, CanaryFormat, deal_writers, grammar_corpus, plant
from .exposure import Exposure, extract, rank_enumerate, rank_pruned
from .model import TrainConfig, train

__all__ = ["CanaryResult", "MemorizationResult", "ModelResult", "Planted", "plan", "plot", "run"]

CHANCE = 1.0 / math.log(2.0)  # E[log2 |R| - log2 rank] for a uniform rank, |R| large
CHANCE_95 = math.log2(20.0)  # P(exposure >= t) = 2^-t for a uniform rank: 95% lie below
_METHODS = ("pruned", "enumerate", "both")
UNITS = ("record", "user")


@dataclass(frozen=True)
class Planted:
    """One canary: its format (prefix + pattern), its secret and how often it was inserted."""

    fmt: CanaryFormat
    secret: str
    insertions: int

    @property
    def line(self) -> str:
        return self.fmt.prefix + self.secret


@dataclass(frozen=True)
class CanaryResult:
    """What one model gives away about one canary."""

    canary: Planted
    exposure: Exposure
    greedy: str
    beam: str
    other: Exposure | None = None  # the second method's answer with method="both"
    extract_seconds: float = 0.0

    @property
    def extracted(self) -> bool:
        return self.greedy == self.canary.secret

    @property
    def beam_extracted(self) -> bool:
        return self.beam == self.canary.secret


@dataclass
class ModelResult:
    """One trained model (``target_epsilon`` ``None``: no DP) and its canaries."""

    target_epsilon: float | None
    epsilon: float | None
    delta: float | None
    noise_multiplier: float | None
    train_seconds: float
    loss: float
    canaries: list[CanaryResult] = field(default_factory=list)
    unit: str | None = None  # "record" (one line) or "user" (one writer); None without DP

    @property
    def label(self) -> str:
        if self.target_epsilon is None:
            return "no DP"
        return f"ε = {self.target_epsilon:g} ({self.unit})"

    @property
    def neighbours(self) -> str:
        return {None: "none", "record": "add/remove one line",
                "user": "add/remove one writer (all its lines)"}[self.unit]

    def at(self, insertions: int) -> list[CanaryResult]:
        return [c for c in self.canaries if c.canary.insertions == insertions]


@dataclass
class MemorizationResult:
    """All models of one run, and the settings that made them."""

    pattern: str
    size: int
    lines: int
    insertions: tuple[int, ...]
    models: list[ModelResult]
    beam_width: int
    writers: int | None = None

    def rows(self) -> list[list[Any]]:
        """One row per (model, insertion count): exposure mean [min, max], extraction counts."""
        out: list[list[Any]] = []
        for m in self.models:
            for r in self.insertions:
                cs = m.at(r)
                ex = [c.exposure.exposure for c in cs]
                out.append([m.label, r, round(float(np.mean(ex)), 2),
                            f"{min(ex):.1f}-{max(ex):.1f}",
                            f"{sum(c.exposure.rank == 1 for c in cs)}/{len(cs)}",
                            f"{sum(c.extracted for c in cs)}/{len(cs)}",
                            f"{sum(c.beam_extracted for c in cs)}/{len(cs)}"])
        return out

    COLUMNS = ("model", "insertions", "exposure (bits)", "min-max", "rank 1",
               "greedy extracts", "beam extracts")


def plan(*, insertions: Sequence[int], repeats: int, pattern: str, prefix: str,
         secrets: Sequence[str] = (), source: noise.Source | None = None) -> list[Planted]:
    """The canaries of a run, validated (every error here comes before any training)."""
    ins = [int(r) for r in insertions]
    if not ins or any(isinstance(r, bool) or r < 0 for r in insertions):
        raise ValueError(f"insertions must be integers >= 0 (got {list(insertions)!r})")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1 (got {repeats})")
    count = len(ins) * repeats
    if "{name}" not in prefix and count > 1:
        raise ValueError(f"{count} canaries would share the prefix {prefix!r}; put '{{name}}' "
                         "in it (e.g. \"{name}'s code is \") so each has its own")
    if count > len(CANARY_NAMES):
        raise ValueError(f"{count} canaries but only {len(CANARY_NAMES)} names; lower repeats= or "
                         "the number of insertion counts")
    fmts = [CanaryFormat(prefix.replace("{name}", CANARY_NAMES[i]), pattern) for i in range(count)]
    if len(secrets) > count:
        raise ValueError(f"{len(secrets)} secrets given for {count} canaries")
    given = [fmts[i].secret(fmts[i].index(s)) for i, s in enumerate(secrets)]
    drawn = [fmts[0].secret(int(i)) for i in fmts[0].draw(count - len(given), source=source)]
    chosen = given + drawn
    return [Planted(fmts[i], chosen[i], ins[i // repeats]) for i in range(count)]


def _measure(model: Any, c: Planted, method: str, beam: int) -> CanaryResult:
    first = rank_pruned if method in ("pruned", "both") else rank_enumerate
    exp = first(model, c.fmt, c.secret)
    other = rank_enumerate(model, c.fmt, c.secret) if method == "both" else None
    t0 = time.perf_counter()
    greedy, wide = extract(model, c.fmt), extract(model, c.fmt, beam=beam)
    return CanaryResult(c, exp, greedy, wide, other, time.perf_counter() - t0)


def _jobs(epsilons: Sequence[float | None], units: Sequence[str],
          models: Sequence[tuple[float | None, str | None]] | None,
          ) -> list[tuple[float | None, str | None]]:
    """The (ε, unit) of each model to train, checked."""
    if not units or any(u not in UNITS for u in units) or len(set(units)) != len(units):
        raise ValueError(f"units must be distinct values among {UNITS} (got {list(units)!r})")
    jobs = [(e, u) for e in epsilons for u in ([None] if e is None else units)] \
        if models is None else [(e, u) for e, u in models]
    if not jobs:
        raise ValueError("no model to train: give epsilons (None: the plain model)")
    for e, u in jobs:
        if e is not None and not (math.isfinite(e) and e > 0):
            raise ValueError(f"each epsilon must be a finite number > 0, or None for the "
                             f"non-private model (got {e!r})")
        if (e is None) != (u is None) or (u is not None and u not in UNITS):
            raise ValueError(f"model {(e, u)!r}: a DP model needs a unit among {UNITS}, the "
                             "plain model (None, None) none")
    return jobs


def _check(jobs: list[tuple[float | None, str | None]], cfg: TrainConfig,
           lines: int, writers: int, method: str, beam: int) -> None:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS} (got {method!r})")
    if lines < 10:
        raise ValueError(f"lines must be >= 10 (got {lines})")
    if not 1 <= writers <= lines:
        raise ValueError(f"writers must lie in [1, lines] = [1, {lines}] (got {writers})")
    if any(u is not None for _, u in jobs):
        n = min(lines if u == "record" else writers for _, u in jobs if u is not None)
        if not 0 < cfg.delta < 1.0 / n:
            raise ValueError(f"delta must lie in (0, 1/{n}) = (0, {1.0 / n:.3g}), below one "
                             f"over the number of privacy units (got {cfg.delta!r})")
    if beam < 1:
        raise ValueError(f"beam must be >= 1 (got {beam})")


def run(*, epsilons: Sequence[float | None] = (None, 8.0, 3.0, 1.0),
        units: Sequence[str] = ("record",), writers: int | None = None,
        models: Sequence[tuple[float | None, str | None]] | None = None,
        insertions: Sequence[int] = (0, 1, 4, 16, 64), repeats: int = 2, lines: int = 2000,
        pattern: str = "DDD-DDD", prefix: str = "{name}'s code is ",
        secrets: Sequence[str] = (), config: TrainConfig | None = None,
        method: str = "pruned", beam: int = 16,
        source: noise.Source | None = None) -> MemorizationResult:
    """Plant, train the plain model and one DP model per (ε, unit), measure (module docstring).

    ``units``: the privacy units of the DP models, ``"record"`` (one line) and/or ``"user"``
    (one writer); every ε of ``epsilons`` is trained at every unit. ``models``: instead, the
    explicit list of ``(ε, unit)`` to train (``(None, None)``: the plain model). ``writers``:
    how many writers the generated lines are dealt to (default ``lines // 2``; each canary's
    copies go to one of them). ``pattern``: the secret's layout
    (``D`` = digit; at most ``log10`` of
    :data:`~dpkit.attacks.memorization.canaries.MAX_CANDIDATES` digits). ``secrets``: fixed
    secrets for the first canaries (the rest are drawn). ``method``: how the exact rank is
    found, ``"pruned"`` (shortest-path search), ``"enumerate"`` or ``"both"`` (checks that they
    agree, and times both). ``source``: :mod:`dpkit.noise` source for the corpus, writers,
    canaries, weights, batches and DP noise (``noise.seeded(s)`` is reproducible and insecure).
    """
    cfg = config or TrainConfig()
    n_writers = max(lines // 2, 1) if writers is None else int(writers)
    jobs = _jobs(epsilons, units, models)
    _check(jobs, cfg, lines, n_writers, method, beam)
    canaries = plan(insertions=insertions, repeats=repeats, pattern=pattern, prefix=prefix,
                    secrets=secrets, source=source)
    if n_writers < len(canaries):
        raise ValueError(f"{len(canaries)} canaries need as many writers (got {n_writers})")
    base = grammar_corpus(lines, source=source)
    corpus, owner = plant(base, [c.line for c in canaries], [c.insertions for c in canaries],
                          writers=deal_writers(lines, n_writers, source=source), source=source)
    results = []
    for eps, unit in jobs:
        tr = train(corpus, TrainConfig(**{**cfg.__dict__, "epsilon": eps}),
                   units=owner if unit == "user" else None, source=source)
        mr = ModelResult(eps, tr.epsilon, tr.delta, tr.noise_multiplier, tr.seconds,
                         tr.final_loss, unit=unit)
        mr.canaries = [_measure(tr, c, method, beam) for c in canaries]
        results.append(mr)
    return MemorizationResult(pattern, canaries[0].fmt.size, lines,
                              tuple(sorted(set(int(r) for r in insertions))), results, beam,
                              n_writers)


def plot(result: MemorizationResult, path: str | Path) -> Path:
    """Exposure against insertions, min-max bars over the repeats: one panel per privacy unit
    (each with the plain model), the band where 95% of never-seen canaries fall, full exposure.
    """
    from dpkit.attacks.plots import new_figure, save_figure

    plain = [m for m in result.models if m.unit is None]
    units: list[str | None] = [u for u in UNITS if any(m.unit == u for m in result.models)]
    units = units or [None]
    fig = new_figure(6.4 * len(units), 4.6)
    xs = [max(r, 0.5) for r in result.insertions]  # log axis: draw 0 insertions at 1/2
    full = math.log2(result.size)
    for k, unit in enumerate(units):
        ax = fig.add_subplot(1, len(units), k + 1)
        for m in plain + [m for m in result.models if m.unit == unit and unit is not None]:
            _curve(ax, result, m, xs)
        ax.axhline(full, color="k", lw=0.8, ls="--")
        ax.text(xs[0], full - 1.2, f"full exposure: log2 |R| = {full:.1f} (rank 1)", fontsize=8)
        ax.axhspan(0, CHANCE_95, color="grey", alpha=0.15, lw=0)
        ax.axhline(CHANCE, color="grey", lw=0.8, ls=":")
        ax.text(xs[-1], CHANCE_95 + 0.2, f"chance: mean {CHANCE:.2f}, 95% below "
                f"{CHANCE_95:.2f}", fontsize=8, color="grey", ha="right")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(r) for r in result.insertions])
        ax.set_ylim(0, full + 1)
        ax.set_xlabel("times the canary is in the training data (one writer's copies)")
        ax.set_ylabel("exposure (bits)")
        ax.set_title(_panel_title(result, unit), fontsize=10)
        ax.legend(fontsize=8, loc="center left")
    return save_figure(fig, path)


def _curve(ax: Any, result: MemorizationResult, m: ModelResult, xs: list[float]) -> None:
    ex = [[c.exposure.exposure for c in m.at(r)] for r in result.insertions]
    mean = [float(np.mean(e)) for e in ex]
    lo = [mu - min(e) for mu, e in zip(mean, ex, strict=True)]
    hi = [max(e) - mu for mu, e in zip(mean, ex, strict=True)]
    eps = "" if m.epsilon is None else f" (PLD ε = {m.epsilon:.2f}, δ = {m.delta:g})"
    ax.errorbar(xs, mean, yerr=[lo, hi], marker="o", capsize=3, label=m.label + eps)


def _panel_title(result: MemorizationResult, unit: str | None) -> str:
    head = f"|R| = {result.size:.0e}, {result.lines} lines"
    if unit == "record":
        return f"record level: DP for one line ({head})"
    if unit == "user":
        return f"user level: DP for one writer's lines ({result.writers} writers, {head})"
    return f"Canary exposure, {head}"
