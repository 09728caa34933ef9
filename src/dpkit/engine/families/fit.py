"""Training a model on a private table: ``cur.fit(model, "SELECT ... FROM t", label=...)``.

**What it protects.** The fitted model is post-processing of one run of the estimator's own
mechanism on the table's rows, after the curator's contribution bounding: the estimator's
guarantee (its event, charged to the ledger once, before any row is read) for add/remove of one
**privacy unit** of the table. At record level a unit is one row. At user level a unit keeps at
most ``max_rows_per_unit`` rows (chosen by a keyed hash, as for every query) and the estimator
receives the unit of each row (``units=``), so that it bounds what the unit's rows contribute
*together* (a gradient method clips the sum of a unit's per-row gradients, a sufficient-
statistics method scales its sensitivity by the rows a unit may hold).

**Public encoding.** The features come from the declarations only: a numeric column with
declared bounds ``[lo, hi]`` becomes ``(x - mid) / half`` clamped to ``[-1, 1]`` (NULL and NaN as
0, the middle); a column with a declared domain becomes one indicator per key (a value outside
the domain: all zeros). The label is a column with a declared domain (classification: the
classes, in the declared order; rows with another label are dropped, a per-row filter) or with
declared bounds (regression: clamped). No statistic of the data is read to encode it (no
standardisation by the data's mean, no category list from the rows), so the encoding, and every
error, depend on the query and the declarations alone.

**The estimator's side** (duck-typed, so the engine does not import ``dpkit.learn``): it has
``set_params`` (scikit-learn style), ``privacy_event(n_features, contributions)`` (the event its
``fit`` realises on features in ``[-1, 1]^n_features`` when one unit holds up to
``contributions`` rows; from public parameters only) and ``fit(X, y, units=None)`` (with
``source=None`` too where it draws noise: see below); optionally
``notes_`` after ``fit``, lines on what the fit released besides the model (part of the charged
event, e.g. ``MLPClassifier``'s noisy row count), copied to ``TableModel.notes``.

**Randomness: the project's source, always.** A ``fit`` that takes ``source=`` (every dpkit
estimator) draws everything (initial weights, sampling, noise, the noisy count) from the
project's source: the OS CSPRNG, or the seeded stream of an INSECURE test project, whose fits
are then reproducible like its other releases. A model with ``random_state`` set is refused
before the charge, whatever the project: a seed the caller chose would let them replay the same
noise in two fits and subtract it (the reason ``Curator.open`` refuses ``source=``), and on a
seeded project the project's seed already makes the fit reproducible. The model object is
not changed for this (``source`` is an argument of this one ``fit``, not a parameter).

**The ledger.** The charge row is written (and committed) before any row is read. What the fit
released besides the model (``notes_``, and ``rows_estimate_`` / ``batch_divisor_`` where the
estimator has them: N̂ of ``batch_size="auto"``) is appended afterwards as a ``note`` row naming
the charge (the ledger is append-only: the charge row itself is never changed). A failure or a
crash between the two keeps the charge; a failure to write the note raises the fixed
after-charge error and the TableModel is not returned.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sqlglot
from sqlglot import exp

from dpkit import events as ev
from dpkit import noise as _noise
from dpkit.accounting import BudgetExceeded
from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import dry_run_errors, table_relation
from dpkit.engine.backend_spark import SPARK, check_on_spark
from dpkit.engine.charge import charged_read, quote
from dpkit.engine.families.job import Context, jsonable, table_meta, validated_where
from dpkit.engine.ledger import Entry
from dpkit.engine.plan.portable import bounding_ctes_portable
from dpkit.engine.roles import headroom
from dpkit.engine.scope import table_name
from dpkit.engine.spec import PRIVATE_ALIAS, QueryError
from dpkit.engine.tables import TableMeta, quote_ident, type_class

__all__ = ["Encoding", "Feature", "FitPlan", "FitPreview", "TableModel", "fit", "plan_encoding",
           "plan_fit", "preview_fit"]

_NUMERIC = ("int", "float", "decimal")


@dataclass(frozen=True)
class Feature:
    """One model input: a clamped numeric column or one key's indicator of a domain column."""

    name: str
    column: str
    key: Any = None  # the domain key this indicator stands for; None: a numeric column
    low: float = 0.0
    high: float = 1.0

    def sql(self, ref: str, type_: str) -> str:
        """Total DuckDB text over column reference ``ref`` (never raises on a row)."""
        if self.key is not None:
            return f"(CASE WHEN {ref} = {dplan.literal_sql(self.key, type_)} THEN 1.0 ELSE 0.0 END)"
        mid, half = _mid_half(self.low, self.high)
        x = f"TRY_CAST({ref} AS DOUBLE)"
        # NULL and NaN go to the middle; both must be tested first: DuckDB's LEAST/GREATEST
        # skip a NULL argument (LEAST(NULL, 1) = 1) and order NaN above every number
        return (f"(CASE WHEN {x} IS NULL OR isnan({x}) THEN 0.0 ELSE "
                f"GREATEST(LEAST(({x} - {mid!r}) / {half!r}, 1.0), -1.0) END)")

    def encode(self, values: np.ndarray) -> np.ndarray:
        """The same map in numpy, for new (public or held-out) rows."""
        if self.key is not None:
            return np.array([1.0 if v == self.key else 0.0 for v in values.tolist()])
        mid, half = _mid_half(self.low, self.high)
        x = np.asarray(values, dtype=np.float64)
        out = np.clip((x - mid) / half, -1.0, 1.0)
        return np.where(np.isnan(out), 0.0, out)


