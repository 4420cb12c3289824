// laneledger console: five views over the tail's own HTTP API (spec/tail.md).
// Plain modern JavaScript, no build step, no external resources.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "laneledger.access_token";
const TAIL_ROWS = 500;       // rows rendered in the live tail; older ones are dropped from view
const WORK_PAGE = 50;        // attempt rows per page in the session view
const EVENTS_PAGE = 100;     // events per page in the session view
const SESSIONS_PAGE = 50;    // sessions per page of the index
const SESSIONS_REFRESH_MS = 2000; // how often the index's first page looks for news
const BLOB_PAGE = 65536;     // characters of a blob shown at a time in the event view

// -- small helpers -----------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function cell(text, cls) {
  const td = el("td", { class: cls }, text ?? "");
  if (text !== null && text !== undefined) td.title = String(text);
  return td;
}

function setStatus(node, text, isError = false) {
  node.textContent = text;
  node.classList.toggle("error", isError);
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// GET a tail endpoint as JSON, with the bearer token when one is set.
async function api(path, params = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params)) {
    if (v !== "" && v !== null && v !== undefined) url.searchParams.set(k, v);
  }
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  const resp = await fetch(url, { headers });
  let body = null;
  try { body = await resp.json(); } catch { /* not JSON: reported by status below */ }
  if (!resp.ok) throw new ApiError(resp.status, body && body.error);
  return body;
}

function describeError(err) {
  if (err instanceof ApiError) {
    const code = err.body && err.body.code ? ` (${err.body.code})` : "";
    return `${err.message}${code}, HTTP ${err.status}`;
  }
  return String(err && err.message ? err.message : err);
}

function sessionLink(id) {
  return el("a", { href: "#/session/" + encodeURIComponent(id) }, id);
}

function eventLink(position, text) {
  return el("a", { href: "#/event/" + position }, text ?? String(position));
}

// GET a blob as text, with the bearer token when one is set.
async function apiText(path, params = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const resp = await fetch(url, { headers });
  if (!resp.ok) {
    let body = null;
    try { body = await resp.json(); } catch { /* no typed body */ }
    throw new ApiError(resp.status, body && body.error);
  }
  return resp.text();
}

function shortJSON(value, max = 160) {
  const text = JSON.stringify(value);
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}

function formatMs(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}

function plural(n, noun) { return `${n} ${noun}${n === 1 ? "" : "s"}`; }

function formatCost(list) {
  return (list || []).map((c) => `${c.amount} ${c.currency}`).join(", ");
}

// -- the access token ----------------------------------------------------------------------

function showTokenState() {
  $("token-state").textContent = token() ? "token set for this tab" : "no token";
}

$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const value = $("token").value.trim();
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  $("token").value = "";
  showTokenState();
});
$("token-forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showTokenState();
});

// -- the sessions index (the landing page) ------------------------------------------------------

// The filters shown, the page (``before``: null for the first, which stays
// live), and the applied position the rows were read at (a refresh redraws
// only when it moved).
const sessions = { filters: {}, before: null, pages: [], applied: -1, loading: false };

function sessionsFilters() {
  const form = $("sessions-form");
  const filters = {};
  for (const name of ["tenant", "status", "actor_id", "q", "since", "until"]) {
    const value = form.elements[name].value.trim();
    if (value) filters[name] = value;
  }
  return filters;
}

async function loadSessions(quiet = false) {
  if (sessions.loading) return;
  sessions.loading = true;
  const params = { ...sessions.filters, limit: SESSIONS_PAGE };
  if (sessions.before !== null) params.before = sessions.before;
  try {
    const page = await api("/api/v1/sessions", params);
    if (quiet && page.applied_position === sessions.applied) return;
    sessions.applied = page.applied_position;
    sessions.next = page.next_before;
    const rows = $("sessions-rows");
    rows.textContent = "";
    for (const s of page.sessions) rows.append(sessionRow(s));
    $("sessions-older").disabled = page.next_before === null;
    $("sessions-newest").disabled = sessions.before === null;
    const where = sessions.before === null ? "newest first, updating" : `older than position ${sessions.before}`;
    setStatus($("sessions-status"),
      page.sessions.length
        ? `${plural(page.sessions.length, "session")} (${where}), as of position ${page.applied_position}.`
        : `No sessions match, as of position ${page.applied_position}.`);
  } catch (err) {
    setStatus($("sessions-status"), "Cannot list sessions: " + describeError(err), true);
  } finally {
    sessions.loading = false;
  }
}

function sessionRow(s) {
  const tr = el("tr", { "data-session": s.session_id, class: "session-" + s.status });
  const open = cell(s.attempts_open, "num" + (s.attempts_open ? " attention" : ""));
  const paused = cell(s.pauses_pending, "num" + (s.pauses_pending ? " attention" : ""));
  tr.append(el("td", {}, sessionLink(s.session_id)), cell(s.tenant), cell(s.status, "status"),
    cell(s.runs, "num"), cell(s.lanes, "num"), cell(s.events, "num"), cell(s.first_event_at),
    cell(s.last_event_at), open, paused, cell(formatCost(s.cost)));
  return tr;
}

