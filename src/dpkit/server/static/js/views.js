// Rendering: JSON from the service -> DOM. Every value goes in through textContent (never
// parsed as HTML), so a table or analyst name cannot inject markup into the page.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

// Noisy numbers are shown to 6 significant digits: more would only print noise. Digits are
// grouped as a count's are (a SUM of 14,444,973.27 read "14445000" beside "17,089").
export function fmt(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") {
    if (!Number.isFinite(v)) return String(v);
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    const a = Math.abs(v);
    return a >= 1e-4 && a < 1e21 ? v.toLocaleString("en-US", { maximumSignificantDigits: 6 })
      : String(+v.toPrecision(6));
  }
  return String(v);
}

// The service's texts name its request field ("diagnostics": false) where the switch that
// turns the answer diagnostics off is meant; here that switch is the Diagnostics checkbox.
export const HTTP_DIAGNOSTICS_OFF = '"diagnostics": false';

export function consoleText(text) {
  return String(text ?? "").replaceAll(HTTP_DIAGNOSTICS_OFF, 'unticking "Diagnostics"');
}

// ``text`` into ``node``, each number in exponent notation kept on one line: a budget card
// broke δ_t = 1e-13 at its sign ("1e-" / "13"). textContent reads the same text.
export function setText(node, text) {
  const parts = String(text ?? "").split(/(\d+(?:\.\d+)?e[-+]\d+)/);
  node.replaceChildren(...parts.map((p, i) => (i % 2 ? el("span", { class: "nowrap", text: p })
    : p)).filter((p) => p !== ""));
}

export function fmtEps(v) {
  return v === null || v === undefined ? "none" : String(+Number(v).toPrecision(4));
}

function headRow(names) {
  return el("thead", {}, el("tr", {}, ...names.map((n) => el("th", { scope: "col", text: n }))));
}

// classes[j]: the class of column j's cells ("num nowrap", "sql"; a number is "num" anyway)
export function fillTable(table, names, rows, caption, classes = []) {
  // data-label: on a narrow screen each row becomes a card of "label: value" lines (app.css)
  const body = el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c, j) =>
    c instanceof Node ? el("td", { "data-label": names[j], class: classes[j] ?? null }, c)
      : el("td", { text: fmt(c), "data-label": names[j],
        class: classes[j] ?? (typeof c === "number" ? "num" : null) })))));
  table.replaceChildren(...(caption ? [el("caption", { text: caption })] : []), headRow(names), body);
}

export function renderTables(container, tables, onUse) {
  if (!tables.length) {
    container.replaceChildren(el("p", { text: "No tables are declared in this project yet." }));
    return;
  }
  container.replaceChildren(...tables.map((t) => {
    const unit = t.privacy_unit ? `privacy unit: ${t.privacy_unit}` : "each row is its own privacy unit";
    const m = t.max_rows_per_unit;
    const rowsPer = m ? `, at most ${m} row${m === 1 ? "" : "s"} per unit` : "";
    const cols = el("table", { class: "columns" });
    const notNull = new Set(t.not_null || []);  // declared: AVG of one shares COUNT(*)
    fillTable(cols, ["column", "type", "bounds / domain"], t.columns.map((c) => [
      c.name, c.type,
      (c.bounds ? `${fmt(c.bounds[0])} to ${fmt(c.bounds[1])}`
        : c.domain ? c.domain.map(fmt).join(", ") : "—") + (notNull.has(c.name) ? "; not null" : ""),
    ]), `Columns of ${t.name}`);
    return el("details", { class: "table-meta", "data-table": t.name },
      el("summary", {}, el("strong", { text: t.name }), el("span", { class: "hint", text: ` ${t.columns.length} columns` })),
      el("p", { class: "hint", text: unit + rowsPer }),
      cols,
      el("button", { type: "button", class: "secondary small", text: `Query ${t.name}`, onclick: () => onUse(t) }));
  }));
}

