"""An opt-in record of the work one query does: its noise requests and its engine statements.

Wall-clock time is too noisy to compare in CI, but what the curator *does* is a deterministic
proxy for its timing classes: which statements it sends to the engine, in which order, and
which noise it asks for (sampler or mechanism, shape, scale). On neighbouring datasets D and
D' run with the same seeded source, all of it must be equal; a statement run only on some data,
or a noise scale computed from the data, is a side channel that no noise covers. The
side-channel fuzzer (:mod:`dpkit.attacks.side_channels`) turns the recorder on around each
query and compares the two records.

Off by default: every hook is one call that finds no recorder (``None``) and returns. The
recorder is process-wide, not per thread, on purpose: the service answers in worker threads,
and the fuzzer runs one query at a time. Do not turn it on in a process that serves others.

What a noise request records: the entry point's name, then each argument except the source,
described by :func:`describe` (scalars by value, arrays by shape and dtype, never their
contents; the arguments that set how many values are drawn marked ``#``). Requests made
inside a recorded request are not recorded: a mechanism's rejection loop, or a sampler calling
another, shows as the one request its caller made. The number of random words a request
consumes is not recorded either. For the samplers with scalar parameters (discrete Laplace and
Gaussian, Bernoulli, uniform integers, permutations, floats) it is a function of the
parameters, the size and the random words only: their loops test the random draws against the
parameters, never a data value (the noise is added after it is drawn). For the lane samplers
(``bernoulli_lanes``, ``bernoulli_exp_lanes``) and the exponential mechanism's rejection loop
built on them (``dpkit.mechanisms``), it depends on the per-lane parameters, which are computed
from the scores, i.e. from the data: a timing channel in principle (docs/attacks.md §6), closed
on a ``ConstantWork`` source (:mod:`dpkit.noise.constant`: fixed plans, the same words).

Values drawn by small outermost requests (``uniform_int`` of at most :data:`SMALL_DRAW` values
of 12 digits or more: the per-query seeds that the compiled SQL embeds) are remembered, so
that a reader can tell a random literal in a statement from a data-dependent one
(:meth:`Trace.scrub`).

>>> from dpkit import noise
>>> with noise.trace.recording() as t:
...     _ = noise.discrete_laplace(3, 4, source=noise.seeded(1))
>>> t.noise
[('discrete_laplace', '3', '#4')]
>>> noise.trace.active() is None
True
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ParamSpec, TypeVar

import numpy as np

from .sources import Source

__all__ = ["SIZES", "SMALL_DRAW", "SizeOf", "Trace", "active", "derived", "describe",
           "recording", "request", "statement", "traced"]

P = ParamSpec("P")
R = TypeVar("R")

#: requests of at most this many uniform integers are seeds: their values are remembered
SMALL_DRAW = 4
_SKIP = frozenset({"source", "src", "out"})
#: the entry points' arguments that set how many values are drawn, not their law
SIZES = frozenset({"size", "n", "values", "probs", "g"})
_LONG = 10**11  # a remembered draw has at least 12 digits (seeds are 63-bit)


@dataclass
class Trace:
    """What the curator did while recording: statements and noise requests, in order."""

    statements: list[tuple[str, ...]] = field(default_factory=list)
    noise: list[tuple[str, ...]] = field(default_factory=list)
    drawn: list[str] = field(default_factory=list)  # small uniform draws (per-query seeds)
    derived: list[str] = field(default_factory=list)  # values computed from drawn ones only
    depth: int = 0  # > 0 inside a recorded request: nested requests are its own work
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def scrub(self, text: str) -> str:
        """``text`` with the values drawn during the recording replaced by ``<drawn#i>``
        (their order of drawing), so that two runs whose sources were at different positions
        (a sampler consumed a different number of words earlier) compare equal."""
        for i, v in sorted(enumerate(self.drawn), key=lambda iv: -len(iv[1])):
            text = text.replace(v, f"<drawn#{i}>")
        for i, v in enumerate(self.derived):  # whole numbers only: they may be short
            text = re.sub(rf"(?<![0-9]){v}(?![0-9])", f"<derived#{i}>", text)
        return text


_current: Trace | None = None


def active() -> Trace | None:
    """The recorder now on, or None (the normal case)."""
    return _current


@contextlib.contextmanager
def recording() -> Iterator[Trace]:
    """Record the work done inside the block (nested recordings are refused: one query at a
    time)."""
    global _current
    if _current is not None:
        raise RuntimeError("a work trace is already being recorded; recordings do not nest")
    t = Trace()
    _current = t
    try:
        yield t
    finally:
        _current = None


@dataclass(frozen=True)
class SizeOf:
    """An argument that sets how many values are drawn (a size, a shape, the array the noise
    is added to): described with a leading ``#``, so that a reader can tell the sizes, which
    may follow the data where the release allows it (the groups found, the units sampled),
    from the scales, which never may."""

    value: Any


def describe(value: Any) -> str:
    """A public description of one argument: scalars by value, arrays by shape and dtype,
    objects by their ``trace_face()`` (a mechanism's weights: shape and factor) or type;
    sizes (:class:`SizeOf`) with a leading ``#``."""
    if isinstance(value, SizeOf):
        return "#" + describe(value.value)
    if isinstance(value, Source):
        return "source"
    if isinstance(value, np.ndarray):
        return f"array{value.shape}:{value.dtype}"
    if isinstance(value, (bool, int, float, Fraction, str, np.integer, np.floating)):
        return str(value)
    if isinstance(value, tuple):
        return "(" + ",".join(describe(v) for v in value) + ")"
    face = getattr(value, "trace_face", None)
    if callable(face):
        return str(face())
    if value is None:
        return "None"
    return type(value).__name__


def _flat(params: tuple[Any, ...]) -> list[str]:
    """The described parameters, an object's ``trace_face()`` tuple spread into its parts (so
    that its sizes stay apart from its scales)."""
    out: list[str] = []
    for p in params:
        face = getattr(p, "trace_face", None)
        parts = face() if callable(face) else p
        out += [describe(x) for x in parts] if isinstance(parts, tuple) and callable(face) \
            else [describe(parts)]
    return out


def derived(values: Iterable[int]) -> None:
    """Record values computed from drawn ones only (a keyed hash's multipliers, derived from a
    per-query seed), which :meth:`Trace.scrub` blanks as it blanks the drawn values: where two
    sources stood at different positions, they differ for the same reason (no-op when not
    recording)."""
    t = _current
    if t is not None:
        with t.lock:
            t.derived.extend(str(int(v)) for v in values)


def statement(engine: str, method: str, text: str) -> None:
    """Record one statement sent to an engine (no-op when not recording)."""
    t = _current
    if t is not None:
        with t.lock:
            t.statements.append((engine, method, text))


@contextlib.contextmanager
def request(name: str, *params: Any) -> Iterator[None]:
    """Record one noise request (a mechanism's sampling) and nothing nested inside it."""
    t = _current
    if t is None or t.depth:
        yield
        return
    with t.lock:
        t.noise.append((name, *_flat(params)))
        t.depth += 1
    try:
        yield
    finally:
        with t.lock:
            t.depth -= 1


def traced(fn: Callable[P, R]) -> Callable[P, R]:
    """Record each outermost call of the noise entry point ``fn`` (name and described
    arguments, the source left out) while a recording is on."""
    name = fn.__name__
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def entry(*args: P.args, **kwargs: P.kwargs) -> R:
        t = _current
        if t is None:
            return fn(*args, **kwargs)
        outer = t.depth == 0
        bound = sig.bind(*args, **kwargs).arguments
        params = [SizeOf(v) if k in SIZES else v for k, v in bound.items() if k not in _SKIP]
        with request(name, *params):
            out = fn(*args, **kwargs)
        if outer and name == "uniform_int" and isinstance(out, np.ndarray) and (
                out.size <= SMALL_DRAW):
            # only long numbers: a short one ("3") would also blank unrelated literals
            with t.lock:
                t.drawn.extend(str(int(v)) for v in out.ravel() if abs(int(v)) >= _LONG)
        return out

    return entry
