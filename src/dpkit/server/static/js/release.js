// The release family over a table (POST /v1/release/{cdf|quantiles|marginals}): one charged
// release each, answered in the same shape as a query (columns, rows, intervals, warnings,
// charge, budget), so the results panel shows it unchanged. Synthetic data (a CSV download)
// is left to the HTTP API and dpkit.Client.

import { el } from "./views.js";

const $ = (id) => document.getElementById(id);

function listOf(text) {
  return text.split(",").map((x) => x.trim()).filter(Boolean);
}

// The request body for the chosen kind; `target` is {epsilon} or {accuracy} from the query
// form, with {diagnostics: false} when its Diagnostics box is unticked.
export function releaseBody(kind, table, columnText, probsText, target) {
  const body = { table, ...target };
  if (kind === "marginals") {
    const cols = listOf(columnText);
    if (!cols.length) throw new Error("Name one or more columns, separated by commas.");
    body.columns = cols;
  } else {
    if (!columnText.trim()) throw new Error("Name the column to release.");
    body.column = columnText.trim();
  }
  if (kind === "quantiles") {
    const probs = listOf(probsText).map(Number);
    if (!probs.length || probs.some((p) => !(p > 0 && p < 1))) {
      throw new Error("Probabilities are numbers between 0 and 1, separated by commas (e.g. 0.25, 0.5, 0.75).");
    }
    body.probabilities = probs;
  }
  return body;
}

export function fillReleaseTables(tables) {
  const select = $("release-table");
  select.replaceChildren(...tables.map((t) => el("option", { value: t.name, text: t.name })));
  fillColumns(tables);
}

function fillColumns(tables) {
  const t = tables.find((x) => x.name === $("release-table").value);
  $("release-columns").replaceChildren(...(t ? t.columns : []).map((c) => el("option", { value: c.name })));
}

function showKind() {
  const kind = $("release-kind").value;
  $("release-probs-field").hidden = kind !== "quantiles";
  $("release-column-label").textContent = kind === "marginals" ? "Columns (comma-separated)" : "Column";
}

// submit(kind, body): the caller posts it and shows the answer or the refusal.
export function initRelease(getTables, target, submit) {
  $("release-kind").addEventListener("change", showKind);
  $("release-table").addEventListener("change", () => fillColumns(getTables()));
  $("release-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const kind = $("release-kind").value;
    submit(kind, () => releaseBody(kind, $("release-table").value, $("release-column").value,
      $("release-probs").value, target()));
  });
  showKind();
}