function showSessions(params) {
  sessions.filters = {};
  for (const [k, v] of params) if (v) sessions.filters[k] = v;
  sessions.before = null;
  sessions.pages = [];
  sessions.applied = -1;
  loadSessions();
}

$("sessions-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const filters = sessionsFilters();
  history.replaceState(null, "", "#/sessions?" + new URLSearchParams(filters));
  showSessions(Object.entries(filters));
});
$("sessions-older").addEventListener("click", () => {
  if (sessions.next === null || sessions.next === undefined) return;
  sessions.pages.push(sessions.before);
  sessions.before = sessions.next;
  sessions.applied = -1;
  loadSessions();
});
$("sessions-newest").addEventListener("click", () => {
  sessions.before = null;
  sessions.pages = [];
  sessions.applied = -1;
  loadSessions();
});
// The first page follows the ledger: looked at again while it is shown.
setInterval(() => {
  if (!$("view-sessions").hidden && sessions.before === null) loadSessions(true);
}, SESSIONS_REFRESH_MS);

// -- the live tail -----------------------------------------------------------------------------

// One EventSource at a time. `last` is the last position received: a pause
// closes the stream and a resume (or a reconnection after the service went
// away) opens a new one from `last`, which the tail answers exactly (no gap,
// no duplicate). While connected, the browser's own reconnection sends
// Last-Event-ID, which the tail prefers over from_position.
const tail = {
  source: null, filters: {}, last: 0, received: 0, paused: false, ended: false, started: false,
  pending: [], flushTimer: null, retryTimer: null, backoffMs: 500,

  start(filters, from) {
    this.started = true;
    this.close();
    this.filters = filters;
    this.last = from;
    this.received = 0;
    this.paused = false;
    this.ended = false;
    this.pending = [];
    $("tail-rows").textContent = "";
    $("tail-pause").disabled = false;
    this.showPaused();
    this.open();
  },

  open() {
    const q = new URLSearchParams(this.filters);
    q.set("from_position", String(this.last));
    if (token()) q.set("access_token", token());
    const source = new EventSource("/api/v1/events?" + q);
    this.source = source;
    setStatus($("tail-status"), `Connecting after position ${this.last}…`);
    source.onopen = () => {
      this.backoffMs = 500;
      this.showLive();
    };
    source.onerror = () => {
      if (this.source !== source) return;
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up: an error answer (EventSource cannot show it,
        // so ask once more with fetch) or the service was away. A refusal
        // (4xx: bad filter, no or wrong token) stops here with its reason;
        // anything else reopens from the last position, backing off.
        source.close();
        this.source = null;
        this.refusal(q).then((err) => {
          if (this.source !== null || this.paused || this.retryTimer !== null) return;
          if (err) {
            $("tail-pause").disabled = true;
            setStatus($("tail-status"), "The tail refused: " + describeError(err), true);
            return;
          }
          const wait = this.backoffMs;
          this.backoffMs = Math.min(this.backoffMs * 2, 5000);
          setStatus($("tail-status"),
            `Disconnected at position ${this.last}; reconnecting in ${(wait / 1000).toFixed(1)} s…`, true);
          this.retryTimer = setTimeout(() => { this.retryTimer = null; this.open(); }, wait);
        });
      } else {
        setStatus($("tail-status"), `Reconnecting after position ${this.last}…`, true);
      }
    };
    source.addEventListener("ledger-event", (m) => {
      if (this.source !== source) return;
      const event = JSON.parse(m.data);
      if (event.position <= this.last) return; // never shown twice
      this.last = event.position;
      this.received += 1;
      this.pending.push(event);
      this.scheduleFlush();
    });
    source.addEventListener("end", (m) => {
      if (this.source !== source) return;
      const end = JSON.parse(m.data);
      this.close();
      this.ended = true;
      $("tail-pause").disabled = true;
      this.flush();
      setStatus($("tail-status"),
        `Ended (${end.reason}) at position ${end.position}; ${this.received} events received.`);
    });
  },

  // The error a tail request answers with, if it is a refusal (4xx); null
  // when it would stream (the probe is then cut off) or cannot connect.
  async refusal(q) {
    const abort = new AbortController();
    try {
      const headers = token() ? { Authorization: "Bearer " + token() } : {};
      const resp = await fetch("/api/v1/events?" + q, { headers, signal: abort.signal });
      if (resp.status < 400 || resp.status >= 500) { abort.abort(); return null; }
      let body = null;
      try { body = await resp.json(); } catch { /* no typed body */ }
      return new ApiError(resp.status, body && body.error);
    } catch {
      return null;
    }
  },

  close() {
    if (this.source) this.source.close();
    this.source = null;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  },

  // Rows are added in batches: a backfill can deliver thousands of events a
  // second, and only the newest TAIL_ROWS are ever in the document.
  scheduleFlush() {
    if (this.flushTimer === null) this.flushTimer = setTimeout(() => this.flush(), 100);
  },

  flush() {
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    const batch = this.pending.slice(-TAIL_ROWS);
    this.pending = [];
    const rows = $("tail-rows");
    const fragment = document.createDocumentFragment();
    for (let i = batch.length - 1; i >= 0; i--) fragment.append(tailRow(batch[i]));
    rows.prepend(fragment);
    while (rows.rows.length > TAIL_ROWS) rows.deleteRow(-1);
    if (this.source && !this.paused) this.showLive();
  },

  pause() {
    this.close();
    this.flush();
    this.paused = true;
    this.showPaused();
    setStatus($("tail-status"),
      `Paused at position ${this.last}; ${this.received} events received. Resume continues from there.`);
  },

  resume() {
    this.paused = false;
    this.showPaused();
    this.open();
  },

  showLive() {
    setStatus($("tail-status"), `Live: ${this.received} events received, last position ${this.last}.`);
  },

  showPaused() {
    const button = $("tail-pause");
    button.textContent = this.paused ? "Resume" : "Pause";
    button.setAttribute("aria-pressed", this.paused ? "true" : "false");
  },
};

