"""The web console end to end in a real browser: Debian's ``chromium`` driven headless by
Playwright (pytest-playwright's ``page`` fixture; RECIPES.md section 1), against the real
service (uvicorn on a free loopback port, in a thread) over a small demo project.

What an analyst does: sign in (a wrong token first: the service's refusal text is shown),
browse a table's public metadata, write SQL with completion, preview the cost, run, see the
answer as a table and as bars with interval whiskers, then hit their cap and see the refusal
(nothing charged); the token stays out of the URL. What the owner does: see analysts and their
spending, add one (the token is shown once), revoke one. Screenshots go to
``$DPKIT_SCREENSHOTS`` (if set) or pytest's tmp dir; the ones in docs/img/console-*.png were
made this way.

Skips with the reason when chromium, Playwright or the service's extra is missing, except
under ``DPKIT_REQUIRE_EXTRAS=1`` (CI), where a missing piece fails.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REQUIRED = bool(os.environ.get("DPKIT_REQUIRE_EXTRAS"))


def _need(module: str, why: str) -> Any:
    if REQUIRED:  # CI: the browser test must run, never skip quietly
        return __import__(module)
    return pytest.importorskip(module, reason=why)


_need("playwright", "the console's browser test needs Playwright: pip install playwright "
      "pytest-playwright (never `playwright install`: it uses Debian's chromium)")
_need("pytest_playwright", "pip install pytest-playwright (the page/browser fixtures)")
uvicorn = _need("uvicorn", "the service needs its extra: pip install 'dpkit[server]'")
_need("fastapi", "the service needs its extra: pip install 'dpkit[server]'")

from playwright.sync_api import Page, Route, expect  # noqa: E402

import dpkit as dp  # noqa: E402
from dpkit.server.app import create_app  # noqa: E402

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists()
                                        else None)
if CHROMIUM is None:
    if REQUIRED:
        raise RuntimeError("chromium is missing: apt-get install -y chromium (.ci/run does)")
    pytest.skip("Debian's chromium is missing: apt-get install -y chromium",
                allow_module_level=True)

# pytest-playwright 0.10's base_url fixture trips a pytest 9 deprecation notice (theirs, not ours)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Session-scoped fixtures defined as instance methods")

OWNER_TOKEN = "dpkit_owner_" + "0" * 64  # a test credential; the service keeps only its hash
CAP = 1.0  # the analyst's own cap: one query at EPS fits, a second does not
EPS = 0.6
WARDS = ["A", "B", "C", "D"]


@pytest.fixture(scope="session")
def base_url() -> None:
    """No base URL: each test goes to the service's own. pytest-playwright provides this
    fixture itself only when its plugin loads at start-up; tests/server/conftest.py loads it
    later (pyproject.toml blocks its entry point in every other pytest process)."""
    return None


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, "executable_path": CHROMIUM,
            "args": ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--disable-background-networking", "--disable-component-update"]}


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("DPKIT_SCREENSHOTS")
    out = Path(env) if env else tmp_path_factory.mktemp("console-screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _project(path: Path) -> dict[str, str]:
    """A small demo project: 4,000 patients in 4 wards (declared keys), ages 5-94 declared 0-50:
    about half are clamped, so the answer warns (the diagnostic counts get 1/60 of the query's
    epsilon: at 0.01 their 95% half-width is ~300 rows against ~2,000 clamped, so a missed
    warning needs noise ~6x that half-width: probability < 1e-6, and the source is seeded);
    analysts ``alice`` and ``dora`` with their own cap of CAP, ``bob`` with 0.5; a seeded
    (INSECURE, test-only) noise source."""
    rows = "\n".join(f"{i},{WARDS[i % 4]},{(i * 37) % 90 + 5}" for i in range(4000))
    (path.parent / "patients.csv").write_text("patient_id,ward,age\n" + rows + "\n")
    cur = dp.Curator.create(path, epsilon=5.0, source=dp.noise.seeded(7))
    cur.add_table("patients", path.parent / "patients.csv", privacy_unit="patient_id",
                  max_rows_per_unit=1, bounds={"age": (0, 50)}, domains={"ward": WARDS})
    tokens = {name: cur.add_analyst(name, epsilon=cap)
              for name, cap in (("alice", CAP), ("bob", 0.5), ("dora", CAP))}
    cur.close()
    return tokens


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The real service in a uvicorn thread; yields its URL and the two tokens."""
    project = tmp_path_factory.mktemp("console") / "clinic.dpkit"
    tokens = _project(project)
    owner_sha = hashlib.sha256(OWNER_TOKEN.encode()).hexdigest()
    app = create_app(project, owner_token_sha256=(owner_sha,), rate=1000.0, burst=1000)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the service did not start on 127.0.0.1")
        time.sleep(0.02)
    yield {"url": f"http://127.0.0.1:{port}/", "analyst": tokens["alice"],
           "dora": tokens["dora"], "bob": tokens["bob"], "owner": OWNER_TOKEN}
    server.should_exit = True
    thread.join(10)


