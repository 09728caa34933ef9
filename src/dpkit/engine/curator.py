"""The curator: private tables, aggregate queries with error bars, a budget kept on disk.

A project is a folder::

    clinic.dpkit/
        ledger.sqlite   the keyed, hash-chained ledger: budget, declarations, analysts, charges
        ledger.key      the owner key (mode 0600) that authenticates it; ledger.head its head
        (ledger.pg      instead of ledger.sqlite: the PostgreSQL database and schema holding it)
        data.duckdb     the rows (private tables copied in; public ones may be file views)

**Privacy semantics.** Each private table names its *privacy unit* (a column identifying one
person; without one, every row is its own unit). Two datasets are neighbours when they differ by
adding or removing all the rows of one unit (add/remove-one-unit). Every answer the curator
gives is differentially private for that relation, and the project's budget bounds the total
over all answers, all analysts and all time, under the accountant chosen at creation
(:class:`dpkit.accounting.Budget`: ``pure``, ``approx``, ``zcdp``, ``rdp`` or ``pld``). The
budget covers the tables registered in the project; a unit who appears in two tables under the
same id is one unit (the budget is per project, not per table).

Every query follows one sealed line (docs/architecture.md): parse and type against the schema
(``sql``) → plan from public things only (``plan``) → budget pre-check → prepare and dry-run the
statement over empty tables (``read``) → charge (``charge``, durably) → read the rows with a
total statement → noise (``noisy``) → post-processing → :class:`~dpkit.engine.results.Result`.
Refusals before the charge spend nothing; anything after it keeps the charge. This class is the
front: lifecycle, tables, analysts, and the calls that drive that line.

>>> import tempfile, os, dpkit as dp
>>> folder = tempfile.mkdtemp()
>>> cur = dp.Curator.create(os.path.join(folder, "p.dpkit"),
...                         budget=dp.Budget(epsilon=1.0, delta=1e-6),
...                         source=dp.noise.seeded(0))
>>> import pandas as pd
>>> _ = cur.add_table("t", pd.DataFrame({"x": [1.0, 2.0, 3.0]}), bounds={"x": (0, 10)})
>>> res = cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
>>> res.columns
['n', 'n_ci_low', 'n_ci_high']
>>> round(cur.budget().spent, 6)
0.5
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpkit import noise as _noise
from dpkit.accounting import BudgetExceeded
from dpkit.engine import bounds as dbounds
from dpkit.engine import families
from dpkit.engine import plan as dplan
from dpkit.engine import sql as dsql
from dpkit.engine.accuracy import epsilon_for_accuracy, expected_errors, preview_of
from dpkit.engine.backend_duckdb import drop_orphans
from dpkit.engine.backend_spark import (
    SPARK,
    SparkBackend,
    backend_for,
    check_engine,
    check_on_spark,
    drop_spark_orphans,
)
from dpkit.engine.charge import charged_read, quote
from dpkit.engine.ledger import Entry, Ledger
from dpkit.engine.load import (
    MAX_TEXT_LENGTH,
    Declarations,
    check_load,
    load_declared,
    load_declared_spark,
    load_lock,
    tables_in_force,
)
from dpkit.engine.noisy import release
from dpkit.engine.plan.cache import PlanCache
from dpkit.engine.prepare import Preparer
from dpkit.engine.project import (
    DATA_FILE,
    LOAD_LOCK,
    budget_parameters,
    ledger_dsn,
    make_project,
    open_project,
)
from dpkit.engine.read import Exact, read_exact
from dpkit.engine.release_methods import ReleaseMethods
from dpkit.engine.results import BudgetStatus, HistoryItem, Preview, Result, json_safe
from dpkit.engine.roles import (
    OWNER,
    add_analyst,
    charged_analyst,
    constant_work_source,
    headroom,
    project_source,
    reopen_seed,
    revoke_analyst,
    set_analyst_caps,
    visible_budget,
)
from dpkit.engine.tables import TableMeta, check_identifier

__all__ = ["BudgetStatus", "Curator", "HistoryItem"]

_NOT_GIVEN: Any = object()  # marks a removed keyword argument that the caller did not pass
STRATEGY_CACHE = "strategies"  # folder (inside the project) holding optimised strategies
# the SQL forms dpkit.engine.families answers (DP_CDF(...), COUNT(*) FILTER (WHERE c BETWEEN
# a AND b), ...): a cheap test before parsing twice; any other FILTER (a rate, a conditional
# count) skips it, and the import of the families with scipy (0.5 s per CLI query)
_RELEASE_FORM = re.compile(r"\bDP_|\bFILTER\b.*\bBETWEEN\b", re.IGNORECASE | re.DOTALL)
_GAUSSIAN_ADVICE = "Use Laplace noise / public group keys, or a project with an 'approx' accountant"


class Curator(ReleaseMethods):
    """A project: private tables behind aggregate-only queries and an enforced, durable budget.

    Create with :meth:`create` (the owner), reopen from any process with :meth:`open`: without
    a token as the owner, with ``token=`` (or ``DPKIT_TOKEN``) as the analyst it names. The
    noise source is fixed at creation: ``source=dp.noise.seeded(s)`` makes an INSECURE test
    project, and every result of it says so, after reopening too.
    """

    def __init__(self, path: Path, ledger: Ledger, *, analyst: str, owner: bool,
                 source: _noise.Source | None, engine: str = "duckdb", spark: Any = None,
                 ) -> None:
        self.path = path
        self.ledger = ledger
        self.analyst = analyst
        self.is_owner = owner
        self._source = source = constant_work_source(source, ledger)
        self._lock = threading.RLock()
        self._tables_cache: tuple[int, dict[str, TableMeta]] | None = None
        self._planner = PlanCache()
        self._engine = check_engine(engine)  # where add_table puts rows by default
        self._backend = backend_for(path / DATA_FILE, engine=engine, spark=spark,
                                    tables=self.tables())
        self._preparer = Preparer(self._backend, source)

    @property
    def insecure(self) -> bool:
        """True for a test project with seeded (reproducible) noise: its answers are not
        private and say INSECURE."""
        return self.ledger.config.noise_seed is not None

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        budget: Any = None,
        epsilon: float | None = None,
        delta: float = 0.0,
        accountant: str | None = None,
        source: _noise.Source | None = None,
        ledger: str | None = None,
        engine: str = "duckdb",
        spark: Any = None,
        constant_work: bool | None = None,
    ) -> Curator:
        """Create a project folder with a total budget; the caller is its owner.

        Give ``budget=dp.Budget(epsilon=3.0, delta=1e-6, accountant=...)`` or ``epsilon=``,
        ``delta=``, ``accountant=`` (default: ``pure`` when delta is 0, else ``approx``; both are
        valid privacy filters for adaptively chosen queries). The owner key (``ledger.key``,
        mode 0600) is written into the folder: it authenticates the ledger, and whoever can
        read it (and the data beside it) is the owner. ``source``: the secure OS CSPRNG
        (default) or ``dp.noise.seeded(s)`` for an INSECURE, reproducible test project; it is
        recorded in the ledger and cannot be changed later. ``ledger``: ``"sqlite"`` (default:
        ``ledger.sqlite`` in the folder) or a PostgreSQL DSN (default ``$DPKIT_LEDGER_DSN``),
        for a service with several processes or hosts; extra ``[postgres]``.
        ``engine="spark"``: tables are added on Spark (``spark``: a SparkSession; None starts
        a local one when first needed; docs/scale.md).

        ``constant_work``: noise and selections on fixed plans whose work (time, random words)
        depends on public parameters only, each release charged a small extra δ
        (docs/attacks.md §6). **Default (None): on when the budget can pay for it** (delta > 0,
        an accountant other than ``pure``, a total ε up to about 27, 22 under ``zcdp`` /
        ``rdp`` at δ = 1e-6), off otherwise; ``False`` opts out; ``True`` on a budget that
        cannot pay is refused. The genesis row records the resolved value; reopening keeps it.
        """
        path = Path(path)
        check_engine(engine)
        src, noise_seed = project_source(source)
        epsilon, delta, accountant, orders = budget_parameters(
            budget, epsilon=epsilon, delta=delta, accountant=accountant)
        made = make_project(path, epsilon=epsilon, delta=delta, accountant=accountant,
                            orders=orders, noise_seed=noise_seed, dsn=ledger_dsn(ledger),
                            constant_work=constant_work)
        return cls(path, made, analyst=OWNER, owner=True, source=src, engine=engine,
                   spark=spark)

    @classmethod
    def open(cls, path: str | Path, *, token: str | None = None,
             expected_head: tuple[int, str] | None = None,
             source: Any = _NOT_GIVEN, analyst: Any = _NOT_GIVEN, engine: str = "duckdb",
             spark: Any = None) -> Curator:
        """Open an existing project; the ledger's keyed chain is verified first.

        ``token``: act as the analyst it names (default: ``$DPKIT_TOKEN``; neither: the owner,
        who holds the project's files). Unknown, revoked or malformed tokens are refused.
        ``source=`` and ``analyst=`` are refused: the noise source is the project's, fixed at
        creation, and the analyst is whoever the token names.
        """
        if source is not _NOT_GIVEN:
            raise ValueError(
                "Curator.open takes no source=: the noise source is fixed when the project is "
                "created (the OS CSPRNG, or dp.noise.seeded(s) for an INSECURE test project "
                "via Curator.create(..., source=...)); a source chosen at open would let a "
                "caller replay the same noise in two queries and subtract it"
            )
        if analyst is not _NOT_GIVEN:
            charged_analyst(OWNER, analyst if analyst is not None else "")
        path = Path(path)
        ledger, who = open_project(path, token, expected_head=expected_head)
        seed = ledger.config.noise_seed
        src = None if seed is None else _noise.seeded(reopen_seed(seed, len(ledger.entries())))
        return cls(path, ledger, analyst=who, owner=who == OWNER, source=src, engine=engine,
                   spark=spark)

    def _require_owner(self, action: str) -> None:
        if not self.is_owner:
            raise PermissionError(
                f"{action} needs the owner's credential; analyst {self.analyst!r} (opened with "
                f"a token) cannot do it. The owner opens the project without a token, from an "
                f"account that can read its files. Nothing was changed"
            )

    def close(self) -> None:
        if isinstance(self._backend, SparkBackend):  # what outlives backend.close
            self._backend.release()  # (Spark's cached lookups; DuckDB has nothing)
        self._backend.close()
        self.ledger.close()

    def __enter__(self) -> Curator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self.ledger.spend()
        return (f"Curator({str(self.path)!r}, tables={sorted(self.tables())}, "
                f"spent epsilon {s.spent:.4g} of {s.epsilon:g}, accountant {s.accountant})")

    # ------------------------------------------------------------------ tables

    def tables(self) -> dict[str, TableMeta]:
        """The registered tables and their (public) declarations."""
        rows = self.ledger.entries("table")
        key = rows[-1].seq if rows else 0
        if self._tables_cache is None or self._tables_cache[0] != key:
            self._tables_cache = (key, tables_in_force(rows))
        return dict(self._tables_cache[1])

    def add_table(
        self,
        name: str,
        source: Any,
        *,
        privacy_unit: str | None = None,
        bounds: Mapping[str, Any] | None = None,
        max_rows_per_unit: int | str | None = None,
        max_groups_per_unit: int | None = None,
        domains: Mapping[str, Any] | None = None,
        not_null: Any = None,
        public: bool = False,
        copy: bool = True,
        source_table: str | None = None,
        replace: bool = False,
        description: str = "",
        progress: Any = None,
        rows_epsilon: float = dbounds.AUTO_ROWS_EPSILON,
        engine: str | None = None,
        max_text_length: int | None = MAX_TEXT_LENGTH,
        drop_privacy_unit: bool = False,
    ) -> TableMeta:
        """Register a table (the data owner's job); spends nothing, except ``"auto"``.

        ``source``: a CSV / Parquet / JSON / DuckDB path, a pandas or polars DataFrame, a
        pyarrow Table or a DuckDB relation. ``privacy_unit``: the column naming one person
        (None: record level). ``max_rows_per_unit``: rows one unit may contribute to a query,
        required with a ``privacy_unit``: a number you know, or ``"auto"`` (chosen privately,
        charged ``rows_epsilon``: :mod:`dpkit.engine.bounds`). ``bounds={"age": (0, 120)}``:
        clamps. ``domains={"ward": ["A", "B"]}``: public keys. ``not_null=["age"]``: columns
        checked to hold no NULL/NaN. ``public=True``: a lookup table (``copy=False``: a view).
        ``progress(step, fraction)``: called during the load. ``engine="spark"``: the rows
        stay on Spark (a Spark DataFrame or a Parquet/CSV path; default: the project's engine;
        docs/scale.md). ``max_text_length``: a private copy's text values are cut to this many
        characters (None: not cut; public in the declarations). ``replace=True`` keeps a
        privacy unit unless it is given again or ``drop_privacy_unit=True`` says to drop it.
        Details: docs/curator.md.
        """
        spark = check_engine(engine or self._engine) == SPARK
        check_identifier(name, "table")
        self._require_owner("adding, replacing or declaring a table")
        auto = dbounds.check_rows_declaration(privacy_unit, max_rows_per_unit, public=public,
                                              name=name, epsilon=rows_epsilon)
        decl = Declarations(privacy_unit=privacy_unit, bounds=bounds,
                            max_rows_per_unit=None if isinstance(max_rows_per_unit, str)
                            else max_rows_per_unit,
                            max_groups_per_unit=max_groups_per_unit, domains=domains,
                            not_null=not_null, public=public, copy=copy,
                            source_table=source_table, description=description,
                            max_text_length=max_text_length)
        with self._lock, load_lock(self.path / LOAD_LOCK):
            check_load(name, self.tables().get(name), decl, replace=replace,
                       drop_privacy_unit=drop_privacy_unit)
            self._backend.close()  # DuckDB: one writer, no readers attached meanwhile
            if spark:
                meta = self._add_spark_table(name, source, decl)
            else:
                meta = load_declared(
                    self.path / DATA_FILE, name, source, decl, progress=progress)
            if auto:  # charged before the declaration that publishes it is recorded
                check = (None if meta.storage != SPARK else  # Spark analyses it first
                         lambda text: check_on_spark(self._backend, meta, [text]))
                meta = dbounds.with_auto_rows(self.ledger, self._backend.query_public, meta,
                                              analyst=self.analyst, epsilon=rows_epsilon,
                                              source=self._source, check=check)
            self.ledger.record("table", {"name": name, "table": meta.to_dict()},
                               analyst=self.analyst,
                               query=f"ADD TABLE {name} ({meta.summary()})")
            self._drop_orphans_locked()
            return meta

    def _add_spark_table(self, name: str, source: Any, decl: Declarations) -> TableMeta:
        """Rows to Parquet under ``$DPKIT_SPARK_DIR`` (default ``<project>/spark``: on a
        cluster, a path every executor reads), read by Spark at every query."""
        if not isinstance(self._backend, SparkBackend):  # the first Spark table
            self._backend = SparkBackend(self.path / DATA_FILE)
            self._preparer = Preparer(self._backend, self._source)
        directory = Path(os.environ.get("DPKIT_SPARK_DIR") or self.path / "spark")
        return load_declared_spark(self.path / DATA_FILE, self._backend.session(), name,
                                   source, decl, directory=directory)

    def drop_orphans(self) -> list[str]:
        """Drop stored relations no table in force names (the old rows of a replaced table, or
        the new rows of a load that crashed before its ledger row); owner only. Best effort:
        returns [] while another process reads the data (the next load retries)."""
        self._require_owner("cleaning up the project's data")
        with self._lock, load_lock(self.path / LOAD_LOCK):
            return self._drop_orphans_locked()

    def _drop_orphans_locked(self) -> list[str]:
        with self._lock:  # the caller holds the load lock (flock is per open file: not again)
            tables = self.tables()
            keep = {(m.public, m.stored_name) for m in tables.values()}
            keys = {k for m in tables.values() for k in m.key_tables.values()}
            copies = {n for m in tables.values() if m.storage == SPARK
                      for n in (m.stored_name, Path(str(m.source)).name)}
            gone = drop_spark_orphans(self.path / "spark", copies)
            self._backend.close()
            try:
                return gone + drop_orphans(self.path / DATA_FILE, keep, keys)
            except RuntimeError:
                return gone

    def add_public_table(self, name: str, source: Any, **kwargs: Any) -> TableMeta:
        """Register a public lookup table (no privacy; may be joined and used as group keys)."""
        return self.add_table(name, source, public=True, **kwargs)

    def set_analyst_budget(self, analyst: str, epsilon: float | None,
                           delta: float | None = None) -> None:
        """Give ``analyst`` their own epsilon cap inside the project's budget, and a delta cap
        beside it (default on an 'approx' project: the project's delta in the same proportion
        as the epsilon cap); None removes both; owner only."""
        self._require_owner("setting a budget")
        set_analyst_caps(self.ledger, self.analyst, analyst, epsilon, delta)

    # ------------------------------------------------------------------ roles

    def add_analyst(self, name: str, *, epsilon: float | None = None,
                    delta: float | None = None, expires_days: float | None = None) -> str:
        """Add an analyst and return their token (owner only). The token is shown once: only
        its SHA-256 is stored. It carries 256 bits from the OS CSPRNG; ``epsilon``: the
        analyst's own cap inside the project's budget (None: only the project's budget);
        ``delta``: their δ cap beside it (default on an 'approx' project: the project's δ in
        the same proportion as ``epsilon``, so that no analyst can spend everyone's δ; other
        accountants: none unless given); the default δ of their queries is a tenth of it;
        ``expires_days``: the token opens nothing after that many days (None: never)."""
        self._require_owner("adding an analyst")
        return add_analyst(self.ledger, self.analyst, name, epsilon, expires_days, delta)

    def revoke_analyst(self, name: str) -> None:
        """Revoke an analyst's token (owner only): it opens nothing from now on, and a curator
        already open with it can charge nothing more. Their history stays."""
        self._require_owner("revoking an analyst")
        revoke_analyst(self.ledger, self.analyst, name)

    def analysts(self) -> dict[str, dict[str, Any]]:
        """Every analyst added: ``{name: {"active": bool, "epsilon": cap}}`` (owner only)."""
        self._require_owner("listing analysts")
        return self.ledger.analysts()

    # ------------------------------------------------------------------ queries

    def table(self, name: str) -> Any:
        """A Python query builder over ``name`` (compiles to the same SQL path)."""
        from dpkit.engine.builder import QueryBuilder

        if name not in self.tables():
            raise dsql.QueryError(
                f"unknown table {name!r}; registered tables: {', '.join(sorted(self.tables()))}"
            )
        return QueryBuilder(self, name)

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

    def _tables_version(self) -> int:
        """The ledger seq of the last table registration read (-1 before any read)."""
        return self._tables_cache[0] if self._tables_cache is not None else -1

    # ------------------------------------------------------------------ accuracy and preview

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
        the epsilon :meth:`sql` would spend for it)."""
        who, query = charged_analyst(self.analyst, analyst), dsql.to_duckdb(query, dialect)
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

    # ------------------------------------------------------------------ release families

    def _families(self, analyst: None = None) -> families.Context:
        """What the release families need from this project (:mod:`dpkit.engine.families`),
        charged to the analyst the curator was opened as (``analyst=`` is refused)."""
        return families.Context(
            tables=self.tables, ledger=self.ledger, backend=self._backend, source=self._source,
            lock=self._lock, strategy_cache=self.path / STRATEGY_CACHE,
            analyst=charged_analyst(self.analyst, analyst), portable=self._preparer.portable)

    def suggest_bounds(self, table: str, column: str, *, epsilon: float,
                       search: tuple[float, float] | None = None, lower: float = 0.01,
                       upper: float = 0.99, bins: int | None = None,
                       analyst: None = None) -> dict[str, Any]:
        """Clamp bounds for ``column``: the grid cells holding its ``lower``/``upper``
        quantiles by :meth:`quantiles` over the public ``search`` range (default: its declared
        bounds), rounded outward to their edges; one ε-DP charge (:mod:`.bounds`)."""
        rng = dbounds.search_range(self.tables(), table, column, search)
        res = self.quantiles(table, column, [lower, upper], epsilon=epsilon,
                             bounds={column: rng}, bins=bins, analyst=analyst)
        grid = dbounds.search_grid(self.tables(), table, column, rng, bins)
        return dbounds.suggested_bounds(res, column, lower, upper, grid)

    # ------------------------------------------------------------------ budget

    def budget(self, analyst: str | None = None) -> BudgetStatus:
        """Spent, remaining and the history of charges: project-wide or for one analyst (the
        owner), or the caller's own (an analyst sees only its own charges; ``remaining`` is
        the smaller of its cap's and the project's)."""
        return visible_budget(self.ledger, self.analyst, owner=self.is_owner, analyst=analyst)

    def verify(self, *, expected_head: tuple[int, str] | None = None) -> int:
        """Re-verify the ledger's hash chain from disk; returns the number of rows."""
        return self.ledger.verify(expected_head=expected_head)

    def entries(self) -> list[Entry]:
        """The ledger's rows; an analyst gets only its own charges (and their notes) and no
        other analyst's."""
        rows = self.ledger.entries()
        if self.is_owner:
            return rows
        return [e for e in rows
                if (e.kind in ("charge", "note") and e.analyst == self.analyst)
                or (e.kind == "analyst" and e.payload.get("analyst") == self.analyst)
                or e.kind not in ("charge", "note", "analyst")]