def _mid_half(low: float, high: float) -> tuple[float, float]:
    half = (high - low) / 2.0
    return (low + high) / 2.0, half if half > 0 else 1.0


@dataclass(frozen=True)
class Encoding:
    """The public map from a table's columns to model inputs and the label."""

    table: str
    features: tuple[Feature, ...]
    label: str
    classes: tuple[Any, ...] | None  # classification: the declared label domain, in order
    label_bounds: tuple[float, float] | None  # regression: the declared label bounds

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    def transform(self, data: Any) -> np.ndarray:
        """Features of new rows (a mapping of column -> values, e.g. a pandas DataFrame)."""
        cols = {f.column for f in self.features}
        missing = [c for c in sorted(cols) if c not in data]
        if missing:
            raise ValueError(f"the rows lack the model's columns {missing}")
        arrays = {c: np.asarray(data[c], dtype=object) for c in cols}
        return np.column_stack([f.encode(arrays[f.column]) for f in self.features])

    def labels(self, values: Any) -> np.ndarray:
        """Labels of new rows in the model's terms (class index, or the clamped value)."""
        vals = np.asarray(values, dtype=object)
        if self.classes is not None:
            index = {k: i for i, k in enumerate(self.classes)}
            return np.array([index.get(v, -1) for v in vals.tolist()], dtype=np.int64)
        assert self.label_bounds is not None
        lo, hi = self.label_bounds
        return np.clip(vals.astype(np.float64), lo, hi)


@dataclass
class TableModel:
    """A model trained on a private table through the curator, and what it cost.

    ``model``: the fitted estimator; ``encoding``: the public feature map (apply it to new
    rows with :meth:`predict` / :meth:`score`); ``epsilon`` and ``delta``: the cost charged
    (ledger entry ``ledger_seq``). Post-processing of one private release: any use costs
    nothing more.
    """

    model: Any
    encoding: Encoding
    epsilon: float
    ledger_seq: int
    event: ev.Event
    notes: list[str] = field(default_factory=list)
    delta: float = 0.0  # the delta charged with it (the ledger row's)

    def predict(self, data: Any) -> np.ndarray:
        """Predictions for new rows, as labels (the declared classes) or values."""
        pred = np.asarray(self.model.predict(self.encoding.transform(data)))
        if self.encoding.classes is not None:
            classes = np.asarray(self.encoding.classes, dtype=object)
            return classes[pred.astype(np.int64)]
        return pred

    def score(self, data: Any, labels: Any) -> float:
        """Accuracy (classification) or R² (regression) on new rows."""
        return float(self.model.score(self.encoding.transform(data),
                                      self.encoding.labels(labels)))

    def __repr__(self) -> str:
        return (f"TableModel({type(self.model).__name__} on {self.encoding.table!r}, "
                f"{len(self.encoding.features)} features, epsilon={self.epsilon:.4g}, "
                f"ledger #{self.ledger_seq})")