def _with_csp(route: Route) -> None:
    """Serve the page with ``default-src 'self'``: no inline script or style, no other origin
    (whatever header the service sets; docs/service.md says the console needs no more)."""
    resp = route.fetch()
    route.fulfill(response=resp, headers={
        **resp.headers, "content-security-policy": "default-src 'self'"})


def _sign_in(page: Page, url: str, token: str) -> None:
    page.goto(url)
    page.get_by_label("Token", exact=True).fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#app")).to_be_visible()


def test_analyst_signs_in_queries_sees_the_chart_and_hits_the_cap(
        page: Page, service: dict[str, str], shots: Path) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text
            else None)
    page.route(service["url"], _with_csp)  # the console must run under a strict CSP
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(service["url"])
    # a wrong token: the service's 401 detail is what the user reads
    page.get_by_label("Token", exact=True).fill("dpkit_" + "f" * 64)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#signin-error")).to_contain_text("token")
    expect(page.locator("#app")).to_be_hidden()

    _sign_in(page, service["url"], service["analyst"])
    expect(page.locator("#who-name")).to_have_text("alice")
    assert service["analyst"] not in page.url
    assert page.evaluate("sessionStorage.getItem('dpkit.token')") == service["analyst"]

    # browse: the table's public metadata (declared keys, bounds, privacy unit)
    page.locator("details[data-table=patients] summary").click()
    meta = page.locator("details[data-table=patients]")
    expect(meta).to_contain_text("privacy unit: patient_id")
    expect(meta).to_contain_text("0 to 50")

    # completion: "pat" -> patients (keyboard only), then "wa" -> ward
    sql = page.locator("#sql")
    sql.click()
    sql.press_sequentially("SELECT COUNT(*) FROM pat")
    options = page.get_by_role("listbox", name="Completions").get_by_role("option")
    expect(options.filter(has_text="patients")).to_be_visible()
    sql.press("Enter")
    expect(sql).to_have_value("SELECT COUNT(*) FROM patients")
    sql.fill("")
    sql.press_sequentially("SELECT patients.")  # after "table." its columns, at once
    expect(options).to_have_count(3)
    sql.press("Escape")
    expect(options).to_have_count(0)
    sql.fill("")
    sql.press_sequentially("SELECT wa")
    expect(options.first).to_contain_text("ward")
    page.screenshot(path=str(shots / "console-completion.png"))
    sql.press("Tab")
    sql.press_sequentially(", COUNT(*), AVG(age) FROM patients GROUP BY ward")
    expect(sql).to_have_value("SELECT ward, COUNT(*), AVG(age) FROM patients GROUP BY ward")
    page.get_by_label("ε (epsilon)").fill(str(EPS))

    page.get_by_role("button", name="Preview cost").click()
    expect(page.locator("#preview")).to_contain_text(f"ε = {EPS}")
    expect(page.locator("#preview")).to_contain_text("nothing charged")
    # each figure once: the count's in the list, the average's formula (no single figure)
    # in the detail below it; the first hour read "count: ± 42" and "count: ±42" twice
    expect(page.locator("#preview li").first).to_contain_text("count: ±")
    expect(page.locator("#preview pre")).to_contain_text("avg_age: about")
    expect(page.locator("#preview pre")).not_to_contain_text("count:")

    page.get_by_role("button", name="Run").click()
    chart = page.locator("#chart[data-bars]")
    expect(chart).to_have_attribute("data-bars", str(len(WARDS)))
    expect(chart).to_have_attribute("data-whiskers", str(len(WARDS)))
    rows = page.locator("#result-table tbody tr")
    expect(rows).to_have_count(len(WARDS))
    expect(page.locator("#charge")).to_contain_text(f"ε = {EPS}")
    expect(page.locator("#warnings li").first).to_contain_text("age")  # half the ages clamped
    expect(page.locator("#budget-text")).to_contain_text(f"ε spent {EPS}")
    expect(page.locator("#history-table tbody tr")).to_have_count(1)
    # the whiskers are the service's intervals: each bar's value lies inside its own
    bars = page.evaluate("""() => { const c = Chart.getChart(document.getElementById('chart'));
        const d = c.data.datasets[0]; return d.data.map((v, i) => [v, d.intervals[i]]); }""")
    assert len(bars) == len(WARDS)
    assert all(lo <= v <= hi for v, (lo, hi) in bars)
    page.screenshot(path=str(shots / "console-results.png"), full_page=True)
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download CSV").click()
    csv = Path(dl.value.path()).read_text().splitlines()
    assert csv[0].startswith("ward,") and "_low," in csv[0] and len(csv) == 1 + len(WARDS)

    # the cap: a second query at EPS would exceed alice's CAP -> refused, nothing charged
    page.get_by_role("button", name="Run").click()
    refusal = page.locator("#query-error")
    expect(refusal).to_contain_text("Refused: privacy budget exceeded")  # the curator's text
    expect(page.locator("#budget-text")).to_contain_text(f"ε spent {EPS}")
    expect(page.locator("#history-table tbody tr")).to_have_count(1)
    page.screenshot(path=str(shots / "console-refusal.png"), full_page=True)

    # SQL the curator refuses: its own text, nothing charged
    sql.fill("SELECT age FROM patients")
    page.get_by_role("button", name="Run").click()
    expect(refusal).to_contain_text("Refused: column 'age' is neither aggregated")
    expect(page.locator("#history-table tbody tr")).to_have_count(1)

    # a target error instead of an epsilon: the service finds the epsilon (preview only)
    sql.fill("SELECT COUNT(*) FROM patients")
    page.get_by_label("ε (epsilon)").fill("")
    page.get_by_label("or target error ±").fill("50")
    page.get_by_role("button", name="Preview cost").click()
    expect(page.locator("#preview li")).to_have_text("count: ± 50")
    expect(refusal).to_be_empty()

    # a past query goes back into the editor from the history
    page.locator("#history-table tbody button").first.click()
    expect(sql).to_have_value("SELECT ward, COUNT(*), AVG(age) FROM patients GROUP BY ward")

    # a reload keeps the tab signed in (sessionStorage), with the token still out of the URL
    page.reload()
    expect(page.locator("#who-name")).to_have_text("alice")
    assert service["analyst"] not in page.url

    # sign out forgets the token
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#signin")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('dpkit.token')") is None
    # ... and what was shown for it: the next person at this computer finds no answer
    expect(page.locator("#results")).to_be_hidden()
    expect(page.locator("#result-table tr")).to_have_count(0)
    expect(page.locator("#history-table tr")).to_have_count(0)
    expect(page.locator("#sql")).to_have_value("")
    assert not errors, errors


