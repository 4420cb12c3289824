// laneledger console: seven views over the tail's own HTTP API (spec/tail.md).
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

// What a table shows of an event's payload: an erased event's content is
// gone (spec/erasure.md), so say by which erasure rather than show "{}".
function payloadText(ev) {
  return ev.erased ? `erased by erasure ${ev.erased.event_id}` : shortJSON(ev.payload);
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
    cell(ev.run_id), cell(`${ev.lane_id}:${ev.seq}`), cell(ev.actor_id), cell(payloadText(ev)));
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
  $("session-timeline-link").href = `#/session/${encodeURIComponent(id)}/timeline`;
  $("session-graph-link").href = `#/session/${encodeURIComponent(id)}/graph`;
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
      cell(`${laneName(session.data, ev.lane_id)}:${ev.seq}`), cell(ev.subject_id), cell(payloadText(ev)));
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
      `${ev.session_id}, run ${ev.run_id}; prev_hash ${ev.prev_hash}; entry_hash ${ev.entry_hash}.` +
      (ev.erased ? ` Its content was erased by erasure ${ev.erased.event_id} (position ${ev.erased.position}).` : "");
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

// -- the timeline (#/session/<id>/timeline) ----------------------------------------------------

// GET …/timeline, page after page (TIMELINE_PAGE spans each), drawn on one
// <canvas>: a row per lane (sub-agents under the lane they hang off), a thin
// bar per turn, a bar per attempt (packed into tracks when they overlap),
// coloured by outcome. Only what is in the window is drawn: each track's
// spans are sorted by start with a running maximum of their ends, so the
// first bar that can reach the window is a binary search away.
const TIMELINE_PAGE = 5000;
const TL = { labelW: 170, axisH: 26, turnH: 6, trackH: 13, gap: 7, maxTracks: 8, listMax: 100 };
const TL_COLOURS = { completed: "#2b8a3e", failed: "#c92a2a", open: "#e67700", gone: "#adb5bd",
                     turn: "#d0e2f5", turnLine: "#0b5cad", spawn: "#862e9c", retry: "#1d1f23" };

const tl = { id: null, lanes: [], rows: [], spans: [], byId: new Map(), end: 1, t0: 0, t1: 1, scrollY: 0,
             selected: null, drawn: 0, renderMs: 0, complete: false, frame: 0, drag: null, linkTimer: null };

function laneOrder(lanes) {
  const byId = new Map(lanes.map((l) => [l.lane_id, l]));
  const parentOf = (l) => {
    if (l.parent_lane_id && byId.has(l.parent_lane_id)) return l.parent_lane_id;
    if (l.spawned_from && byId.has(l.spawned_from.lane_id)) return l.spawned_from.lane_id;
    return null;
  };
  const children = new Map();
  for (const l of lanes) {
    const p = parentOf(l);
    if (!children.has(p)) children.set(p, []);
    children.get(p).push(l);
  }
  const out = [];
  const seen = new Set();
  const walk = (l, depth) => {
    if (seen.has(l.lane_id)) return;
    seen.add(l.lane_id);
    out.push({ lane: l, depth });
    for (const c of children.get(l.lane_id) || []) walk(c, depth + 1);
  };
  for (const l of children.get(null) || []) walk(l, 0);
  for (const l of lanes) walk(l, 0); // a cycle of parents: shown anyway
  return out;
}

function spanEnd(s) { return s.end_ms ?? tl.end; }
function spanState(s) { return s.invalidated ? "gone" : s.outcome || "open"; }

// Lay out the rows: per lane a turn track and up to TL.maxTracks attempt tracks.
function tlLayout() {
  const rows = laneOrder(tl.lanes).map(({ lane, depth }) => ({ lane, depth, turns: [], tracks: [] }));
  const rowOf = new Map(rows.map((r) => [r.lane.lane_id, r]));
  const sorted = tl.spans.filter((s) => s.start_ms !== null).sort((a, b) => a.start_ms - b.start_ms);
  for (const s of sorted) {
    const row = rowOf.get(s.lane_id);
    if (!row) continue;
    if (s.kind === "turn") { row.turns.push(s); continue; }
    let track = row.tracks.find((t) => t.lastEnd <= s.start_ms);
    if (!track) {
      if (row.tracks.length < TL.maxTracks) { track = { spans: [], lastEnd: -Infinity }; row.tracks.push(track); }
      else track = row.tracks[row.tracks.length - 1]; // overflow: drawn over the last track
    }
    track.spans.push(s);
    s.track = row.tracks.indexOf(track);
    track.lastEnd = Math.max(track.lastEnd, spanEnd(s));
  }
  let y = 0;
  for (const row of rows) {
    row.y = y;
    row.h = TL.gap + TL.turnH + 2 + Math.max(1, row.tracks.length) * TL.trackH + TL.gap;
    y += row.h;
    row.index = [indexed(row.turns), ...row.tracks.map((t) => indexed(t.spans))];
  }
  tl.rows = rows;
  tl.rowOf = rowOf;
  tl.height = y;
}