def _column(meta: TableMeta, name: str) -> Any:
    try:
        return meta.column(name)
    except ValueError as exc:
        raise QueryError(str(exc)) from None


def _select_columns(query: str, ctx: Context) -> tuple[TableMeta, list[str], str | None]:
    """The table, the selected columns and the WHERE text of ``SELECT cols FROM t [WHERE c]``."""
    if not isinstance(query, str) or not query.strip():
        raise QueryError('fit needs a query, e.g. "SELECT age, ward FROM visits"')
    try:
        stmt = sqlglot.parse_one(query, read="duckdb")
    except sqlglot.errors.ParseError as exc:
        raise QueryError(f"cannot parse the query: {str(exc).splitlines()[0]}") from None
    if not isinstance(stmt, exp.Select):
        raise QueryError("fit reads one SELECT of columns: SELECT a, b FROM t [WHERE ...]")
    # every clause but these is refused: the statement is rebuilt from the columns and WHERE,
    # so anything else (WITH, a SAMPLE, WINDOW, PIVOT...) would be ignored, and charged
    extra = sorted(k.rstrip("_").upper() for k, v in stmt.args.items()
                   if k not in ("expressions", "from_", "from", "where")
                   and v is not None and v is not False and v != [])
    frm = stmt.args.get("from_") or stmt.args.get("from")  # the key sqlglot 27+ uses
    if extra or frm is None or not isinstance(frm.this, exp.Table):
        raise QueryError("fit reads one SELECT of plain columns from one private table: "
                         f"SELECT a, b FROM t [WHERE ...] (this one has {extra or 'no table'})")
    table_name(frm.this, ctx.tables())  # a schema, TABLESAMPLE, PIVOT: refused as in sql()
    meta = table_meta(ctx, frm.this.name)
    alias = frm.this.alias or None
    names: list[str] = []
    for e in stmt.expressions:
        if isinstance(e, exp.Column) and e.table and e.table.lower() not in {
                meta.name.lower(), (alias or meta.name).lower()}:
            raise QueryError(f"unknown table or alias {e.table!r} in {e.sql()}; fit reads "
                             f"from {alias or meta.name!r}")
        if isinstance(e, exp.Star):
            names.extend(c.name for c in meta.columns if not c.name.startswith("__"))
        elif isinstance(e, exp.Column) and not isinstance(e.this, exp.Star):
            names.append(_column(meta, e.name).name)
        else:
            raise QueryError(f"fit selects plain columns; {e.sql()!r} is not one (derive "
                             f"features in the model's pipeline, or declare the column)")
    where = stmt.args.get("where")
    where_text = where.this.sql(dialect="duckdb") if where is not None else None
    return meta, names, validated_where(ctx, meta, where_text, alias)


def _features(meta: TableMeta, column: str) -> list[Feature]:
    col = _column(meta, column)
    if col.name in meta.domains:
        return [Feature(f"{col.name}={k}", col.name, key=k) for k in meta.domains[col.name]]
    bounds = meta.bounds_for(col.name)
    if bounds is not None and type_class(col.type) in _NUMERIC:
        return [Feature(col.name, col.name, low=float(bounds[0]), high=float(bounds[1]))]
    raise _undeclared(meta, [col.name])