def test_release_quantiles_from_the_console(page: Page, service: dict[str, str]) -> None:
    """The release family answers like a query: quantiles of age with their intervals as a
    table and a chart; bad probabilities are caught before anything is sent or charged."""
    _sign_in(page, service["url"], service["dora"])
    page.get_by_text("Releases: quantiles, CDF, marginals").click()
    expect(page.get_by_label("Table", exact=True)).to_have_value("patients")
    page.get_by_label("Column", exact=True).fill("age")
    page.get_by_label("Probabilities").fill("0.5, 2")
    page.get_by_role("button", name="Release").click()
    expect(page.locator("#query-error")).to_contain_text("between 0 and 1")
    expect(page.locator("#history-table tbody tr")).to_have_count(0)

    page.get_by_label("Probabilities").fill("0.25, 0.5, 0.75")
    page.get_by_label("ε (epsilon)").fill("0.5")
    page.get_by_role("button", name="Release").click()
    expect(page.locator("#chart")).to_have_attribute("data-bars", "3")
    expect(page.locator("#result-table tbody tr")).to_have_count(3)
    expect(page.locator("#charge")).to_contain_text("ε = 0.5")
    expect(page.locator("#history-table tbody tr")).to_have_count(1)
    bars = page.evaluate("""() => { const c = Chart.getChart(document.getElementById('chart'));
        const d = c.data.datasets[0]; return d.data.map((v, i) => [v, d.intervals[i]]); }""")
    assert [v for v, _ in bars] == sorted(v for v, _ in bars)  # quartiles in order
    assert all(lo <= v <= hi for v, (lo, hi) in bars)

    page.get_by_label("Kind").select_option("marginals")
    page.get_by_label("Columns (comma-separated)").fill("ward")
    page.get_by_label("ε (epsilon)").fill("0.25")
    page.get_by_role("button", name="Release").click()
    expect(page.locator("#result-table tbody tr")).to_have_count(len(WARDS))


