"""``GET /``: a one-page console over the tail's own API: a live, filterable
view of the committed stream (EventSource on ``/api/v1/events``, which
resumes by itself with Last-Event-ID) and a chain-verification button.
``/?session_id=…`` (any filter) fills the form and starts tailing.
No external resources; the page is a constant so a wheel install carries it."""

from __future__ import annotations

from aiohttp import web

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>laneledger tail</title>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:1em;color:#222}
form{display:flex;flex-wrap:wrap;gap:.5em;align-items:end;margin-bottom:.6em}
label{display:flex;flex-direction:column;font-size:11px;color:#555}
input{font:12px monospace;width:12em}
table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #eee;padding:2px 6px;text-align:left;font:12px monospace;
      white-space:nowrap;overflow:hidden;text-overflow:ellipsis;max-width:28em}
#status{margin:.4em 0;color:#555}
</style></head><body>
<h1 style="font-size:16px">laneledger tail</h1>
<form id="f">
 <label>tenant<input name="tenant"></label><label>session_id<input name="session_id"></label>
 <label>run_id<input name="run_id"></label><label>lane_id<input name="lane_id"></label>
 <label>actor_id<input name="actor_id"></label>
 <label>event_type (prefix)<input name="event_type"></label>
 <label>from_position<input name="from_position" value="0"></label>
 <button>tail</button><button type="button" id="verify">verify</button>
</form>
<div id="status">idle</div>
<table><thead><tr><th>position</th><th>committed_at</th><th>event_type</th><th>session / run</th>
<th>lane:seq</th><th>actor</th><th>payload</th></tr></thead><tbody id="rows"></tbody></table>
<script>
const MAX_ROWS = 500, rows = document.getElementById("rows"), status = document.getElementById("status");
let source = null, seen = 0;
function cell(tr, text) { const td = tr.insertCell(); td.textContent = text; td.title = text; }
document.getElementById("f").onsubmit = (e) => {
  e.preventDefault();
  if (source) source.close();
  rows.textContent = ""; seen = 0;
  const q = new URLSearchParams();
  for (const [k, v] of new FormData(e.target)) if (v !== "") q.set(k, v);
  source = new EventSource("/api/v1/events?" + q);
  source.onopen = () => { status.textContent = "live"; };
  source.onerror = () => { status.textContent = "reconnecting (resumes after the last position)"; };
  source.addEventListener("ledger-event", (m) => {
    const ev = JSON.parse(m.data), tr = rows.insertRow(0);
    cell(tr, ev.position); cell(tr, ev.committed_at); cell(tr, ev.event_type);
    cell(tr, ev.session_id + " / " + ev.run_id); cell(tr, ev.lane_id + ":" + ev.seq);
    cell(tr, ev.actor_id); cell(tr, JSON.stringify(ev.payload));
    seen += 1; status.textContent = "live, " + seen + " events";
    while (rows.rows.length > MAX_ROWS) rows.deleteRow(-1);
  });
  source.addEventListener("end", (m) => {
    source.close(); status.textContent = "ended: " + m.data;
  });
};
// A link with filters (/?session_id=...) fills the form and starts tailing.
const given = new URLSearchParams(location.search), form = document.getElementById("f");
for (const [k, v] of given) if (form.elements[k]) form.elements[k].value = v;
if ([...given].length) form.requestSubmit();
document.getElementById("verify").onclick = async () => {
  const q = new URLSearchParams(), form = new FormData(document.getElementById("f"));
  for (const k of ["lane_id", "session_id"]) if (form.get(k)) { q.set(k, form.get(k)); break; }
  const report = await (await fetch("/api/v1/verify?" + q)).json();
  status.textContent = report.error ? "verify: " + report.error.message
    : "verify " + report.scope + ": " + (report.intact ? "intact, " + report.events + " events"
    : "FAULT " + JSON.stringify(report.fault));
};
</script></body></html>
"""


def console_route() -> web.RouteDef:
    async def console(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    return web.get("/", console, name="console")