def _encodable(meta: TableMeta, name: str) -> bool:
    return name in meta.domains or (
        meta.bounds_for(name) is not None and type_class(_column(meta, name).type) in _NUMERIC)


def _undeclared(meta: TableMeta, names: Sequence[str]) -> QueryError:
    """One refusal naming every column without a public encoding, with the command line's and
    Python's way to declare one: the researcher's walk met them one at a time (age, then
    education_num, ...), each a reload of the table, from a message in Python's spelling."""
    listed = ", ".join(repr(n) for n in names)
    flags = " ".join(f"--domain {n}=A,B" if type_class(_column(meta, n).type) not in _NUMERIC
                     else f"--bounds {n}=LOW:HIGH" for n in names)
    return QueryError(
        f"{listed} {'has' if len(names) == 1 else 'have'} no declared bounds or domain, so "
        f"no public encoding (a number needs bounds, a category a domain, the label its "
        f"classes): ask the data owner to declare them (dpkit add-table {meta.name} ... "
        f"{flags} --replace, repeating the table's other flags; in Python the table's "
        f"add_table(...) again with bounds={{...}}, domains={{...}}), or leave them out of "
        f"the SELECT. "
        f"Nothing was charged.")


def plan_encoding(meta: TableMeta, columns: Sequence[str], label: str) -> Encoding:
    """The public encoding of ``columns`` (features) and ``label`` (see the module docstring)."""
    lab = _column(meta, label).name
    used = {_column(meta, c).name for c in columns} | {lab}
    if meta.privacy_unit is not None and str(meta.privacy_unit) in used:
        raise QueryError(f"the privacy unit {meta.privacy_unit!r} cannot be a feature or the "
                         f"label (it identifies people; leave it out of the SELECT)")
    missing = [n for n in dict.fromkeys(_column(meta, c).name for c in [*columns, label])
               if not _encodable(meta, n)]
    if missing:
        raise _undeclared(meta, missing)
    feats = [f for c in columns if _column(meta, c).name != lab for f in _features(meta, c)]
    if not feats:
        raise QueryError("select at least one feature column besides the label")
    if lab in meta.domains:
        classes = tuple(meta.domains[lab])
        if len(classes) < 2:
            raise QueryError(f"label {lab!r} needs at least two declared classes")
        return Encoding(meta.name, tuple(feats), lab, classes, None)
    bounds = meta.bounds_for(lab)
    if bounds is None or type_class(_column(meta, lab).type) not in _NUMERIC:
        raise QueryError(f"label {lab!r} needs a declared domain (its classes) or bounds "
                         f"(a number to predict)")
    return Encoding(meta.name, tuple(feats), lab, None, (float(bounds[0]), float(bounds[1])))


def _label_sql(enc: Encoding, ref: str, type_: str) -> str:
    if enc.classes is not None:
        whens = " ".join(f"WHEN {ref} = {dplan.literal_sql(k, type_)} THEN {i}"
                         for i, k in enumerate(enc.classes))
        return f"(CASE {whens} ELSE NULL END)"
    assert enc.label_bounds is not None
    lo, hi = enc.label_bounds
    x = f"TRY_CAST({ref} AS DOUBLE)"
    return (f"(CASE WHEN {x} IS NULL OR isnan({x}) THEN NULL "
            f"ELSE GREATEST(LEAST({x}, {hi!r}), {lo!r}) END)")


