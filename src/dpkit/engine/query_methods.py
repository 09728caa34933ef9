"""The curator's queries: ``sql`` and ``preview``, each driving the sealed line once.

``sql`` parses and types the query (``sql``), plans it from public things only (``plan``),
dry-runs the statement over empty tables (``prepare``), charges the ledger durably
(``charge.charged_read``), reads the rows with the one total statement (``read``), adds the
noise (``noisy``) and post-processes; ``preview`` stops before the charge and reads nothing.
SQL forms of the release families (``DP_CDF(...)``, ...) are handed to
:mod:`dpkit.engine.families` through :meth:`QueryMethods._families`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dpkit.accounting import BudgetExceeded
from dpkit.engine import families
from dpkit.engine import plan as dplan
from dpkit.engine import sql as dsql
from dpkit.engine.accuracy import epsilon_for_accuracy, expected_errors, preview_of
from dpkit.engine.charge import charged_read, quote
from dpkit.engine.ledger import Entry
from dpkit.engine.noisy import release
from dpkit.engine.plan.cache import PlanCache
from dpkit.engine.read import Exact, read_exact
from dpkit.engine.results import Preview, Result, json_safe
from dpkit.engine.roles import charged_analyst, headroom
from dpkit.engine.table_methods import TableMethods

__all__ = ["STRATEGY_CACHE", "QueryMethods"]

STRATEGY_CACHE = "strategies"  # folder (inside the project) holding optimised strategies
# the SQL forms dpkit.engine.families answers (DP_CDF(...), COUNT(*) FILTER (WHERE c BETWEEN
# a AND b), ...): a cheap test before parsing twice; any other FILTER (a rate, a conditional
# count) skips it, and the import of the families with scipy (0.5 s per CLI query)
_RELEASE_FORM = re.compile(r"\bDP_|\bFILTER\b.*\bBETWEEN\b", re.IGNORECASE | re.DOTALL)
_GAUSSIAN_ADVICE = "Use Laplace noise / public group keys, or a project with an 'approx' accountant"


class QueryMethods(TableMethods):
    """Aggregate queries and their previews, as methods of :class:`dpkit.engine.Curator`."""

    _planner: PlanCache

    def _epsilon_for_accuracy(self, query: str, accuracy: Any, accuracy_rows: float | None, *,
                              epsilon: float | None, rho: float | None, **plan_kw: Any) -> float:
        """The smallest epsilon whose plan meets ``accuracy`` (from public things only)."""
        if epsilon is not None or rho is not None:
            raise dsql.QueryError("give epsilon= or accuracy=, not both")
        return epsilon_for_accuracy(
            lambda eps: expected_errors(self._plan(query, epsilon=eps, rho=None, **plan_kw),
                                        accuracy_rows), accuracy)

    def _plan(self, query: str, *, epsilon: float | None, rho: float | None,
              delta: float | None, noise: str, level: float,
              bounds: Mapping[str, Any] | None,
              weights: Mapping[str, float] | None = None,
              diagnostics: bool = True) -> dplan.Plan:
        cfg = self.ledger.config
        return self._planner.plan(query, self.tables(), self._tables_version(),
                                  accountant=cfg.accountant,
                                  budget_delta=self.ledger.delta_for(self.analyst),
                                  epsilon=epsilon, rho=rho, delta=delta, noise=noise,
                                  level=level, bounds=bounds, weights=weights,
                                  diagnostics=diagnostics)

    def _delta_share(self, plan: dplan.Plan, delta: float | None) -> float | None:
        cfg = self.ledger.config
        if cfg.accountant != "approx" or plan.noise != dplan.GAUSSIAN:
            return None
        return delta if delta is not None else self.ledger.delta_for(self.analyst) / 10.0

    def _cost(self, plan: dplan.Plan, analyst: str, delta: float | None) -> Any:
        return quote(self.ledger, plan.event, analyst=analyst,
                     delta_share=self._delta_share(plan, delta), advice=_GAUSSIAN_ADVICE)

    def sql(
        self,
        query: str,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        delta: float | None = None,
        accuracy: float | Mapping[str, float] | None = None,
        noise: str = dplan.LAPLACE,
        level: float = 0.95,
        bounds: Mapping[str, Any] | None = None,
        analyst: None = None,
        weights: Mapping[str, float] | None = None, dialect: str | None = None,
        diagnostics: bool = True, accuracy_rows: float | None = None,
    ) -> Result:
        """Answer an aggregate query privately, spending ``epsilon`` (or what ``accuracy`` needs).

        ``accuracy``: target CI half-width (one number, or per output name); AVG and QUANTILE
        also need ``accuracy_rows`` (:mod:`dpkit.engine.accuracy`). ``delta``: for private
        group selection and Gaussian noise (default: a tenth of the project's). ``noise``:
        ``"laplace"`` (pure DP) or ``"gaussian"`` (``rho=`` or ``epsilon=``). ``bounds``:
        per-query clamps. ``weights={"n": 1, "avg_age": 3}``: budget split per output name.
        ``ORDER BY <COUNT/SUM> LIMIT k`` picks groups by noisy max (``res.selection``).
        ``dialect``: the query's SQL dialect if not DuckDB's (``"tsql"``, ``"postgres"``, ...).
        ``diagnostics`` (default on): 5% of the budget estimates the rows dropped and values
        clamped by bounding (``res.diagnostics``, ``res.warnings``; docs/curator.md).
        """
        who, query = charged_analyst(self.analyst, analyst), dsql.to_duckdb(query, dialect)
        if _RELEASE_FORM.search(query) is not None:  # cheap test before parsing it twice
            special = families.answer_sql(self._families(), query, epsilon=epsilon,
                                          rho=rho, delta=delta, accuracy=accuracy,
                                          noise=noise, level=level, bounds=bounds,
                                          diagnostics=diagnostics)
            if special is not None:  # a range/CDF/marginal family: answered by dpkit.release
                return special
        with self._lock:
            if accuracy is not None:
                epsilon = self._epsilon_for_accuracy(
                    query, accuracy, accuracy_rows, epsilon=epsilon, rho=rho, delta=delta,
                    noise=noise, level=level, bounds=bounds, weights=weights,
                    diagnostics=diagnostics)
            plan = self._plan(query, epsilon=epsilon, rho=rho, delta=delta, noise=noise,
                              level=level, bounds=bounds, weights=weights,
                              diagnostics=diagnostics)
            # under 'approx' with Gaussian noise the plan books one delta for the query (the
            # Gaussian conversion plus partition selection)
            booked = plan.charge_delta if plan.charge_delta is not None else delta
            # down once: prepare (dry run) -> charge (check + record) -> read -> noise -> post
            prepared = self._preparer.prepare(plan, self._tables_version())
            details: dict[str, Any] = {"split": [json_safe(s) for s in plan.split()],
                                       "noise": plan.noise, "level": plan.level}
            if plan.weights:
                details["weights"] = dict(plan.weights)
            src = self._source
            insecure = bool(src is not None and src.insecure)

            def finish(exact: Exact, entry: Entry) -> Result:
                return release(plan, exact, source=src, insecure=insecure,
                               epsilon_cost=float(entry.view["epsilon_cost"]),
                               delta_cost=float(entry.view.get("delta_cost") or 0.0),
                               ledger_seq=entry.seq, remaining=headroom(self.ledger, who),
                               scratch=self._backend.scratch)

            return charged_read(self.ledger, plan.event, analyst=who, query=query,
                                delta_share=self._delta_share(plan, booked), details=details,
                                read=lambda: read_exact(self._backend, prepared), finish=finish,
                                advice=_GAUSSIAN_ADVICE)

    def _execute(self, plan: dplan.Plan) -> Exact:
        """The exact aggregates of ``plan``, uncharged: for tests and benchmarks of the read
        path only (no public method returns them, and :meth:`sql` charges first)."""
        return read_exact(self._backend, self._preparer.prepare(plan, self._tables_version()))

    def preview(
        self,
        query: str,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        delta: float | None = None,
        noise: str = dplan.LAPLACE,
        level: float = 0.95,
        bounds: Mapping[str, Any] | None = None,
        analyst: None = None,
        weights: Mapping[str, float] | None = None, dialect: str | None = None,
        diagnostics: bool = True, accuracy: float | Mapping[str, float] | None = None,
        accuracy_rows: float | None = None,
    ) -> Preview:
        """Cost and expected error of a query, without reading data or spending anything
        (same parameters as :meth:`sql`; ``weights`` shows the weighted split; ``accuracy``:
        the epsilon :meth:`sql` would spend for it). The release forms :meth:`sql` gives the
        families (``DP_CDF(...)``, ``COUNT(*) FILTER (WHERE c BETWEEN a AND b)``, ...) are
        priced by their own planning, as they will run (they were refused here)."""
        who, query = charged_analyst(self.analyst, analyst), dsql.to_duckdb(query, dialect)
        if _RELEASE_FORM.search(query) is not None:
            special = families.preview_sql(self._families(), query, epsilon=epsilon,
                                           rho=rho, delta=delta, accuracy=accuracy,
                                           noise=noise, level=level, bounds=bounds,
                                           diagnostics=diagnostics)
            if special is not None:
                return special
        if accuracy is not None:
            epsilon = self._epsilon_for_accuracy(
                query, accuracy, accuracy_rows, epsilon=epsilon, rho=rho, delta=delta,
                noise=noise, level=level, bounds=bounds, weights=weights,
                diagnostics=diagnostics)
        plan = self._plan(query, epsilon=epsilon, rho=rho, delta=delta, noise=noise,
                          level=level, bounds=bounds, weights=weights, diagnostics=diagnostics)
        booked = plan.charge_delta if plan.charge_delta is not None else delta
        remaining = headroom(self.ledger, who)  # what this caller's next charge may use
        try:  # the epsilon and delta the ledger would charge (constant work's included)
            price = self._cost(plan, who, booked)
        except BudgetExceeded as exc:
            price = exc.requested
        return preview_of(plan, query, cost=price.epsilon, remaining=remaining, delta=price.delta)

    def _families(self, analyst: None = None) -> families.Context:
        """What the release families need from this project (:mod:`dpkit.engine.families`),
        charged to the analyst the curator was opened as (``analyst=`` is refused)."""
        return families.Context(
            tables=self.tables, ledger=self.ledger, backend=self._backend, source=self._source,
            lock=self._lock, strategy_cache=self.path / STRATEGY_CACHE,
            analyst=charged_analyst(self.analyst, analyst), portable=self._preparer.portable)
