// The HTTP side of the console: one fetch wrapper over the /v1 contract
// (docs/service.md). The token lives in sessionStorage (this tab only, gone when it closes) and
// travels only in the Authorization header, never in a URL, so it stays out of history, logs
// and Referer headers.

const TOKEN_KEY = "dpkit.token";

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

// Bumped at sign-out: an answer that arrives after it belongs to the signed-out session and
// is dropped (thrown as a `stale` error the console ignores), never drawn for the next person.
let epoch = 0;

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  epoch += 1;
}

// An error carrying the service's RFC 9457 problem details: `detail` is the curator's own text
// (the same as the CLI's), which is what the user needs to read.
export class ApiError extends Error {
  constructor(status, title, detail) {
    super(detail || title || `HTTP ${status}`);
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.stale = false;
  }
}

function stale() {
  const err = new ApiError(0, "stale", "signed out while this request was under way");
  err.stale = true;
  return err;
}

async function problem(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    // not JSON (a proxy's HTML error page, say): fall back to the status line
  }
  if (body && typeof body === "object") {
    let detail = body.detail;
    // FastAPI's own validation errors are a list of {loc, msg}; show them readably
    if (Array.isArray(detail)) {
      detail = detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
    }
    return new ApiError(resp.status, body.title, detail);
  }
  return new ApiError(resp.status, resp.statusText, `${resp.status} ${resp.statusText}`);
}

// Relative URLs ("v1/..."): the console works behind a reverse proxy that mounts the service
// under a path prefix.
// A request past the service's timeout is answered 504 naming where its answer is kept (the
// charge is made once, by the request): poll it until it comes, telling the caller it still
// runs (`onWait(seconds)`). Gives the answer's response, or the 504 when none is kept.
const KEPT_MS = 15 * 60 * 1000; // how long the service keeps a late answer

async function lateAnswer(resp, headers, started, onWait) {
  let body = null;
  try {
    body = await resp.clone().json();
  } catch {
    return resp;
  }
  if (!body || !body.answer_url) return resp;
  const url = String(body.answer_url).replace(/^\//, "");
  const since = Date.now();
  for (;;) {
    if (onWait) onWait(Math.round((Date.now() - since) / 1000));
    let poll = null;
    try {
      poll = await fetch(url, { method: "GET", headers, cache: "no-store",
                                credentials: "omit" });
    } catch {
      // the network dropped one poll: poll again (below)
    }
    if (started !== epoch) throw stale();
    // 202: still running; 429 / 503 / no answer: a poll refused for a while (the caller's own
    // rate, the ledger busy). Shown as the answer, such a refusal lost the id of a request
    // already charged, and "Run" again charged twice (FINDINGS.md J1). After the 15 minutes
    // the service keeps an answer, the 504 naming the id is shown instead.
    if (poll && ![202, 429, 503].includes(poll.status)) return poll;
    if (Date.now() - since > KEPT_MS) return resp;
    const wait = Number(poll && poll.headers.get("Retry-After")) || 1;
    await new Promise((done) => setTimeout(done, wait * 1000));
  }
}

export async function call(method, path, body, token = getToken(), onWait = null) {
  const headers = { Accept: "application/json, application/problem+json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const started = epoch;
  let resp;
  try {
    resp = await fetch(`v1/${path}`, init);
  } catch (err) {
    if (started !== epoch) throw stale();
    throw new ApiError(0, "network", `The service did not answer (${err.message}). Is it running?`);
  }
  if (started !== epoch) throw stale();
  if (resp.status === 504) resp = await lateAnswer(resp, headers, started, onWait);
  if (!resp.ok) throw await problem(resp);
  if (resp.status === 204) return null;
  const answer = await resp.json();
  if (started !== epoch) throw stale();
  return answer;
}