function indexed(spans) {
  const starts = new Float64Array(spans.length), reach = new Float64Array(spans.length);
  let max = -Infinity;
  spans.forEach((s, i) => { starts[i] = s.start_ms; max = Math.max(max, spanEnd(s)); reach[i] = max; });
  return { spans, starts, reach };
}

// The spans of one track that intersect [t0, t1], in start order.
function* visible(index, t0, t1) {
  let lo = 0, hi = index.reach.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (index.reach[mid] < t0) lo = mid + 1; else hi = mid; }
  for (let i = lo; i < index.spans.length && index.starts[i] <= t1; i++) {
    if (spanEnd(index.spans[i]) >= t0) yield index.spans[i];
  }
}

function niceStep(ms) {
  const raw = ms / 8;
  const pow = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-3))));
  for (const m of [1, 2, 5, 10]) if (raw <= m * pow) return m * pow;
  return 10 * pow;
}

function formatOffset(ms, step) {
  if (step < 1000) return `+${(ms / 1000).toFixed(step < 10 ? 3 : step < 100 ? 2 : 1)} s`;
  if (step < 60000) return `+${(ms / 1000).toFixed(0)} s`;
  const m = Math.floor(ms / 60000), s = Math.round((ms % 60000) / 1000);
  return `+${m} min` + (s ? ` ${s} s` : "");
}

function tlCanvasSize() {
  const frame = $("tl-frame"), canvas = $("tl-canvas");
  const width = Math.max(frame.clientWidth, 300);
  const height = Math.min(TL.axisH + tl.height + 4, 560);
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
  }
  return { width, height, dpr };
}

function tlX(ms, width) { return TL.labelW + (ms - tl.t0) * (width - TL.labelW - 8) / (tl.t1 - tl.t0); }

function tlRender() {
  tl.frame = 0;
  if (!tl.rows.length) return;
  const started = performance.now();
  const { width, height, dpr } = tlCanvasSize();
  const ctx = $("tl-canvas").getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px system-ui, sans-serif";
  const maxScroll = Math.max(0, tl.height - (height - TL.axisH));
  tl.scrollY = Math.min(Math.max(tl.scrollY, 0), maxScroll);
  const top = TL.axisH - tl.scrollY;
  const t0 = tl.t0, t1 = tl.t1;
  const hits = [];
  let drawn = 0;
  // Lanes' background and labels.
  for (const row of tl.rows) {
    const y = top + row.y;
    if (y > height || y + row.h < TL.axisH) continue;
    ctx.fillStyle = row.depth % 2 ? "#f7f8fa" : "#fff";
    ctx.fillRect(0, y, width, row.h);
    ctx.strokeStyle = "#e3e6eb";
    ctx.beginPath(); ctx.moveTo(0, y + row.h - 0.5); ctx.lineTo(width, y + row.h - 0.5); ctx.stroke();
    ctx.fillStyle = "#1d1f23";
    const name = (row.lane.name || row.lane.lane_id);
    ctx.fillText((row.depth ? "↳ ".padStart(row.depth + 2, " ") : "") + name.slice(0, 22), 6 + row.depth * 6, y + 16);
    ctx.fillStyle = "#5a6270";
    ctx.fillText(`${row.lane.kind || "lane"} · ${row.lane.events} ev`, 6 + row.depth * 6, y + 29);
  }
  ctx.save();
  ctx.beginPath(); ctx.rect(TL.labelW, TL.axisH, width - TL.labelW, height - TL.axisH); ctx.clip();
  // Bars: the turns' thin strip, then each attempt track.
  for (const row of tl.rows) {
    const y = top + row.y;
    if (y > height || y + row.h < TL.axisH) continue;
    row.index.forEach((index, k) => {
      const isTurn = k === 0;
      const by = isTurn ? y + TL.gap : y + TL.gap + TL.turnH + 2 + (k - 1) * TL.trackH;
      const bh = isTurn ? TL.turnH : TL.trackH - 3;
      let lastPx = -1, lastColour = "";
      for (const s of visible(index, t0, t1)) {
        const x0 = Math.max(tlX(s.start_ms, width), TL.labelW - 2);
        const x1 = Math.min(tlX(spanEnd(s), width), width + 2);
        const w = Math.max(x1 - x0, 1.5);
        const state = spanState(s);
        const colour = isTurn ? TL_COLOURS.turn : TL_COLOURS[state];
        if (w < 2 && Math.floor(x0) === lastPx && colour === lastColour) continue; // same pixel: drawn already
        lastPx = Math.floor(x0); lastColour = colour;
        ctx.fillStyle = colour;
        ctx.fillRect(x0, by, w, bh);
        if (isTurn) {
          ctx.strokeStyle = s.outcome === "failed" ? TL_COLOURS.failed : TL_COLOURS.turnLine;
          ctx.strokeRect(x0 + 0.5, by + 0.5, Math.max(w - 1, 0.5), bh - 1);
        } else if (state === "open" && w > 6) { // unresolved: striped
          ctx.fillStyle = "#ffd8a8";
          for (let sx = x0 + 3; sx < x0 + w - 2; sx += 6) ctx.fillRect(sx, by, 2, bh);
        }
        if (!isTurn && s.retry_of && w > 14) {
          ctx.fillStyle = "#fff";
          ctx.fillText("↻" + (s.attempt_no ?? ""), x0 + 2, by + bh - 2);
        }
        if (tl.selected === s) {
          ctx.strokeStyle = "#f0a500"; ctx.lineWidth = 3;
          ctx.strokeRect(x0 - 1.5, by - 1.5, w + 3, bh + 3);
          ctx.lineWidth = 1;
        }
        hits.push([x0, by, w, bh, s]);
        drawn += 1;
      }
    });
  }
  // Retries: dashed from the end of the attempt retried to the retry's start.
  ctx.setLineDash([3, 3]);
  ctx.strokeStyle = TL_COLOURS.retry;
  for (const [x, y, , h, s] of hits) {
    const prior = s.retry_of && tl.byId.get(s.retry_of);
    const place = prior && tl.place(prior);
    if (!place) continue;
    const px = tlX(spanEnd(prior), width), py = top + place.y + h / 2;
    ctx.beginPath(); ctx.moveTo(px, py); ctx.lineTo(x, y + h / 2); ctx.stroke();
  }
  ctx.setLineDash([]);
  // Spawns: from the event a lane's first event points at, down to the lane.
  ctx.strokeStyle = ctx.fillStyle = TL_COLOURS.spawn;
  ctx.lineWidth = 2;
  for (const row of tl.rows) {
    const from = row.lane.spawned_from;
    const parent = from && tl.rowOf.get(from.lane_id);
    if (!parent || from.ms === null || from.ms < t0 || from.ms > t1) continue;
    const x = tlX(from.ms, width), y0 = top + parent.y + TL.gap, y1 = top + row.y + TL.gap;
    ctx.beginPath(); ctx.arc(x, y0, 3, 0, 2 * Math.PI); ctx.fill();
    ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y1); ctx.stroke();
    ctx.beginPath(); ctx.moveTo(x - 4, y1 - 6); ctx.lineTo(x, y1); ctx.lineTo(x + 4, y1 - 6); ctx.stroke();
  }
  ctx.lineWidth = 1;
  ctx.restore();
  // The time axis.
  ctx.fillStyle = "#f2f4f7";
  ctx.fillRect(0, 0, width, TL.axisH);
  ctx.fillStyle = "#5a6270";
  ctx.strokeStyle = "#dde1e7";
  const step = niceStep(t1 - t0);
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const x = tlX(t, width);
    ctx.beginPath(); ctx.moveTo(x + 0.5, TL.axisH - 6); ctx.lineTo(x + 0.5, height); ctx.stroke();
    ctx.fillText(formatOffset(t, step), x + 3, 16);
  }
  ctx.fillText("time since the first event", 6, 16);
  tl.hits = hits;
  tl.drawn = drawn;
  tl.renderMs = performance.now() - started;
  const frame = $("tl-frame");
  frame.dataset.drawn = String(drawn);
  frame.dataset.renderMs = tl.renderMs.toFixed(2);
  frame.dataset.t0 = String(Math.round(t0));
  frame.dataset.t1 = String(Math.round(t1));
  $("tl-window").textContent = `Showing ${formatMs(Math.round(t0))} to ${formatMs(Math.round(t1))} ` +
    `after the first event (${plural(drawn, "bar")} drawn of ${tl.spans.length}).`;
  tlList();
  tlKeepLink();
}

