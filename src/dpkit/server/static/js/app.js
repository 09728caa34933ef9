// The console: sign in with a token, browse tables, preview and run queries, see answers as a
// table and a chart with interval whiskers, the budget and one's own history; owners also
// manage analysts. Everything it shows comes from the /v1 API (docs/service.md); every check
// that matters (who may do what, what a query costs, whether the budget allows it) is the
// service's, the console only asks and shows the answer or the refusal's `detail` text.

import { ApiError, call, clearToken, getToken, setToken } from "./api.js";
import { clearChart, drawChart } from "./chart.js";
import { attachCompletion } from "./complete.js";
import { initOwner, loadAnalysts } from "./owner.js";
import { fillReleaseTables, initRelease } from "./release.js";
import {
  chartData, consoleText, el, exampleSql, renderBudget, renderHistory, renderPreview, renderTables, resultCsv,
  resultTable, setText,
} from "./views.js";

const $ = (id) => document.getElementById(id);
let tables = [];
let lastResult = null;
let role = "analyst";

function setError(id, err) {
  setText($(id), err ? consoleText(err.message) : "");
}

// A 401 anywhere means the token is no longer good (revoked, expired): back to sign-in.
function handle(id, err) {
  if (err instanceof ApiError && err.stale) return;  // an answer for a signed-out session
  if (err instanceof ApiError && err.status === 401) return signOut(`Signed out: ${err.message}`);
  // 409: the service refused the query (budget, SQL); it says why, and nothing was charged
  if (err instanceof ApiError && err.status === 409) {
    setText($(id), `Refused: ${consoleText(err.message)}`);
    return;
  }
  setError(id, err);
}

// Signing out forgets the token and everything shown for it: on a shared computer the next
// person must not find the last answer, token or analyst list on the page.
function signOut(message = "") {
  clearToken();
  lastResult = null;
  tables = [];
  role = "analyst";
  $("query-form").reset();
  $("sql").placeholder = exampleSql([]);
  $("add-analyst-form").reset();
  $("release-form").reset();
  for (const id of ["preview", "new-token", "tables-list", "warnings", "notes"]) $(id).replaceChildren();
  for (const id of ["result-table", "history-table", "analysts-table"]) $(id).replaceChildren();
  for (const id of ["query-error", "budget-error", "tables-error", "history-error", "owner-error",
    "budget-text", "charge", "chart-note"]) $(id).textContent = "";
  clearChart($("chart"));
  $("results").hidden = true;
  $("owner").hidden = true;
  $("app").hidden = true;
  $("whoami").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("token").value = "";
  $("token").focus();
}

async function loadBudget() {
  try {
    renderBudget($("budget-meter"), $("budget-text"), await call("GET", "budget"), role);
    setError("budget-error", null);
  } catch (err) { handle("budget-error", err); }
}

async function loadHistory() {
  try {
    renderHistory($("history-table"), (await call("GET", "history")).items, (text) => {
      $("sql").value = text;
      $("sql").focus();
    });
    setError("history-error", null);
  } catch (err) { handle("history-error", err); }
}

async function loadTables() {
  try {
    tables = (await call("GET", "tables")).tables;
    $("sql").placeholder = exampleSql(tables);
    renderTables($("tables-list"), tables, useTable);
    fillReleaseTables(tables);
  } catch (err) { handle("tables-error", err); }
}

function useTable(t) {
  const sql = $("sql");
  sql.value = exampleSql([t]);
  sql.focus();
}

// Epsilon or a target error (the service calibrates epsilon to it), never both; and the
// diagnostics switch, which queries and releases share.
function target() {
  const acc = $("accuracy").value.trim();
  const eps = $("epsilon").value.trim();
  if (!acc && !eps) throw new Error("Give an ε (epsilon) or a target error.");
  const t = acc ? { accuracy: Number(acc) } : { epsilon: Number(eps) };
  // the diagnostics' share is part of the planned request: the preview prices it as it runs
  if (!$("diagnostics").checked) t.diagnostics = false;
  return t;
}

// unset fields are left out rather than sent as null: the same request either way
function queryBody() {
  const sql = $("sql").value.trim();
  if (!sql) throw new Error("Write a query first, e.g. SELECT COUNT(*) FROM <table>.");
  const body = { sql, ...target() };
  if ($("noise").value) body.noise = $("noise").value;
  return body;
}

async function preview() {
  setError("query-error", null);
  try {
    const body = queryBody();
    $("preview").replaceChildren(el("p", { class: "hint", text: "Pricing…" }));
    renderPreview($("preview"), await call("POST", "preview", body));
  } catch (err) {
    $("preview").replaceChildren();
    handle("query-error", err);
  }
}

