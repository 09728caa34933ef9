// The owner's panel: analysts, their caps and spending; add (the token is shown once, as the
// CLI does), set a cap, revoke. The service refuses these endpoints to analysts (403); the
// panel is only shown to an owner token, but the check that matters is the server's.

import { call } from "./api.js";
import { el, fillTable, fmtEps, gauge } from "./views.js";

const $ = (id) => document.getElementById(id);

function showError(err) {
  if (err && err.stale) return;  // an answer for a signed-out session
  $("owner-error").textContent = err ? err.message : "";
}

async function setCap(name, input) {
  showError(null);
  const v = input.value.trim();
  if (v === "") { input.focus(); return showError(new Error(`Type a cap for ${name} first.`)); }
  try {
    await call("PUT", `analysts/${encodeURIComponent(name)}/budget`, { epsilon: Number(v) });
    await loadAnalysts();
  } catch (err) { showError(err); }
}

async function revoke(name) {
  showError(null);
  if (!window.confirm(`Revoke ${name}? Their token will open nothing, now and later.`)) return;
  try {
    await call("DELETE", `analysts/${encodeURIComponent(name)}`);
    await loadAnalysts();
  } catch (err) { showError(err); }
}

export async function loadAnalysts() {
  try {
    const { analysts } = await call("GET", "analysts");
    fillTable($("analysts-table"), ["analyst", "status", "own ε cap", "ε spent", "token expires", "actions"],
      analysts.map((a) => {
        const input = el("input", { type: "number", min: "0", step: "any", class: "cap-input",
          "aria-label": `New ε cap for ${a.name}`, placeholder: fmtEps(a.cap_epsilon) });
        const active = a.status !== "revoked";
        const actions = active ? el("div", { class: "row-actions" }, input,
          el("button", { type: "button", class: "secondary small", text: "Set cap",
            "aria-label": `Set ε cap of ${a.name}`, onclick: () => setCap(a.name, input) }),
          el("button", { type: "button", class: "danger small", text: "Revoke",
            "aria-label": `Revoke ${a.name}`, onclick: () => revoke(a.name) })) : "—";
        return [a.name, a.status, fmtEps(a.cap_epsilon),
          gauge(Number(a.spent_epsilon) || 0, a.cap_epsilon, `ε spent by ${a.name}`),
          a.expires ? new Date(a.expires).toLocaleString() : "never", actions];
      }), `${analysts.length} analyst${analysts.length === 1 ? "" : "s"}`);
  } catch (err) { showError(err); }
}

export function initOwner() {
  $("add-analyst-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    showError(null);
    const name = $("new-name").value.trim();
    const eps = $("new-epsilon").value.trim();
    const days = $("new-expires").value.trim();
    const body = { name, epsilon: eps === "" ? null : Number(eps) };
    if (days !== "") body.expires_days = Number(days);
    try {
      const made = await call("POST", "analysts", body);
      const code = el("code", { class: "token", text: made.token });
      const copy = el("button", { type: "button", class: "secondary small", text: "Copy",
        onclick: async () => {
          try { await navigator.clipboard.writeText(made.token); copy.textContent = "Copied"; }
          catch { copy.textContent = "Select and copy it by hand"; }
        } });
      $("new-token").replaceChildren(
        el("p", { text: `Token for ${made.name}, shown only now (only its hash is kept)`
          + (made.expires ? `; it expires ${new Date(made.expires).toLocaleString()}:` : ":") }),
        code, copy);
      $("add-analyst-form").reset();
      await loadAnalysts();
    } catch (err) { showError(err); }
  });
}
