"""The event-to-span mapping (spec/otel.md): a demo session's span tree,
attributes and parents; ids derived from ledger ids; content as blob links."""

from __future__ import annotations

from typing import Any

import pytest
from otel_support import TAIL, TENANT, expected_tree, record_demo_run
from test_claude_code_import import FIXTURES, import_capture

from laneledger.cli import build_parser, main
from laneledger.cli.otel import HEADERS_ENV, headers_of
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import CommittedEvent, Lane
from laneledger.otel import ids
from laneledger.otel.history import map_history
from laneledger.otel.mapping import SpanMapper
from laneledger.sdk.client import LedgerClient

SESSION = "s-otel-map"


async def session_events(client: LedgerClient, session_id: str) -> dict[int, CommittedEvent]:
    structure = await client.load_structure(session_id, tenant=TENANT)
    events: dict[int, CommittedEvent] = {}
    for lane in structure.lanes:
        async for page in client.lane_pages(lane.id, tenant=TENANT):
            events.update({e.position: e for e in page.events})
    return events


async def test_a_demo_session_maps_to_its_span_tree(nats_server, client, checkpoint_service) -> None:
    await record_demo_run(nats_server.url, SESSION, "r1", seed=3)
    structure = await client.load_structure(SESSION, tenant=TENANT)
    found = await map_history(client, SpanMapper(tail_url=TAIL), SESSION, tenant=TENANT)
    spans = {s.span_id: s for s in found.spans}

    assert len(spans) == len(found.spans), "span ids are unique"
    assert {sid: (s.parent_span_id, s.name) for sid, s in spans.items()} == expected_tree(structure)
    assert found.open_spans == 0
    assert len(spans) == len(structure.attempts) + len(structure.lanes) > 10
    assert {s.trace_id for s in found.spans} == {ids.trace_id(TENANT, SESSION, "r1")}
    kinds = {s.name.split(" ")[0] for s in found.spans}
    assert kinds == {"invoke_agent", "chat", "execute_tool"}

    events = await session_events(client, SESSION)
    for span in found.spans:
        a = span.attributes
        start, end = events[int(a["laneledger.start.position"])], events[int(a["laneledger.end.position"])]
        assert a["laneledger.start.entry_hash"] == start.entry_hash
        assert a["laneledger.end.entry_hash"] == end.entry_hash
        assert a["laneledger.start.lane_seq"] == start.seq and a["laneledger.end.lane_seq"] == end.seq
        assert a["laneledger.start.event_url"] == f"{TAIL}/api/v1/events/{start.position}"
        assert a["gen_ai.conversation.id"] == SESSION and a["laneledger.tenant"] == TENANT
        assert span.start_ns == ids.timestamp_ns(start.occurred_at) <= span.end_ns
        assert "simulated reply" not in repr(a), "no content inline"
        if span.name.startswith("chat"):
            assert start.event_type == "attempt.requested" and end.event_type == "attempt.completed"
            assert a["gen_ai.operation.name"] == "chat"
            assert a["gen_ai.provider.name"] == "anthropic"
            assert a["gen_ai.request.model"] in ("claude-sonnet", "claude-haiku")
            assert a["gen_ai.usage.input_tokens"] == end.payload["outcome"]["input_tokens"]
            assert a["gen_ai.usage.output_tokens"] == end.payload["outcome"]["output_tokens"]
            assert span.kind == "client"
        elif span.name.startswith("execute_tool"):
            assert a["gen_ai.tool.name"] == start.payload["name"]
            assert a["gen_ai.tool.call.id"] == start.subject_id
            failed = end.event_type == "attempt.failed"
            assert (span.status == "error") is failed
            if failed:
                error = end.payload["error"]
                assert a["error.type"] == error.get("code", error["type"])
        elif span.parent_span_id is None:
            assert start.event_type == "run.started" and end.event_type == "run.completed"
            assert span.end_position == end.position
        else:  # a sub-agent's lane: ended with its run
            assert a["laneledger.lane_kind"] == "subagent"
            assert span.end_position > end.position
    failed_tools = [s for s in found.spans if s.status == "error"]
    assert len(failed_tools) >= 2, "turn 1 has a read that failed once and a write that failed"

    again = await map_history(client, SpanMapper(tail_url=TAIL), SESSION, tenant=TENANT)
    assert again.spans == found.spans, "the same ledger maps to the same spans, ids and all"


def committed(
    position: int, event_type: str, subject: str, payload: dict[str, Any], **fields: Any
) -> CommittedEvent:
    base: dict[str, Any] = {
        "schema_version": "1.0",
        "id": f"e{position}",
        "lane_id": "lane-main",
        "subject_id": subject,
        "event_type": event_type,
        "actor_id": "agent-1",
        "occurred_at": f"2026-01-01T00:00:0{position}.123456789Z",
        "payload": payload,
        "extensions": {},
        "tenant": "t1",
        "session_id": "s1",
        "run_id": "r1",
        "seq": position,
        "position": position,
        "append_id": f"a{position}",
        "committed_at": "2026-01-01T00:00:09Z",
        "prev_hash": "0" * 64,
        "entry_hash": f"{position:064x}",
    }
    return CommittedEvent(**{**base, **fields})