function tailRow(ev) {
  const tr = el("tr", { "data-position": ev.position });
  const session = el("td", {}, sessionLink(ev.session_id));
  tr.append(el("td", { class: "num" }, eventLink(ev.position)), cell(ev.committed_at), cell(ev.event_type), session,
    cell(ev.run_id), cell(`${ev.lane_id}:${ev.seq}`), cell(ev.actor_id), cell(shortJSON(ev.payload)));
  return tr;
}

$("tail-cap").textContent = String(TAIL_ROWS);

function tailFilters() {
  const form = $("tail-form");
  const filters = {};
  for (const name of ["tenant", "session_id", "run_id", "lane_id", "actor_id", "event_type"]) {
    const value = form.elements[name].value.trim();
    if (value) filters[name] = value;
  }
  return filters;
}

$("tail-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const raw = e.target.elements.from_position.value.trim() || "0";
  if (!/^[0-9]+$/.test(raw)) {
    setStatus($("tail-status"), "After position must be a whole number (0: from the beginning).", true);
    e.target.elements.from_position.focus();
    return;
  }
  const filters = tailFilters();
  history.replaceState(null, "", "#/tail?" + new URLSearchParams(filters));
  tail.start(filters, Number(raw));
});

$("tail-pause").addEventListener("click", () => {
  if (tail.paused) tail.resume(); else tail.pause();
});

// Opened, the live tail starts by itself: with the filters of its link (or
// of an old-style ?query), else unfiltered from just before the latest events.
async function enterTail(params) {
  if (tail.started) return;
  const legacy = new URLSearchParams(location.search);
  if (fillForm($("tail-form"), [...legacy, ...params])) {
    $("tail-form").requestSubmit();
    return;
  }
  let from = 0;
  try {
    const page = await api("/api/v1/sessions", { limit: 1 });
    from = Math.max(0, page.applied_position - TAIL_ROWS);
  } catch { /* the tail itself says why, once it is asked */ }
  if (!tail.started) tail.start(tailFilters(), from);
}

// -- the session view -----------------------------------------------------------------------

const session = { id: null, data: null, activity: null, workRows: [], workPage: 0, causal: null,
                  events: { list: [], hasOlder: false, hasNewer: false } };

async function openSession(id) {
  session.id = id;
  $("session-id").value = id;
  $("session-body").hidden = true;
  setStatus($("session-status"), `Loading session ${id}…`);
  const path = "/api/v1/sessions/" + encodeURIComponent(id);
  let data, activity;
  try {
    [data, activity] = await Promise.all([api(path, { limit: EVENTS_PAGE }), api(path + "/activity")]);
  } catch (err) {
    if (session.id === id) setStatus($("session-status"), `Cannot open session ${id}: ${describeError(err)}`, true);
    return;
  }
  if (session.id !== id) return; // another session was opened meanwhile
  session.data = data;
  session.activity = activity;
  renderSummary(data, activity);
  renderTree(data);
  renderPauses(data, activity);
  session.workRows = workRows(data, activity);
  session.workPage = 0;
  renderWork();
  showEvents(data.events, false, data.has_more);
  $("session-body").hidden = false;
  setStatus($("session-status"), `Session ${id} as of position ${data.applied_position}.`);
  verifySession(id);
  loadCausalTree(id, path);
}

async function verifySession(id) {
  const out = $("session-verify");
  out.className = "verdict";
  out.textContent = "Verifying the session's hash chains…";
  try {
    const report = await api("/api/v1/verify", { session_id: id });
    if (session.id !== id) return;
    if (report.intact) {
      out.classList.add("intact");
      out.textContent = `Chain intact: ${report.events} events on ${report.lanes} lanes verified.`;
    } else {
      const d = report.fault.details || {};
      out.classList.add("fault");
      out.textContent = `Chain verification FAILED: ${report.fault.code} (${d.kind || "?"}) at position ` +
        `${d.position ?? "?"}, lane ${d.lane_id ?? "?"} seq ${d.seq ?? "?"}, field ${d.field ?? "?"}: ` +
        report.fault.message;
    }
  } catch (err) {
    if (session.id !== id) return;
    out.classList.add("fault");
    out.textContent = "Chain verification could not run: " + describeError(err);
  }
}

