"""Run generated queries on D/D' project pairs and collect what differs (the findings)."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from dpkit import noise
from dpkit.accounting import Budget
from dpkit.attacks.side_channels.draw import Draw
from dpkit.attacks.side_channels.grammar import Grammar, with_options
from dpkit.attacks.side_channels.neighbours import NEIGHBOURS, Scratch
from dpkit.attacks.side_channels.outcome import Outcome, compare, observe, self_check
from dpkit.attacks.side_channels.query import Query
from dpkit.engine.curator import Curator
from dpkit.engine.tables import TableMeta, quote_ident

__all__ = ["ACCOUNTANTS", "Finding", "Report", "declarations", "fuzz"]

ACCOUNTANTS = ("approx", "pld", "zcdp")
# the throwaway projects' budget: the largest whose constant-work failure bits (under every
# accountant, at delta 1e-3) stay within noise.constant.MAX_BITS, so that the projects run on
# fixed plans by default, as new projects do (a query asking more is refused on D and D' alike)
_BUDGET = 25.0
_REFRESH_AT = 15.0  # rebuild a pair before its budget runs out (refusals would mask leaks)
# the PLD accountant composes the whole history on every check (~0.3 s after 40 charges):
# start its pairs afresh after this many charges
_PLD_HISTORY = 10


@dataclass(frozen=True)
class Finding:
    """One query whose public outcome differed between D and D' (``check="neighbours"``), or
    that showed a problem on one dataset alone (``check`` names it: ``free_release``,
    ``duplicate_keys``, ``internal_exception``)."""

    check: str
    fields: tuple[str, ...]
    query: Query
    neighbour: str
    accountant: str
    on_d: Outcome
    on_d1: Outcome | None = None
    minimal: Query | None = None

    def cause(self) -> str:
        """A root-cause label for grouping (which public thing leaked)."""
        if self.check != "neighbours":
            return self.check
        if {"kind", "error_class", "error_text"} & set(self.fields):
            return "error_oracle"
        if "preview" in self.fields:
            return "preview"
        if {"charge_epsilon", "charge_delta"} & set(self.fields):
            return "charge"
        if "key_order" in self.fields:
            return "key_order"
        if {"rows", "key_set", "columns"} & set(self.fields):
            return "shape"
        if "http" in self.fields:
            return "service"  # status, headers, JSON keys or public fields of an HTTP answer
        return "work"  # statements or noise requests: a timing class

    def reproducer(self) -> str:
        q = self.minimal or self.query
        lines = [f"# {self.cause()}: {', '.join(self.fields)} (neighbour {self.neighbour}, "
                 f"accountant {self.accountant})", q.python(),
                 f"# on D : {self.on_d.short()}"]
        if self.on_d1 is not None:
            lines.append(f"# on D': {self.on_d1.short()}")
            lines += _first_work_difference(self.on_d, self.on_d1)
            lines += _http_difference(self.on_d, self.on_d1)
        return "\n".join(lines)


def _first_work_difference(a: Outcome, b: Outcome) -> list[str]:
    """The first statement and the first noise request that differ (a work finding's why)."""
    out = []
    for what, xs, ys in (("statement", a.statements, b.statements),
                         ("noise request", a.noise, b.noise)):
        if xs == ys:
            continue
        n = min(len(xs), len(ys))
        i = next((i for i in range(n) if xs[i] != ys[i]), n)
        x = " ".join(xs[i])[:200] if i < len(xs) else "(none)"
        y = " ".join(ys[i])[:200] if i < len(ys) else "(none)"
        out += [f"# {what} {i + 1} of {len(xs)} on D : {x}",
                f"# {what} {i + 1} of {len(ys)} on D': {y}"]
    return out


def _http_difference(a: Outcome, b: Outcome) -> list[str]:
    """The parts of the two HTTP faces that differ (a service finding's why)."""
    if a.http == b.http:
        return []
    try:
        fa, fb = json.loads(a.http or "{}"), json.loads(b.http or "{}")
    except ValueError:
        return [f"# http on D : {a.http[:200]}", f"# http on D': {b.http[:200]}"]
    out = []
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k) != fb.get(k):
            out += [f"# http {k} on D : {json.dumps(fa.get(k))[:200]}",
                    f"# http {k} on D': {json.dumps(fb.get(k))[:200]}"]
    return out


