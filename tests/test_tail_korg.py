"""Korg compatibility: POST /api/agent/tool-call (the AgentToolCall append
shape, through the sequencer) and GET /api/journal (NDJSON envelopes)."""

from __future__ import annotations

import hashlib
import json

import msgspec
import pytest
from tail_support import fill, new_lane, wait_applied

pytestmark = pytest.mark.timeout(90)

MAIN = "agent:claude-code/main@2.1"
SUB = "agent:claude-code/sub-0f3a9c21@2.1"


def call(source: str, tool: str, triggered_by: int | None = None, **extra) -> dict:
    body = {
        "source_agent": source,
        "tool_name": tool,
        "args": {"file_path": "src/app.py"},
        "result": {"success": True},
        "success": True,
        "duration_ms": 142,
        "triggered_by": triggered_by,
        "payload_refs": [],
    }
    body.update(extra)
    return body


async def post(tail, body) -> dict:
    answer = await tail.api.post("/api/agent/tool-call", json_body=body)
    assert answer.status == 200, answer.body
    return answer.json()


async def test_tool_calls_become_ledger_events_with_causation(client, start_tail):
    tail = await start_tail()
    # Korg §2b worked example: a main spine and a sub-agent spine.
    root = await post(tail, {**call("human:dusk", "user_prompt"), "event_type": "AgentToolCall"})
    llm = await post(tail, call(MAIN, "llm_inference", root["seq_id"]))
    sub_prompt = await post(tail, call(SUB, "user_prompt", llm["seq_id"]))
    sub_llm = await post(tail, call(SUB, "llm_inference", sub_prompt["seq_id"]))
    read = await post(tail, call(SUB, "Read", sub_llm["seq_id"]))
    spawn = await post(tail, call(MAIN, "Agent", llm["seq_id"]))
    calls = [root, llm, sub_prompt, sub_llm, read, spawn]
    assert [c["seq_id"] for c in calls] == sorted(c["seq_id"] for c in calls)
    assert all(c["session_id"] == "korg" for c in calls)
    # One lane per source agent; seq_id is the ledger position.
    assert len({c["lane_id"] for c in calls}) == 3
    assert [c["lane_seq"] for c in (llm, spawn)] == [1, 2]
    await wait_applied(tail.service, spawn["seq_id"])
    session = await client.load_session("korg")
    assert session.tenant == "korg"
    by_position = {e.position: e for e in session.events}
    parents = {
        llm["seq_id"]: root,
        sub_prompt["seq_id"]: llm,
        sub_llm["seq_id"]: sub_prompt,
        read["seq_id"]: sub_llm,
        spawn["seq_id"]: llm,
    }
    for c in calls:
        event = by_position[c["seq_id"]]
        assert event.id == c["event_id"] and event.entry_hash == c["entry_hash"]
        assert event.event_type == "ext.korg.agent_tool_call"
        parent = parents.get(c["seq_id"])
        if parent is None:
            assert event.causation_id is msgspec.UNSET
            assert event.payload["triggered_by"] is None
        else:
            assert event.causation_id == parent["event_id"]
            assert event.payload["triggered_by"] == parent["seq_id"]
    lanes = {lane.name: lane for lane in session.lanes}
    assert lanes[SUB].kind == "subagent" and lanes[MAIN].kind == "main"
    actor = await client.ensure_actor("korg", SUB, "agent", display_name=SUB)
    assert by_position[read["seq_id"]].actor_id == actor.id


async def test_a_chain_posted_back_to_back(client, start_tail):
    tail = await start_tail()
    previous = None
    for n in range(15):
        answer = await post(tail, call(MAIN, f"step-{n}", previous))
        previous = answer["seq_id"]
    journal = await tail.api.get("/api/journal")
    lines = [json.loads(line) for line in journal.body.splitlines()]
    assert [line["metadata"]["triggered_by"] for line in lines] == [None] + [
        line["seq_id"] for line in lines[:-1]
    ]


async def test_triggered_by_must_name_an_existing_earlier_event(client, actor, start_tail):
    tail = await start_tail()
    first = await post(tail, call(MAIN, "user_prompt"))
    lane = await new_lane(client, actor, "elsewhere")
    (foreign,) = await fill(client, lane, actor, 1)
    await wait_applied(tail.service, foreign)
    cases = [(first["seq_id"] + 1000, "unknown"), (0, "unknown"), (-3, "unknown"), (foreign, "other_session")]
    for triggered_by, reason in cases:
        answer = await tail.api.post("/api/agent/tool-call", json_body=call(MAIN, "Edit", triggered_by))
        assert answer.status == 422, triggered_by
        error = answer.error
        assert error["code"] == "causation_violation" and error["retryable"] is False
        assert error["details"]["triggered_by"] == triggered_by
        assert error["details"]["reason"] == reason
    # Nothing was appended by the refusals.
    journal = await tail.api.get("/api/journal")
    assert len(journal.body.splitlines()) == 1