def statement(meta: TableMeta, enc: Encoding, where: str | None, relation: str, *,
              seed: int, portable: bool = False) -> str:
    """The one statement reading the bounded, encoded rows (``__u``, ``__f<i>``, ``__y``).

    ``portable`` (a Spark table): bounding by the portable keyed hash (the rows DuckDB's
    portable form keeps). The rows come in a fixed order (every column, NULLS LAST) on both
    engines: the model's float sums, and which rows a seeded Poisson mask picks, depend on the
    row order, which a parallel window (the bounding) does not keep; so a seeded project's fit
    is reproducible, and the same on both engines."""
    t = quote_ident(PRIVATE_ALIAS)

    def ref(c: str) -> str:
        return f"{t}.{quote_ident(c)}"

    proj = [f"{f.sql(ref(f.column), _column(meta, f.column).type)} AS __f{i}"
            for i, f in enumerate(enc.features)]
    proj.append(f"{_label_sql(enc, ref(enc.label), _column(meta, enc.label).type)} AS __y")
    if not meta.record_level:
        proj.insert(0, f"{ref(str(meta.privacy_unit))} AS __u")
    conds = [c for c in (where,) if c]
    inner = (f"SELECT {', '.join(proj)} FROM {relation} AS {t}"
             + (f" WHERE {' AND '.join(conds)}" if conds else ""))
    cols = [f"__f{i}" for i in range(len(enc.features))] + ["__y"]
    ctes = [f"__src0 AS ({inner})", "__src AS (SELECT * FROM __src0 WHERE __y IS NOT NULL)"]
    current = "__src"
    if not meta.record_level and portable:
        typed = [("__u", _column(meta, str(meta.privacy_unit)).type),
                 *((c, "DOUBLE") for c in cols[:-1]),
                 ("__y", "BIGINT" if enc.classes is not None else "DOUBLE")]
        bound, current = bounding_ctes_portable(current, typed, [],
                                                m=int(meta.max_rows_per_unit), seed=seed)
    elif not meta.record_level:
        bound, current = dplan.bounding_ctes(current, ["__u", *cols], [],
                                             m=int(meta.max_rows_per_unit),
                                             seed_lit=f"CAST({seed} AS UBIGINT)")
    if not meta.record_level:
        ctes.extend(bound)
        cols = ["__u", *cols]
    order = f" ORDER BY {', '.join(f'{c} NULLS LAST' for c in cols)}"
    return f"WITH {', '.join(ctes)} SELECT {', '.join(cols)} FROM {current}{order}"


def _params_of(model: Any) -> dict[str, Any]:
    try:
        return dict(model.get_params())
    except (AttributeError, TypeError):
        return {}


def _declared_params(model: Any, enc: Encoding) -> dict[str, Any]:
    """What the declarations say and the model did not: its classes (the label's declared
    domain, as the indices the engine passes) or its label bounds."""
    have = _params_of(model)
    out: dict[str, Any] = {}
    if enc.classes is not None and "classes" in have:
        k = len(enc.classes)
        given = have["classes"]
        if given is None:
            out["classes"] = list(range(k))
        elif list(given) != list(range(k)):
            raise QueryError(
                f"the label {enc.label!r} has {k} declared classes, passed to the model as "
                f"0..{k - 1}; leave the model's classes unset (got {list(given)!r})")
    if enc.label_bounds is not None and have.get("label_bounds", 0) is None:
        out["label_bounds"] = enc.label_bounds
    return out


def _configure(model: Any, enc: Encoding, epsilon: float | None, delta: float | None,
               caller_delta: float) -> None:
    for method in ("set_params", "privacy_event", "fit"):
        if not callable(getattr(model, method, None)):
            raise QueryError(
                f"{type(model).__name__} cannot be trained through the curator: it needs "
                f"{method}() (use a dpkit.learn estimator)")
    if _params_of(model).get("random_state") is not None:
        raise QueryError(
            f"{type(model).__name__}(random_state={_params_of(model)['random_state']!r}): "
            f"through the curator the fit's randomness comes from the project's noise source "
            f"(a seed of the caller's would let them replay the same noise in two fits and "
            f"subtract it; a seeded test project already makes fits reproducible); leave "
            f"random_state unset")
    if delta is None and caller_delta > 0 and "delta" in _params_of(model):
        delta = caller_delta / 10.0  # as for a query: a tenth of the caller's delta
    params = {k: v for k, v in (("epsilon", epsilon), ("delta", delta)) if v is not None}
    params.update(_declared_params(model, enc))
    if params:
        try:
            model.set_params(**params)
        except (TypeError, ValueError) as exc:
            raise QueryError(f"cannot set {sorted(params)} on the model: {exc}") from None