function renderSummary(data, activity) {
  const lanes = data.lanes.length;
  const attempts = activity.attempts.length;
  const open = activity.attempts.filter((a) => a.started_position !== null && a.outcome === null).length;
  const cost = formatCost(activity.cost) || "none recorded";
  $("session-summary").textContent =
    `Tenant ${data.tenant ?? "?"}; runs ${data.run_ids.join(", ") || "none"}; ${lanes} lanes; ` +
    `${attempts} attempts (${open} unresolved); cost ${cost}.`;
}

// Lanes by run, sub-agent lanes under the lane that spawned them.
function renderTree(data) {
  const box = $("session-tree");
  box.textContent = "";
  const byParent = new Map();
  const known = new Set(data.lanes.map((l) => l.id));
  for (const lane of data.lanes) {
    const parent = lane.parent_lane_id && known.has(lane.parent_lane_id) ? lane.parent_lane_id : null;
    if (!byParent.has(parent)) byParent.set(parent, []);
    byParent.get(parent).push(lane);
  }
  const laneItem = (lane) => {
    const li = el("li", { "data-lane": lane.id },
      el("strong", {}, lane.name), " ", el("span", { class: "kind " + lane.kind }, lane.kind),
      ` ${plural(lane.last_seq, "event")} · lane ${lane.id}`, lane.actor_id ? ` · actor ${lane.actor_id}` : "");
    const children = byParent.get(lane.id) || [];
    if (children.length) li.append(el("ul", {}, ...children.map(laneItem)));
    return li;
  };
  const runs = new Map();
  for (const lane of byParent.get(null) || []) {
    if (!runs.has(lane.run_id)) runs.set(lane.run_id, []);
    runs.get(lane.run_id).push(lane);
  }
  const tree = el("ul", { class: "tree", "aria-label": "Runs and their lanes" });
  for (const [run, lanes] of runs) {
    tree.append(el("li", { "data-run": run }, el("strong", {}, "run " + run),
      el("ul", {}, ...lanes.map(laneItem))));
  }
  box.append(tree);
}

// The causal tree (GET …/causal-tree): spines say where each sub-agent's lane
// hangs off its parent; nodes are read a page at a time (CAUSAL_PAGE), each
// indented under its cause when the cause is on the same page.
const CAUSAL_PAGE = 200;

async function loadCausalTree(id, path, cursor = 0) {
  const out = $("causal-rows");
  let tree;
  try {
    tree = await api(path + "/causal-tree", {
      cursor, limit: CAUSAL_PAGE, exclude_invalidated: $("causal-exclude").checked ? "true" : "" });
  } catch (err) {
    if (session.id !== id) return;
    out.textContent = "";
    $("causal-page").textContent = "Causal tree unavailable: " + describeError(err);
    return;
  }
  if (session.id !== id) return;
  session.causal = { path, cursor, next: tree.next_cursor, hasMore: tree.has_more };
  for (const spine of tree.spines) {
    const item = document.querySelector(`#session-tree li[data-lane="${CSS.escape(spine.lane_id)}"]`);
    if (item && spine.first_cause !== null && !item.querySelector(":scope > .spawned")) {
      item.insertBefore(el("span", { class: "spawned" }, ` · spawned by position ${spine.first_cause}`),
        item.querySelector(":scope > ul"));
    }
  }
  const depth = new Map();
  out.textContent = "";
  for (const node of tree.nodes) {
    const d = node.cause !== null && depth.has(node.cause) ? Math.min(depth.get(node.cause) + 1, 12) : 0;
    depth.set(node.position, d);
    const label = el("td", {}, el("span", { class: "indent", "data-depth": d }), node.name);
    label.firstChild.style.paddingLeft = d + "em";
    const tr = el("tr", { "data-position": node.position, class: node.invalidated ? "invalidated" : null });
    tr.append(cell(node.position, "num"), label, cell(`${laneName(session.data, node.lane_id)}:${node.seq}`),
      cell(node.role + (node.invalidated ? " (invalidated)" : "")), cell(node.summary),
      cell(node.cause === null ? "root" : "#" + node.cause));
    out.append(tr);
  }
  const nodes = tree.nodes;
  $("causal-page").textContent = nodes.length
    ? `Positions ${nodes[0].position}–${nodes[nodes.length - 1].position}` +
      (tree.rewinds.length ? `; ${plural(tree.rewinds.length, "rewind")}` : "")
    : "No nodes";
  $("causal-first").disabled = cursor === 0;
  $("causal-next").disabled = !tree.has_more;
}

$("causal-first").addEventListener("click", () => loadCausalTree(session.id, session.causal.path, 0));
$("causal-next").addEventListener("click", () =>
  loadCausalTree(session.id, session.causal.path, session.causal.next));
$("causal-exclude").addEventListener("change", () => loadCausalTree(session.id, session.causal.path, 0));

function laneName(data, laneId) {
  const lane = data.lanes.find((l) => l.id === laneId);
  return lane ? lane.name : laneId;
}