async def test_bad_bodies_are_refused_with_the_field(client, start_tail):
    tail = await start_tail()
    cases = [
        ({k: v for k, v in call(MAIN, "Edit").items() if k != "tool_name"}, "$", "invalid_request"),
        ({**call(MAIN, "Edit"), "colour": "blue"}, "$", "invalid_request"),
        (call("robot:r2d2", "Edit"), "$.source_agent", "invalid_request"),
        (call(MAIN, "Edit", duration_ms=-1), "$.duration_ms", "invalid_request"),
        ({**call(MAIN, "Edit"), "event_type": "SomethingElse"}, "$.event_type", "invalid_request"),
        (call(MAIN, "Edit", args=[1, 2]), "$.args", "invalid_request"),
    ]
    for body, path, code in cases:
        answer = await tail.api.post("/api/agent/tool-call", json_body=body)
        assert answer.status == 400, body
        assert answer.error["code"] == code and answer.error["details"]["path"] == path, body
    malformed = await tail.api.post(
        "/api/agent/tool-call", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert malformed.status == 400 and malformed.error["code"] == "malformed_message"
    # Server-derived fields (Korg §1.2.7) are ignored, not refused.
    ok = await post(
        tail,
        call(MAIN, "Edit", seq_id=7, event_id="x", actor_id="korg:api", recorded_at="2026-01-01T00:00:00Z"),
    )
    assert ok["seq_id"] != 7 and ok["event_id"] != "x"


async def test_journal_envelopes_cursor_limit_and_session(client, actor, start_tail):
    tail = await start_tail()
    root = await post(tail, call("human:dusk", "user_prompt"))
    lane = await new_lane(client, actor)
    await fill(client, lane, actor, 3)  # ordinary ledger events: not in the journal
    big = {"content": "x" * 10}
    # A descriptor names a blob the client stored first (Korg §7.3 blob-first).
    new_string = b"n" * 2048
    await (await client.blob_store()).put("korg", new_string)
    refs = [
        {
            "sha256": hashlib.sha256(new_string).hexdigest(),
            "size_bytes": 2048,
            "label": "Edit.args.new_string",
        }
    ]
    edit = await post(tail, call(MAIN, "Edit", root["seq_id"], result=big, payload_refs=refs))
    other = await post(tail, call(MAIN, "user_prompt", session_id="second"))
    await wait_applied(tail.service, other["seq_id"])

    answer = await tail.api.get("/api/journal")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in answer.body.splitlines()]
    assert [line["seq_id"] for line in lines] == [root["seq_id"], edit["seq_id"], other["seq_id"]]
    envelope = lines[1]
    assert envelope["schema_version"] == "1.0"
    meta, event = envelope["metadata"], envelope["event"]
    assert meta["seq_id"] == edit["seq_id"] and meta["triggered_by"] == root["seq_id"]
    assert meta["causation_id"] == root["event_id"] and meta["event_id"] == edit["event_id"]
    assert meta["actor_id"] == "korg:api" and meta["ledger_hash"] == edit["entry_hash"]
    assert meta["parent_hash"] is None  # first event of its lane: genesis
    assert meta["session_id"] == "korg" and meta["rewind_of"] is None
    assert meta["payload_refs"] == refs == event["payload_refs"]
    assert event == {
        "event_type": "AgentToolCall",
        "tool_name": "Edit",
        "source_agent": MAIN,
        "args": {"file_path": "src/app.py"},
        "result": big,
        "success": True,
        "duration_ms": 142,
        "timestamp": meta["recorded_at"],
        "payload_refs": refs,
    }

    page = await tail.api.get("/api/journal", params={"cursor": str(root["seq_id"]), "limit": "1"})
    assert [json.loads(line)["seq_id"] for line in page.body.splitlines()] == [edit["seq_id"]]
    second = await tail.api.get("/api/journal", params={"session_id": "second"})
    assert [json.loads(line)["seq_id"] for line in second.body.splitlines()] == [other["seq_id"]]
    none = await tail.api.get("/api/journal", params={"session_id": "nobody"})
    assert none.status == 200 and none.body == b""