def _event(model: Any, enc: Encoding, meta: TableMeta) -> ev.Event:
    contributions = 1 if meta.record_level else int(meta.max_rows_per_unit)
    try:
        event = model.privacy_event(len(enc.features), contributions)
    # ImportError: a missing extra; ArithmeticError: an option whose calibration overflows
    except (TypeError, ValueError, ImportError, ArithmeticError) as exc:
        raise QueryError(f"the model refused its privacy parameters: {exc}") from None
    if not isinstance(event, ev.Event):
        raise QueryError(f"{type(model).__name__}.privacy_event() must return a dpkit event")
    return event


@dataclass(frozen=True)
class FitPlan:
    """What a fit will read and charge, from public things only (the query, the declarations,
    the model's parameters): made before the charge by :func:`fit` and :func:`preview_fit`."""

    meta: TableMeta
    encoding: Encoding
    where: str | None
    event: ev.Event
    delta_share: float | None


def plan_fit(ctx: Context, model: Any, query: str, *, label: str, epsilon: float | None = None,
             delta: float | None = None) -> FitPlan:
    """Parse ``query``, encode its columns, configure ``model`` and ask it for its event; every
    refusal is a :class:`QueryError` (nothing read, nothing charged)."""
    meta, columns, where = _select_columns(query, ctx)
    enc = plan_encoding(meta, columns, label)
    # as a query's: a tenth of the δ the caller draws from (its own cap; FINDINGS.md G6)
    _configure(model, enc, epsilon, delta, ctx.ledger.delta_for(ctx.analyst))
    event = _event(model, enc, meta)
    return FitPlan(meta, enc, where, event, _delta_share(ctx, model, event))


@dataclass(frozen=True)
class FitPreview:
    """What :func:`fit` would charge now (nothing spent, no row read): ``cost`` (the increase of
    the caller's composed ε), ``delta`` (booked), ``remaining`` (the caller's headroom)."""

    model: str
    table: str
    label: str
    features: list[str]
    classes: list[Any] | None
    epsilon: float  # the model's own epsilon parameter
    cost: float
    delta: float
    remaining: float
    event: ev.Event

    @property
    def affordable(self) -> bool:
        return self.cost <= self.remaining * (1 + 1e-9) + 1e-12

    def __repr__(self) -> str:
        return (f"FitPreview({self.model} on {self.table!r} -> {self.label!r}, "
                f"{len(self.features)} features: cost epsilon {self.cost:.4g} of "
                f"{self.remaining:.4g} remaining" + (f", delta {self.delta:.3g}" if self.delta
                                                     else "")
                + ("" if self.affordable else " - NOT affordable") + ")")


def preview_fit(ctx: Context, model: Any, query: str, *, label: str,
                epsilon: float | None = None, delta: float | None = None) -> FitPreview:
    """The cost of ``fit(ctx, model, query, ...)`` now, priced by the ledger without writing."""
    p = plan_fit(ctx, model, query, label=label, epsilon=epsilon, delta=delta)
    try:
        cost = quote(ctx.ledger, p.event, analyst=ctx.analyst, delta_share=p.delta_share,
                     what="fit")
    except BudgetExceeded as exc:
        cost = exc.requested
    return FitPreview(type(model).__name__, p.meta.name, p.encoding.label,
                      p.encoding.feature_names,
                      None if p.encoding.classes is None else list(p.encoding.classes),
                      float(getattr(model, "epsilon", float("nan"))), float(cost.epsilon),
                      float(cost.delta), headroom(ctx.ledger, ctx.analyst), p.event)