// An analyst's gauge runs up to their own cap (or what is left of the project if they have
// none); the owner's is the whole project's budget, over every analyst.
export function renderBudget(meter, text, b, role = "analyst") {
  const spent = Number(b.spent_epsilon) || 0;
  const total = b.cap_epsilon ?? spent + Number(b.remaining_epsilon);
  meter.max = total > 0 ? total : 1;
  meter.value = Math.min(spent, meter.max);
  meter.low = meter.max * 0.5;
  meter.high = meter.max * 0.8;
  meter.textContent = `${fmtEps(spent)} of ${fmtEps(total)}`;
  if (role === "owner") {
    setText(text, `Project: ε spent ${fmtEps(spent)} of ${fmtEps(total)} over all analysts; `
      + `${fmtEps(b.project_remaining_epsilon)} left. δ spent ${fmtEps(b.spent_delta)}.`
      + timingText(b));
    return;
  }
  const cap = b.cap_epsilon === null || b.cap_epsilon === undefined ? "no own cap" : `own cap ${fmtEps(b.cap_epsilon)}`;
  setText(text, `ε spent ${fmtEps(spent)} (${cap}); ${fmtEps(b.remaining_epsilon)} left to you, `
    + `${fmtEps(b.project_remaining_epsilon)} left in the project. δ spent ${fmtEps(b.spent_delta)}.`
    + timingText(b));
}

// Constant work: without it a δ of ~1e-12 on a pure-ε count would read as a mistake.
function timingText(b) {
  const t = b.timing_delta;
  return t === null || t === undefined ? ""
    : ` The project runs with constant work (a query takes as long whatever the data holds); `
      + `each release's δ includes δ_t = ${fmtEps(t)} for it.`;
}

// A small gauge for a table cell: spent against a cap (none: no gauge, the number alone).
export function gauge(spent, cap, label) {
  const box = el("span", { class: "cell-gauge" }, el("span", { text: fmtEps(spent) }));
  if (cap) {
    box.append(el("meter", { min: "0", max: String(cap), value: String(Math.min(spent, cap)),
      low: String(cap * 0.5), high: String(cap * 0.8), optimum: "0", "aria-label": label,
      text: `${fmtEps(spent)} of ${fmtEps(cap)}` }));
  }
  return box;
}