@dataclass
class Report:
    """What a fuzzing run did: comparisons, outcome counts, findings (grouped by cause)."""

    seed: int
    comparisons: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    families: Counter[str] = field(default_factory=Counter)  # comparisons per query family
    findings: list[Finding] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # neighbours whose D' did not load
    seconds: float = 0.0
    trace: bool = True  # the work done (statements, noise requests) was compared too

    @property
    def ok(self) -> bool:
        return not self.findings

    def by_cause(self) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = {}
        for f in self.findings:
            out.setdefault(f.cause(), []).append(f)
        return out

    def summary(self) -> str:
        lines = [f"side-channel fuzz, seed {self.seed}: {self.comparisons} D/D' comparisons in "
                 f"{self.seconds:.1f} s" + (" (work traced)" if self.trace else ""),
                 "outcomes on D: " + ", ".join(f"{k} {v}" for k, v in sorted(
                     self.outcomes.items())),
                 "queries: " + ", ".join(f"{k} {v}" for k, v in sorted(self.families.items()))]
        for s in self.skipped:
            lines.append(f"skipped: {s}")
        causes = self.by_cause()
        lines.append(f"findings: {len(self.findings)}" + ("" if causes else " (none)"))
        for cause, fs in sorted(causes.items()):
            lines.append(f"  {cause}: {len(fs)}")
            for f in fs[:2]:
                lines += ["    " + x for x in f.reproducer().splitlines()]
        return "\n".join(lines)


# ---------------------------------------------------------------------- projects


def make_project(path: Path, data_file: Path, table: TableMeta, public: Sequence[TableMeta],
                 *, accountant: str, seed: int, epsilon: float = _BUDGET,
                 constant_work: bool | None = None) -> Curator:
    """A throwaway project over ``data_file`` with ``table``'s declarations (and the public
    tables), a budget of ``epsilon`` (25), delta 1e-3, and a seeded (insecure) noise source;
    ``constant_work`` as ``Curator.create``'s (default: on, as the budget can pay for it)."""
    cur = Curator.create(path, budget=Budget(epsilon=epsilon, delta=1e-3, accountant=accountant),
                         source=noise.seeded(seed), constant_work=constant_work)
    for p in public:
        cur.add_table(p.name, f"{data_file}::{p.name}", public=True)
    cur.add_table(table.name, f"{data_file}::{table.name}", **declarations(table))
    return cur


def declarations(table: TableMeta) -> dict[str, Any]:
    """``add_table``'s keyword arguments that declare ``table`` as it is declared."""
    return {"privacy_unit": table.privacy_unit,
            # numeric bounds and DATE/TIMESTAMP ranges are one declaration (`bounds=`)
            "bounds": {**table.bounds, **table.date_ranges} or None,
            "max_rows_per_unit": table.max_rows_per_unit,
            "max_groups_per_unit": table.max_groups_per_unit,
            "domains": {k: list(v) for k, v in table.domains.items()} or None,
            "not_null": list(table.not_null) or None}


