"""Fourth red-team pass (FINDINGS.md, section J): the service's new surfaces (late answers,
private fits over HTTP, per-analyst caps) attacked as an analyst and as a co-tenant. Each test
failed before its fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from tests.server.conftest import SQL, Project, idp_key, ledger_held, local_client, make_project
from tests.server.test_endpoints import charges


def test_j1_a_rate_limited_poll_does_not_lose_a_charged_answer(
        make_client: Any, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """J1: ``Client.sql(wait=...)`` polls its kept answer once a second; a 429 on a poll (the
    analyst's own rate, here 0.5/s) was raised out of ``sql()`` as "retry after": the answer
    id was lost, the charge made, and the natural retry charged again. Now the client waits
    the Retry-After and polls on: one charge, the answer."""
    import time as _time

    from dpkit.server import client as client_module

    app_client = make_client(timeout=0.3, rate=0.5, burst=2)
    naps: list[float] = []
    real_sleep = _time.sleep

    def sleep(s: float) -> None:  # the Retry-After is whole seconds: record, sleep briefly
        naps.append(s)
        real_sleep(min(s, 0.6))

    monkeypatch.setattr(client_module.time, "sleep", sleep)
    cl = local_client(app_client, project.alice)
    with ledger_held(project.path, 2.5):  # the query waits past the timeout: 504, polled
        res = cl.sql(SQL, epsilon=0.1, wait=60.0)
    assert res.columns == ["g", "n"] and res.epsilon == 0.1
    assert charges(project) == 1
    assert any(n >= 1.0 for n in naps), naps  # it did meet a 429 and waited it out


#: option combinations whose split of a tiny epsilon left a release that fit could not sample
TOO_SMALL = [
    ("linear_regression", {"alpha": 1e-200, "fit_intercept": False}, "v", 1e-12, 1e-300),
    ("logistic_regression", {"feature_norm": 1e-300, "max_iter": 1}, "y", 1e-300, 1e-300),
    ("logistic_regression", {"learning_rate": 1e300}, "y", 1e-300, 1e-300),
    ("logistic_regression", {"max_iter": 10_000}, "y", 1e-12, 1e-300),
]


@pytest.mark.parametrize("case", TOO_SMALL, ids=lambda c: f"{c[0]}-{c[3]:g}")
def test_j2_an_epsilon_too_small_for_a_fits_gaussian_releases_is_refused_before_the_charge(
        tmp_path: Path, case: tuple[str, dict[str, Any], str, float, float]) -> None:
    """J2: a fit whose epsilon, split over its releases (the row count, each of max_iter
    gradient steps, the Gram matrix), leaves a release rho of 0 or a variance past the exact
    sampler's limit passed privacy_event, was charged, and failed inside fit (the
    after-charge error, through POST /v1/fit as through cur.fit); now refused, nothing
    charged. The same on an empty read (no leak): a loss like G5/G8."""
    from tests.server.test_fit_endpoint import Served, _frame

    model, options, label, epsilon, delta = case
    s = Served(tmp_path, _frame(60), epsilon=10.0, delta=1e-3)
    try:
        rows = s.ledger_rows()
        r = s.post("/v1/fit", {"model": model, "sql": "SELECT x, g FROM t", "label": label,
                               "epsilon": epsilon, "delta": delta, "options": options})
        assert r.status_code == 409, r.text
        assert "too small" in r.json()["detail"] and "charged (ledger" not in r.text, r.text
        assert s.ledger_rows() == rows  # refused before the charge
    finally:
        s.close()


def test_j4_a_view_in_a_database_under_the_data_root_cannot_read_past_it(
        make_client: Any, project: Project, tmp_path: Path) -> None:
    """J4: the data root confines ``POST /v1/tables`` to files under it, opened without
    following a name again; but a DuckDB database there may hold a *view*, and the load ran
    it: ``CREATE VIEW v AS SELECT * FROM read_csv('/outside/file')`` (or
    ``read_text('PROJECT/ledger.key')``) was loaded as a table, the very files the root keeps
    out. Now only stored tables load from a database over HTTP; the owner's own process
    (``cur.add_table``) still reads views."""
    import duckdb

    import dpkit as dp

    client = make_client()
    outside = tmp_path / "outside.csv"
    outside.write_text("line\nSECRET-OUTSIDE-THE-ROOT\n")
    root = project.path / "data"
    root.mkdir()
    with duckdb.connect(str(root / "evil.duckdb")) as con:
        con.execute(f"CREATE VIEW v AS SELECT * FROM read_csv('{outside}')")
        con.execute(f"CREATE VIEW k AS SELECT content FROM read_text("
                    f"'{project.path / 'ledger.key'}')")
        con.execute("CREATE TABLE stored AS SELECT 1 AS z")
    h = project.headers(project.owner)
    for source in ("evil.duckdb::v", "evil.duckdb::k"):
        r = client.post("/v1/tables", headers=h,
                        json={"name": "leak", "source": source, "public": True})
        assert r.status_code == 409 and "is a view" in r.json()["detail"], r.text
    assert "leak" not in client.get("/v1/tables", headers=h).text
    r = client.post("/v1/tables", headers=h,
                    json={"name": "ok", "source": "evil.duckdb::stored", "public": True})
    assert r.status_code == 201, r.text
    own = make_project(tmp_path / "own")  # the owner's process reads views (it is the owner)
    with dp.Curator.open(own.path) as cur:
        assert cur.add_table("mine", f"{root / 'evil.duckdb'}::v", public=True).public


def test_j3_one_analysts_late_answers_do_not_push_out_anothers() -> None:
    """J3: the late-answer store kept at most ``count`` answers, dropping the oldest first,
    whoever's: a co-tenant whose requests run past the timeout (a low ``--timeout``, a few
    analysts together) pushed out alice's answer before she fetched it, a charge she paid
    for nothing. Now the oldest answer of whoever holds the most goes first."""
    from concurrent.futures import Future

    from dpkit.server.answers import AnswerStore

    def done(value: Any) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(value)
        return f

    store = AnswerStore(count=4)
    mine = store.keep("alice", done("alice's answer"))
    flood = [store.keep("mallory", done(i)) for i in range(10)]
    got = store.get(mine, "alice", owner=False)
    assert got is not None and got.future.result() == "alice's answer"
    assert store.get(flood[0], "mallory", owner=False) is None  # hers went first
    assert store.get(flood[-1], "mallory", owner=False) is not None
    assert len(store._items) == 4


def test_j5_an_analysts_fresh_credentials_share_one_rate_limit(
        make_client: Any, project: Project, tmp_path: Path) -> None:
    """J5: the rate limiter kept one bucket per credential (its hash), so an analyst behind an
    identity provider, which mints a fresh JWT at each sign-in or refresh, had a fresh burst
    with each JWT (and each added a bucket that was never dropped); now one bucket per
    analyst, whichever credential it signs in with."""
    import time

    jwt = pytest.importorskip("jwt")
    from dpkit.server.config import OidcConfig

    key, pub = idp_key(tmp_path)
    client = make_client(rate=0.01, burst=3, oidc=OidcConfig(public_key=str(pub), audience="dpkit"))
    now = int(time.time())

    def fresh(i: int) -> dict[str, str]:  # what the IdP hands out at each sign-in
        body = {"sub": "alice", "aud": "dpkit", "exp": now + 300, "jti": f"sign-in-{i}"}
        return {"Authorization": "Bearer " + jwt.encode(body, key, algorithm="RS256")}

    statuses = [client.get("/v1/me", headers=fresh(i)).status_code for i in range(6)]
    statuses.append(client.get("/v1/me", headers=project.headers(project.alice)).status_code)
    assert statuses == [200, 200, 200, 429, 429, 429, 429], statuses
    assert client.get("/v1/me", headers=project.headers(project.bob)).status_code == 200
    assert len(client.app.state.service.limiter._buckets) == 2  # alice's and bob's


#: the console's ``call`` against a scripted ``fetch``: a 504 naming a kept answer, then a
#: poll refused by the rate limit, then still running, then the answer
CONSOLE_POLL = """
const answers = [
  [504, {detail: "ran past", answer_id: "ans_x", answer_url: "/v1/answers/ans_x"}],
  [429, {title: "Too many requests", detail: "rate limited"}, {"Retry-After": "1"}],
  [202, {status: "running"}, {"Retry-After": "1"}],
  [200, {columns: ["n"], rows: [[1]]}],
];
const calls = [];
globalThis.sessionStorage = {getItem: () => "tok", setItem() {}, removeItem() {}};
globalThis.fetch = async (url, init) => {
  calls.push(init.method + " " + url);
  const [status, body, headers] = answers.shift();
  return new Response(JSON.stringify(body), {status, headers: {
    "Content-Type": "application/json", ...(headers || {})}});
};
const api = await import(process.argv.at(-1));
try {
  console.log(JSON.stringify({ok: await api.call("POST", "query", {sql: "x"}, "tok"), calls}));
} catch (err) {
  console.log(JSON.stringify({error: err.status, calls}));
}
"""


def test_j1_the_console_polls_through_a_rate_limited_poll() -> None:
    """J1, the console's side: its poll of a kept answer showed a 429 as the request's
    answer (the id lost, the charge made; "Run" again charged twice). Now it waits the
    Retry-After and polls on (Node runs the console's own api.js against a scripted fetch)."""
    import json
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    api = Path(__file__).resolve().parents[2] / "src/dpkit/server/static/js/api.js"
    done = subprocess.run([node, "--input-type=module", "-", str(api)], input=CONSOLE_POLL,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out.get("ok") == {"columns": ["n"], "rows": [[1]]}, out
    assert out["calls"] == ["POST v1/query"] + ["GET v1/answers/ans_x"] * 3


def test_j3_kept_answers_are_bounded_in_bytes_too() -> None:
    """J3, memory: kept answers were bounded in count only, and a late synthetic release
    is tens of MB; past ``max_bytes`` the largest holder's oldest answers go first."""
    from concurrent.futures import Future

    from dpkit.server.answers import AnswerStore

    def done(value: Any) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(value)
        return f

    store = AnswerStore(max_bytes=100)
    mine = store.keep("alice", done({"rows": [[1]]}))
    big = [store.keep("mallory", done(("x" * 60, None))) for _ in range(3)]
    assert store.get(mine, "alice", owner=False) is not None
    assert [store.get(i, "mallory", owner=False) is not None for i in big] == [False, False, True]
    running: Future[Any] = Future()
    later = store.keep("alice", running)  # sized when done
    assert store.get(later, "alice", owner=False) is not None
    running.set_result("y" * 30)  # 16 + 60 + 30 > 100: mallory holds more, hers goes
    assert store.get(later, "alice", owner=False) is not None
    assert store.get(mine, "alice", owner=False) is not None
    assert store.get(big[2], "mallory", owner=False) is None