export function renderPreview(box, p) {
  const errs = Object.entries(p.expected_error || {});
  // the service's text opens with a Python repr line ("Preview(cost epsilon ...)") that says
  // what "Would cost" already does: keep only its per-column detail lines, and of those only
  // the ones the list above does not already give ("count: ±42" twice read as two figures)
  const shown = new Set(errs.filter(([, e]) => e !== null && e !== undefined).map(([c]) => c));
  const detail = consoleText(p.text || "").replace(/^Preview\([^\n]*\n?/, "").split("\n")
    .filter((line) => { const m = line.match(/^\s*(.+?): ±[^ ]*$/); return !(m && shown.has(m[1])); })
    .join("\n").trimEnd();
  // replaceChildren would write a null as the text "null": leave the missing parts out
  box.replaceChildren(...[
    el("p", {}, el("strong", { text: "Would cost " }),
      el("span", { class: "cost", text: `ε = ${fmtEps(p.epsilon)}, δ = ${fmtEps(p.delta)}` }),
      el("span", { text: " (nothing charged yet)" })),
    // the service's own verdict (the analyst's cap or the project's, whichever is tighter)
    p.affordable === false ? el("p", { class: "over", text: `More than the ε ${fmtEps(p.remaining)} `
      + "left to you: running it would be refused (nothing charged). Lower ε or ask for a "
      + "larger target error." }) : null,
    errs.length ? el("ul", { class: "errors-list", "aria-label": "Expected error per column" },
      ...errs.map(([c, e]) => el("li", { text: e === null || e === undefined
        ? `${c}: no single figure (it depends on the group's size; see below)`
        : `${c}: ± ${fmt(e)}` }))) : null,
    ...(p.notes || []).map((n) => el("p", { class: "hint", text: consoleText(n) })),
    detail ? el("pre", { class: "preview-text", text: detail }) : null,
  ].filter((c) => c !== null));
}

// Group-key columns label the bars; the columns with intervals are the measures. At most
// CHART_BARS bars: past that a bar chart is unreadable (the table and the CSV have them all).
export const CHART_BARS = 60;

export function chartData(result, measure) {
  const keys = result.columns.filter((c) => !(c in (result.intervals || {})));
  const mi = result.columns.indexOf(measure);
  const ki = keys.map((k) => result.columns.indexOf(k));
  const rows = result.rows.slice(0, CHART_BARS);
  const iv = (result.intervals || {})[measure];
  return {
    measure,
    labels: rows.map((r) => (ki.length ? ki.map((i) => fmt(r[i])).join(" · ") : "all")),
    values: rows.map((r) => (typeof r[mi] === "number" ? r[mi] : null)),
    intervals: iv ? iv.slice(0, CHART_BARS) : null,
    omitted: result.rows.length - rows.length,
  };
}

export function resultTable(table, result) {
  const iv = result.intervals || {};
  // the level is part of what an interval means: "95% interval", not just "interval"
  const level = result.level ? `${+(result.level * 100).toPrecision(4)}% ` : "";
  const names = [];
  for (const c of result.columns) {
    names.push(c);
    if (c in iv) names.push(`${c} ${level}interval`);
  }
  const rows = result.rows.map((r, i) => {
    const out = [];
    result.columns.forEach((c, j) => {
      out.push(r[j]);
      if (c in iv) {
        const x = iv[c][i];
        out.push(x ? `${fmt(x[0])} to ${fmt(x[1])}` : "—");
      }
    });
    return out;
  });
  fillTable(table, names, rows, `Answer: ${result.rows.length} row${result.rows.length === 1 ? "" : "s"}`);
}

// onUse(sql): put a past query back in the editor (re-running it is charged again).
export function renderHistory(table, items, onUse) {
  const sorted = [...items].sort((a, b) => String(b.time).localeCompare(String(a.time)));
  if (!sorted.length) {
    table.replaceChildren(el("caption", { text: "Nothing spent yet." }));
    return;
  }
  fillTable(table, ["time", "kind", "query", "ε", "δ"], sorted.map((h) => [
    new Date(h.time).toLocaleString(), h.kind,
    // only a query's text can be run again as SQL; a release's is a description of it
    h.sql && h.kind === "query" ? el("button", { type: "button", class: "link", text: h.sql,
      title: "Put this query in the editor", onclick: () => onUse(h.sql) })
      : h.description ?? h.sql ?? "—",
    fmtEps(h.epsilon), fmtEps(h.delta),
  ]), undefined, [null, null, "sql", "num nowrap", "num nowrap"]);
}

// The SQL box's example: the first private table the caller can see (a public lookup table
// only if there is no other), grouped by a column with declared keys when it has one; the
// console once showed a table `patients` that neither the demo nor most projects have.
export function exampleSql(tables) {
  const t = tables.find((x) => !x.public) || tables[0];
  if (!t) return "SELECT COUNT(*) FROM your_table";
  const key = t.columns.find((c) => c.domain) || null;
  return key ? `SELECT ${key.name}, COUNT(*) FROM ${t.name} GROUP BY ${key.name}`
    : `SELECT COUNT(*) FROM ${t.name}`;
}

// The answer as CSV (each aggregate with <name>_low/<name>_high), made in the browser from the
// JSON already received: post-processing, nothing is asked of the service.
export function resultCsv(result) {
  const iv = result.intervals || {};
  const cell = (v) => {
    const t = v === null || v === undefined ? "" : String(v);
    return /[",\n\r]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t;
  };
  const head = [];
  for (const c of result.columns) head.push(c, ...(c in iv ? [`${c}_low`, `${c}_high`] : []));
  const lines = [head.map(cell).join(",")];
  result.rows.forEach((r, i) => {
    const out = [];
    result.columns.forEach((c, j) => {
      out.push(r[j]);
      if (c in iv) out.push(...(iv[c][i] || [null, null]));
    });
    lines.push(out.map(cell).join(","));
  });
  return lines.join("\r\n") + "\r\n";
}
