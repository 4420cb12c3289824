"""The tail's OpenAPI document: the answers of every operation validate
against it, over the real stream (``TailAPI`` checks every answer of every
tail test); that it is valid, served and names exactly the routes served:
test_tail_openapi_document.py, in-process."""

from __future__ import annotations

import hashlib

import pytest
from tail_support import fill, new_lane, wait_applied, wait_ready

pytestmark = pytest.mark.timeout(90)


async def test_every_operation_answers_as_documented(client, actor, start_tail, tmp_path):
    tail = await start_tail()
    api = tail.api
    lane = await new_lane(client, actor)
    turn = await client.create_turn(lane.id, 1)
    action = await client.create_action(
        lane.id, turn.id, "tool_call", "shell", effect="write", idempotency="none"
    )
    attempt = await client.create_attempt(lane.id, action.id, 1)
    positions = await fill(client, lane, actor, 3)
    receipt = await client.append(
        lane,
        3,
        [
            {**_event(lane, actor, "attempt.requested", attempt.id)},
            {**_event(lane, actor, "run.completed", "r1")},
        ],
    )
    korg = await tail.ingest.post(  # Korg's writes are the ingest's; the tail reads them
        "/api/agent/tool-call",
        json_body={
            "source_agent": "agent:korgex@0.2.2",
            "tool_name": "user_prompt",
            "args": {},
            "result": {},
            "success": True,
            "duration_ms": 0,
        },
    )
    assert korg.status == 200
    await wait_applied(tail.service, korg.json()["seq_id"])
    await wait_ready(api)
    data = b'{"k":"v"}'
    digest = hashlib.sha256(data).hexdigest()
    await (await client.blob_store()).put("acme", data)

    # Each answer is checked against the document by TailAPI.
    expect = [
        ("/", {}, 200),
        ("/healthz", {}, 200),
        ("/readyz", {}, 200),
        ("/metrics", {}, 200),
        (f"/api/v1/events/{positions[0]}", {}, 200),
        (f"/api/v1/lanes/{lane.id}/events", {"limit": "2"}, 200),
        ("/api/v1/sessions/s1", {"direction": "backward"}, 200),
        ("/api/v1/sessions/s1/runs/r1", {}, 200),
        ("/api/v1/sessions/s1/runs/r1/inspection", {}, 200),
        ("/api/v1/sessions/s1/activity", {}, 200),
        ("/api/v1/costs", {"bucket_s": "60"}, 200),
        ("/api/v1/sessions", {"status": "running", "limit": "5"}, 200),
        ("/api/v1/sessions", {"status": "asleep"}, 400),
        (f"/api/v1/events/{positions[0]}/causation", {"limit": "3"}, 200),
        ("/api/v1/events/99999/causation", {}, 404),
        ("/console/app.js", {}, 200),
        ("/console/app.css", {}, 200),
        ("/console/nope.js", {}, 404),
        ("/api/v1/costs", {"bucket_s": "0"}, 400),
        ("/api/v1/sessions/s1/causal-tree", {"limit": "2"}, 200),
        ("/api/v1/sessions/s1/causal-tree", {"exclude_invalidated": "yes"}, 400),
        (f"/api/v1/blobs/{digest}", {"tenant": "acme"}, 200),
        ("/api/v1/verify", {}, 200),
        ("/api/v1/verify", {"lane_id": lane.id}, 200),
        ("/api/journal", {}, 200),
        ("/api/korg", {}, 200),
        ("/api/korg/local/ledger/recent", {"limit": "2"}, 200),
        ("/api/korg/local/ledger/heads", {}, 200),
        ("/api/korg/local/agent/recent", {"source_agent": "agent:korgex@0.2.2"}, 200),
        (f"/api/korg/local/session/{korg.json()['seq_id']}", {}, 200),
        (f"/api/korg/local/session/{korg.json()['seq_id']}/summary", {}, 200),
        (f"/api/korg/local/session/{korg.json()['seq_id']}/events", {"limit": "501"}, 400),
        (f"/api/korg/local/event/{korg.json()['seq_id']}", {}, 200),
        ("/api/korg/nobody/ledger/recent", {}, 404),
        ("/api/v1/events/99999", {}, 404),
        ("/api/v1/sessions/none", {}, 404),
        ("/api/v1/lanes/x/events", {"bad": "1"}, 400),
    ]
    for path, params, status in expect:
        answer = await api.get(path, params=params)
        assert answer.status == status, (path, answer.body[:300])
    console = await api.get("/")
    assert b'<script src="/console/app.js"' in console.body
    script = await api.get("/console/app.js")
    assert b'new EventSource("/api/v1/events?"' in script.body  # the console tails the API
    inspection = (await api.get("/api/v1/sessions/s1/runs/r1/inspection")).json()
    assert inspection["terminal_events"][0]["position"] == receipt.positions[1]
    assert inspection["unresolved_attempts"][0]["attempt_id"] == attempt.id
    async with api.stream({"session_id": "s1", "run_id": "r1"}) as stream:
        frames = await stream.collect(10)  # event frames are checked against CommittedEvent
    assert frames[-1].event == "end"


def _event(lane, actor, event_type, subject):
    from laneledger.sdk.client import make_event

    return make_event(lane.id, event_type, actor_id=actor.id, subject_id=subject)