function renderPauses(data, activity) {
  const list = $("session-pauses");
  list.textContent = "";
  const pending = activity.pauses.filter((p) => p.decision === null);
  const answered = activity.pauses.length - pending.length;
  for (const p of pending) {
    list.append(el("li", { class: "pending" },
      `Pending: pause ${p.pause_id} on lane ${laneName(data, p.lane_id)} (trigger ${p.trigger ?? "?"}) ` +
      `since ${p.paused_at}, position ${p.position}`));
  }
  list.append(el("li", {}, `${answered} answered, ${pending.length} pending.`));
}

// One row per attempt (or per action without an attempt), joined from the
// sequencer's structure and the activity read from the events; with no
// structure recorded (events appended without the attempt guard), one row
// per attempt span the events show, by lane.
function workRows(data, activity) {
  const outcome = new Map(activity.attempts.map((a) => [a.id, a]));
  const actionSpan = new Map(activity.actions.map((a) => [a.id, a]));
  const rows = [];
  if (data.turns.length + data.actions.length + data.attempts.length) {
    const turns = new Map(data.turns.map((t) => [t.id, t]));
    const attemptsOf = new Map();
    for (const a of data.attempts) {
      if (!attemptsOf.has(a.action_id)) attemptsOf.set(a.action_id, []);
      attemptsOf.get(a.action_id).push(a);
    }
    for (const action of data.actions) {
      const turn = turns.get(action.turn_id);
      const base = { lane: laneName(data, action.lane_id), turn: turn ? turn.turn_no : "?",
                     action: `${action.action_type} ${action.name}`,
                     effect: `${action.effect} / ${action.idempotency}` };
      const attempts = (attemptsOf.get(action.id) || []).sort((a, b) => a.attempt_no - b.attempt_no);
      if (!attempts.length) {
        const span = actionSpan.get(action.id);
        rows.push({ ...base, attempt: "none", span: null, cost: span ? span.cost : [] });
      }
      for (const attempt of attempts) {
        const span = outcome.get(attempt.id) || null;
        rows.push({ ...base, attempt: `#${attempt.attempt_no}`, attemptId: attempt.id, span,
                    cost: span ? span.cost : [] });
      }
    }
    rows.sort((a, b) => (a.span?.started_position ?? Infinity) - (b.span?.started_position ?? Infinity));
  } else {
    for (const span of activity.attempts) {
      rows.push({ lane: laneName(data, span.lane_id), turn: "", action: "", effect: "",
                  attempt: span.id, attemptId: span.id, span, cost: span.cost });
    }
  }
  return rows;
}

function rowState(row) {
  if (!row.span || row.span.started_position === null) {
    return row.span && row.span.outcome ? row.span.outcome : "not requested";
  }
  return row.span.outcome || "unresolved";
}

function renderWork() {
  const only = $("work-unresolved").checked;
  const rows = only ? session.workRows.filter((r) => rowState(r) === "unresolved") : session.workRows;
  const pages = Math.max(1, Math.ceil(rows.length / WORK_PAGE));
  session.workPage = Math.min(session.workPage, pages - 1);
  const start = session.workPage * WORK_PAGE;
  const body = $("work-rows");
  body.textContent = "";
  for (const row of rows.slice(start, start + WORK_PAGE)) {
    const state = rowState(row);
    const tr = el("tr", { class: state === "unresolved" ? "unresolved" : state === "failed" ? "failed" : null,
                          "data-attempt": row.attemptId || null });
    tr.append(cell(row.lane), cell(row.turn), cell(row.action), cell(row.effect), cell(row.attempt),
      cell(state, "outcome"), cell(formatMs(row.span ? row.span.duration_ms : null), "num"),
      cell(formatCost(row.cost), "num"));
    body.append(tr);
  }
  const unresolved = session.workRows.filter((r) => rowState(r) === "unresolved").length;
  $("work-summary").textContent = `${plural(session.workRows.length, "row")}, ${plural(unresolved, "unresolved attempt")}` +
    (unresolved ? " (highlighted: requested, never completed or failed; reconcile before any retry)." : ".");
  $("work-page").textContent = rows.length
    ? `Rows ${start + 1}–${Math.min(start + WORK_PAGE, rows.length)} of ${rows.length}` : "No rows";
  $("work-prev").disabled = session.workPage === 0;
  $("work-next").disabled = session.workPage >= pages - 1;
}

$("work-prev").addEventListener("click", () => { session.workPage -= 1; renderWork(); });
$("work-next").addEventListener("click", () => { session.workPage += 1; renderWork(); });
$("work-unresolved").addEventListener("change", () => { session.workPage = 0; renderWork(); });

// Events: keyset pages over the session endpoint (cursor = position).
function showEvents(list, hasOlder, hasNewer) {
  session.events = { list, hasOlder, hasNewer };
  const body = $("events-rows");
  body.textContent = "";
  for (const ev of list) {
    const tr = el("tr", { "data-position": ev.position });
    tr.append(el("td", { class: "num" }, eventLink(ev.position)), cell(ev.occurred_at), cell(ev.event_type), cell(ev.run_id),
      cell(`${laneName(session.data, ev.lane_id)}:${ev.seq}`), cell(ev.subject_id), cell(shortJSON(ev.payload)));
    body.append(tr);
  }
  $("events-page").textContent = list.length
    ? `Positions ${list[0].position}–${list[list.length - 1].position}` : "No events";
  $("events-first").disabled = $("events-prev").disabled = !hasOlder;
  $("events-next").disabled = $("events-last").disabled = !hasNewer;
}