// Where a span's bar is (row y and track), for the retry lines.
tl.place = (s) => {
  const row = tl.rowOf && tl.rowOf.get(s.lane_id);
  if (!row) return null;
  if (s.kind === "turn") return { y: row.y + TL.gap };
  return { y: row.y + TL.gap + TL.turnH + 2 + (s.track || 0) * TL.trackH };
};

function tlDraw() { if (!tl.frame) tl.frame = requestAnimationFrame(tlRender); }

// The bars in view as a table (the timeline's text alternative), by start.
function tlList() {
  const inView = tl.hits.map((h) => h[4]).sort((a, b) => a.start_ms - b.start_ms);
  const body = $("tl-rows");
  body.textContent = "";
  for (const s of inView.slice(0, TL.listMax)) {
    const row = tl.rowOf.get(s.lane_id);
    const tr = el("tr", { "data-span": s.id, class: spanState(s) === "open" && s.kind === "attempt" ? "unresolved"
      : spanState(s) === "failed" ? "failed" : spanState(s) === "gone" ? "invalidated" : null });
    tr.append(cell(formatMs(s.start_ms)), cell(row ? row.lane.name || row.lane.lane_id : s.lane_id), cell(s.kind),
      cell(s.name), cell(s.kind === "attempt" ? `#${s.attempt_no ?? "?"}` + (s.retry_of ? " (retry)" : "") : ""),
      cell(describeOutcome(s), "outcome"), cell(s.end_ms === null ? "" : formatMs(s.end_ms - s.start_ms), "num"),
      el("td", { class: "num" }, eventLink(s.started_position)));
    body.append(tr);
  }
  $("tl-list-summary").textContent = inView.length > TL.listMax
    ? `${plural(inView.length, "bar")} in view; the first ${TL.listMax} are listed (zoom in for the others).`
    : `${plural(inView.length, "bar")} in view.`;
}