def test_content_is_linked_not_copied_and_a_failure_is_an_error() -> None:
    digest = "ab" * 32
    mapper = SpanMapper(tail_url="https://tail.example/")
    mapper.add_lane(
        Lane(id="lane-main", tenant="t1", session_id="s1", run_id="r1", name="main", created_at="x")
    )
    tool = {"action_type": "tool_call", "name": "Bash", "tool_use_id": "toolu_1", "attempt_no": 1}
    events = [
        committed(1, "run.started", "r1", {}),
        committed(
            2,
            "attempt.requested",
            "att-1",
            {**tool, "input": {"_ref": f"sha256:{digest}", "size_bytes": 5000}},
        ),
        committed(
            3, "attempt.failed", "att-1", {**tool, "error": {"code": "tool_error", "message": "exit 1"}}
        ),
        committed(4, "run.failed", "r1", {"error": {"code": "gave_up"}}),
    ]
    spans = [span for event in events for span in mapper.feed(event)]
    tool_span, run_span = spans
    assert tool_span.name == "execute_tool Bash" and tool_span.attributes["gen_ai.tool.call.id"] == "toolu_1"
    assert tool_span.attributes["laneledger.start.content"] == [
        f"https://tail.example/api/v1/blobs/{digest}?tenant=t1"
    ]
    assert "laneledger.end.content" not in tool_span.attributes
    assert (tool_span.status, tool_span.status_message) == ("error", "exit 1")
    assert tool_span.attributes["error.type"] == "tool_error"
    assert tool_span.parent_span_id == run_span.span_id == ids.run_span_id("t1", "s1", "r1")
    assert tool_span.start_ns == 1767225602123456789  # every digit of the fraction, to the nanosecond
    assert run_span.status == "error" and run_span.attributes["error.type"] == "gave_up"
    assert mapper.open_spans == 0
    assert mapper.feed(committed(5, "attempt.completed", "att-9", tool)) == [], "no request seen: no span"


def test_ids_are_derived_from_ledger_ids() -> None:
    assert ids.trace_id("t1", "s1", "r1") == ids.trace_id("t1", "s1", "r1")
    assert ids.trace_id("t1", "s1", "r1") != ids.trace_id("t2", "s1", "r1"), "ids are each tenant's own"
    assert ids.trace_id("t1", "s1", "r1") < 2**128 and ids.attempt_span_id("t1", "a") < 2**64
    # No two inputs share bytes: a separator inside an id does not collide.
    assert ids.trace_id("a", "b\x00c", "d") != ids.trace_id("a", "b", "c\x00d")
    assert ids.lane_span_id("t1", "x") != ids.attempt_span_id("t1", "x")
    with pytest.raises(InvalidRequest, match="RFC 3339"):
        ids.timestamp_ns("yesterday")
    assert ids.timestamp_ns("2026-01-01T01:00:00+01:00") == ids.timestamp_ns("2026-01-01T00:00:00Z")


async def test_a_claude_code_capture_links_each_sub_agent_to_its_spawning_tool_call(client) -> None:
    summary = await import_capture(client, FIXTURES / "parallel-subagents.jsonl")
    found = await map_history(client, SpanMapper(tail_url=TAIL), summary.session_id, tenant="acme")
    spans = {s.span_id: s for s in found.spans}
    subagents = [s for s in found.spans if s.attributes.get("laneledger.lane_kind") == "subagent"]
    assert len(subagents) == 3, "two parallel sub-agents and a nested one"
    for sub in subagents:
        spawner = spans[sub.parent_span_id]  # type: ignore[index]
        assert spawner.name.startswith("execute_tool ")
        # Claude Code names a sub-agent's lane after the tool use that spawned it.
        assert sub.name == f"invoke_agent sub-{spawner.attributes['gen_ai.tool.call.id']}"
        assert spawner.trace_id == sub.trace_id
    # The nested one was spawned by a tool call made inside another sub-agent.
    sub_ids = {s.span_id for s in subagents}
    inside = [s for s in subagents if spans[s.parent_span_id].parent_span_id in sub_ids]  # type: ignore[index]
    assert len(inside) == 1
    chats = [s for s in found.spans if s.name.startswith("chat ")]
    assert chats and all(s.attributes["gen_ai.request.model"] for s in chats)


def test_headers_come_from_the_flags_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HEADERS_ENV, "Authorization=Basic cGs6c2s=, x-langfuse-ingestion-version=4")
    args = build_parser().parse_args(
        ["otel", "export", "--live", "--header", "x-langfuse-ingestion-version=5"]
    )
    assert headers_of(args) == {"Authorization": "Basic cGs6c2s=", "x-langfuse-ingestion-version": "5"}
    monkeypatch.setenv(HEADERS_ENV, "no-equals-sign")
    with pytest.raises(ValueError, match=HEADERS_ENV):
        headers_of(args)
    assert main(["otel", "export", "--live"]) == 2, "a malformed header variable is a usage error"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["otel", "export", "--live", "--header", "=x"])