async function pageEvents(params, backward, hadCursor) {
  const id = session.id;
  try {
    const page = await api("/api/v1/sessions/" + encodeURIComponent(id), { ...params, limit: EVENTS_PAGE });
    if (session.id !== id) return;
    if (backward) showEvents(page.events.slice().reverse(), page.has_more, hadCursor);
    else showEvents(page.events, hadCursor, page.has_more);
  } catch (err) {
    setStatus($("session-status"), "Cannot read the events: " + describeError(err), true);
  }
}

$("events-first").addEventListener("click", () => pageEvents({}, false, false));
$("events-last").addEventListener("click", () => pageEvents({ direction: "backward" }, true, false));
$("events-next").addEventListener("click", () => {
  const list = session.events.list;
  pageEvents({ cursor: list.length ? list[list.length - 1].position : 0 }, false, true);
});
$("events-prev").addEventListener("click", () => {
  const list = session.events.list;
  if (list.length) pageEvents({ cursor: list[0].position, direction: "backward" }, true, true);
});

$("session-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const id = $("session-id").value.trim();
  if (!id) return;
  const target = "#/session/" + encodeURIComponent(id);
  if (location.hash === target) openSession(id); // the same session again: reload it
  else location.hash = target;
});

// -- costs ---------------------------------------------------------------------------------