function describeOutcome(s) {
  if (s.invalidated) return `${s.outcome || "open"}, invalidated by a rewind`;
  if (s.outcome) return s.outcome;
  return s.kind === "attempt" ? "unresolved" : "open";
}

function describeSpan(s) {
  const row = tl.rowOf.get(s.lane_id);
  const lane = row ? row.lane.name || row.lane.lane_id : s.lane_id;
  const what = s.kind === "turn" ? s.name : `attempt #${s.attempt_no ?? "?"} of ${s.name}` +
    (s.retry_of ? " (a retry)" : "");
  const took = s.end_ms === null ? "still open" : formatMs(s.end_ms - s.start_ms);
  return `${what} on lane ${lane}: ${describeOutcome(s)}, ${took}, from ${formatMs(s.start_ms)}; ` +
    `event ${s.started_position}.`;
}

let tlLinkTimer = null;
function tlKeepLink() { // the window is in the link, so what a person sees can be shared
  clearTimeout(tlLinkTimer);
  tlLinkTimer = setTimeout(() => {
    if ($("view-timeline").hidden || !tl.id) return;
    const q = new URLSearchParams({ t0: String(Math.round(tl.t0)), t1: String(Math.round(tl.t1)) });
    history.replaceState(null, "", `#/session/${encodeURIComponent(tl.id)}/timeline?${q}`);
  }, 300);
}

function tlSetWindow(t0, t1) {
  const span = Math.max(t1 - t0, 1);
  const pad = Math.max(tl.end * 0.05, 1);
  const low = -pad, high = tl.end + pad;
  const width = Math.min(span, high - low);
  t0 = Math.min(Math.max(t0, low), high - width);
  tl.t0 = t0;
  tl.t1 = t0 + width;
  tlDraw();
}

function tlZoom(factor, at) {
  const centre = at ?? (tl.t0 + tl.t1) / 2;
  const w = Math.max((tl.t1 - tl.t0) * factor, 2);
  const f = (centre - tl.t0) / (tl.t1 - tl.t0);
  tlSetWindow(centre - f * w, centre - f * w + w);
}

function tlPan(fraction) {
  const w = tl.t1 - tl.t0;
  tlSetWindow(tl.t0 + w * fraction, tl.t1 + w * fraction);
}

function tlFit() {
  const pad = Math.max(tl.end * 0.01, 1);
  tlSetWindow(-pad, tl.end + pad);
}

function tlSelect(step) {
  const inView = tl.hits.map((h) => h[4]).sort((a, b) => a.start_ms - b.start_ms || a.started_position - b.started_position);
  if (!inView.length) return;
  let i = tl.selected ? inView.indexOf(tl.selected) : -1;
  i = i < 0 ? (step > 0 ? 0 : inView.length - 1) : Math.min(Math.max(i + step, 0), inView.length - 1);
  tl.selected = inView[i];
  setStatus($("tl-selected"), "Selected: " + describeSpan(tl.selected));
  tlDraw();
}

// The window a link names (t0, t1: ms after the first event), applied; false if none.
function tlWindowOf(params) {
  const t0 = Number(params.get("t0")), t1 = Number(params.get("t1"));
  if (!params.has("t0") || !params.has("t1") || !Number.isFinite(t0) || !Number.isFinite(t1) || t1 <= t0) {
    return false;
  }
  tlSetWindow(t0, t1);
  return true;
}

async function openTimeline(id, params) {
  tl.id = id;
  tl.lanes = []; tl.spans = []; tl.byId = new Map(); tl.rows = []; tl.hits = []; tl.selected = null; tl.complete = false;
  $("timeline-title").textContent = `Timeline of session ${id}`;
  for (const [link, sub] of [["timeline-session-link", ""], ["timeline-graph-link", "/graph"]]) {
    $(link).href = `#/session/${encodeURIComponent(id)}${sub}`;
  }
  setStatus($("tl-selected"), "");
  setStatus($("timeline-status"), `Loading the timeline of session ${id}…`);
  const path = `/api/v1/sessions/${encodeURIComponent(id)}/timeline`;
  const started = performance.now();
  let cursor = 0, pages = 0, first = true;
  try {
    for (;;) {
      const page = await api(path, { cursor, limit: TIMELINE_PAGE });
      if (tl.id !== id) return;
      pages += 1;
      tl.lanes = page.lanes;
      tl.end = Math.max(page.end_ms, 1);
      for (const s of page.spans) { tl.spans.push(s); tl.byId.set(s.id, s); }
      tlLayout();
      if (first) {
        first = false;
        if (!tlWindowOf(params)) tlFit();
      }
      tlDraw();
      if (!page.has_more) break;
      cursor = page.next_cursor;
      setStatus($("timeline-status"), `Loading: ${plural(tl.spans.length, "span")} so far…`);
    }
  } catch (err) {
    if (tl.id === id) setStatus($("timeline-status"), `Cannot load the timeline of ${id}: ` + describeError(err), true);
    return;
  }
  tl.complete = true;
  const attempts = tl.spans.filter((s) => s.kind === "attempt");
  const count = (state) => attempts.filter((s) => spanState(s) === state).length;
  const summary = `${plural(tl.lanes.length, "lane")}, ${plural(tl.spans.length - attempts.length, "turn")}, ` +
    `${plural(attempts.length, "attempt")} (${count("completed")} completed, ${count("failed")} failed, ` +
    `${count("open")} unresolved, ${count("gone")} invalidated, ${attempts.filter((s) => s.retry_of || (s.attempt_no || 1) > 1).length} retries), ` +
    `${formatMs(tl.end)} long`;
  $("tl-frame").setAttribute("aria-label", `Timeline of session ${id}: ${summary}`);
  $("tl-frame").dataset.loadMs = (performance.now() - started).toFixed(0);
  setStatus($("timeline-status"), `Session ${id}: ${summary}; ${plural(pages, "page")} read.`);
  tlDraw();
}

