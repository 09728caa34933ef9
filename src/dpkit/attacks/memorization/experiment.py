"""The Secret Sharer experiment: plant canaries, train without and with DP-SGD, measure exposure.

:func:`run` draws ``repeats`` canaries per insertion count (``"ann's code is 281-264"``, one
name per canary so that canaries do not share a prefix), inserts each into the seeded grammar
corpus its number of times, trains one model per entry of ``epsilons`` (``None``: no DP) on the
same lines, and for every model and canary finds the exact rank over the whole candidate space
(:mod:`.exposure`) and tries the extraction attack (greedy and beam decoding from the prefix).
Canaries inserted 0 times are the control: their exposure is what chance gives (~1.44 bits).

Every input is checked before anything is trained. Privacy: each DP model is (ε, δ)-DP for
add/remove-one-line neighbours; a canary inserted ``r`` times is ``r`` lines (module
:mod:`.model`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import noise

from .canaries import NAMES, CanaryFormat, grammar_corpus, insert_canaries
from .exposure import Exposure, extract, rank_enumerate, rank_pruned
from .model import TrainConfig, train

__all__ = ["CanaryResult", "MemorizationResult", "ModelResult", "Planted", "plan", "plot", "run"]

CHANCE = 1.0 / math.log(2.0)  # E[log2 |R| - log2 rank] for a uniform rank, |R| large
_METHODS = ("pruned", "enumerate", "both")


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

    @property
    def label(self) -> str:
        return "no DP" if self.target_epsilon is None else f"ε = {self.target_epsilon:g}"

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
    if count > len(NAMES):
        raise ValueError(f"{count} canaries but only {len(NAMES)} names; lower repeats= or "
                         "the number of insertion counts")
    fmts = [CanaryFormat(prefix.replace("{name}", NAMES[i]), pattern) for i in range(count)]
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
    return CanaryResult(c, exp, extract(model, c.fmt), extract(model, c.fmt, beam=beam), other)


def run(*, epsilons: Sequence[float | None] = (None, 8.0, 3.0, 1.0),
        insertions: Sequence[int] = (0, 1, 4, 16, 64), repeats: int = 2, lines: int = 2000,
        pattern: str = "DDD-DDD", prefix: str = "{name}'s code is ",
        secrets: Sequence[str] = (), config: TrainConfig | None = None,
        method: str = "pruned", beam: int = 16,
        source: noise.Source | None = None) -> MemorizationResult:
    """Plant, train one model per ``epsilons`` entry, measure (module docstring).

    ``pattern``: the secret's layout (``D`` = digit; at most ``log10`` of
    :data:`~dpkit.attacks.memorization.canaries.MAX_CANDIDATES` digits). ``secrets``: fixed
    secrets for the first canaries (the rest are drawn). ``method``: how the exact rank is
    found, ``"pruned"`` (shortest-path search), ``"enumerate"`` or ``"both"`` (checks that they
    agree, and times both). ``source``: :mod:`dpkit.noise` source for the corpus, canaries,
    weights, batches and DP noise (``noise.seeded(s)`` is reproducible and insecure).
    """
    cfg = config or TrainConfig()
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS} (got {method!r})")
    for e in epsilons:
        if e is not None and not (math.isfinite(e) and e > 0):
            raise ValueError(f"each epsilon must be a finite number > 0, or None for the "
                             f"non-private model (got {e!r})")
    if lines < 10:
        raise ValueError(f"lines must be >= 10 (got {lines})")
    if any(e is not None for e in epsilons) and not 0 < cfg.delta < 1.0 / lines:
        raise ValueError(f"delta must lie in (0, 1/lines) = (0, {1.0 / lines:.3g}) "
                         f"(got {cfg.delta!r})")
    if beam < 1:
        raise ValueError(f"beam must be >= 1 (got {beam})")
    canaries = plan(insertions=insertions, repeats=repeats, pattern=pattern, prefix=prefix,
                    secrets=secrets, source=source)
    corpus = insert_canaries(grammar_corpus(lines, source=source), [c.line for c in canaries],
                             [c.insertions for c in canaries], source=source)
    models = []
    for eps in epsilons:
        tr = train(corpus, TrainConfig(**{**cfg.__dict__, "epsilon": eps}), source=source)
        mr = ModelResult(eps, tr.epsilon, tr.delta, tr.noise_multiplier, tr.seconds,
                         tr.final_loss)
        mr.canaries = [_measure(tr, c, method, beam) for c in canaries]
        models.append(mr)
    return MemorizationResult(pattern, canaries[0].fmt.size, lines,
                              tuple(sorted(set(int(r) for r in insertions))), models, beam)


def plot(result: MemorizationResult, path: str | Path) -> Path:
    """Exposure against insertions, one line per model, min-max bars over the repeats."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'dpkit[plots]'") from exc
    fig = Figure(figsize=(6.4, 4.4), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    xs = [max(r, 0.5) for r in result.insertions]  # log axis: draw 0 insertions at 1/2
    for m in result.models:
        ex = [[c.exposure.exposure for c in m.at(r)] for r in result.insertions]
        mean = [float(np.mean(e)) for e in ex]
        lo = [mu - min(e) for mu, e in zip(mean, ex, strict=True)]
        hi = [max(e) - mu for mu, e in zip(mean, ex, strict=True)]
        eps = "" if m.epsilon is None else f" (PLD ε = {m.epsilon:.2f}, δ = {m.delta:g})"
        ax.errorbar(xs, mean, yerr=[lo, hi], marker="o", capsize=3, label=m.label + eps)
    full = math.log2(result.size)
    ax.axhline(full, color="k", lw=0.8, ls="--")
    ax.text(xs[0], full - 1.2, f"full exposure: log2 |R| = {full:.1f} (rank 1)", fontsize=8)
    ax.axhline(CHANCE, color="grey", lw=0.8, ls=":")
    ax.text(xs[0], CHANCE + 0.3, "chance (never inserted): 1.44", fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(r) for r in result.insertions])
    ax.set_ylim(0, full + 1)
    ax.set_xlabel("times the canary is in the training data")
    ax.set_ylabel("exposure (bits)")
    ax.set_title(f"Canary exposure, |R| = {result.size:.0e}, {result.lines} lines")
    ax.legend(fontsize=8, loc="center right")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p, format="png")
    return p