const PALETTE = ["#0b5cad", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#1098ad", "#e67700", "#5c940d"];

async function loadCosts(params) {
  setStatus($("costs-status"), "Loading costs…");
  let report;
  try {
    report = await api("/api/v1/costs", params);
  } catch (err) {
    setStatus($("costs-status"), "Cannot load costs: " + describeError(err), true);
    return;
  }
  const fill = (id, rows) => {
    const body = $(id);
    body.textContent = "";
    for (const cells of rows) {
      body.append(el("tr", {}, ...cells.map((c) => cell(c, /^-?[0-9.eE+-]+$/.test(String(c)) ? "num" : null))));
    }
  };
  fill("costs-totals", report.totals.map((t) => [t.currency, t.amount, t.events, t.input_tokens, t.output_tokens]));
  fill("costs-models", report.by_model.map((m) => [m.provider, m.model, m.currency, m.amount, m.events,
    m.input_tokens, m.output_tokens]));
  fill("costs-tenants", report.by_tenant.map((t) => [t.tenant, t.currency, t.amount, t.events]));
  const by = new FormData($("costs-form")).get("by") || "model";
  plotCosts(report, by);
  $("costs-body").hidden = false;
  setStatus($("costs-status"),
    `${report.events} cost events as of position ${report.applied_position}; buckets of ${report.bucket_s} s.`);
}

// Every bucket from the first to the last with spending, empty ones
// included, so the x axis is time (unless that would be over MAX_SLOTS).
const MAX_SLOTS = 1000;
function timeAxis(starts, bucketS) {
  if (starts.length < 2) return starts;
  const first = Date.parse(starts[0]), last = Date.parse(starts[starts.length - 1]);
  const step = bucketS * 1000;
  if ((last - first) / step + 1 > MAX_SLOTS) return starts;
  const all = [];
  for (let t = first; t <= last; t += step) all.push(new Date(t).toISOString().replace(".000Z", "Z"));
  return all;
}

// A stacked bar chart of the amount per bucket, one colour per model (or
// tenant), in the currency with the most events; the same figures are in
// the tables below for anyone who cannot see it.
function plotCosts(report, by) {
  const box = $("costs-plot");
  box.textContent = "";
  if (!report.totals.length) {
    $("costs-caption").textContent = "No cost recorded in this scope.";
    return;
  }
  const currency = report.totals.slice().sort((a, b) => b.events - a.events)[0].currency;
  const points = report.series.filter((p) => p.currency === currency);
  const groups = [...new Set(points.map((p) => p[by]))].sort();
  const buckets = timeAxis([...new Set(points.map((p) => p.start))].sort(), report.bucket_s);
  const stacks = new Map(buckets.map((b) => [b, new Map()]));
  for (const p of points) {
    const stack = stacks.get(p.start);
    stack.set(p[by], (stack.get(p[by]) || 0) + Number(p.amount));
  }
  const totals = buckets.map((b) => [...stacks.get(b).values()].reduce((x, y) => x + y, 0));
  const max = Math.max(...totals, 1e-12);
  const W = 760, H = 240, L = 64, R = 12, T = 12, B = 36;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const title = `Cost in ${currency} per ${report.bucket_s} s bucket, by ${by}`;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", String(W));
  svg.setAttribute("height", String(H));
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${title}: ${buckets.length} buckets, peak ${max.toPrecision(4)} ${currency}`);
  svg.classList.add("plot");
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  for (let i = 0; i <= 4; i++) {
    const y = T + (H - T - B) * (1 - i / 4);
    add("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: "#e3e6eb" });
    add("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, (max * i / 4).toPrecision(3));
  }
  const slot = (W - L - R) / Math.max(buckets.length, 1);
  const barW = Math.max(Math.min(slot * 0.8, 40), 1);
  buckets.forEach((bucket, i) => {
    let y = H - B;
    const x = L + i * slot + (slot - barW) / 2;
    groups.forEach((g, gi) => {
      const v = stacks.get(bucket).get(g) || 0;
      if (!v) return;
      const h = (H - T - B) * v / max;
      y -= h;
      const rect = add("rect", { x, y, width: barW, height: Math.max(h, 0.5), fill: PALETTE[gi % PALETTE.length] });
      const tip = document.createElementNS(ns, "title");
      tip.textContent = `${bucket} ${g}: ${v} ${currency}`;
      rect.append(tip);
    });
  });
  // Tick labels: the time of day when the plot spans under a day, else the date too.
  const oneDay = Date.parse(buckets[buckets.length - 1]) - Date.parse(buckets[0]) < 86400000;
  const tick = (b) => oneDay ? b.slice(11, report.bucket_s >= 60 ? 16 : 19) : b.slice(5, 16).replace("T", " ");
  const labelEvery = Math.max(1, Math.ceil(buckets.length / 7));
  buckets.forEach((bucket, i) => {
    if (i % labelEvery) return;
    add("text", { x: L + i * slot + slot / 2, y: H - B + 16, "text-anchor": "middle" }, tick(bucket));
  });
  add("text", { x: L, y: H - 4 }, "UTC, bucket start" + (oneDay ? ", " + buckets[0].slice(0, 10) : ""));
  box.append(svg);
  const legend = el("ul", { class: "legend", "aria-label": "Legend" });
  groups.forEach((g, gi) => {
    const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
    swatch.style.background = PALETTE[gi % PALETTE.length];
    legend.append(el("li", {}, swatch, g));
  });
  box.append(legend);
  $("costs-caption").textContent = title + ".";
}

$("costs-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const form = e.target;
  const raw = form.elements.bucket_s.value.trim();
  if (raw && !/^[0-9]+$/.test(raw)) {
    setStatus($("costs-status"), "Bucket seconds must be a whole number, or empty for automatic.", true);
    form.elements.bucket_s.focus();
    return;
  }
  const params = {};
  for (const name of ["tenant", "session_id", "run_id", "bucket_s"]) {
    const value = form.elements[name].value.trim();
    if (value) params[name] = value;
  }
  history.replaceState(null, "", "#/costs?" + new URLSearchParams(params));
  loadCosts(params);
});
for (const radio of document.querySelectorAll('#costs-form input[name="by"]')) {
  radio.addEventListener("change", () => { if (!$("costs-body").hidden) $("costs-form").requestSubmit(); });
}

// -- the event view ---------------------------------------------------------------------------

// One committed event: its chain fields and its lane's verification, its
// cause and what it caused (links), the content its references name (read
// from the blob store, shown a page at a time) and the whole record.
let shownEvent = null;

async function openEvent(position) {
  shownEvent = position;
  $("event-position").value = String(position);
  $("event-title").textContent = `Event ${position}`;
  $("event-body").hidden = true;
  setStatus($("event-status"), `Loading event ${position}…`);
  try {
    const [ev, links] = await Promise.all([
      api(`/api/v1/events/${position}`),
      api(`/api/v1/events/${position}/causation`),
    ]);
    if (shownEvent !== position) return;
    $("event-record").textContent = JSON.stringify(ev, null, 2);
    $("event-chain").textContent = `${ev.event_type} on lane ${ev.lane_id} seq ${ev.seq} of session ` +
      `${ev.session_id}, run ${ev.run_id}; prev_hash ${ev.prev_hash}; entry_hash ${ev.entry_hash}.`;
    renderCausation(links);
    renderContent(ev);
    $("event-body").hidden = false;
    setStatus($("event-status"), `Event ${position}, committed at ${ev.committed_at}.`);
    verifyLane(ev.lane_id, position);
  } catch (err) {
    if (shownEvent !== position) return;
    setStatus($("event-status"), `Cannot open event ${position}: ` + describeError(err), true);
  }
}

function renderCausation(links) {
  const cause = $("event-cause");
  cause.textContent = "";
  if (links.cause) {
    cause.append("Caused by ", eventLink(links.cause.position, `position ${links.cause.position}`),
      ` (${links.cause.event_type} on lane ${links.cause.lane_id} seq ${links.cause.seq}).`);
  } else {
    cause.textContent = links.causation_id ? `Caused by ${links.causation_id}, which is not in this ledger.`
      : "A root: it names no cause.";
  }
  const list = $("event-caused");
  list.textContent = "";
  for (const c of links.caused) {
    list.append(el("li", {}, eventLink(c.position, `position ${c.position}`),
      ` ${c.event_type} on lane ${c.lane_id} seq ${c.seq}`));
  }
  $("event-caused-summary").textContent = links.caused.length
    ? `It caused ${plural(links.caused.length, "event")}${links.more_caused ? " (the first ones shown)" : ""}:`
    : "It caused no event.";
}

// Every {"_ref": "sha256:…", "size_bytes": n} in the payload, with its path.
function contentRefs(value, path, out) {
  if (value && typeof value === "object") {
    if (typeof value._ref === "string" && value._ref.startsWith("sha256:") && Number.isInteger(value.size_bytes)) {
      out.push({ path, sha256: value._ref.slice(7), size: value.size_bytes });
    } else {
      for (const [k, v] of Object.entries(value)) contentRefs(v, Array.isArray(value) ? `${path}[${k}]` : `${path}.${k}`, out);
    }
  }
  return out;
}

function renderContent(ev) {
  const box = $("event-content");
  box.textContent = "";
  const refs = contentRefs(ev.payload, "payload", []);
  if (!refs.length) {
    box.append(el("p", {}, "The payload references no blob."));
    return;
  }
  for (const ref of refs) {
    const pre = el("pre", { class: "blob", tabindex: "0", "aria-label": `Content of ${ref.path}` });
    const status = el("p", { class: "status", role: "status" }, `Reading ${ref.path} (${ref.size} bytes)…`);
    const more = el("button", { type: "button", hidden: true }, `More of ${ref.path}`);
    box.append(el("h4", {}, `${ref.path}: sha256:${ref.sha256.slice(0, 12)}…, ${ref.size} bytes`), status, pre, more);
    apiText(`/api/v1/blobs/${ref.sha256}`, { tenant: ev.tenant }).then((text) => {
      let shown = 0;
      const page = () => {
        shown = Math.min(text.length, shown + BLOB_PAGE);
        pre.textContent = text.slice(0, shown);
        more.hidden = shown >= text.length;
        status.textContent = shown < text.length ? `Showing ${shown} of ${text.length} characters.`
          : `All ${text.length} characters.`;
      };
      more.addEventListener("click", page);
      page();
    }).catch((err) => setStatus(status, `Cannot read ${ref.path}: ` + describeError(err), true));
  }
}

async function verifyLane(laneId, position) {
  const out = $("event-verify");
  out.className = "verdict";
  out.textContent = "Verifying its lane's hash chain…";
  try {
    const report = await api("/api/v1/verify", { lane_id: laneId });
    if (shownEvent !== position) return;
    out.classList.add(report.intact ? "intact" : "fault");
    out.textContent = report.intact ? `Its lane's chain is intact: ${report.events} events verified.`
      : `Its lane's chain FAILED verification: ${report.fault.code}: ${report.fault.message}`;
  } catch (err) {
    if (shownEvent !== position) return;
    out.classList.add("fault");
    out.textContent = "Verification could not run: " + describeError(err);
  }
}