(function timelineControls() {
  const frame = $("tl-frame");
  $("tl-zoom-in").addEventListener("click", () => tlZoom(0.5));
  $("tl-zoom-out").addEventListener("click", () => tlZoom(2));
  $("tl-earlier").addEventListener("click", () => tlPan(-0.25));
  $("tl-later").addEventListener("click", () => tlPan(0.25));
  $("tl-fit").addEventListener("click", () => tlFit());
  const msAt = (clientX) => {
    const r = frame.getBoundingClientRect();
    const width = r.width;
    return tl.t0 + (clientX - r.left - TL.labelW) * (tl.t1 - tl.t0) / (width - TL.labelW - 8);
  };
  frame.addEventListener("wheel", (e) => {
    e.preventDefault();
    if (e.shiftKey) { tl.scrollY += e.deltaY; tlDraw(); return; }
    tlZoom(Math.exp(Math.max(Math.min(e.deltaY, 200), -200) / 300), msAt(e.clientX));
  }, { passive: false });
  frame.addEventListener("keydown", (e) => {
    const keys = {
      ArrowLeft: () => tlPan(-0.1), ArrowRight: () => tlPan(0.1),
      ArrowUp: () => { tl.scrollY -= 40; tlDraw(); }, ArrowDown: () => { tl.scrollY += 40; tlDraw(); },
      "+": () => tlZoom(0.5, tl.selected ? tl.selected.start_ms : undefined), "=": () => tlZoom(0.5),
      "-": () => tlZoom(2), "0": () => tlFit(),
      n: () => tlSelect(1), p: () => tlSelect(-1), N: () => tlSelect(1), P: () => tlSelect(-1),
      Enter: () => { if (tl.selected) location.hash = "#/event/" + tl.selected.started_position; },
      Escape: () => { tl.selected = null; setStatus($("tl-selected"), ""); tlDraw(); },
    };
    const action = keys[e.key];
    if (action && !e.ctrlKey && !e.metaKey && !e.altKey) { e.preventDefault(); action(); }
  });
  const hitAt = (e) => {
    const r = frame.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    for (let i = (tl.hits || []).length - 1; i >= 0; i--) {
      const [hx, hy, hw, hh, s] = tl.hits[i];
      if (x >= hx - 2 && x <= hx + hw + 2 && y >= hy && y <= hy + hh) return s;
    }
    return null;
  };
  frame.addEventListener("pointerdown", (e) => {
    tl.drag = { x: e.clientX, t0: tl.t0, t1: tl.t1, moved: false };
    frame.setPointerCapture(e.pointerId);
  });
  frame.addEventListener("pointermove", (e) => {
    if (!tl.drag) {
      const s = hitAt(e);
      frame.title = s ? describeSpan(s) : "";
      frame.style.cursor = s ? "pointer" : "";
      return;
    }
    const dx = e.clientX - tl.drag.x;
    if (Math.abs(dx) > 3) tl.drag.moved = true;
    if (!tl.drag.moved) return;
    frame.classList.add("dragging");
    const per = (tl.drag.t1 - tl.drag.t0) / (frame.clientWidth - TL.labelW - 8);
    tlSetWindow(tl.drag.t0 - dx * per, tl.drag.t1 - dx * per);
  });
  frame.addEventListener("pointerup", (e) => {
    const drag = tl.drag;
    tl.drag = null;
    frame.classList.remove("dragging");
    if (drag && !drag.moved) {
      const s = hitAt(e);
      if (s) location.hash = "#/event/" + s.started_position;
    }
  });
  window.addEventListener("resize", () => { if (!$("view-timeline").hidden) tlDraw(); });
})();

// -- the causal graph (#/session/<id>/graph) -----------------------------------------------------

// One page of …/causal-tree (GRAPH_PAGE nodes) drawn as SVG: a column per
// spine (lane), a row per event in position order; an edge from each
// event's cause (an arc within a spine, a purple fork across spines), the
// §2b diamonds (a sub-agent forked from an inference and its result
// recorded back as a sibling tool call: the join is dashed, the diamond
// shaded), rewinds dotted to their target, invalidated events greyed. The
// nodes are one Tab stop (roving tabindex): arrows walk the graph.
const GRAPH_PAGE = 500;
const G = { col: 170, row: 24, left: 24, top: 44, r: 6 };
const ROLE_COLOURS = { prompt: "#1098ad", inference: "#0b5cad", tool: "#e67700", other: "#868e96", rewind: "#c92a2a" };
const SPAWN_NAMES = new Set(["Agent", "Task"]);
const graph = { id: null, cursor: 0, history: [], tree: null, nodes: new Map(), focus: null };

