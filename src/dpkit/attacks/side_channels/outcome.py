"""What a query showed besides its noisy values, and the comparison of two of them.

The curator's promise (DESIGN.md, "one sealed line"): the outcome kind, the exception class
and text, the result's columns, the released keys and their order, the number of rows and the
budget charged are functions of public things only (the query, the declarations, the budget).
On neighbouring datasets D and D' run with the same seed and the same query sequence, they
must therefore be equal; only the noisy values may differ. Where the released rows depend on
noise (private partition selection, HAVING, ORDER BY an aggregate), only what noise cannot
explain is compared: the relative order of the keys released on both sides.

The work done is compared too (``observe(..., trace=True)``, :mod:`dpkit.noise.trace`): the
engine statements, in order and with their text, and the noise requests (sampler or mechanism,
scales, sizes). They are the deterministic proxy for a query's timing class: a statement run
only on some data, or a noise scale computed from the data, is a channel no noise covers.
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import Any

from dpkit import noise
from dpkit.attacks.side_channels.query import RELEASES, Query, make_model
from dpkit.engine.charge import AFTER_CHARGE
from dpkit.noise.trace import Trace

__all__ = ["Outcome", "compare", "observe", "self_check"]

_REFUSALS = ("QueryError", "BudgetExceeded")
# the engine's words for a failure between the charge and the noise (engine/charge.py)
# the fixed message's words (engine.charge.AFTER_CHARGE), so a rewording cannot silence the check
_READ_FAILED = AFTER_CHARGE.split("{what} ", 1)[1].split(" (", 1)[0]


@dataclass(frozen=True)
class Outcome:
    """The public face of one query's outcome on one project."""

    kind: str  # "answer", "refusal" (QueryError / BudgetExceeded) or "exception" (anything else)
    error_class: str = ""
    error_text: str = ""
    columns: tuple[str, ...] = ()
    keys: tuple[tuple[Any, ...], ...] = ()
    rows: int = 0
    charged_epsilon: float = 0.0
    charged_delta: float = 0.0
    charges: int = 0  # ledger charges this query added
    selected: bool = False  # groups chosen by private partition selection (delta > 0)
    noisy_rows: bool = False  # the number of rows is itself noisy (synthetic records)
    preview: str = ""  # an SQL query's preview (cost, expected errors) or its refusal, asked first
    # the work trace (dpkit.noise.trace), when recorded: engine statements and noise requests
    statements: tuple[tuple[str, ...], ...] = ()
    noise: tuple[tuple[str, ...], ...] = ()
    # the warnings the call emitted (class: message), a set: a warning raised only when a row
    # holds some value is a channel like an error (FINDINGS.md G2: numpy's on a diverging fit)
    warnings: tuple[str, ...] = ()
    # what a front end adds (the service's status, headers, JSON keys and public fields:
    # dpkit.server.fuzz), as the answer or exception object tells it; empty on the curator
    http: str = ""
    flags: tuple[str, ...] = ()  # one-sided problems the front end saw (a reused reference)

    def short(self) -> str:
        if self.kind != "answer":
            return f"{self.kind} {self.error_class}: {self.error_text[:160]}"
        keys = f", keys {list(self.keys)[:6]}" if self.keys else ""
        return (f"answer {list(self.columns)[:4]}, {self.rows} rows{keys}, charged "
                f"eps={self.charged_epsilon:.6g} delta={self.charged_delta:.3g} "
                f"({self.charges} charges)")