$("event-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const raw = $("event-position").value.trim();
  if (!/^[1-9][0-9]*$/.test(raw)) {
    setStatus($("event-status"), "Position must be a whole number from 1.", true);
    return;
  }
  if (location.hash === "#/event/" + raw) openEvent(Number(raw));
  else location.hash = "#/event/" + raw;
});

// -- routing: #/sessions?filters, #/tail?filters, #/session/<id>, #/event/<position>, #/costs ---

const VIEWS = ["sessions", "tail", "session", "event", "costs"];

function route() {
  const hash = location.hash || "#/sessions";
  const [path, query] = hash.slice(1).split("?");
  const parts = path.split("/").filter(Boolean);
  const view = VIEWS.includes(parts[0]) ? parts[0] : "sessions";
  for (const name of VIEWS) $("view-" + name).hidden = name !== view;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (view === "session" && parts[1]) {
    const id = decodeURIComponent(parts[1]);
    if (id !== session.id || !session.data) openSession(id);
  }
  const params = new URLSearchParams(query || "");
  if (view === "sessions") {
    $("sessions-form").reset();
    fillForm($("sessions-form"), params);
    showSessions(params);
  }
  if (view === "tail") enterTail(params);
  if (view === "event" && /^[1-9][0-9]*$/.test(parts[1] || "") && Number(parts[1]) !== shownEvent) {
    openEvent(Number(parts[1]));
  }
  if (view === "costs" && !costsShown) { // the first visit loads them
    costsShown = true;
    fillForm($("costs-form"), params);
    $("costs-form").requestSubmit();
  }
  return { view, params };
}

let costsShown = false;
// Moving to another view moves the focus to its heading, so keyboard and
// screen reader users land where the new content starts.
window.addEventListener("hashchange", () => $(route().view + "-title").focus());

function fillForm(form, params) {
  let any = false;
  for (const [k, v] of params) {
    if (form.elements[k] && form.elements[k].type !== "radio") { form.elements[k].value = v; any = true; }
  }
  return any;
}

// First load: the sessions index, unless the link names another view (an
// old-style link with filters in the query, /?session_id=…, opens the live
// tail with them).
showTokenState();
if (!location.hash && location.search) location.hash = "#/tail";
route();