// The spawn tool call(s) of each sub-agent spine whose first event is on
// this page (laneledger.history.causality.Graph._spawners_of, on the page).
function spawnersOf(tree, byPos, children) {
  const out = new Map();
  for (const spine of tree.spines) {
    const first = byPos.get(spine.first_position);
    if (!first) continue;
    const named = spine.spawned_by !== null ? byPos.get(spine.spawned_by) : null;
    if (named && named.lane_id !== spine.lane_id) { out.set(spine.lane_id, [named.position]); continue; }
    const parent = first.cause !== null ? byPos.get(first.cause) : null;
    if (!parent || parent.lane_id === spine.lane_id) continue;
    if (parent.role === "tool") { out.set(spine.lane_id, [parent.position]); continue; }
    if (parent.role !== "inference") continue;
    const siblings = (children.get(parent.position) || []).map((p) => byPos.get(p))
      .filter((n) => n.position > first.position && n.lane_id === parent.lane_id && n.role === "tool");
    const spawnNamed = siblings.filter((n) => SPAWN_NAMES.has(n.name));
    const found = (spawnNamed.length ? spawnNamed : siblings).map((n) => n.position);
    if (found.length) out.set(spine.lane_id, found);
  }
  return out;
}

async function openGraph(id, cursor = 0) {
  graph.id = id;
  $("graph-title").textContent = `Causal graph of session ${id}`;
  for (const [link, sub] of [["graph-session-link", ""], ["graph-timeline-link", "/timeline"]]) {
    $(link).href = `#/session/${encodeURIComponent(id)}${sub}`;
  }
  setStatus($("graph-status"), `Loading the causal graph of session ${id}…`);
  let tree;
  try {
    tree = await api(`/api/v1/sessions/${encodeURIComponent(id)}/causal-tree`, {
      cursor, limit: GRAPH_PAGE, exclude_invalidated: $("graph-exclude").checked ? "true" : "" });
  } catch (err) {
    if (graph.id === id) setStatus($("graph-status"), `Cannot load the causal graph of ${id}: ` + describeError(err), true);
    return;
  }
  if (graph.id !== id) return;
  graph.cursor = cursor;
  graph.tree = tree;
  if (!$("view-graph").hidden) { // the page is in the link
    history.replaceState(null, "", `#/session/${encodeURIComponent(id)}/graph` + (cursor ? `?cursor=${cursor}` : ""));
  }
  drawGraph(tree);
  $("graph-first").disabled = $("graph-prev").disabled = cursor === 0;
  $("graph-next").disabled = !tree.has_more;
  const nodes = tree.nodes;
  $("graph-page").textContent = nodes.length
    ? `Positions ${nodes[0].position}–${nodes[nodes.length - 1].position}` : "No nodes";
  setStatus($("graph-status"), `Session ${id} as of position ${tree.applied_position}: ` +
    `${plural(tree.spines.length, "spine")}, ${plural(tree.rewinds.length, "rewind")}; ` +
    `${plural(nodes.length, "node")} on this page${tree.has_more ? ", more on later pages" : ""}.`);
}

