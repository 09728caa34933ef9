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
front: lifecycle, analysts and budget here; its tables (:mod:`.table_methods`), the queries that
drive that line (:mod:`.query_methods`) and the release families (:mod:`.release_methods`) are
method groups it inherits, over the one state its constructor sets.

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

import threading
from pathlib import Path
from typing import Any

from dpkit import noise as _noise
from dpkit.engine import bounds as dbounds
from dpkit.engine.backend_spark import SparkBackend, backend_for, check_engine
from dpkit.engine.ledger import Entry, Ledger
from dpkit.engine.plan.cache import PlanCache
from dpkit.engine.prepare import Preparer
from dpkit.engine.project import (
    DATA_FILE,
    budget_parameters,
    ledger_dsn,
    make_project,
    open_project,
)
from dpkit.engine.query_methods import QueryMethods
from dpkit.engine.release_methods import ReleaseMethods
from dpkit.engine.results import BudgetStatus, HistoryItem
from dpkit.engine.roles import (
    OWNER,
    add_analyst,
    charged_analyst,
    constant_work_source,
    project_source,
    reopen_seed,
    revoke_analyst,
    set_analyst_caps,
    visible_budget,
)

__all__ = ["BudgetStatus", "Curator", "HistoryItem"]

_NOT_GIVEN: Any = object()  # marks a removed keyword argument that the caller did not pass


class Curator(QueryMethods, ReleaseMethods):
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
        self._tables_cache = None
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

    # ------------------------------------------------------------------ roles

    def set_analyst_budget(self, analyst: str, epsilon: float | None,
                           delta: float | None = None) -> None:
        """Give ``analyst`` their own epsilon cap inside the project's budget, and a delta cap
        beside it (default on an 'approx' project: the project's delta in the same proportion
        as the epsilon cap); None removes both; owner only."""
        self._require_owner("setting a budget")
        set_analyst_caps(self.ledger, self.analyst, analyst, epsilon, delta)

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

    # ------------------------------------------------------------------ clamp bounds

    def suggest_bounds(self, table: str, column: str, *, epsilon: float,
                       search: tuple[float, float] | None = None, lower: float = 0.01,
                       upper: float = 0.99, bins: int | None = None,
                       grid: str = "auto", analyst: None = None) -> dict[str, Any]:
        """Clamp bounds for ``column``: the grid cells holding its ``lower``/``upper``
        quantiles by :meth:`quantiles` over the public ``search`` range (default: its declared
        bounds), rounded outward to their edges; one ε-DP charge (:mod:`.bounds`). ``grid``:
        ``"auto"`` (log-scale cells when the range spans four orders of magnitude, a rule on
        the public range), ``"log"`` or ``"linear"``."""
        rng = dbounds.search_range(self.tables(), table, column, search)
        res = self.quantiles(table, column, [lower, upper], epsilon=epsilon,
                             bounds={column: rng}, bins=bins, grid=grid, analyst=analyst)
        cells = dbounds.search_grid(self.tables(), table, column, rng, bins, grid)
        whole = self.tables()[table].column(column).cls == "int"
        return dbounds.suggested_bounds(res, column, lower, upper, cells, whole)

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