def _key(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return v


def _keys(res: Any) -> tuple[tuple[Any, ...], ...]:
    kinds = getattr(res, "kinds", None) or {}
    cols = [c for c in res.columns if kinds.get(c) == "group"]
    if not cols:
        return ()
    arrays = [list(res.data[c]) for c in cols]
    return tuple(tuple(_key(a[i]) for a in arrays) for i in range(len(arrays[0])))


def observe(cur: Any, query: Query, scrub: tuple[str, ...] = (), *,
            trace: bool = False) -> Outcome:
    """Run ``query`` on ``cur`` and record its public face (``scrub``: text to blank out of
    error messages, e.g. the project's own folder, which differs between D and D').

    ``trace``: also record the work done (the preview's and the query's engine statements and
    noise requests, :mod:`dpkit.noise.trace`) into ``statements`` and ``noise``."""
    with _work(trace) as work:
        face = _run(cur, query, scrub)
    if work is None:
        return face
    return dc_replace(face, statements=tuple(_statement(work, s, scrub) for s in work.statements),
                      noise=tuple(work.noise))


@contextlib.contextmanager
def _work(on: bool) -> Iterator[Trace | None]:
    if not on:
        yield None
        return
    with noise.trace.recording() as t:
        yield t


# a table's physical relation carries a random suffix per load (engine/load.py): the same
# table on D and D' has two names
_PHYSICAL = re.compile(r"__v[0-9a-f]{16}")


def _statement(work: Trace, s: tuple[str, ...], scrub: tuple[str, ...]) -> tuple[str, ...]:
    """One recorded statement with what legitimately differs between the two projects blanked:
    their folders, their relations' load suffixes, and the values drawn from the noise source
    (per-query seeds: random, and a source that consumed a different number of words earlier,
    e.g. in an exponential mechanism's rejection loop, draws different ones)."""
    *where, text = s
    for x in scrub:
        text = text.replace(x, "<project>")
    return (*where, _PHYSICAL.sub("__v<load>", work.scrub(text)))


def _run(cur: Any, query: Query, scrub: tuple[str, ...]) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        face = _run_call(cur, query, scrub)
    # a ResourceWarning comes from the garbage collector finalising whatever object it finds
    # (another test's unclosed connection), at a moment no query controls: not the call's
    said = sorted({f"{w.category.__name__}: {w.message}" for w in caught
                   if not issubclass(w.category, ResourceWarning)})
    for s in scrub:
        said = [w.replace(s, "<project>") for w in said]
    return dc_replace(face, warnings=tuple(said))


def _run_call(cur: Any, query: Query, scrub: tuple[str, ...]) -> Outcome:
    seen = _preview_face(cur, query, scrub)
    before = cur.ledger.spend()
    try:
        res = query.call(cur)
    except Exception as exc:  # every exception is an outcome to compare
        after = cur.ledger.spend()
        text = str(exc)
        for s in scrub:
            text = text.replace(s, "<project>")
        name = type(exc).__name__
        # a refusal is a QueryError or BudgetExceeded, or a subclass (PlanError, ...)
        refused = any(c.__name__ in _REFUSALS for c in type(exc).__mro__)
        return Outcome(
            kind="refusal" if refused else "exception", error_class=name,
            error_text=text, charged_epsilon=after.spent - before.spent,
            charged_delta=after.delta_spent - before.delta_spent,
            charges=after.charges - before.charges, preview=seen, **_front(exc, scrub))
    after = cur.ledger.spend()
    if query.family == "fit":  # a trained model: its public face is its shape and classes
        return Outcome(
            kind="answer", columns=_model_face(res), rows=0,
            charged_epsilon=after.spent - before.spent,
            charged_delta=after.delta_spent - before.delta_spent,
            charges=after.charges - before.charges, preview=seen)
    synthetic = not hasattr(res, "kinds")
    return Outcome(
        kind="answer", columns=tuple(res.columns), keys=() if synthetic else _keys(res),
        rows=len(res.data[res.columns[0]]) if res.columns else 0,
        charged_epsilon=after.spent - before.spent,
        charged_delta=after.delta_spent - before.delta_spent,
        charges=after.charges - before.charges,
        selected=float(getattr(res, "delta", 0.0) or 0.0) > 0.0 and not synthetic,
        # synthetic records: their number is a noisy count unless the query fixed it (rows=)
        noisy_rows=synthetic and query.rows is None, preview=seen, **_front(res, scrub))


def _front(obj: Any, scrub: tuple[str, ...]) -> dict[str, Any]:
    """The front end's own face of an answer or an exception (``http``, ``flags``), if any."""
    http = str(getattr(obj, "http", "") or "")
    for s in scrub:
        http = http.replace(s, "<project>")
    return {"http": http, "flags": tuple(getattr(obj, "flags", ()) or ())}


def _preview_face(cur: Any, query: Query, scrub: tuple[str, ...]) -> str:
    """What previewing an SQL query, a fit or a release family (``cur.preview_release``)
    shows (it reads no data, so all of it must be public): the cost, the remaining budget, the
    expected error per output and the notes (a fit: its features, classes, event), or the
    refusal's class and text. Empty for synthetic records, for a release asked by accuracy
    (``accuracy=`` is the release's keyword, not its preview's) and on a front without the
    preview."""
    try:
        if query.family == "sql" and hasattr(cur, "preview"):
            p = cur.preview(query.sql(), **query.kwargs())
        elif query.family == "fit" and hasattr(cur, "preview_fit"):
            p = cur.preview_fit(make_model(query.model), query.sql(), label=query.label,
                                **query.kwargs())
        elif (query.family in RELEASES and query.accuracy is None
              and hasattr(cur, "preview_release")):
            p = cur.preview_release(query.family, query.table, *query.release_args(),
                                    where=query.where_sql() or None, **query.kwargs())
        else:
            return ""
    except Exception as exc:  # a refusal is part of the face too
        text = f"{type(exc).__name__}: {exc}"
        for s in scrub:
            text = text.replace(s, "<project>")
        return text
    if isinstance(p, str):  # the service's JSON text
        return p
    if query.family == "fit":
        return repr((p.model, p.features, p.classes, p.epsilon, p.cost, p.remaining, p.delta,
                     repr(p.event)))
    return repr((p.cost, p.remaining, p.delta, p.split, p.outputs, p.notes, repr(p.event)))


def _model_face(fitted: Any) -> tuple[str, ...]:
    """The estimator's class, its features' names and its classes: all from the query and the
    declarations (the weights are the noisy part)."""
    model = getattr(fitted, "model", fitted)
    feats = getattr(getattr(fitted, "encoding", None), "features", ())
    classes = getattr(model, "classes_", None)
    return (type(model).__name__, *(str(getattr(f, "name", f)) for f in feats),
            "classes=" + ("" if classes is None else repr([_key(c) for c in classes])),
            *_attributes(model))


def _attributes(model: Any) -> tuple[str, ...]:
    """What the fitted object holds besides its weights' values: each attribute's name and
    type (an array's shape), and the training summary (FINDINGS.md G1: the training object,
    its rows and exact counts, was kept on the model), its noisy divisor left out."""
    out = []
    for name, value in sorted(vars(model).items()):
        shape = getattr(value, "shape", None)
        out.append(f"{name}:{type(value).__name__}{'' if shape is None else list(shape)}")
    summary = getattr(model, "training_", None)
    if summary is not None:
        out.append(re.sub(r"expected_batch_size=[^,)]*", "", repr(summary)))
    return tuple(out)


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def _common_order(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
    sa, sb = set(a), set(b)
    return [k for k in a if k in sb], [k for k in b if k in sa]


def _requests(query: Query, o: Outcome) -> Any:
    """The part of the noise requests that must not depend on the data.

    Everywhere: each request's sampler or mechanism and its scales, in order. The sizes
    (arguments marked ``#``) too, except where the release lets the work follow the data or the
    noise: under private partition selection (one noise value per group found in the data) and
    for synthetic records (their number is a noisy count unless ``rows=`` fixed it, the draws
    that place them, e.g. permutations, follow the noisy histogram, and MST measures the pairs
    of a privately chosen tree), only the requests that carry a scale are compared, without
    their sizes. A trained model's requests are compared in order, without their sizes: the fit
    draws from the project's seeded source, in line (so the order and the number of steps are
    fixed), but DP-SGD samples the units of each step (a mask of one draw per unit, a priority
    per row) and the estimators' noisy counts pass the count itself as the ``values`` argument.
    """
    if query.family == "fit":
        return tuple(tuple(p for p in r if not p.startswith("#")) for r in o.noise)
    if o.selected or query.family == "synthetic":  # noisy_rows: synthetic only
        scaled = (tuple(p for p in r if not p.startswith("#")) for r in o.noise)
        return tuple(r for r in scaled if len(r) > 1)
    return o.noise


def compare(query: Query, a: Outcome, b: Outcome) -> tuple[str, ...]:
    """The public fields on which ``a`` (on D) and ``b`` (on D') differ, in a fixed order."""
    diff: list[str] = []
    if a.kind != b.kind:
        diff.append("kind")
    if a.error_class != b.error_class:
        diff.append("error_class")
    elif a.error_text != b.error_text:
        diff.append("error_text")
    if a.columns != b.columns:
        diff.append("columns")
    if a.preview != b.preview:
        diff.append("preview")
    if not _close(a.charged_epsilon, b.charged_epsilon) or a.charges != b.charges:
        diff.append("charge_epsilon")
    if not _close(a.charged_delta, b.charged_delta):
        diff.append("charge_delta")
    if a.warnings != b.warnings:
        diff.append("warnings")
    if a.http != b.http:
        diff.append("http")
    if a.statements != b.statements:
        diff.append("statements")
    if _requests(query, a) != _requests(query, b):
        diff.append("noise_requests")
    if a.kind == b.kind == "answer" and not diff:
        noisy_set = query.noisy_rows or a.selected or b.selected or a.noisy_rows
        if not noisy_set:
            if a.rows != b.rows:
                diff.append("rows")
            if set(a.keys) != set(b.keys):
                diff.append("key_set")
        if not query.noisy_order:
            ca, cb = _common_order(a.keys, b.keys)
            if ca != cb:
                diff.append("key_order")
    return tuple(diff)


def self_check(query: Query, o: Outcome) -> tuple[str, ...]:
    """Problems visible on one dataset alone: a release that charged nothing, keys released
    twice (-0.0 and 0.0 as two groups), an internal exception (not a refusal), a fit that
    failed after its charge (a fit has no post-processing that may refuse: a charged failure
    is an option checked too late, FINDINGS.md G5, or a failure that follows the rows, G2), and
    any query whose work between the charge and the noise failed (M2)."""
    out: list[str] = []
    if o.kind == "answer" and o.rows > 0 and o.charges == 0:
        out.append("free_release")
    if o.kind == "answer" and len(set(o.keys)) < len(o.keys):
        out.append("duplicate_keys")
    if o.kind == "exception":
        out.append("internal_exception")
    if query.family == "fit" and o.kind != "answer" and o.charges > 0:
        out.append("charged_failure")
    elif o.error_class == "ChargedQueryError" and _READ_FAILED in o.error_text:
        # the work between the charge and the noise failed: a failure that follows the rows
        # (FINDINGS.md M2), seen on D and D' alike only when both hold such a row (a failure
        # on the noisy table, HAVING's or an expression's, says so in its own words)
        out.append("charged_failure")
    out += o.flags
    return tuple(out)