def test_console_says_what_an_answer_needs(page: Page, service: dict[str, str]) -> None:
    """What the first hour found (docs/first_hour.md): a preview with no single expected error
    showed the text "null"; a preview over what is left did not say it would be refused; an
    answer's notes (a median's rank error, groups chosen privately) were not shown; the interval
    header did not give its level; after a refusal the answer before it read as the refused
    query's. Bob (cap 0.5) runs before the owner's test revokes him."""
    _sign_in(page, service["url"], service["bob"])
    sql = page.locator("#sql")
    sql.fill("SELECT COUNT(*) FILTER (WHERE age > 30) / COUNT(*) AS share FROM patients")
    page.get_by_label("ε (epsilon)").fill("0.1")
    page.get_by_role("button", name="Preview cost").click()
    expect(page.locator("#preview")).to_contain_text("nothing charged yet")
    expect(page.locator("#preview")).not_to_contain_text("null")
    expect(page.locator("#preview")).not_to_contain_text("Preview(")  # a Python repr line
    expect(page.locator("#preview .over")).to_have_count(0)

    sql.fill("SELECT MEDIAN(age) AS m FROM patients")
    page.get_by_label("ε (epsilon)").fill("0.2")
    page.get_by_role("button", name="Run").click()
    expect(page.locator("#notes li").first).to_contain_text("MEDIAN(age)")
    expect(page.locator("#result-table thead")).to_contain_text("m 95% interval")
    expect(page.locator("#results-title")).to_have_text("Results")

    page.get_by_label("ε (epsilon)").fill("5")
    page.get_by_role("button", name="Preview cost").click()
    expect(page.locator("#preview .over")).to_contain_text("running it would be refused")
    page.get_by_role("button", name="Run").click()
    # his cap, not the project's: it is the tighter limit
    expect(page.locator("#query-error")).to_contain_text("analyst 'bob'")
    expect(page.locator("#results-title")).to_have_text("Results of the previous request")
    expect(page.locator("#history-table tbody tr")).to_have_count(1)


def test_owner_sees_analysts_adds_and_revokes(page: Page, service: dict[str, str],
                                              shots: Path) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    page.on("dialog", lambda d: d.accept())  # the revoke confirmation
    _sign_in(page, service["url"], service["owner"])
    expect(page.locator("#who-role")).to_have_text("owner")
    table = page.locator("#analysts-table")
    expect(table.locator("tbody tr")).to_have_count(3)
    alice = table.locator("tr", has_text="alice")
    expect(alice).to_contain_text("active")
    expect(alice.locator("meter")).to_have_attribute("max", f"{CAP:g}")  # her spending gauge
    expect(page.locator("#history-title")).to_have_text("Project history")

    page.get_by_label("Analyst name", exact=True).fill("carol")
    page.get_by_label("Own ε cap").fill("0.25")
    page.get_by_label("Expires after (days)").fill("30")
    page.get_by_role("button", name="Add analyst").click()
    token = page.locator("#new-token code")
    expect(token).to_have_text(re.compile(r"^dpkit_[0-9a-f]{64}$"))
    expect(table.locator("tbody tr")).to_have_count(4)
    expect(page.locator("#new-token")).to_contain_text("it expires")
    expect(table.locator("tr", has_text="alice")).to_contain_text("never")

    carol = table.locator("tr", has_text="carol")
    expect(carol).to_contain_text("0.25")
    page.get_by_label("New ε cap for carol").fill("0.75")
    page.get_by_role("button", name="Set ε cap of carol").click()
    expect(carol.locator("meter")).to_have_attribute("max", "0.75")

    page.get_by_role("button", name="Revoke bob").click()
    expect(table.locator("tr", has_text="bob")).to_contain_text("revoked")
    expect(page.get_by_role("button", name="Revoke bob")).to_have_count(0)
    page.screenshot(path=str(shots / "console-owner.png"), full_page=True)