class _Side:
    """The project over D of one accountant, shared by every pair (one per neighbour kind) whose
    D has the same history: D's public outcome is a function of the seed and the queries asked
    since the project was opened, so the copies that each pair kept until 2026-11 answered
    alike (``compare`` found nothing between them, tests/attacks/test_side_channels.py), and
    observing one copy once per query makes the same comparisons with 40% fewer runs. A pair
    whose D must diverge (a minimisation's extra queries, a refresh after its charges
    differed) takes a :meth:`fork` of its own."""

    def __init__(self, opener: Callable[[str], Any], name: str) -> None:
        self.opener, self.name = opener, name
        self.generation = 0
        self.users = 0  # the pairs reading this D
        self.forks = 0
        self.history: list[Query] = []  # asked since the project was opened
        self.cur: Any = None
        self._last: tuple[int, Outcome] | None = None  # the outcome of step n, for the others
        self._checked = -1  # the last step whose staleness was decided
        self.reopen()

    def reopen(self) -> None:
        self.close()
        self.generation += 1
        self.history, self._last = [], None
        self.cur = self.opener(f"{self.name}_{self.generation}")

    def fork(self, *, replay: bool) -> _Side:
        """A D of its own for one pair: fresh, or (``replay``) asked this D's queries again,
        so that it is in the same state."""
        self.forks += 1
        mine = _Side(self.opener, f"{self.name}_{self.generation}_fork{self.forks}")
        if replay:
            for q in self.history:
                mine.observe(q, trace=False)
        return mine

    def observe(self, q: Query, *, trace: bool, step: int | None = None) -> Outcome:
        """D's outcome of ``q``; asked once per ``step`` whatever the number of pairs."""
        if step is not None and self._last is not None and self._last[0] == step:
            return self._last[1]
        out = observe(self.cur, q, (str(self.cur.path),), trace=trace)
        self.history.append(q)
        self._last = None if step is None else (step, out)
        return out

    def stale(self, accountant: str, step: int) -> bool:
        """Whether to start afresh before ``step``: budget nearly spent, or a long (slow) PLD
        history. Asked once per step, before the step's query (the first pair asks; a D
        reopened then is seen by the others as a new generation)."""
        if self._checked == step:
            return False
        self._checked = step
        s = self.cur.ledger.spend()
        return s.spent > _REFRESH_AT or (accountant == "pld" and s.charges >= _PLD_HISTORY)

    def close(self) -> None:
        if self.cur is not None:
            with contextlib.suppress(Exception):
                self.cur.close()


class _Pair:
    """Projects over D and D' with the same seed, asked the same queries in the same order
    (D's project shared with the other pairs of its accountant, see :class:`_Side`)."""

    def __init__(self, folder: Path, files: tuple[Path, Path], table: TableMeta,
                 public: Sequence[TableMeta], accountant: str, seed: int,
                 factory: Callable[..., Any], trace: bool = True,
                 side: _Side | None = None) -> None:
        self.args = (folder, files, table, public, accountant, seed)
        self.factory = factory
        self.trace = trace
        self.d1_generation = 0
        self.side = side if side is not None else _Side(
            self.opener(0), f"{files[1].stem}_{accountant}_d")  # named by the first pair
        try:
            self.d1 = self._open_d1()
        except Exception:
            if self.side.users == 0:
                self.side.close()
            raise
        self.side.users += 1

    def opener(self, i: int) -> Callable[[str], Any]:
        """Opens a project over ``files[i]`` (D: 0, D': 1) at a path named by its argument."""
        folder, files, table, public, accountant, seed = self.args

        def open_at(name: str) -> Any:
            return self.factory(folder / f"{name}.dpkit", files[i], table, public,
                                accountant=accountant, seed=seed)
        return open_at

    @property
    def d(self) -> Any:
        return self.side.cur

    def _open_d1(self) -> Any:
        self.d1_generation += 1
        self.seen = self.side.generation  # the D generation this D' was opened beside
        stem, acct = self.args[1][1].stem, self.args[4]
        return self.opener(1)(f"{stem}_{acct}_{self.d1_generation}_d1")

    def _own(self, *, replay: bool) -> None:
        """Give this pair a D of its own (``replay``: in the shared D's state)."""
        if self.side.users > 1:
            self.side.users -= 1
            self.side = self.side.fork(replay=replay)
            self.side.users = 1
        elif not replay:
            self.side.reopen()

    def refresh(self) -> None:
        """D and D' afresh: when the shared D has not been reopened yet by another pair, it is
        reopened here; D' always."""
        if self.seen == self.side.generation:
            self.side.reopen()
        with contextlib.suppress(Exception):
            self.d1.close()
        self.d1 = self._open_d1()

    def restart(self) -> None:
        """Both afresh, D no longer shared (the two ledgers no longer match)."""
        self._own(replay=False)
        with contextlib.suppress(Exception):
            self.d1.close()
        self.d1 = self._open_d1()

    def run(self, q: Query, step: int | None = None) -> tuple[Outcome, Outcome]:
        """The outcomes on D and D'; ``step`` None (a minimisation's extra query): D diverges
        from the other pairs', so this pair takes its own."""
        if step is None:
            self._own(replay=True)
        a = self.side.observe(q, trace=self.trace, step=step)
        b = observe(self.d1, q, (str(self.d1.path),), trace=self.trace)
        return a, b

    def stale(self, step: int) -> bool:
        """Whether to start afresh before ``step``: D is stale, or was reopened by another
        pair."""
        return self.seen != self.side.generation or self.side.stale(self.args[4], step)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.d1.close()
        self.side.users -= 1
        if self.side.users <= 0:
            self.side.close()