function showChart(res, measure) {
  const data = chartData(res, measure);
  drawChart($("chart"), data);
  $("chart-note").textContent = data.omitted
    ? `The chart shows the first ${data.values.length} rows; all ${res.rows.length} are in the table and the CSV.`
    : "";
}

function showResult(res) {
  lastResult = res;
  $("results").hidden = false;
  setText($("charge"), `Charged ε = ${+Number(res.charge.epsilon).toPrecision(4)}, `
    + `δ = ${+Number(res.charge.delta).toPrecision(4)}.`);
  $("results-title").textContent = "Results";
  $("warnings").replaceChildren(...(res.warnings || []).map((w) => el("li", { text: w })));
  // notes say how the answer was made (groups chosen privately and the rest not shown, a
  // quantile's rank error, top-k by noisy max): without them a missing group looks like none
  $("notes").replaceChildren(...(res.notes || []).map((n) => el("li", { text: consoleText(n) })));
  const measures = res.columns.filter((c) => c in (res.intervals || {}));
  const select = $("measure");
  select.replaceChildren(...measures.map((m) => el("option", { value: m, text: m })));
  select.disabled = measures.length < 2;
  // the table first: the answer is paid for, so it is shown even if the chart cannot be drawn
  resultTable($("result-table"), res);
  $("chart").parentElement.hidden = measures.length === 0;
  try {
    if (measures.length) showChart(res, measures[0]);
  } catch (err) {
    $("chart").parentElement.hidden = true;
    $("warnings").append(el("li", { text: `No chart: ${err.message}. The table has the answer.` }));
  }
}

// A charged request (a query or a release): one at a time; the answer or the refusal shown.
async function charged(path, makeBody, btn) {
  if (btn.disabled) return;  // Ctrl+Enter while one runs does nothing
  setError("query-error", null);
  const label = btn.textContent;
  try {
    const body = makeBody();
    btn.disabled = true;
    btn.textContent = "Running…";
    // past the service's timeout the answer is kept: the button says it still runs
    const res = await call("POST", path, body, undefined,
                           (s) => { btn.textContent = `Still running… ${s} s`; });
    showResult(res);
    if (res.budget) renderBudget($("budget-meter"), $("budget-text"), res.budget, role);
    $("results-title").focus();
  } catch (err) {
    handle("query-error", err);
    // the answer still shown is the one before: say so, or it reads as the refused query's
    if (!$("results").hidden) $("results-title").textContent = "Results of the previous request";
    // a refusal spends nothing, but the gauge may be stale (another tab, another process)
    loadBudget();
  } finally {
    btn.disabled = false;
    btn.textContent = label;
    loadHistory();
  }
}

function run(ev) {
  if (ev) ev.preventDefault();
  return charged("query", queryBody, $("run-btn"));
}

async function enter(me) {
  $("signin").hidden = true;
  $("app").hidden = false;
  $("whoami").hidden = false;
  $("who-name").textContent = me.name;
  $("who-role").textContent = me.role;
  role = me.role;
  $("owner").hidden = me.role !== "owner";
  // the owner's budget and history are the project's, over every analyst
  $("history-title").textContent = me.role === "owner" ? "Project history" : "My history";
  document.body.dataset.role = me.role;
  await Promise.all([loadTables(), loadBudget(), loadHistory(),
    me.role === "owner" ? loadAnalysts() : null]);
  $("main").focus();
}

async function signIn(ev) {
  ev.preventDefault();
  const token = $("token").value.trim();
  $("signin-error").textContent = "";
  try {
    const me = await call("GET", "me", undefined, token);
    setToken(token);
    $("token").value = "";
    await enter(me);
  } catch (err) {
    if (!err.stale) $("signin-error").textContent = err.message;
  }
}

function downloadCsv() {
  if (!lastResult) return;
  const url = URL.createObjectURL(new Blob([resultCsv(lastResult)], { type: "text/csv" }));
  const a = el("a", { href: url, download: "answer.csv" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function init() {
  $("results-title").tabIndex = -1;
  $("signin-form").addEventListener("submit", signIn);
  $("signout").addEventListener("click", () => signOut("Signed out."));
  $("query-form").addEventListener("submit", run);
  $("preview-btn").addEventListener("click", preview);
  $("csv-btn").addEventListener("click", downloadCsv);
  $("measure").addEventListener("change", () => {
    if (lastResult) showChart(lastResult, $("measure").value);
  });
  $("sql").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) run(ev);
  });
  attachCompletion($("sql"), $("completions"), () => tables);
  initOwner();
  initRelease(() => tables, target,
    (kind, makeBody) => charged(`release/${kind}`, makeBody, $("release-btn")));
  if (getToken()) {
    call("GET", "me").then(enter).catch((err) => err.stale || signOut(
      err instanceof ApiError && err.status === 401 ? `Signed out: ${err.message}` : err.message));
  } else {
    $("token").focus();
  }
}

init();