function drawGraph(tree) {
  const ns = "http://www.w3.org/2000/svg";
  const nodes = tree.nodes;
  const byPos = new Map(nodes.map((n) => [n.position, n]));
  const children = new Map();
  for (const n of nodes) {
    if (n.cause === null) continue;
    if (!children.has(n.cause)) children.set(n.cause, []);
    children.get(n.cause).push(n.position);
  }
  const spines = tree.spines.filter((s) => nodes.some((n) => n.lane_id === s.lane_id));
  for (const n of nodes) { // a lane that is not a spine (a rewind's lane with no other event)
    if (!spines.some((s) => s.lane_id === n.lane_id)) spines.push({ lane_id: n.lane_id, name: n.lane_id });
  }
  const colOf = new Map(spines.map((s, i) => [s.lane_id, i]));
  const rowOf = new Map(nodes.map((n, i) => [n.position, i]));
  const at = (n) => [G.left + colOf.get(n.lane_id) * G.col, G.top + rowOf.get(n.position) * G.row];
  const W = G.left + spines.length * G.col + 40, H = G.top + nodes.length * G.row + 20;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", String(W));
  svg.setAttribute("height", String(H));
  const add = (parent, tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    parent.append(node);
    return node;
  };
  const defs = add(svg, "defs", {});
  const marker = add(defs, "marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5",
    markerWidth: "6", markerHeight: "6", orient: "auto-start-reverse" });
  add(marker, "path", { d: "M0,0 L10,5 L0,10 z", fill: "#862e9c" });
  const spawners = spawnersOf(tree, byPos, children);
  const spawnCalls = new Set([...spawners.values()].flat());
  const lastOf = new Map();
  for (const n of nodes) if (n.role !== "rewind") lastOf.set(n.lane_id, n);
  // Spines and their names.
  spines.forEach((s, i) => {
    const x = G.left + i * G.col;
    const own = nodes.filter((n) => n.lane_id === s.lane_id);
    const name = s.name || s.lane_id;
    const head = add(svg, "text", { x: x - 8, y: 16, class: "lane" }, name.length > 21 ? name.slice(0, 20) + "…" : name);
    add(head, "title", {}, name);
    add(svg, "text", { x: x - 8, y: 30 }, `${s.kind || "lane"}${s.parent_lane_id ? " ↳" : ""}`);
    if (own.length > 1) {
      add(svg, "line", { class: "spine", x1: x, x2: x, y1: at(own[0])[1], y2: at(own[own.length - 1])[1] });
    }
  });
  let diamonds = 0, forks = 0;
  // The §2b diamonds: fork origin → sub-agent's first → its last → spawn call.
  for (const [lane, calls] of spawners) {
    const spine = tree.spines.find((s) => s.lane_id === lane);
    const first = byPos.get(spine.first_position), last = lastOf.get(lane);
    const origin = first && first.cause !== null ? byPos.get(first.cause) : null;
    for (const call of calls) {
      const target = byPos.get(call);
      if (!first || !last || !target) continue;
      const points = [origin || target, first, last, target].map((n) => at(n).join(",")).join(" ");
      add(svg, "polygon", { class: "diamond", points });
      const [x1, y1] = at(last), [x2, y2] = at(target);
      add(svg, "path", { class: "edge join" + (target.invalidated ? " gone" : ""), "marker-end": "url(#arrow)",
        d: `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2 + G.r},${y2 - G.r}` });
      diamonds += 1;
    }
  }
  // Edges from each node's cause.
  for (const n of nodes) {
    const [x2, y2] = at(n);
    if (n.cause === null) continue;
    const cause = byPos.get(n.cause);
    const gone = n.invalidated ? " gone" : "";
    if (!cause) { // on an earlier page
      add(svg, "path", { class: "edge" + gone, d: `M${x2},${y2 - 14} L${x2},${y2 - G.r}` });
      add(svg, "text", { x: x2 - 30, y: y2 - 8 }, `↑${n.cause}`);
      continue;
    }
    const [x1, y1] = at(cause);
    if (cause.lane_id === n.lane_id) {
      const k = 10 + Math.min(40, (y2 - y1) / 6);
      add(svg, "path", { class: "edge" + gone, d: `M${x1},${y1} C${x1 - k},${y1} ${x2 - k},${y2} ${x2},${y2}` });
    } else {
      forks += 1;
      const mid = (x1 + x2) / 2;
      add(svg, "path", { class: "edge fork" + gone, "marker-end": "url(#arrow)",
        d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2 - G.r - 1},${y2}` });
    }
  }
  // Rewinds, dotted to their target.
  for (const n of nodes.filter((n) => n.role === "rewind")) {
    const rewind = tree.rewinds.find((r) => r.position === n.position);
    const target = rewind && byPos.get(rewind.target_position);
    if (!target) continue;
    const [x1, y1] = at(n), [x2, y2] = at(target);
    add(svg, "path", { class: "edge rewind", d: `M${x1},${y1} C${x1 + 60},${y1} ${x2 + 60},${y2} ${x2 + G.r},${y2}` });
  }
  // Nodes, focusable, one Tab stop.
  graph.nodes = new Map();
  const list = $("graph-text");
  list.textContent = "";
  const laneName = (id) => { const s = spines.find((x) => x.lane_id === id); return s && s.name ? s.name : id; };
  nodes.forEach((n, i) => {
    const [x, y] = at(n);
    const spawn = spawnCalls.has(n.position);
    const cause = n.cause === null ? "a root" : `caused by ${n.cause}`;
    const label = `Event ${n.position}: ${n.role} ${n.name} on ${laneName(n.lane_id)}, ${cause}` +
      (spawn ? ", the spawn call a sub-agent returns to" : "") + (n.invalidated ? ", invalidated by a rewind" : "");
    const g = add(svg, "g", { class: "node" + (n.invalidated ? " invalidated" : ""), role: "link",
      tabindex: i === 0 ? "0" : "-1", "aria-label": label, "data-position": String(n.position) });
    const fill = ROLE_COLOURS[n.role] || ROLE_COLOURS.other;
    if (spawn) {
      add(g, "rect", { class: "mark", x: x - 7, y: y - 7, width: 14, height: 14, fill,
        stroke: "#862e9c", "stroke-width": 2, transform: `rotate(45 ${x} ${y})` });
    } else if (n.role === "rewind") {
      add(g, "rect", { class: "mark", x: x - 6, y: y - 6, width: 12, height: 12, fill, stroke: "#fff" });
    } else {
      add(g, "circle", { class: "mark", cx: x, cy: y, r: G.r, fill, stroke: "#fff", "stroke-width": 1.5 });
    }
    add(g, "text", { x: x + 11, y: y + 4 }, `${n.position} ${n.name}`.slice(0, 20));
    graph.nodes.set(n.position, g);
    list.append(el("li", { class: n.invalidated ? "invalidated" : null, value: String(n.position) },
      eventLink(n.position, `event ${n.position}`), ` ${n.role} ${n.name} on ${laneName(n.lane_id)}, ${cause}` +
      (spawn ? "; the spawn call the sub-agent's result joins (§2b)" : "") +
      (n.invalidated ? "; invalidated by a rewind" : "")));
  });
  const gone = nodes.filter((n) => n.invalidated).length;
  const summary = `Causal graph of session ${tree.session_id}, positions ` +
    (nodes.length ? `${nodes[0].position} to ${nodes[nodes.length - 1].position}` : "none") +
    `: ${plural(nodes.length, "event")} on ${plural(spines.length, "spine")}, ${plural(forks, "spawn fork")}, ` +
    `${plural(diamonds, "§2b diamond")}, ${plural(gone, "invalidated event")}`;
  svg.setAttribute("role", "group");
  svg.setAttribute("aria-roledescription", "causal graph");
  svg.setAttribute("aria-label", summary);
  svg.dataset.forks = String(forks);
  svg.dataset.diamonds = String(diamonds);
  const box = $("graph-box");
  box.textContent = "";
  box.append(svg);
  $("graph-caption").textContent = summary + ". The same as text below the legend.";
  graph.focus = nodes.length ? nodes[0].position : null;
  svg.addEventListener("keydown", graphKey);
  svg.addEventListener("click", (e) => {
    const g = e.target.closest(".node");
    if (g) location.hash = "#/event/" + g.dataset.position;
  });
  svg.addEventListener("focusin", (e) => {
    const g = e.target.closest(".node");
    if (g) graphFocus(Number(g.dataset.position), false);
  });
}

function graphFocus(position, move = true) {
  const g = graph.nodes.get(position);
  if (!g) return;
  const old = graph.nodes.get(graph.focus);
  if (old) old.setAttribute("tabindex", "-1");
  g.setAttribute("tabindex", "0");
  graph.focus = position;
  if (move) g.focus();
  setStatus($("graph-selected"), g.getAttribute("aria-label") + ".");
}

function graphKey(e) {
  const nodes = graph.tree ? graph.tree.nodes : [];
  const i = nodes.findIndex((n) => n.position === graph.focus);
  if (i < 0) return;
  const n = nodes[i];
  const moves = {
    ArrowDown: () => nodes[Math.min(i + 1, nodes.length - 1)].position,
    ArrowUp: () => nodes[Math.max(i - 1, 0)].position,
    ArrowLeft: () => (n.cause !== null && graph.nodes.has(n.cause) ? n.cause : null),
    ArrowRight: () => { const c = nodes.find((m) => m.cause === n.position); return c ? c.position : null; },
    Home: () => nodes[0].position, End: () => nodes[nodes.length - 1].position,
  };
  if (e.key === "Enter") { e.preventDefault(); location.hash = "#/event/" + n.position; return; }
  const move = moves[e.key];
  if (!move) return;
  e.preventDefault();
  const to = move();
  if (to !== null) graphFocus(to);
}

$("graph-first").addEventListener("click", () => { graph.history = []; openGraph(graph.id, 0); });
$("graph-next").addEventListener("click", () => {
  if (!graph.tree || !graph.tree.has_more) return;
  graph.history.push(graph.cursor);
  openGraph(graph.id, graph.tree.next_cursor);
});
$("graph-prev").addEventListener("click", () => openGraph(graph.id, graph.history.pop() ?? 0));
$("graph-exclude").addEventListener("change", () => { graph.history = []; openGraph(graph.id, 0); });

// -- routing: #/sessions?filters, #/tail?filters, #/session/<id>, #/event/<position>, #/costs ---

const VIEWS = ["sessions", "tail", "session", "timeline", "graph", "event", "costs"];
const SESSION_SUBVIEWS = { timeline: "timeline", graph: "graph" }; // #/session/<id>/<subview>

function route() {
  const hash = location.hash || "#/sessions";
  const [path, query] = hash.slice(1).split("?");
  const parts = path.split("/").filter(Boolean);
  let view = VIEWS.includes(parts[0]) && !SESSION_SUBVIEWS[parts[0]] ? parts[0] : "sessions";
  if (view === "session" && parts[1] && SESSION_SUBVIEWS[parts[2]]) view = SESSION_SUBVIEWS[parts[2]];
  for (const name of VIEWS) $("view-" + name).hidden = name !== view;
  const navView = SESSION_SUBVIEWS[view] ? "session" : view;
  for (const link of document.querySelectorAll("nav a[data-view]")) {
    if (link.dataset.view === navView) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (view === "timeline") {
    const id = decodeURIComponent(parts[1]);
    const params = new URLSearchParams(query || "");
    if (id !== tl.id || !tl.complete) openTimeline(id, params);
    else if (!tlWindowOf(params)) tlDraw();
  }
  if (view === "graph") {
    const id = decodeURIComponent(parts[1]);
    const cursor = /^[0-9]+$/.test(new URLSearchParams(query || "").get("cursor") || "")
      ? Number(new URLSearchParams(query).get("cursor")) : 0;
    if (id !== graph.id || !graph.tree || cursor !== graph.cursor) { graph.history = []; openGraph(id, cursor); }
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