def fit(ctx: Context, model: Any, query: str, *, label: str, epsilon: float | None = None,
        delta: float | None = None) -> TableModel:
    """Train ``model`` on the rows ``query`` selects, charged once (see the module docstring)."""
    p = plan_fit(ctx, model, query, label=label, epsilon=epsilon, delta=delta)
    meta, enc, where, event = p.meta, p.encoding, p.where, p.event
    source_kw = _source_kwargs(model, ctx.source)
    shadow = ctx.backend.shadow(table_relation(meta))
    portable = meta.storage == SPARK or ctx.portable
    with ctx.lock:
        with dry_run_errors("fit"):
            ctx.backend.dry_run(statement(meta, enc, where, shadow, seed=0, portable=portable))
        seed = int(_noise.uniform_int(2**63 - 1, 1, source=ctx.source)[0])
        text = statement(meta, enc, where, table_relation(meta), seed=seed, portable=portable)
        check_on_spark(ctx.backend, meta, [text])  # Spark analyses it before the charge
        nf = len(enc.features)

        def read() -> dict[str, np.ndarray]:
            return ctx.backend.run_numpy(text)

        def done(cols: dict[str, np.ndarray], entry: Entry) -> TableModel:
            x = (np.column_stack([np.asarray(cols[f"__f{i}"], dtype=np.float64)
                                  for i in range(nf)]) if len(cols["__y"]) else
                 np.zeros((0, nf)))
            y = np.asarray(cols["__y"])
            y = y.astype(np.int64) if enc.classes is not None else y.astype(np.float64)
            units = None if meta.record_level else np.asarray(cols["__u"])
            model.fit(x, y, units=units, **source_kw)
            notes = [str(n) for n in getattr(model, "notes_", None) or ()]
            if notes:  # released besides the model: into the ledger before it is returned
                ctx.ledger.record("note", _note(model, notes, entry.seq), analyst=ctx.analyst,
                                  query=query)
            return TableModel(model, enc, float(entry.view["epsilon_cost"]), entry.seq, event,
                              notes, float(entry.view.get("delta_cost") or 0.0))

        details = jsonable({"kind": "fit", "model": type(model).__name__, "table": meta.name,
                            "features": enc.feature_names, "label": enc.label,
                            "contributions": 1 if meta.record_level else
                            int(meta.max_rows_per_unit)})
        return charged_read(ctx.ledger, event, analyst=ctx.analyst, query=query,
                            delta_share=p.delta_share, details=details, read=read,
                            finish=done, what="fit")


def _source_kwargs(model: Any, source: _noise.Source | None) -> dict[str, Any]:
    """``{"source": the project's}`` for a ``fit`` that takes one (dpkit's estimators);
    nothing for one that does not (a duck-typed model that draws no noise of its own)."""
    try:
        params = inspect.signature(model.fit).parameters.values()
    except (TypeError, ValueError):  # a builtin or C-level fit: no signature to read
        return {}
    if not any(p.name == "source" or p.kind == p.VAR_KEYWORD for p in params):
        return {}
    return {"source": source if source is not None else _noise.default_source()}


def _note(model: Any, notes: list[str], charge: int) -> dict[str, Any]:
    """The ledger's ``note`` row after charge ``charge``: the notes, and the released numbers
    the estimator reports (N̂ of ``batch_size="auto"`` and the divisor made from it)."""
    released = {name.rstrip("_"): getattr(model, name, None)
                for name in ("rows_estimate_", "batch_divisor_")}
    return jsonable({"charge": charge, "notes": notes,
                     **{k: v for k, v in released.items() if v is not None}})


def _delta_share(ctx: Context, model: Any, event: ev.Event) -> float | None:
    """The δ an 'approx' ledger books for an event with Gaussian or zCDP steps: the model's own δ
    (a tenth of the analyst's δ when the model has none: the project's, or their own cap)."""
    if ctx.ledger.config.accountant != "approx":
        return None
    if not any(isinstance(e, (ev.Gaussian, ev.DiscreteGaussian, ev.ZCDP)) for e in event.leaves()):
        return None
    delta = getattr(model, "delta", None)
    return float(delta) if delta else ctx.ledger.delta_for(ctx.analyst) / 10.0
