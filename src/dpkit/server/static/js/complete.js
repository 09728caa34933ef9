// Completion of table and column names in a plain <textarea> (ARIA 1.2 combobox + listbox).
// The names come from GET /v1/tables (public metadata), so completing never touches data.
// Keys: typing opens the list once a word has 1+ letters; Ctrl+Space opens it on demand;
// ArrowUp/ArrowDown move, Enter or Tab accept, Escape closes. The list sits under the
// textarea rather than at the caret: it stays on screen on a narrow phone as well.

const KEYWORDS = ["SELECT", "FROM", "WHERE", "GROUP BY", "ORDER BY", "HAVING", "LIMIT", "COUNT",
  "SUM", "AVG", "MIN", "MAX", "DISTINCT", "AND", "OR", "NOT", "AS", "JOIN", "ON", "CASE", "WHEN",
  "THEN", "ELSE", "END", "DESC", "ASC", "BETWEEN", "IN", "IS", "NULL"];

// Tables named in the text: their columns come first in the list.
function mentionedTables(text, tables) {
  const words = new Set((text.match(/[A-Za-z_][\w]*/g) || []).map((w) => w.toLowerCase()));
  return tables.filter((t) => words.has(t.name.toLowerCase()));
}

export function candidates(text, caret, tables) {
  const before = text.slice(0, caret);
  const m = before.match(/([A-Za-z_][\w]*)\.([A-Za-z_]\w*)?$|([A-Za-z_]\w*)$/);
  if (!m) return { start: caret, items: [] };
  const items = [];
  if (m[1] !== undefined) {
    // "table.col": columns of that table only
    const prefix = (m[2] || "").toLowerCase();
    const t = tables.find((x) => x.name.toLowerCase() === m[1].toLowerCase());
    for (const c of t ? t.columns : []) {
      if (c.name.toLowerCase().startsWith(prefix)) items.push({ label: c.name, kind: `${t.name} column · ${c.type}` });
    }
    return { start: caret - (m[2] || "").length, items, dotted: true };
  }
  const prefix = m[3].toLowerCase();
  const seen = new Set();
  const add = (label, kind) => {
    if (label.toLowerCase().startsWith(prefix) && label.toLowerCase() !== prefix && !seen.has(label)) {
      seen.add(label);
      items.push({ label, kind });
    }
  };
  // after FROM or JOIN only a table fits; elsewhere the columns of the tables named so far
  if (/\b(from|join)\s+$/i.test(before.slice(0, before.length - m[3].length))) {
    for (const t of tables) add(t.name, "table");
    return { start: caret - m[3].length, items: items.slice(0, 12) };
  }
  const named = mentionedTables(text, tables);
  for (const t of named.length ? named : tables) {
    for (const c of t.columns) add(c.name, `${t.name} column · ${c.type}`);
  }
  for (const t of tables) add(t.name, "table");
  for (const k of KEYWORDS) add(k, "keyword");
  return { start: caret - m[3].length, items: items.slice(0, 12) };
}

export function attachCompletion(textarea, list, getTables) {
  let state = { start: 0, items: [], active: -1 };

  const close = () => {
    list.hidden = true;
    list.replaceChildren();
    textarea.setAttribute("aria-expanded", "false");
    textarea.removeAttribute("aria-activedescendant");
    state = { start: 0, items: [], active: -1 };
  };

  const highlight = (i) => {
    state.active = i;
    [...list.children].forEach((li, j) => li.setAttribute("aria-selected", String(j === i)));
    const li = list.children[i];
    if (li) {
      textarea.setAttribute("aria-activedescendant", li.id);
      li.scrollIntoView({ block: "nearest" });
    }
  };

  const accept = (i) => {
    const item = state.items[i];
    if (!item) return;
    const caret = textarea.selectionStart;
    const v = textarea.value;
    textarea.value = v.slice(0, state.start) + item.label + v.slice(caret);
    const pos = state.start + item.label.length;
    textarea.setSelectionRange(pos, pos);
    close();
    textarea.focus();
  };

  const open = (force) => {
    const { start, items, dotted } = candidates(textarea.value, textarea.selectionStart, getTables());
    // typing opens the list once a word has begun, or right after "table."
    if (!items.length || (!force && !dotted && textarea.selectionStart === start)) return close();
    state = { start, items, active: 0 };
    list.replaceChildren(...items.map((it, i) => {
      const li = document.createElement("li");
      li.id = `completion-${i}`;
      li.setAttribute("role", "option");
      const name = document.createElement("span");
      name.textContent = it.label;
      const kind = document.createElement("small");
      kind.textContent = it.kind;
      li.append(name, kind);
      // mousedown, not click: keep the focus (and caret) in the textarea
      li.addEventListener("mousedown", (ev) => { ev.preventDefault(); accept(i); });
      return li;
    }));
    list.hidden = false;
    textarea.setAttribute("aria-expanded", "true");
    highlight(0);
  };

  textarea.addEventListener("input", () => open(false));
  textarea.addEventListener("blur", () => setTimeout(close, 100));
  textarea.addEventListener("keydown", (ev) => {
    if (ev.key === " " && ev.ctrlKey) { ev.preventDefault(); open(true); return; }
    if (list.hidden) return;
    const n = state.items.length;
    if (ev.key === "ArrowDown") { ev.preventDefault(); highlight((state.active + 1) % n); }
    else if (ev.key === "ArrowUp") { ev.preventDefault(); highlight((state.active - 1 + n) % n); }
    else if ((ev.key === "Enter" && !ev.ctrlKey) || ev.key === "Tab") { ev.preventDefault(); accept(state.active); }
    else if (ev.key === "Escape") { ev.preventDefault(); close(); }
  });
  return { close };
}
