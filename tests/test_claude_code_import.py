"""The Claude Code importer against a real nats-server and sequencer: a
stream-json capture written from the documented format
(tests/fixtures/claude-code/session.jsonl: hooks before init, streaming
repeats, a failing tool, a sub-agent, task progress, a rate-limit line, a
partial-message line, an unknown line type) becomes a session that reads back
with the Korg spines; re-importing it is idempotent; a malformed line is a
typed error naming its line; the CLI does the same from a file and a pipe."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from msgspec import UNSET

from laneledger.compat.claudecode import ClaudeCodeImport
from laneledger.compat.claudecode_names import IMPORT_GUARANTEES
from laneledger.contract.errors import InvalidRequest, MalformedMessage
from laneledger.sdk.guarantees import AdapterGuarantees
from laneledger.sdk.spine import spawned_by, spine_role
from laneledger.services.checkpoint.recovery import unresolved_attempts
from laneledger.services.checkpoint.runread import read_run

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude-code"
CAPTURE = FIXTURES / "session.jsonl"
SESSION = "9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"
RUN = "5b8e1f0a-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
VERSION = "2.1.150"


async def import_capture(client, path: Path = CAPTURE, tenant: str = "acme"):
    importer = ClaudeCodeImport(client, tenant=tenant)
    return await importer.run((await asyncio.to_thread(path.read_bytes)).splitlines(keepends=True))


def spine_nodes(events, lane_id, role):
    return [e for e in events if e.lane_id == lane_id and spine_role(e.event_type, e.payload) == role]


async def test_a_capture_becomes_a_session_with_its_spines(client):
    summary = await import_capture(client)
    assert (summary.session_id, summary.run_id) == (SESSION, RUN)
    assert summary.dropped == {"stream_event": 1}
    assert summary.unresolved_tools == []
    run = await client.load_run(SESSION, RUN)
    events = run.events
    by_id = {e.id: e for e in events}
    lanes = {lane.name: lane for lane in run.lanes}
    assert set(lanes) == {"main", "sub-toolu_03TaskSpawn"}  # named by the full parent tool-use id
    main, sub = lanes["main"], lanes["sub-toolu_03TaskSpawn"]
    assert sub.kind == "subagent" and sub.parent_lane_id == main.id
    assert set(summary.lanes.values()) == {main.id, sub.id}

    # One actor per agent, named by the §2b convention (the sub-agent by the
    # last 8 characters of its parent tool-use id); the root prompt is the human's.
    view = await client.load_session(SESSION)
    assert view.tenant == "acme"
    main_actor = await client.ensure_actor(
        "acme",
        f"agent:claude-code/main@{VERSION}",
        "agent",
        attributes={"runtime": "claude-code", "version": VERSION},
    )
    sub_actor = await client.ensure_actor(
        "acme",
        f"agent:claude-code/sub-askSpawn@{VERSION}",
        "agent",
        attributes={"runtime": "claude-code", "version": VERSION},
    )
    human = await client.ensure_actor("acme", "human:unknown", "human")
    assert {e.actor_id for e in events if e.lane_id == main.id} == {main_actor.id, human.id}
    assert {e.actor_id for e in events if e.lane_id == sub.id} == {sub_actor.id}

    # The init line: the session's start, the run's start with the guarantees, a labelled root.
    main_events = [e for e in events if e.lane_id == main.id]
    assert [e.event_type for e in main_events[:4]] == [
        "session.started",
        "run.started",
        "turn.started",
        "context.prompt_composed",
    ]
    init = main_events[0].payload["claude_code"]
    assert init["claude_code_version"] == VERSION and init["model"] == "claude-sonnet-4-5-20250929"
    assert init["tools"][:2] == ["Task", "Bash"] and init["cwd"] == "/home/dev/project"
    assert AdapterGuarantees.from_payload(main_events[1].payload["adapter"]) == IMPORT_GUARANTEES
    root = main_events[3]
    assert root.payload["synthesized"] is True and "synthesized" in root.payload["label"]
    assert root.causation_id is UNSET  # the root of the session's causal tree
    assert root.actor_id == human.id
    assert {e.actor_id for e in main_events if e.id != root.id} == {main_actor.id}

    # Inferences, deduplicated by message id, linked in a list (§2a).
    requests = [e for e in spine_nodes(events, main.id, "inference") if e.event_type == "attempt.requested"]
    inferences = [e for e in spine_nodes(events, main.id, "inference") if e.event_type == "attempt.completed"]
    assert [e.payload["message_id"] for e in inferences] == [
        "msg_01A",
        "msg_02B",
        "msg_03C",
        "msg_04D",
        "msg_05E",
    ]
    assert requests[0].causation_id == root.id
    for previous, request in zip(inferences, requests[1:], strict=False):  # the first has no previous
        assert request.causation_id == previous.id
    first = inferences[0].payload["outcome"]
    assert first["text"] == "Let me look at the failing test."  # the repeated line counted once
    assert first["thinking"].startswith("The test expects add(2, 2) == 5")
    assert first["output_tokens"] == 96 and first["cache_write_tokens"] == 5120
    assert first["tool_uses"] == ["toolu_01Read"]

    # Tool calls hang off the inference that asked for them, with success and duration.
    tools = {
        e.payload["name"]: e
        for e in events
        if e.event_type != "attempt.requested" and spine_role(e.event_type, e.payload) == "tool_call"
    }
    tool_requests = {
        e.payload["name"]: e
        for e in events
        if e.event_type == "attempt.requested" and spine_role(e.event_type, e.payload) == "tool_call"
    }
    assert set(tools) == set(tool_requests) == {"Read", "Bash", "Task", "Grep", "Edit"}
    assert tool_requests["Read"].causation_id == inferences[0].id
    assert tool_requests["Task"].causation_id == inferences[2].id
    assert tools["Read"].event_type == "attempt.completed" and tools["Read"].payload["success"] is True
    assert tools["Bash"].event_type == "attempt.failed" and tools["Bash"].payload["success"] is False
    assert "Exit code 1" in tools["Bash"].payload["error"]["message"]
    assert tools["Grep"].payload["duration_ms"] == 37 and tools["Task"].payload["duration_ms"] == 4210
    for name, done in tools.items():
        assert (
            done.causation_id == tool_requests[name].id and done.subject_id == tool_requests[name].subject_id
        )
    assert tools["Grep"].lane_id == sub.id and tools["Task"].lane_id == main.id
    assert unresolved_attempts(await read_run(client, run.session_id, run.run_id)) == []

    # The sub-agent (§2b): its first event is its prompt, caused by the
    # spawning inference; then its own spine.
    sub_events = [e for e in events if e.lane_id == sub.id]
    sub_prompt = sub_events[0]
    assert spine_role(sub_prompt.event_type, sub_prompt.payload) == "prompt"
    assert sub_prompt.payload == {
        "prompt_kind": "subagent",
        "parent_tool_use_id": "toolu_03TaskSpawn",
        "spawned_by": tool_requests["Task"].id,
        "synthesized": False,
        "text": "Find where add() is defined",
    }
    assert spawned_by(sub_prompt.event_type, sub_prompt.payload) == tool_requests["Task"].id
    assert sub_prompt.causation_id == inferences[2].id
    sub_requests = [
        e for e in spine_nodes(events, sub.id, "inference") if e.event_type == "attempt.requested"
    ]
    sub_inferences = [
        e for e in spine_nodes(events, sub.id, "inference") if e.event_type == "attempt.completed"
    ]
    assert [e.payload["model"] for e in sub_inferences] == ["claude-haiku-4-5-20251001"] * 2
    assert sub_requests[0].causation_id == sub_prompt.id
    assert sub_requests[1].causation_id == sub_inferences[0].id
    assert tool_requests["Grep"].causation_id == sub_inferences[0].id
    # Its turn ends when the Task call returns: last on its lane, before the call's result.
    ended = sub_events[-1]
    assert ended.event_type == "turn.completed" and ended.subject_id == sub_events[2].subject_id
    assert ended.causation_id == sub_inferences[-1].id and ended.position < tools["Task"].position

    # The result line: the run's completion with cost, turns and duration; cost per model.
    [completed] = [e for e in events if e.event_type == "run.completed"]
    assert completed.payload["total_cost_usd"] == "0.0712345"
    assert completed.payload["num_turns"] == 6 and completed.payload["duration_ms"] == 23817
    assert completed.causation_id == inferences[-1].id
    costs = {e.payload["model"]: e.payload for e in events if e.event_type == "cost.recorded"}
    assert costs["claude-sonnet-4-5-20250929"]["amount"] == "0.0651234"
    assert costs["claude-haiku-4-5-20251001"]["amount"] == "0.0061111"
    assert costs["claude-haiku-4-5-20251001"]["input_tokens"] == 1200

    # Kept as namespaced extensions, with the line as it came; the hooks
    # before init are not lost either.
    extensions = [e for e in events if e.event_type.startswith("ext.claude_code.")]
    kinds = [(e.event_type, e.lane_id) for e in extensions]
    assert kinds.count(("ext.claude_code.hook", main.id)) == 2
    assert ("ext.claude_code.task", main.id) in kinds  # the parent's view of its sub-agent
    assert ("ext.claude_code.rate_limit", main.id) in kinds
    [unknown] = [e for e in extensions if e.event_type == "ext.claude_code.unknown"]
    assert unknown.payload["line"]["type"] == "mystery_event" and unknown.payload["line_no"] == 21
    assert all(e.causation_id is UNSET or by_id[e.causation_id].session_id == SESSION for e in events)


async def test_importing_the_same_capture_again_changes_nothing(client):
    first = await import_capture(client)
    before = (await client.load_run(SESSION, RUN)).events
    again = await import_capture(client)
    after = (await client.load_run(SESSION, RUN)).events
    assert again.appends == first.appends and again.replayed == again.appends > 0
    assert first.replayed == 0
    assert [(e.id, e.entry_hash) for e in after] == [(e.id, e.entry_hash) for e in before]


async def test_a_malformed_line_is_a_typed_error_naming_its_line(client):
    with pytest.raises(MalformedMessage, match="bad JSON") as caught:
        await import_capture(client, FIXTURES / "malformed.jsonl")
    assert caught.value.details["line"] == 3
    # What came before the bad line is committed; the import stopped there.
    run = await client.load_run(SESSION, "6c9f2a1b-3d4e-4f5a-9b8c-1d2e3f4a5b6c")
    assert [e.event_type for e in run.events] == [
        "session.started",
        "run.started",
        "turn.started",
        "context.prompt_composed",
    ]
    with pytest.raises(InvalidRequest, match="not a JSON object") as caught:
        await ClaudeCodeImport(client, tenant="acme").run(["[1, 2]\n"])
    assert caught.value.details["line"] == 1
    with pytest.raises(MalformedMessage, match="NaN is not valid JSON") as caught:
        await ClaudeCodeImport(client, tenant="acme").run(["\n", '{"type": "x", "n": NaN}\n'])
    assert caught.value.details["line"] == 2
    with pytest.raises(InvalidRequest, match="no system/init line"):
        await ClaudeCodeImport(client, tenant="acme").run(['{"type": "assistant"}\n', "\n"])
    with pytest.raises(InvalidRequest, match="no system/init line in the first 1000") as caught:
        await ClaudeCodeImport(client, tenant="acme").run(
            ['{"type": "system", "subtype": "hook_started"}\n'] * 1001
        )
    assert caught.value.details["line"] == 1001


async def run_cli(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "laneledger.cli",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_the_cli_imports_a_pipe_then_the_file_idempotently(client, nats_server):
    code, out, err = await run_cli(
        "import",
        "claude-code",
        "-",
        "--nats",
        nats_server.url,
        "--tenant",
        "acme",
        "--json",
        stdin=CAPTURE.read_bytes(),
    )
    assert code == 0, err
    piped = json.loads(out)
    assert piped["session_id"] == SESSION and piped["replayed_appends"] == 0
    assert piped["dropped"]["stream_event"] == 1 and piped["line_types"]["mystery_event"] == 1
    code, out, err = await run_cli(
        "import", "claude-code", str(CAPTURE), "--nats", nats_server.url, "--tenant", "acme"
    )
    assert code == 0, err
    assert f"({piped['appends']} already committed)" in out
    code, out, err = await run_cli(
        "import",
        "claude-code",
        str(FIXTURES / "malformed.jsonl"),
        "--nats",
        nats_server.url,
        "--tenant",
        "acme",
    )
    assert code == 2 and "malformed.jsonl:3: bad JSON" in err and "Traceback" not in err


def test_derived_ids_are_deterministic_uuidv7_shaped_and_distinct():
    import uuid

    from laneledger.contract.ids import derived_id, is_uuid

    one = derived_id("claude-code", "s", "r", "event", "msg/1", at_ms=1_767_323_045_123)
    assert one == derived_id("claude-code", "s", "r", "event", "msg/1", at_ms=1_767_323_045_123)
    assert is_uuid(one) and uuid.UUID(one).version == 7 and uuid.UUID(one).variant == uuid.RFC_4122
    assert int(one.replace("-", "")[:12], 16) == 1_767_323_045_123  # the time field
    assert one != derived_id("claude-code", "s", "r", "event", "msg/2", at_ms=1_767_323_045_123)
    assert derived_id("a", "bc") != derived_id("ab", "c")  # parts are separated, not concatenated