def test_narrow_screen_has_no_sideways_scroll(page: Page, service: dict[str, str],
                                              shots: Path) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    _sign_in(page, service["url"], service["owner"])
    expect(page.locator("#tables-list details")).to_have_count(1)
    # every control has an accessible name (a label, aria-label or its text)
    unnamed = page.evaluate("""() => [...document.querySelectorAll(
        'input, select, textarea, button')].filter((e) => e.offsetParent !== null
        && !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
        && !e.getAttribute('aria-labelledby') && !e.textContent.trim()).map((e) => e.outerHTML)""")
    assert not unnamed, unnamed
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at 390px"
    page.screenshot(path=str(shots / "console-narrow.png"), full_page=True)


def test_chart_and_csv_helpers_in_the_page(page: Page, service: dict[str, str]) -> None:
    """The console's own modules, run in the browser: a long answer charts its first 60 rows
    (the rest stay in the table and the CSV); CSV cells with commas, quotes or line breaks are
    quoted (RFC 4180)."""
    page.goto(service["url"])
    out = page.evaluate("""async () => {
        const v = await import('./static/js/views.js');
        const rows = Array.from({length: 100}, (_, i) => [`k${i}`, i]);
        const res = {columns: ['key', 'n'], rows,
                     intervals: {n: rows.map((r) => [r[1] - 1, r[1] + 1])}};
        const d = v.chartData(res, 'n');
        const csv = v.resultCsv({columns: ['name', 'n'], rows: [["a,\\"b\\"\\nc", 1]],
                                 intervals: {n: [[0, 2]]}});
        return {bars: d.values.length, whiskers: d.intervals.length, omitted: d.omitted,
                label: d.labels[59], csv};
    }""")
    assert out == {"bars": 60, "whiskers": 60, "omitted": 40, "label": "k59",
                   "csv": 'name,n,n_low,n_high\r\n"a,""b""\nc",1,0,2\r\n'}


def test_console_switches_diagnostics_and_explains_the_timing_delta(
        page: Page, service: dict[str, str]) -> None:
    """The preview's note on the diagnostics names the console's own checkbox (the first hour
    read "diagnostics=False / --no-diagnostics", which a console user cannot set); unticked,
    the preview and the query both send ``"diagnostics": false`` (the preview prices the query
    as it runs) and the answer has no diagnostic warning. The budget panel says what a
    constant-work project's δ_t is (this service's project has none: checked on the module)."""
    _sign_in(page, service["url"], service["dora"])
    page.locator("#sql").fill("SELECT ward, COUNT(*), AVG(age) FROM patients GROUP BY ward")
    page.get_by_label("ε (epsilon)").fill("0.1")
    box = page.get_by_role("checkbox", name="Diagnostics")
    expect(box).to_be_checked()
    page.get_by_role("button", name="Preview cost").click()
    preview = page.locator("#preview")
    expect(preview).to_contain_text('unticking "Diagnostics" gives it to the outputs')
    expect(preview).not_to_contain_text("diagnostics=False")
    expect(preview).not_to_contain_text('"diagnostics": false')

    box.uncheck()
    with page.expect_request("**/v1/preview") as sent:
        page.get_by_role("button", name="Preview cost").click()
    assert sent.value.post_data_json["diagnostics"] is False
    expect(preview).not_to_contain_text("gives it to the outputs")
    with page.expect_request("**/v1/query") as sent:
        page.get_by_role("button", name="Run").click()
    assert sent.value.post_data_json["diagnostics"] is False
    expect(page.locator("#result-table tbody tr")).to_have_count(len(WARDS))
    expect(page.locator("#warnings li")).to_have_count(0)  # half the ages clamped, unmeasured
    expect(page.locator("#budget-text")).not_to_contain_text("constant work")

    texts = page.evaluate("""async () => {
        const v = await import('./static/js/views.js');
        const b = {spent_epsilon: 0.1, spent_delta: 1.8e-12, cap_epsilon: 1,
                   remaining_epsilon: 0.9, project_remaining_epsilon: 4.9};
        const out = [];
        for (const t of [9.094947e-13, null]) {
            const m = document.createElement('meter'), p = document.createElement('p');
            v.renderBudget(m, p, {...b, timing_delta: t});
            out.push(p.textContent);
        }
        return out;
    }""")
    assert "runs with constant work" in texts[0] and "δ_t = 9.095e-13" in texts[0], texts
    assert "constant work" not in texts[1]


