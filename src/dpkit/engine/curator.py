"""The curator: private tables, aggregate queries with error bars, a budget kept on disk.

A project is a folder::

    clinic.dpkit/
        ledger.sqlite   the hash-chained ledger: budget, tables' declarations, every charge
        data.duckdb     the rows (tables copied in, or views over CSV/Parquet files)

**Privacy semantics.** Each private table names its *privacy unit* (a column identifying one
person; without one, every row is its own unit). Two datasets are neighbours when they differ by
adding or removing all the rows of one unit (add/remove-one-unit). Every answer the curator
gives is differentially private for that relation, and the project's budget bounds the total
over all answers, all analysts and all time, under the accountant chosen at creation
(:class:`dpkit.accounting.Budget`: ``pure``, ``approx``, ``zcdp``, ``rdp`` or ``pld``). The
budget covers the tables registered in the project; a unit who appears in two tables under the
same id is one unit (the budget is per project, not per table).

The order of operations for every query (DESIGN invariant 3): parse and validate → plan (public
information only) → budget pre-check → one SQL statement in DuckDB computes the exact aggregates
(in memory only) → the ledger charges the plan's event in one transaction and commits it to disk
→ noise from :mod:`dpkit.mechanisms` → post-processing → :class:`~dpkit.engine.results.Result`. A
refused or failed query spends nothing; a crash after the commit loses budget, never privacy.

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

import contextlib
import getpass
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpkit import events as ev
from dpkit import noise as _noise
from dpkit.engine import families
from dpkit.engine import plan as dplan
from dpkit.engine import sql as dsql
from dpkit.engine.accuracy import epsilon_for_accuracy, expected_errors
from dpkit.engine.backend_duckdb import (
    DuckBackend,
    init_database,
    load_table,
)
from dpkit.engine.charge import charged_read
from dpkit.engine.ledger import Entry, Ledger
from dpkit.engine.noisy import release
from dpkit.engine.read import Exact, Reader
from dpkit.engine.results import Preview, Result
from dpkit.engine.tables import (
    Column,
    TableMeta,
    check_identifier,
    describe_source,
    domain_table_name,
    quote_ident,
    validate_declarations,
    validate_not_null,
)

__all__ = ["BudgetStatus", "Curator", "HistoryItem"]

LEDGER_FILE = "ledger.sqlite"
DATA_FILE = "data.duckdb"
MAX_BUDGET_EPSILON = 1000.0
STRATEGY_CACHE = "strategies"  # folder (inside the project) holding optimised strategies
# the SQL forms dpkit.engine.families answers (DP_CDF(...), COUNT(*) FILTER (...), ...)
_RELEASE_FORM = re.compile(r"\bDP_|\bFILTER\b", re.IGNORECASE)


@dataclass(frozen=True)
class HistoryItem:
    seq: int
    time: str
    analyst: str
    query: str
    event: ev.Event
    epsilon: float  # this charge's own cost
    delta: float
    epsilon_spent: float  # project total after it


@dataclass
class BudgetStatus:
    """The budget as the ledger sees it: totals, spent, remaining, and every charge."""

    epsilon: float
    delta: float
    accountant: str
    spent: float
    remaining: float
    delta_spent: float
    delta_remaining: float
    history: list[HistoryItem]
    head: tuple[int, str]
    analyst: str | None = None
    rho_spent: float | None = None
    rho_remaining: float | None = None
    analysts: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "accountant": self.accountant,
            "spent": self.spent,
            "remaining": self.remaining,
            "delta_spent": self.delta_spent,
            "delta_remaining": self.delta_remaining,
            "rho_spent": self.rho_spent,
            "rho_remaining": self.rho_remaining,
            "analyst": self.analyst,
            "analyst_budgets": self.analysts,
            "head": {"seq": self.head[0], "hash": self.head[1]},
            "history": [
                {"seq": h.seq, "time": h.time, "analyst": h.analyst, "query": h.query,
                 "epsilon": h.epsilon, "delta": h.delta, "epsilon_spent": h.epsilon_spent,
                 "event": h.event.to_dict()}
                for h in self.history
            ],
        }

    def table(self) -> Any:
        from rich.table import Table

        who = f" (analyst {self.analyst})" if self.analyst else ""
        t = Table(title=f"privacy budget{who}: accountant {self.accountant}",
                  title_justify="left")
        t.add_column("#", justify="right")
        t.add_column("time")
        t.add_column("analyst")
        t.add_column("query", overflow="fold", max_width=60)
        t.add_column("epsilon", justify="right")
        t.add_column("delta", justify="right")
        t.add_column("total spent", justify="right")
        for h in self.history:
            t.add_row(str(h.seq), h.time[:19].replace("T", " "), h.analyst, h.query,
                      f"{h.epsilon:.4g}", f"{h.delta:.3g}" if h.delta else "0",
                      f"{h.epsilon_spent:.4g}")
        t.caption = (f"spent epsilon {self.spent:.4g} of {self.epsilon:g} (remaining "
                     f"{self.remaining:.4g}); delta {self.delta_spent:.3g} of {self.delta:g}; "
                     f"ledger head #{self.head[0]} {self.head[1][:12]}")
        return t

    def __rich__(self) -> Any:
        return self.table()


def _default_analyst() -> str:
    try:
        return getpass.getuser() or "analyst"
    except Exception:  # pragma: no cover - no user database (containers)
        return "analyst"


class Curator:
    """A project: private tables behind aggregate-only queries and an enforced, durable budget.

    Create with :meth:`create`, reopen from any process with :meth:`open`. ``source`` (tests
    only) replaces the secure noise source with a seeded one; every result then says INSECURE.
    """

    def __init__(self, path: Path, ledger: Ledger, *, analyst: str | None,
                 source: _noise.Source | None) -> None:
        self.path = path
        self.ledger = ledger
        self.analyst = analyst or _default_analyst()
        self._source = source
        self._backend = DuckBackend(path / DATA_FILE)
        self._reader = Reader(self._backend, source)
        self._lock = threading.RLock()
        self._tables_cache: tuple[int, dict[str, TableMeta]] | None = None
        self._spec_cache: dict[tuple[str, int], dsql.QuerySpec] = {}
        self._plan_cache: dict[tuple[Any, ...], dplan.Plan] = {}

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
        analyst: str | None = None,
        source: _noise.Source | None = None,
    ) -> Curator:
        """Create a project folder with a total budget.

        Give ``budget=dp.Budget(epsilon=3.0, delta=1e-6, accountant=...)`` or ``epsilon=``,
        ``delta=``, ``accountant=`` (default: ``pure`` when delta is 0, else ``approx``; both are
        valid privacy filters for adaptively chosen queries).
        """
        path = Path(path)
        if budget is not None:
            if epsilon is not None or accountant is not None:
                raise ValueError("give budget= or epsilon=/delta=/accountant=, not both")
            epsilon = float(budget.epsilon)
            delta = float(budget.delta)
            accountant = str(budget.accountant)
            neighboring = str(getattr(budget, "neighboring", "add_remove"))
            orders = getattr(budget, "orders", None)
            if accountant == "approx" and delta == 0.0:
                accountant = "pure"
        else:
            if epsilon is None:
                raise ValueError("give the total budget: epsilon=3.0 (and delta=1e-6)")
            neighboring, orders = "add_remove", None
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (
            math.isfinite(epsilon) and epsilon > 0
        ):
            raise ValueError(f"epsilon must be a finite number > 0 (got {epsilon!r})")
        if epsilon > MAX_BUDGET_EPSILON:
            raise ValueError(
                f"a total epsilon of {epsilon:g} offers no meaningful privacy; the curator accepts "
                f"at most {MAX_BUDGET_EPSILON:g} (typical budgets are 1 to 10)"
            )
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (
            0.0 <= delta < 0.01
        ):
            raise ValueError(
                f"delta must lie in [0, 0.01) (got {delta!r}); it should be far below 1/n, e.g. "
                f"1e-6"
            )
        if accountant is None:
            accountant = "pure" if delta == 0 else "approx"
        if path.exists() and any(path.iterdir()):
            raise FileExistsError(
                f"{path} already exists and is not empty; open it with Curator.open({str(path)!r})"
            )
        if neighboring != "add_remove":
            raise ValueError("the curator's neighbouring relation is add/remove one unit")
        path.mkdir(parents=True, exist_ok=True)
        try:
            ledger = Ledger.create(path / LEDGER_FILE, epsilon=float(epsilon), delta=float(delta),
                                   accountant=accountant, orders=orders,
                                   analyst=analyst or _default_analyst())
            init_database(path / DATA_FILE)
        except BaseException:
            for f in (LEDGER_FILE, LEDGER_FILE + "-wal", LEDGER_FILE + "-shm", DATA_FILE):
                with contextlib.suppress(OSError):
                    (path / f).unlink()
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        return cls(path, ledger, analyst=analyst, source=source)

    @classmethod
    def open(cls, path: str | Path, *, analyst: str | None = None,
             source: _noise.Source | None = None,
             expected_head: tuple[int, str] | None = None) -> Curator:
        """Open an existing project; the ledger's hash chain is verified first."""
        path = Path(path)
        if not (path / LEDGER_FILE).exists():
            raise FileNotFoundError(
                f"{path} is not a dpkit project (no {LEDGER_FILE}); create one with "
                f"Curator.create({str(path)!r}, budget=...) or `dpkit init`"
            )
        ledger = Ledger.open(path / LEDGER_FILE, expected_head=expected_head)
        return cls(path, ledger, analyst=analyst, source=source)

    def close(self) -> None:
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
        if self._tables_cache is not None and self._tables_cache[0] == key:
            return dict(self._tables_cache[1])
        out: dict[str, TableMeta] = {}
        for e in rows:
            if e.payload.get("dropped"):
                out.pop(str(e.payload["name"]), None)
            else:
                meta = TableMeta.from_dict(e.payload["table"])
                out[meta.name] = meta
        self._tables_cache = (key, out)
        return dict(out)

    def add_table(
        self,
        name: str,
        source: Any,
        *,
        privacy_unit: str | None = None,
        bounds: Mapping[str, Any] | None = None,
        max_rows_per_unit: int | None = None,
        max_groups_per_unit: int | None = None,
        domains: Mapping[str, Any] | None = None,
        not_null: Any = None,
        public: bool = False,
        copy: bool = True,
        source_table: str | None = None,
        replace: bool = False,
        description: str = "",
        progress: Any = None,
    ) -> TableMeta:
        """Register a table (the data owner's job); spends nothing.

        ``source``: a CSV / Parquet / JSON path, a DuckDB database path (``source_table=`` or
        ``"file.duckdb::table"``), a pandas or polars DataFrame, a pyarrow Table or a DuckDB
        relation. ``privacy_unit``: the column naming one person (None: record level).
        ``max_rows_per_unit`` (default 1): rows one unit may contribute to a query (more are
        dropped at query time, chosen at random). ``max_groups_per_unit``: groups one unit may
        touch in a GROUP BY (default: max_rows_per_unit). ``bounds={"age": (0, 120)}``: values
        are clamped into these before summing. ``domains={"ward": ["A", "B"]}``: the public keys
        of a column (GROUP BY ward then shows every key, and needs no delta; each key is cast
        to the column's type at load, and keys that cannot be read as it, or that coincide in
        it, are refused; a copied table keeps the keys in a hidden key table that queries join
        with, so a million keys cost about what the GROUP BY itself costs).
        ``not_null=["age"]``: columns with no NULL (or NaN) value, checked at load (a load that
        finds one is refused): COUNT(age) is then COUNT(*), and AVG/VAR/STDDEV(age) share the
        query's noisy row count instead of measuring their own (less budget per measurement).
        ``public=True``: a lookup table with no private data, joinable to private tables.
        ``copy=False`` (public tables only): keep a view over the CSV/Parquet file instead of
        copying it in; private tables are always copied, so their rows are a snapshot the
        ledger's declarations describe. ``progress(step, fraction)``: called while the
        long steps of the load run (the CLI draws a progress bar with it).
        """
        check_identifier(name, "table")
        if not copy and not public:
            raise ValueError(
                f"copy=False keeps a view that re-reads the file at every query, so a row "
                f"appended or changed after loading (or a malformed one) would change answers "
                f"and errors without the ledger knowing; private tables are always copied in. "
                f"Drop copy=False for {name!r} (public lookup tables may stay views)"
            )
        with self._lock:
            existing = self.tables()
            if name in existing and not replace:
                raise ValueError(
                    f"table {name!r} already exists; pass replace=True to load it again (its "
                    f"declarations are replaced too, and the change is recorded in the ledger)"
                )
            if not public and max_rows_per_unit is None and privacy_unit is not None:
                max_rows_per_unit = 1
            declared: dict[str, Any] = {}

            def validate(columns: list[Column], rows: int) -> None:
                if rows == 0:
                    raise ValueError(f"the source for {name!r} has no rows; nothing to protect")
                declared["v"] = validate_declarations(
                    name=name, columns=columns, privacy_unit=privacy_unit, public=public,
                    bounds=bounds, max_rows_per_unit=max_rows_per_unit,
                    max_groups_per_unit=max_groups_per_unit, domains=domains,
                )
                declared["not_null"] = validate_not_null(columns, not_null, public=public)

            def fixed() -> list[tuple[str, str]]:
                # the clamped fixed-point integers for the bounds being declared now (and only
                # those: a reload with other bounds recomputes them, and a query reads a hidden
                # column only if its name, a hash of column + bounds, matches the current ones)
                if public:
                    return []
                _, _, _, bnds_now, _ = declared["v"]
                types = {c.name: c for c in columns_seen["v"]}
                out = []
                unit_now = declared["v"][0]
                if unit_now is not None:  # each row's unit total, for the bounding fast path
                    out.append((dplan.unit_rows_column_name(unit_now),
                                f"COUNT(*) OVER (PARTITION BY {quote_ident(unit_now)})"))
                for col, (lo, hi) in bnds_now.items():
                    c = types[col]
                    out.append((dplan.fixed_column_name(col, lo, hi),
                                dplan.fixed_column_sql(quote_ident(col), lo, hi, c.cls)))
                return out

            columns_seen: dict[str, list[Column]] = {}
            inner_validate = validate

            def validate_and_keep(columns: list[Column], rows: int) -> None:
                columns_seen["v"] = columns
                inner_validate(columns, rows)

            key_tables: dict[str, str] = {}

            def key_domains() -> list[tuple[str, str, tuple[Any, ...]]]:
                # each declared domain, cast to its column's type and checked at load; copied
                # private tables keep it as a hidden key table named by a hash of the table,
                # column, type and keys (a changed domain gets a new table, never a stale one)
                doms_now = declared["v"][4]
                types = {c.name: c.type for c in columns_seen["v"]}
                out = []
                for col, keys in doms_now.items():
                    tname = domain_table_name(name, col, types[col], keys)
                    key_tables[col] = tname
                    out.append((col, tname, keys))
                return out

            self._backend.close()  # DuckDB: one writer, no readers attached meanwhile
            columns, storage, relation = load_table(
                self.path / DATA_FILE, name, source, public=public, copy=copy,
                source_table=source_table, validate=validate_and_keep, fixed=fixed,
                domains=key_domains, not_null=lambda: declared["not_null"],
                progress=progress,
            )
            unit, rows, groups, bnds, doms = declared["v"]
            meta = TableMeta(
                name=name, columns=tuple(columns), privacy_unit=unit, public=public,
                max_rows_per_unit=rows, max_groups_per_unit=groups, bounds=bnds, domains=doms,
                storage=storage, source=describe_source(source), relation=relation,
                description=description,
                key_tables=key_tables if storage == "copy" and not public else {},
                not_null=declared["not_null"],
            )
            self.ledger.record("table", {"name": name, "table": meta.to_dict()},
                               analyst=self.analyst,
                               query=f"ADD TABLE {name} ({meta.summary()})")
            return meta

    def add_public_table(self, name: str, source: Any, **kwargs: Any) -> TableMeta:
        """Register a public lookup table (no privacy; may be joined and used as group keys)."""
        return self.add_table(name, source, public=True, **kwargs)

    def set_analyst_budget(self, analyst: str, epsilon: float | None) -> None:
        """Give ``analyst`` their own epsilon cap inside the project's budget (None removes it)."""
        if epsilon is not None:
            dplan.check_epsilon(epsilon, "epsilon")
        self.ledger.record("analyst", {"analyst": analyst, "epsilon": epsilon},
                           analyst=self.analyst, query=f"SET BUDGET {analyst} = {epsilon}")

    # ------------------------------------------------------------------ queries

    def table(self, name: str) -> Any:
        """A Python query builder over ``name`` (compiles to the same SQL path)."""
        from dpkit.engine.builder import QueryBuilder

        if name not in self.tables():
            raise dsql.QueryError(
                f"unknown table {name!r}; registered tables: {', '.join(sorted(self.tables()))}"
            )
        return QueryBuilder(self, name)

    def _plan(self, query: str, *, epsilon: float | None, rho: float | None,
              delta: float | None, noise: str, level: float,
              bounds: Mapping[str, Any] | None,
              weights: Mapping[str, float] | None = None) -> dplan.Plan:
        catalog = self.tables()
        # parsing + validation depend only on the text and the declarations: cache the spec
        # (treated as immutable downstream) until a table is (re)registered
        key = (query, self._tables_version())
        spec = self._spec_cache.get(key)
        if spec is None:
            spec = dsql.parse_query(query, catalog)
            if len(self._spec_cache) >= 64:
                self._spec_cache.clear()
            self._spec_cache[key] = spec
        cfg = self.ledger.config
        # a plan depends only on public inputs: the same query with the same parameters under
        # the same declarations gets the same plan (compile_sql sets the same columns again)
        plan_key = _plan_cache_key(key, epsilon, rho, delta, noise, level, bounds, weights)
        cached = self._plan_cache.get(plan_key) if plan_key is not None else None
        if cached is not None:
            return cached
        plan = dplan.build_plan(spec, catalog, epsilon=epsilon, rho=rho, delta=delta,
                                noise=noise, level=level, bounds=dict(bounds or {}),
                                budget_delta=cfg.delta, weights=weights,
                                accountant=cfg.accountant)
        if plan.group_mode == "select" and (
            cfg.accountant in ("zcdp", "rdp")
            or (cfg.accountant == "pld" and plan.noise == dplan.GAUSSIAN)
        ):
            cols = ", ".join(k.column for k in spec.group_by)
            raise dsql.QueryError(
                f"GROUP BY {cols} has no declared keys, so the groups would be selected "
                f"privately; that selection is (epsilon, delta)-DP (a group of one person shows "
                f"with probability <= delta), which the project's {cfg.accountant!r} accountant "
                f"cannot express. Declare the keys (add_table(..., domains={{'"
                f"{spec.group_by[0].column}': [...]}})), join a public table of keys, or use a "
                f"project with accountant 'approx'"
                + (" (or 'pld' with Laplace noise)" if cfg.accountant != "pld" else
                   " (or Laplace noise)")
                + ". Nothing was charged"
            )
        if plan_key is not None:
            if len(self._plan_cache) >= 64:
                self._plan_cache.clear()
            self._plan_cache[plan_key] = plan
        return plan

    def _delta_share(self, plan: dplan.Plan, delta: float | None) -> float | None:
        cfg = self.ledger.config
        if cfg.accountant != "approx" or plan.noise != dplan.GAUSSIAN:
            return None
        return delta if delta is not None else cfg.delta / 10.0

    def _cost(self, plan: dplan.Plan, analyst: str, delta: float | None, *,
              check_only: bool = False) -> Any:
        from dpkit.accounting import BudgetExceeded, UnsupportedEvent

        try:
            if check_only:
                return self.ledger.check(plan.event, analyst=analyst,
                                         delta_share=self._delta_share(plan, delta))
            return self.ledger.cost(plan.event, analyst=analyst,
                                    delta_share=self._delta_share(plan, delta))
        except UnsupportedEvent as exc:
            raise dsql.QueryError(
                f"the project's accountant ({self.ledger.config.accountant}) cannot pay for this "
                f"query: {exc}. Use Laplace noise / public group keys, or a project with an "
                f"'approx' accountant"
            ) from None
        except BudgetExceeded:
            raise
        except (ValueError, ArithmeticError) as exc:
            raise dsql.QueryError(
                f"the project's accountant ({self.ledger.config.accountant}) failed on this "
                f"query's event: {str(exc).splitlines()[0]}. Nothing was charged"
            ) from None

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
        analyst: str | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> Result:
        """Answer an aggregate query privately, spending ``epsilon`` (or what ``accuracy`` needs).

        ``accuracy``: target CI half-width (a number for every output, or per output name);
        the smallest epsilon reaching it is found and spent (COUNT and SUM outputs only: other
        aggregates' errors depend on the data). ``delta``: the query's delta, for private group
        selection and (accountant ``approx``) Gaussian noise, halved between them when both
        (default: a tenth of the project's delta). ``noise``: ``"laplace"`` (pure DP, default)
        or ``"gaussian"`` (``rho=`` or ``epsilon=``; needs delta > 0). ``bounds``: per-query
        clamps. ``weights``: ``{"n": 1, "avg_age": 3}`` splits the budget in proportion to
        these weights per output name instead of equally (unnamed outputs weigh 1).
        ``ORDER BY <COUNT/SUM> [DESC] LIMIT k`` over groups chooses the ``k`` groups by noisy
        max (``res.selection`` has its utility bound).
        """
        who = analyst or self.analyst
        if _RELEASE_FORM.search(query) is not None:  # cheap test before parsing it twice
            special = families.answer_sql(self._families(who), query, epsilon=epsilon,
                                          rho=rho, delta=delta, accuracy=accuracy,
                                          noise=noise, level=level, bounds=bounds)
            if special is not None:  # a range/CDF/marginal family: answered by dpkit.release
                return special
        with self._lock:
            if accuracy is not None:
                if epsilon is not None or rho is not None:
                    raise dsql.QueryError("give epsilon= or accuracy=, not both")
                epsilon = epsilon_for_accuracy(
                    lambda eps: expected_errors(self._plan(
                        query, epsilon=eps, rho=None, delta=delta, noise=noise, level=level,
                        bounds=bounds, weights=weights)),
                    accuracy)
            plan = self._plan(query, epsilon=epsilon, rho=rho, delta=delta, noise=noise,
                              level=level, bounds=bounds, weights=weights)
            # under 'approx' with Gaussian noise the plan books one delta for the query (the
            # Gaussian conversion plus partition selection)
            booked = plan.charge_delta if plan.charge_delta is not None else delta
            self._cost(plan, who, booked, check_only=True)  # early refusal, nothing read
            prepared = self._reader.prepare(plan, self._tables_version())
            details: dict[str, Any] = {"split": [_json_safe(s) for s in plan.split()],
                                       "noise": plan.noise, "level": plan.level}
            if plan.weights:
                details["weights"] = dict(plan.weights)
            src = self._source
            insecure = bool(src is not None and src.insecure)

            def finish(exact: Exact, entry: Entry) -> Result:
                spend = self.ledger.spend(who if who in self.ledger.analyst_budgets() else None)
                return release(plan, exact, source=src, insecure=insecure,
                               epsilon_cost=float(entry.view["epsilon_cost"]),
                               ledger_seq=entry.seq, remaining=spend.remaining,
                               scratch=self._backend.scratch)

            return charged_read(self.ledger, plan.event, analyst=who, query=query,
                                delta_share=self._delta_share(plan, booked), details=details,
                                read=lambda: self._reader.read(prepared), finish=finish)

    def _execute(self, plan: dplan.Plan) -> Exact:
        """The exact aggregates of ``plan``, uncharged: for tests and benchmarks of the read
        path only (no public method returns them, and :meth:`sql` charges first)."""
        return self._reader.read(self._reader.prepare(plan, self._tables_version()))

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
        analyst: str | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> Preview:
        """Cost and expected error of a query, without reading data or spending anything
        (same parameters as :meth:`sql`; ``weights`` shows the weighted split)."""
        from dpkit.accounting import BudgetExceeded

        who = analyst or self.analyst
        plan = self._plan(query, epsilon=epsilon, rho=rho, delta=delta, noise=noise,
                          level=level, bounds=bounds, weights=weights)
        booked = plan.charge_delta if plan.charge_delta is not None else delta
        spend = self.ledger.spend(who if who in self.ledger.analyst_budgets() else None)
        try:
            cost = self._cost(plan, who, booked).epsilon
        except BudgetExceeded as exc:
            cost = float(exc.requested.epsilon)
        outputs = expected_errors(plan)
        notes = list(plan.notes)
        topk = plan.top_k
        if topk is not None:
            n_keys = len(plan.keys) if plan.keys is not None else None
            u = dplan.top_k_utility(topk, n_keys or 1000, level)
            notes.append(
                f"{topk.label}: each group shown within {u:.4g} of the true "
                f"{dplan.ordinal(topk.k)} {'largest' if topk.desc else 'smallest'} "
                f"{topk.score_label} with probability {level:g} "
                + (f"({n_keys} candidate groups)" if n_keys else
                   "(for 1000 candidate groups; grows like ln K)")
            )
        return Preview(query=query, epsilon=plan.epsilon, cost=cost, remaining=spend.remaining,
                       delta=plan.delta, level=level, split=plan.split(), outputs=outputs,
                       event=plan.event, notes=notes, weights=dict(plan.weights))

    # ------------------------------------------------------------------ release families

    def _families(self, analyst: str | None = None) -> families.Context:
        """What the release families need from this project (:mod:`dpkit.engine.families`)."""
        return families.Context(
            tables=self.tables, ledger=self.ledger, backend=self._backend, source=self._source,
            lock=self._lock, strategy_cache=self.path / STRATEGY_CACHE,
            analyst=analyst or self.analyst)

    def ranges(self, table: str, column: str, ranges: Sequence[tuple[float, float]], *,
               where: str | None = None, epsilon: float | None = None,
               rho: float | None = None, delta: float | None = None, strategy: Any = None,
               bins: int | None = None, bounds: Mapping[str, Any] | None = None,
               level: float = 0.95, accuracy: float | None = None,
               analyst: str | None = None) -> Result:
        """Counts of rows with ``low <= column <= high`` for every ``(low, high)`` in
        ``ranges``, answered together with correlated noise and charged once.

        ε-DP (``epsilon=``), ρ-zCDP (``rho=``) or the Gaussian mechanism at (ε, δ)
        (``epsilon=, delta=``) for add/remove one privacy unit with at most
        ``max_rows_per_unit`` rows. ``accuracy=`` (instead of ``epsilon=``; also for
        :meth:`cdf`, :meth:`quantiles`, :meth:`marginals`): the largest CI half-width wanted.
        Grid, strategy and columns: :func:`dpkit.engine.families.answer.ranges`.

        >>> res = cur.ranges("visits", "age", [(0, 17), (18, 64), (65, 100)], epsilon=0.5)
        ... # doctest: +SKIP
        """
        ask = families.RangesAsk(table=table, column=column, ranges=ranges, where=where,
                                 strategy=strategy, bins=bins, bounds=bounds, level=level)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.ranges(self._families(analyst), ask, target, accuracy=accuracy)

    def cdf(self, table: str, column: str, *, where: str | None = None,
            epsilon: float | None = None, rho: float | None = None,
            delta: float | None = None, strategy: Any = None, bins: int | None = None,
            bounds: Mapping[str, Any] | None = None, level: float = 0.95,
            accuracy: float | None = None, analyst: str | None = None) -> Result:
        """The cumulative distribution of ``column`` over its declared bounds, with a
        **simultaneous** confidence band (all rows at once at ``level``). Same guarantee as
        :meth:`ranges`; details: :func:`dpkit.engine.families.answer.cdf`."""
        ask = families.CdfAsk(table=table, column=column, where=where, strategy=strategy,
                              bins=bins, bounds=bounds, level=level)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.cdf(self._families(analyst), ask, target, accuracy=accuracy)

    def quantiles(self, table: str, column: str, probabilities: Sequence[float], *,
                  where: str | None = None, epsilon: float | None = None,
                  rho: float | None = None, delta: float | None = None, strategy: Any = None,
                  bins: int | None = None, bounds: Mapping[str, Any] | None = None,
                  level: float = 0.95, accuracy: float | None = None,
                  analyst: str | None = None) -> Result:
        """Any number of quantiles of ``column`` from one private CDF (one charge), with
        intervals holding jointly at ``level``. Same guarantee as :meth:`cdf`; details:
        :func:`dpkit.engine.families.answer.quantiles`."""
        ask = families.CdfAsk(table=table, column=column, probabilities=probabilities,
                              where=where, strategy=strategy, bins=bins, bounds=bounds,
                              level=level)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.quantiles(self._families(analyst), ask, target, accuracy=accuracy)

    def marginals(self, table: str, columns: Sequence[str | Sequence[str]], *,
                  k: int | None = None, where: str | None = None,
                  epsilon: float | None = None, rho: float | None = None,
                  delta: float | None = None, strategy: Any = None, bins: int | None = None,
                  bounds: Mapping[str, Any] | None = None, level: float = 0.95,
                  accuracy: float | None = None, analyst: str | None = None) -> Result:
        """Marginal tables (contingency tables) over declared domains, answered together
        (mutually consistent). Same guarantee as :meth:`ranges`; ``columns`` and ``k``:
        :func:`dpkit.engine.families.answer.marginals`."""
        ask = families.MarginalsAsk(table=table, columns=columns, k=k, where=where,
                                    strategy=strategy, bins=bins, bounds=bounds, level=level)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.marginals(self._families(analyst), ask, target, accuracy=accuracy)

    def synthetic(self, table: str, columns: Sequence[str], *, where: str | None = None,
                  epsilon: float | None = None, rho: float | None = None,
                  delta: float | None = None, rows: int | None = None,
                  method: str = "factorization", k: int | None = None, rounds: int = 20,
                  bins: int | None = None, bounds: Mapping[str, Any] | None = None,
                  level: float = 0.95, analyst: str | None = None) -> families.SyntheticData:
        """Synthetic records over the declared domains of ``columns``, charged to the ledger.

        Post-processing of one ε-DP (``epsilon=``) or ρ-zCDP (``rho=``; ``epsilon=, delta=``
        converts to the largest ρ meeting (ε, δ)) release of the table's histogram over the
        public product grid of ``columns``, for add/remove one privacy unit: no record is a
        real row, and only the ``k``-way marginals are preserved, approximately. ``method``
        ``"factorization"`` (default) or ``"mwem"``: see
        :func:`dpkit.engine.families.answer.synthetic`. Returns
        :class:`~dpkit.engine.families.SyntheticData`.
        """
        ask = families.SyntheticAsk(table=table, columns=columns, where=where, rows=rows,
                                    method=method, k=k, rounds=rounds, bins=bins,
                                    bounds=bounds, level=level)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.synthetic(self._families(analyst), ask, target)

    def preview_release(self, kind: str, table: str, *args: Any, analyst: str | None = None,
                        **kwargs: Any) -> Preview:
        """Cost and expected accuracy of :meth:`ranges` / :meth:`cdf` / :meth:`quantiles` /
        :meth:`marginals` (``kind``) with the same arguments, without reading data or spending
        anything. ``outputs`` lists the expected RMSE and the largest CI half-width."""
        return families.preview(self._families(analyst), kind, table, *args, **kwargs)

    # ------------------------------------------------------------------ budget

    def budget(self, analyst: str | None = None) -> BudgetStatus:
        """Spent, remaining and the history of charges (project-wide or for one analyst)."""
        spend = self.ledger.spend(analyst)
        history = [
            HistoryItem(seq=e.seq, time=e.time, analyst=e.analyst, query=e.query, event=e.event,
                        epsilon=float(e.view.get("epsilon_cost", 0.0)),
                        delta=float(e.view.get("delta_cost", 0.0)),
                        epsilon_spent=float(e.view.get("epsilon_spent", 0.0)))
            for e in self.ledger.entries("charge")
            if analyst is None or e.analyst == analyst
        ]
        return BudgetStatus(
            epsilon=spend.epsilon, delta=spend.delta, accountant=spend.accountant,
            spent=spend.spent, remaining=spend.remaining, delta_spent=spend.delta_spent,
            delta_remaining=spend.delta_remaining, history=history, head=self.ledger.head(),
            analyst=analyst, rho_spent=spend.rho_spent, rho_remaining=spend.rho_remaining,
            analysts=self.ledger.analyst_budgets(),
        )

    def verify(self, *, expected_head: tuple[int, str] | None = None) -> int:
        """Re-verify the ledger's hash chain from disk; returns the number of rows."""
        return self.ledger.verify(expected_head=expected_head)

    def entries(self) -> list[Entry]:
        return self.ledger.entries()


def _plan_cache_key(spec_key: tuple[str, int], *params: Any) -> tuple[Any, ...] | None:
    """A hashable key for a plan's inputs (mappings as sorted items), or None when some input
    is not hashable as given (then the plan is built afresh)."""
    def frozen(v: Any) -> Any:
        # every value with its type: 1, 1.0, True and np.float32(1) compare and hash alike,
        # but validation accepts only some of them (a cached plan must not skip the check)
        if isinstance(v, Mapping):
            return ("Mapping", tuple(sorted((str(k), type(k).__name__, frozen(x))
                                            for k, x in v.items())))
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(frozen(x) for x in v))
        return (type(v).__name__, v)

    try:
        key = (spec_key, *(frozen(p) for p in params))
        hash(key)
    except TypeError:
        return None
    return key


def _json_safe(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out