def _minimise(pair: _Pair, q: Query, fields: tuple[str, ...]) -> Query | None:
    """The first single WHERE conjunct (or none) that still shows the same difference."""
    candidates = [q.with_where(())] + [q.with_where((w,)) for w in q.where]
    if len(q.where) <= 1:
        candidates = candidates[:1]
    for c in candidates:
        a, b = pair.run(c)
        if set(fields) <= set(compare(c, a, b)):
            return c
    return None


# ---------------------------------------------------------------------- the data


def _resolve(target: Any, table: str | None) -> tuple[TableMeta, list[TableMeta], Path | None]:
    """(private table, public tables, project folder or None) for a TableMeta / Curator /
    project path."""
    if isinstance(target, TableMeta):
        return target, [], None
    if isinstance(target, Curator):
        tables, folder = target.tables(), Path(target.path)
    else:
        folder = Path(target)
        with Curator.open(folder) as cur:
            tables = cur.tables()
    private = sorted(n for n, m in tables.items() if not m.public)
    if table is None:
        if len(private) != 1:
            raise ValueError(f"the project has private tables {private or 'none'}; name the one "
                             f"to fuzz with table=... (--table on the command line)")
        table = private[0]
    if table not in tables or tables[table].public:
        raise ValueError(f"no private table {table!r} in the project; its private tables: "
                         f"{', '.join(private) or 'none'}")
    return tables[table], [m for m in tables.values() if m.public], folder


def _fill(scratch: Scratch, table: TableMeta, public: Sequence[TableMeta],
          project: Path | None, d: Draw, units: int) -> None:
    """D: a sample of ``units`` units of the project's rows (the owner's own data, read from
    the project's DuckDB file), or generated rows when fuzzing declarations only."""
    if project is None:
        scratch.generate(d, units=units)
        for p in public:
            scratch.add_public(p, None, d)
        return
    scratch.con.execute(f"ATTACH '{project / 'data.duckdb'}' AS dpdata (READ_ONLY)")
    try:
        salt = d.seed()
        if table.privacy_unit is not None:
            u = quote_ident(table.privacy_unit)
            sql = (f"SELECT * FROM {table.relation} WHERE {u} IN (SELECT {u} FROM "
                   f"{table.relation} GROUP BY {u} ORDER BY hash({u}, {salt}) LIMIT {units})")
        else:
            sql = f"SELECT * FROM {table.relation} ORDER BY hash(rowid, {salt}) LIMIT {units}"
        scratch.load_rows(sql)
        for p in public:
            cols = ", ".join(quote_ident(c.name) for c in p.columns)
            scratch.add_public(p, f"SELECT {cols} FROM {p.relation}", d)
    finally:
        scratch.con.execute("DETACH dpdata")


# ---------------------------------------------------------------------- the run