@pytest.mark.parametrize("width", [1280, 800])
def test_history_fits_its_card_and_the_sql_box_names_a_real_table(
        page: Page, service: dict[str, str], width: int) -> None:
    """What the second walk found: δ = 1e-13 broke at its hyphen ("1e-" / "13") in the history,
    the owner's history ran past its card's right edge (the query cut), and the SQL box's
    example named a table ``patients`` whatever the project held (here it happens to hold one:
    the example must come from the tables the caller sees, checked on another list too)."""
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(service["url"])
    expect(page.locator("#sql")).to_have_attribute("placeholder", re.compile("your_table"))
    _sign_in(page, service["url"], service["owner"])
    expect(page.locator("#sql")).to_have_attribute(
        "placeholder", "SELECT ward, COUNT(*) FROM patients GROUP BY ward")
    shown = page.evaluate("""async () => {
        const v = await import('./static/js/views.js');
        const tables = [{name: 'levels', public: true, columns: []},
                        {name: 'visits', public: false, columns: [{name: 'age'},
                         {name: 'ward', domain: ['A']}]}];
        const long = 'SELECT ' + 'x'.repeat(300) + ', COUNT(*) AS n FROM patients GROUP BY ward';
        const items = [1, 2, 3].map((i) => ({time: '2026-11-26T22:00:0' + i + 'Z',
            kind: 'query', sql: i === 2 ? long : 'SELECT COUNT(*) FROM patients',
            epsilon: 0.123456, delta: 9.094947e-13}));
        v.renderHistory(document.getElementById('history-table'), items, () => {});
        const wrap = document.querySelector('#history .table-wrap');
        const cells = [...document.querySelectorAll('#history-table tbody tr')].map(
            (tr) => tr.lastElementChild);
        const lines = (td) => { const r = document.createRange(); r.selectNodeContents(td);
                                 return r.getClientRects().length; };
        const narrow = document.createElement('p');
        narrow.style.width = '1px';  // every break it may take, it takes
        document.body.append(narrow);
        v.setText(narrow, "each release's δ includes δ_t = 1e-13 (9.095e-13 spent)");
        const kept = [...narrow.querySelectorAll('span.nowrap')].map(
            (e) => [e.textContent, e.getClientRects().length]);
        const said = narrow.textContent;
        narrow.remove();
        const box = document.createElement('div');
        v.renderTables(box, [{name: 'c', privacy_unit: 'm', max_rows_per_unit: 5,
            not_null: ['age'], columns: [{name: 'age', type: 'BIGINT', bounds: [18, 95]}]}],
            () => {});
        return {kept, said, meta: box.querySelector('td:last-child').textContent,
                numbers: [14444973.27, 1297.1523, 0.460098, -2.5, 1e-13, 17089].map(v.fmt),
                example: v.exampleSql(tables), none: v.exampleSql([]),
                publicOnly: v.exampleSql([tables[0]]),
                overflow: wrap.scrollWidth - wrap.clientWidth,
                deltaLines: cells.map(lines)};
    }""")
    # the budget card broke "δ_t = 1e-" / "13" (the third walk); its text is unchanged
    assert shown["kept"] == [["1e-13", 1], ["9.095e-13", 1]], shown["kept"]
    assert shown["said"] == "each release's δ includes δ_t = 1e-13 (9.095e-13 spent)"
    # a SUM read "14445000" beside counts like "17,089" (the third walk)
    assert shown["numbers"] == ["14,445,000", "1,297.15", "0.460098", "-2.5", "1e-13", "17,089"]
    assert shown["example"] == "SELECT ward, COUNT(*) FROM visits GROUP BY ward"
    assert shown["meta"] == "18 to 95; not null"  # the declaration GET /v1/tables now gives
    assert shown["none"] == "SELECT COUNT(*) FROM your_table"
    assert shown["publicOnly"] == "SELECT COUNT(*) FROM levels"
    assert shown["overflow"] <= 0, f"the history runs {shown['overflow']}px past its card"
    assert shown["deltaLines"] == [1, 1, 1], shown  # "9.095e-13" on one line
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#sql")).to_have_attribute("placeholder", re.compile("your_table"))
