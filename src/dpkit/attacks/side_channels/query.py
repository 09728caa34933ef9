"""One fuzzer query: what to call on a curator, and which parts of its answer are noisy."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["MODELS", "RELEASES", "Query"]

#: the release families that have a preview (``cur.preview_release(family, ...)``)
RELEASES = ("ranges", "cdf", "quantiles", "marginals")

#: the estimators a ``fit`` query may train, by name -> (module attribute, classifier?);
#: DP-SGD's MLP only where torch is installed (without it, training is refused on both sides)
MODELS = {"logistic": ("LogisticRegression", True), "naive_bayes": ("GaussianNB", True),
          "linear": ("LinearRegression", False),
          "logistic_diverging": ("LogisticRegression", True),
          "linear_bad_option": ("LinearRegression", False)}
if importlib.util.find_spec("torch") is not None:
    MODELS["mlp"] = ("MLPClassifier", True)
    MODELS["mlp_diverging"] = ("MLPClassifier", True)
    MODELS["mlp_bad_option"] = ("MLPClassifier", True)

#: a small network and few steps: the fuzzer looks at what is public, not at accuracy; the
#: sampling rate is required through the curator (the row count is private); batch_size left
#: to the curator's default, "auto", so that the noisy row count N̂ is drawn (and traced) too.
#: "_diverging": a learning rate that overflows the weights to inf / NaN, after which a row's
#: gradient is NaN: it must neither fail nor warn only where a row is read (FINDINGS.md G2, G3).
#: "_bad_option": an option fit would refuse, which must be refused before the charge (G5;
#: ``self_check`` flags a fit that failed after its charge)
_PARAMS: dict[str, dict[str, Any]] = {
    "mlp": {"hidden_layer_sizes": (4,), "epochs": 2, "sample_rate": 0.5},
    "logistic_diverging": {"learning_rate": 1e308},
    "mlp_diverging": {"hidden_layer_sizes": (4,), "epochs": 2, "sample_rate": 1.0,
                      "learning_rate": 1e38},
    "linear_bad_option": {"label_bounds": (0.0, float("inf"))},
    "mlp_bad_option": {"hidden_layer_sizes": (4,), "epochs": 2, "sample_rate": 0.5,
                       "activation": "sigmoid"}}


def make_model(name: str) -> Any:
    import dpkit.learn as learn  # lazily: the fuzzer's other families need no learner

    return getattr(learn, MODELS[name][0])(**_PARAMS.get(name, {}))


@dataclass(frozen=True)
class Query:
    """A query the fuzzer runs on both projects of a D/D' pair.

    ``family``: ``"sql"`` (``cur.sql(text, ...)``), ``"cdf"`` (``cur.cdf(table, column,
    where=...)``), ``"ranges"`` (``cur.ranges(table, column, ranges, where=...)``),
    ``"quantiles"`` (``cur.quantiles(table, column, probabilities, where=...)``),
    ``"marginals"`` (``cur.marginals(table, columns, k=..., where=...)``), ``"synthetic"``
    (``cur.synthetic(table, columns, where=..., method=...)``) or ``"fit"`` (``cur.fit(model,
    text, label=...)``: ``model`` names a ``dpkit.learn`` estimator, :data:`MODELS`).
    ``where``: the WHERE conjuncts (kept apart so that a finding can be minimised to one of them);
    ``text`` is the SQL with ``{where}`` standing for them. ``noisy_rows``: the set of released
    rows may legitimately depend on noise (HAVING, or ORDER BY an aggregate with LIMIT);
    ``noisy_order``: their order may (ORDER BY an aggregate). ``tags``: the grammar rules used
    (for grouping findings by root cause).
    """

    family: str
    table: str
    text: str = ""
    where: tuple[str, ...] = ()
    column: str = ""
    columns: tuple[str, ...] = ()
    epsilon: float = 0.1
    noise: str = "laplace"
    delta: float | None = None
    weights: tuple[tuple[str, float], ...] = ()
    bins: int | None = None
    probabilities: tuple[float, ...] = ()  # quantiles
    ranges: tuple[tuple[float, float], ...] = ()  # ranges: the (low, high) pairs counted
    k: int | None = None  # marginals: the tables' width (None: the curator's default)
    # request options (drawn only by Grammar(options=True)): an accuracy target instead of
    # epsilon, the intervals' level, the bounding diagnostics off
    accuracy: float | None = None
    level: float | None = None
    diagnostics: bool = True
    method: str = ""  # synthetic: "auto", "mst", ...; "" leaves the curator's default
    rows: int | None = None  # synthetic: how many records (None: the noisy count, the default)
    rounds: int | None = None  # synthetic (MWEM's): its rounds (None: the curator's default)
    label: str = ""  # fit: the label column
    model: str = ""  # fit: a key of MODELS
    noisy_rows: bool = False
    noisy_order: bool = False
    tags: tuple[str, ...] = field(default=(), compare=False)

    # ------------------------------------------------------------------ text

    def where_sql(self) -> str:
        return " AND ".join(f"({w})" for w in self.where)

    def sql(self) -> str:
        """The SQL text (family ``sql``) with its WHERE clause filled in."""
        w = self.where_sql()
        return self.text.replace("{where}", f" WHERE {w}" if w else "")

    def with_where(self, where: tuple[str, ...]) -> Query:
        return replace(self, where=where)

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = ({"epsilon": self.epsilon} if self.accuracy is None
                              else {"accuracy": self.accuracy})
        if self.level is not None:
            kw["level"] = self.level
        if not self.diagnostics:
            kw["diagnostics"] = False
        if self.delta is not None:
            kw["delta"] = self.delta
        if self.bins is not None and self.family in RELEASES:
            kw["bins"] = self.bins
        if self.k is not None and self.family == "marginals":
            kw["k"] = self.k
        if self.family == "synthetic" and self.method:
            kw["method"] = self.method
        if self.family == "synthetic" and self.rows is not None:
            kw["rows"] = self.rows
        if self.family == "synthetic" and self.rounds is not None:
            kw["rounds"] = self.rounds
        if self.family == "sql":
            if self.noise != "laplace":
                kw["noise"] = self.noise
            if self.weights:
                kw["weights"] = dict(self.weights)
        return kw

    def call(self, cur: Any) -> Any:
        """Run this query on a curator (may raise)."""
        kw = self.kwargs()
        if self.family == "sql":
            return cur.sql(self.sql(), **kw)
        where = self.where_sql() or None
        if self.family == "cdf":
            return cur.cdf(self.table, self.column, where=where, **kw)
        if self.family == "ranges":
            return cur.ranges(self.table, self.column, [list(r) for r in self.ranges],
                              where=where, **kw)
        if self.family == "quantiles":
            return cur.quantiles(self.table, self.column, list(self.probabilities),
                                 where=where, **kw)
        if self.family == "marginals":
            return cur.marginals(self.table, list(self.columns), where=where, **kw)
        if self.family == "synthetic":
            return cur.synthetic(self.table, list(self.columns), where=where, **kw)
        if self.family == "fit":
            return cur.fit(make_model(self.model), self.sql(), label=self.label, **kw)
        raise ValueError(f"unknown query family {self.family!r}")

    def python(self) -> str:
        """The call as Python source (for reproducers)."""
        kw = ", ".join(f"{k}={v!r}" for k, v in self.kwargs().items())
        if self.family == "sql":
            return f"cur.sql({self.sql()!r}, {kw})"
        if self.family == "fit":
            params = ", ".join(f"{k}={v!r}" for k, v in _PARAMS.get(self.model, {}).items())
            return (f"cur.fit(dpkit.learn.{MODELS[self.model][0]}({params}), {self.sql()!r}, "
                    f"label={self.label!r}, {kw})")
        where = self.where_sql() or None
        if self.family == "cdf":
            return f"cur.cdf({self.table!r}, {self.column!r}, where={where!r}, {kw})"
        if self.family == "ranges":
            return (f"cur.ranges({self.table!r}, {self.column!r}, "
                    f"{[list(r) for r in self.ranges]!r}, where={where!r}, {kw})")
        if self.family == "quantiles":
            return (f"cur.quantiles({self.table!r}, {self.column!r}, "
                    f"{list(self.probabilities)!r}, where={where!r}, {kw})")
        if self.family == "marginals":
            return (f"cur.marginals({self.table!r}, {list(self.columns)!r}, where={where!r}, "
                    f"{kw})")
        return (f"cur.synthetic({self.table!r}, {list(self.columns)!r}, where={where!r}, "
                f"{kw})")

    def release_args(self) -> tuple[Any, ...]:
        """The positional arguments after the table of a release family's call (and of its
        ``cur.preview_release(family, table, ...)``)."""
        if self.family == "ranges":
            return (self.column, [list(r) for r in self.ranges])
        if self.family == "quantiles":
            return (self.column, list(self.probabilities))
        if self.family == "marginals":
            return (list(self.columns),)
        return (self.column,)

    def __str__(self) -> str:
        return self.python()