def fuzz(
    target: Any,
    *,
    queries: int = 2000,
    seed: int = 0,
    neighbours: Sequence[str] = NEIGHBOURS,
    accountants: Sequence[str] = ACCOUNTANTS,
    table: str | None = None,
    public: Sequence[TableMeta] = (),
    units: int = 12,
    families: Sequence[str] | None = None,
    minimise: bool = True,
    max_findings: int | None = None,
    folder: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    factory: Callable[..., Any] = make_project,
    trace: bool = True,
    options: bool = False,
) -> Report:
    """Fuzz the curator for side channels on neighbouring datasets; returns a :class:`Report`.

    ``target``: a private table's declarations (:class:`TableMeta`, rows are generated; give
    its public tables as ``public=``), or a project (:class:`Curator` or its folder; the owner's
    run: a sample of ``units`` units of ``table``'s rows is copied). For every neighbour kind
    in ``neighbours`` (add / remove one unit, a unit of extreme values added or changed, a unit
    with many rows) and accountant, two throwaway projects over D and D' (same declarations,
    budget ε = 25, δ = 1e-3, constant work on as for any new project whose budget can pay for
    it, the same seeded noise) get the same ``queries / pairs`` random queries in the same
    order. Every public part of the outcomes is compared (see
    :func:`compare`); differences, and problems visible on one side (a release charged
    nothing, duplicate keys, an internal exception), are findings. The run is reproducible
    from ``seed`` (all choices come from ``dpkit.noise.seeded``). Nothing is written to the
    target project.

    ``max_findings``: stop after this many (a CI run that only needs to know "any?");
    ``folder``: keep the scratch projects there (default: a temporary folder, removed);
    ``factory(path, data_file, table, public, accountant=, seed=)``: makes each project
    (default :func:`make_project`; tests plant a leak with it); ``trace``: also compare the
    work each query does (its engine statements and noise requests, in order:
    :mod:`dpkit.noise.trace`), the deterministic proxy for its timing class; ``options``:
    also draw request options (``accuracy=``, ``level=``, ``diagnostics=False``).
    """
    start = time.perf_counter()
    meta, pubs, project = _resolve(target, table)
    pubs = list(public) or pubs
    d = Draw(seed)
    grammar = Grammar(meta, pubs, **({"families": families} if families else {}))
    report = Report(seed=seed, trace=trace)
    tmp = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="dpkit-fuzz-"))
    tmp.mkdir(parents=True, exist_ok=True)
    scratch = Scratch(tmp, meta, pubs)
    pairs: list[tuple[str, _Pair]] = []
    try:
        _fill(scratch, meta, pubs, project, d, units)
        base = scratch.write("d0", tmp / "d.duckdb")
        project_seed = d.seed()
        sides: dict[str, _Side] = {}  # D's project per accountant, shared by the pairs
        for kind in neighbours:
            f1 = scratch.write(scratch.neighbour(kind, d), tmp / f"{kind}.duckdb")
            for acct in accountants:
                try:
                    pair = _Pair(tmp, (base, f1), meta, pubs, acct, project_seed, factory,
                                 trace, side=sides.get(acct))
                except (ValueError, duckdb.Error) as exc:
                    report.skipped.append(f"{kind}/{acct}: {str(exc).splitlines()[0]}")
                else:
                    sides[acct] = pair.side
                    pairs.append((kind, pair))
        scratch.close()
        if pairs:
            _loop(pairs, grammar, d, max(1, queries // len(pairs)), report, minimise,
                  max_findings, progress, options)
    finally:
        for _, p in pairs:
            p.close()
        scratch.close()
        if folder is None:
            shutil.rmtree(tmp, ignore_errors=True)
    report.seconds = time.perf_counter() - start
    return report


def _loop(pairs: list[tuple[str, _Pair]], grammar: Grammar, d: Draw, per_pair: int,
          report: Report, minimise: bool, max_findings: int | None,
          progress: Callable[[int, int], None] | None, options: bool = False) -> None:
    seen: set[tuple[str, tuple[str, ...], str]] = set()
    total = per_pair * len(pairs)
    for step in range(per_pair):
        q = grammar.query(d)
        if options:  # drawn after the query: a run without options asks what it asked before
            q = with_options(q, d)
        for kind, pair in pairs:
            if pair.stale(step):
                pair.refresh()
            a, b = pair.run(q, step)
            report.comparisons += 1
            report.outcomes[a.kind] += 1
            report.families[q.family] += 1
            acct = pair.args[4]
            fields = compare(q, a, b)
            if fields:
                key = ("neighbours", fields, q.sql() + kind)
                small = _minimise(pair, q, fields) if minimise and key not in seen else None
                seen.add(key)
                report.findings.append(Finding("neighbours", fields, q, kind, acct, a, b, small))
                if {"charge_epsilon", "charge_delta"} & set(fields):
                    pair.restart()  # the two ledgers no longer match: start both afresh
            for check in dict.fromkeys(self_check(q, a) + self_check(q, b)):
                once = (check, (a.error_class,), q.sql() + q.python())
                if once not in seen:  # a one-sided problem does not depend on the neighbour
                    seen.add(once)
                    report.findings.append(Finding(check, (check,), q, kind, acct, a, b))
            if progress is not None:
                progress(report.comparisons, total)
            if max_findings is not None and len(report.findings) >= max_findings:
                return
