"""Sub-agents of a Claude Code capture, against a real nats-server and
sequencer: tests/fixtures/claude-code/parallel-subagents.jsonl has the main
agent spawn two sub-agents in one message (their lines interleaved) and one
of them spawn a third (nested). Every Claude Code tool-use id starts
``toolu_01``, so ids alike in their first 8 characters must still make three
sub-agents: three lanes, three actors, three §2b spines, each turn completed
when its spawning call returns, a rewind of one invalidating nothing of the
others; the root prompt is the human's; the ledger passes ``laneledger
verify --db`` without an identity warning and exports as a korg-ledger-v1
journal that verifies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from korg_dogfood import dogfood
from msgspec import UNSET
from test_claude_code_import import FIXTURES, VERSION, import_capture, run_cli

from laneledger.compat.claudecode import ClaudeCodeImport
from laneledger.compat.claudecode_names import subagent_display_id
from laneledger.contract.errors import InvalidRequest
from laneledger.history.branching import rewind_session, session_graph
from laneledger.history.rewind import Invalidation
from laneledger.sdk.spine import spawned_by, spine_role

CAPTURE = FIXTURES / "parallel-subagents.jsonl"
SESSION = "3c1d2e4f-5a6b-4c7d-8e9f-1a2b3c4d5e6f"
RUN = "7d2e3f4a-6b5c-4d7e-9f8a-2b3c4d5e6f70"
A, B, C = "toolu_01HJvX8bQ2mNc4rT7yWzKp3a", "toolu_01Lq9sDf3GhJk5Zx7Cv2BnM8", "toolu_01Pw6eRt4YuIo2As8Df5Gh1j"
SUB_ACTORS = {  # the last 8 characters of each spawning tool-use id (spec/claude-code.md)
    A: f"agent:claude-code/sub-7yWzKp3a@{VERSION}",
    B: f"agent:claude-code/sub-7Cv2BnM8@{VERSION}",
    C: f"agent:claude-code/sub-8Df5Gh1j@{VERSION}",
}
ATTRIBUTES = {"runtime": "claude-code", "version": VERSION}


async def actor_id(client, key: str, kind: str = "agent") -> str:
    attributes = ATTRIBUTES if kind == "agent" else {}
    return (await client.ensure_actor("acme", key, kind, attributes=attributes)).id


def by_type(events, lane_id, event_type):
    return [e for e in events if e.lane_id == lane_id and e.event_type == event_type]


def inferences(events, lane_id):
    return [
        e
        for e in events
        if e.lane_id == lane_id
        and e.event_type == "attempt.completed"
        and spine_role(e.event_type, e.payload) == "inference"
    ]


def tool_event(events, event_type, tool_use_id):
    [found] = [
        e for e in events if e.event_type == event_type and e.payload.get("tool_use_id") == tool_use_id
    ]
    return found


async def test_parallel_and_nested_subagents_are_each_their_own_spine(client):
    summary = await import_capture(client, CAPTURE)
    assert summary.unresolved_tools == []
    run = await client.load_run(SESSION, RUN)
    events = run.events
    lanes = {lane.name: lane for lane in run.lanes}
    assert set(lanes) == {"main", f"sub-{A}", f"sub-{B}", f"sub-{C}"}
    main, sub = lanes["main"], {p: lanes[f"sub-{p}"] for p in (A, B, C)}
    assert {lane.kind for lane in sub.values()} == {"subagent"}
    assert sub[A].parent_lane_id == sub[B].parent_lane_id == main.id
    assert sub[C].parent_lane_id == sub[B].id  # nested: under the sub-agent that spawned it
    assert summary.lanes == {lane.name: lane.id for lane in run.lanes}

    # One actor per agent, each sub-agent's key distinct and of the §2b form.
    assert len(set(SUB_ACTORS.values())) == 3
    for ptuid, key in SUB_ACTORS.items():
        assert {e.actor_id for e in events if e.lane_id == sub[ptuid].id} == {await actor_id(client, key)}

    # The root prompt is the human's, every other main-lane event the agent's.
    human = await actor_id(client, "human:unknown", "human")
    main_agent = await actor_id(client, f"agent:claude-code/main@{VERSION}")
    [root] = [e for e in events if e.causation_id is UNSET and spine_role(e.event_type, e.payload)]
    assert root.lane_id == main.id and spine_role(root.event_type, root.payload) == "prompt"
    assert root.actor_id == human
    assert {e.actor_id for e in events if e.lane_id == main.id and e.id != root.id} == {main_agent}

    # §2b per sub-agent: its prompt first, caused by the spawning inference
    # and naming the spawning Task call; then its own §2a list.
    spawning = {A: inferences(events, main.id)[0], B: inferences(events, main.id)[0]}
    spawning[C] = inferences(events, sub[B].id)[0]
    texts = {A: "List the modules under src/", B: "Find the tests for add()", C: "Grep the tests for add("}
    for ptuid, lane in sub.items():
        mine = [e for e in events if e.lane_id == lane.id]
        prompt = mine[0]
        request = tool_event(events, "attempt.requested", ptuid)
        assert request.payload["name"] == "Task" and request.causation_id == spawning[ptuid].id
        assert prompt.payload == {
            "prompt_kind": "subagent",
            "parent_tool_use_id": ptuid,
            "spawned_by": request.id,
            "synthesized": False,
            "text": texts[ptuid],
        }
        assert spawned_by(prompt.event_type, prompt.payload) == request.id
        assert prompt.causation_id == spawning[ptuid].id
        assert [e.event_type for e in mine[1:3]] == ["lane.created", "turn.started"]
        assert mine[1].payload["parent_tool_use_id"] == ptuid
        done = inferences(events, lane.id)
        requests = [
            e
            for e in mine
            if e.event_type == "attempt.requested" and spine_role(e.event_type, e.payload) == "inference"
        ]
        assert len(done) == len(requests) == 2
        assert requests[0].causation_id == prompt.id and requests[1].causation_id == done[0].id

        # The turn completes when the spawning call returns, just before its result.
        [started] = by_type(events, lane.id, "turn.started")
        [completed] = by_type(events, lane.id, "turn.completed")
        assert completed.subject_id == started.subject_id and completed.causation_id == done[-1].id
        result = tool_event(events, "attempt.completed", ptuid)
        assert result.causation_id == request.id and result.lane_id == request.lane_id
        assert result.position > completed.position
        assert by_type(events, lane.id, "turn.failed") == []
    assert tool_event(events, "attempt.completed", C).lane_id == sub[B].id

    # Lines of different agents interleave; each message stays on its agent.
    assert [e.payload["message_id"] for e in inferences(events, sub[A].id)] == ["msg_01SubA1", "msg_01SubA2"]
    assert [e.payload["message_id"] for e in inferences(events, sub[C].id)] == ["msg_01SubC1", "msg_01SubC2"]
    assert [e.payload["message_id"] for e in inferences(events, main.id)] == ["msg_01Main1", "msg_01Main2"]
    [main_done] = by_type(events, main.id, "turn.completed")
    assert main_done.causation_id == inferences(events, main.id)[-1].id


async def test_a_rewind_of_one_subagent_invalidates_nothing_of_another(client):
    await import_capture(client, CAPTURE)
    view = await client.load_session(SESSION)
    graph = session_graph(view)
    lane_of = {lane.name: lane.id for lane in view.lanes}
    sub = {p: lane_of[f"sub-{p}"] for p in (A, B, C)}
    position = {(e.event_type, e.payload.get("tool_use_id")): e.position for e in view.events}
    # Each sub-agent links to its own spawn call, not to its sibling's.
    for ptuid, lane in sub.items():
        assert graph.spawners[lane] == [position["attempt.requested", ptuid]]

    rewinder = await actor_id(client, "human:dusk", "human")
    glob_in_a = position["attempt.requested", "toolu_01Ga7mGlobSrcA9kq2Wz4Xc1"]
    rewound = await rewind_session(client, SESSION, glob_in_a, actor_id=rewinder, reason="redo the survey")
    gone = Invalidation([rewound.payload])
    assert not any(p in gone for p in graph.spines[sub[B]] + graph.spines[sub[C]])
    assert position["attempt.completed", B] not in gone and position["attempt.completed", C] not in gone
    assert all(p in gone for p in graph.spines[sub[A]] if p > glob_in_a)
    assert position["attempt.completed", A] in gone  # rule 4: A's return value
    later = [e.position for e in view.events if e.payload.get("message_id") == "msg_01Main2"]
    assert len(later) == 2 and all(p in gone for p in later)  # and the main inference that consumed it

    # A rewind inside the nested sub-agent reaches its parent sub-agent and
    # the main agent, never the sibling.
    grep_in_c = position["attempt.requested", "toolu_01Gr3pTestsC5vB8nM2kL7"]
    rewound = await rewind_session(client, SESSION, grep_in_c, actor_id=rewinder, dry_run=True)
    gone = Invalidation([rewound.payload])
    assert not any(p in gone for p in graph.spines[sub[A]])
    assert position["attempt.completed", A] not in gone
    assert position["attempt.completed", C] in gone and position["attempt.completed", B] in gone
    [b_done] = [e.position for e in view.events if e.lane_id == sub[B] and e.event_type == "turn.completed"]
    assert b_done in gone and all(p in gone for p in later)


async def test_importing_the_same_capture_again_changes_nothing(client):
    first = await import_capture(client, CAPTURE)
    before = (await client.load_session(SESSION)).events
    again = await import_capture(client, CAPTURE)
    after = (await client.load_session(SESSION)).events
    assert first.replayed == 0 and again.replayed == again.appends == first.appends > 0
    assert again.lanes == first.lanes
    assert [(e.id, e.entry_hash) for e in after] == [(e.id, e.entry_hash) for e in before]


async def test_the_import_verifies_and_exports_as_a_verifiable_korg_journal(client, sequencer, tmp_path):
    importer = ClaudeCodeImport(client, tenant="acme", human="human:dusk")
    await importer.run((await asyncio.to_thread(CAPTURE.read_bytes)).splitlines(keepends=True))
    db = tmp_path / "ledger.db"
    code, out, err = await run_cli("verify", "--db", str(db), "--json")
    assert code == 0, err + out
    report = json.loads(out)
    assert [w for w in report["warnings"] if w["kind"].startswith("actor_")] == []
    code, out, err = await run_cli("verify", "--db", str(db), "--strict-actors")
    assert code == 0, err + out

    journal = tmp_path / "parallel.jsonl"
    code, out, err = await run_cli(
        "export", "--db", str(db), "--format", "korg-ledger-v1", "--session", SESSION, "-o", str(journal)
    )
    assert code == 0, err
    code, out, err = await run_cli("verify", "--format", "korg-ledger-v1", str(journal))
    assert code == 0, err + out
    records = [json.loads(line) for line in journal.read_bytes().splitlines()]
    assert all(r.get("triggered_by", 0) < r["seq_id"] for r in records)
    # One source_agent per spine: Korg reads a spine back by filtering on it.
    assert {r["source_agent"] for r in records} == {
        "human:dusk",
        f"agent:claude-code/main@{VERSION}",
        *SUB_ACTORS.values(),
    }
    by_seq = {r["seq_id"]: r for r in records}
    for ptuid, key in SUB_ACTORS.items():
        spine = [r for r in records if r["source_agent"] == key]
        assert spine[0]["tool_name"] == "user_prompt"
        assert spine[0]["args"]["parent_tool_use_id"] == ptuid
        parent = by_seq[spine[0]["triggered_by"]]
        assert parent["tool_name"] == "llm_inference" and parent["source_agent"] != key
    [root] = [r for r in records if r["tool_name"] == "user_prompt" and r["source_agent"] == "human:dusk"]
    assert "triggered_by" not in root
    assert dogfood(records, {}).seq == root["seq_id"]  # Korg §6 on the export: one root, every walk


def test_a_subagent_display_id_is_8_characters_unique_in_its_session():
    assert subagent_display_id(A, set()) == "7yWzKp3a"
    assert subagent_display_id(A, set()) == subagent_display_id(A, set())  # a re-import names it alike
    # Another id with the same last 8 characters gets a digest instead, and a third another one.
    twin = "toolu_01Zz" + A[-20:]
    first = subagent_display_id(twin, {"7yWzKp3a"})
    assert len(first) == 8 and first != "7yWzKp3a"
    assert subagent_display_id(twin, {"7yWzKp3a", first}) not in {"7yWzKp3a", first}
    # Ids too short or with characters an actor key's <id8> cannot hold.
    for odd in ("toolu_1", "call/with/slashes", "tool use ünïcode"):
        found = subagent_display_id(odd, set())
        assert len(found) == 8 and all(c in "0123456789abcdef" for c in found)


async def test_a_bad_parent_tool_use_id_or_human_is_a_typed_error(client):
    init = (await asyncio.to_thread(CAPTURE.read_bytes)).splitlines(keepends=True)[0]
    for ptuid, reason in (("", "wrong_shape"), ("x" * 253, "wrong_shape"), (7, "wrong_shape")):
        line = json.dumps({"type": "user", "message": {"content": "hi"}, "parent_tool_use_id": ptuid})
        with pytest.raises(InvalidRequest) as caught:
            await ClaudeCodeImport(client, tenant="acme").run([init, line.encode()])
        assert caught.value.details["line"] == 2 and caught.value.details["reason"] == reason
        assert caught.value.details["path"] == "$.parent_tool_use_id"
    with pytest.raises(InvalidRequest, match="human:<identifier>"):
        ClaudeCodeImport(client, tenant="acme", human="dusk")


def test_the_fixture_interleaves_two_parallel_subagents_and_nests_one() -> None:
    # Guard against the fixture drifting from what it claims to cover.
    lines = [json.loads(line) for line in Path(CAPTURE).read_bytes().splitlines()]
    ptuids = [line.get("parent_tool_use_id") for line in lines if line["type"] in ("user", "assistant")]
    assert {p[:8] for p in ptuids if p} == {"toolu_01"}
    firsts = [ptuids.index(p) for p in (A, B)]
    assert firsts[1] < max(i for i, p in enumerate(ptuids) if p == A)  # interleaved


async def test_a_failed_spawn_fails_the_subagents_turn_and_one_never_returning_leaves_it_open(client):
    session = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"
    failing, lost = "toolu_01Fa1LeDsPawNxQ9rT3uV5wY", "toolu_01NeVeRrEtUrNs7kL2mP4qS6"

    def line(obj: dict) -> bytes:
        return json.dumps({**obj, "session_id": session}).encode() + b"\n"

    def message(ptuid, mid, block):
        return line(
            {
                "type": "assistant",
                "parent_tool_use_id": ptuid,
                "message": {"id": mid, "model": "claude-haiku-4-5-20251001", "content": [block]},
            }
        )

    def spawn(tid):
        return {"type": "tool_use", "id": tid, "name": "Agent", "input": {"prompt": "look around"}}

    capture = [
        line({"type": "system", "subtype": "init", "claude_code_version": VERSION, "uuid": "r-failing"}),
        message(None, "msg_01M", spawn(failing)),
        message(None, "msg_01M", spawn(lost)),
        message(failing, "msg_01F", {"type": "text", "text": "giving up"}),
        message(lost, "msg_01L", {"type": "text", "text": "still working"}),
        line(
            {
                "type": "user",
                "parent_tool_use_id": None,
                "message": {
                    "content": [
                        {"type": "tool_result", "tool_use_id": failing, "is_error": True, "content": "boom"}
                    ]
                },
            }
        ),
        line({"type": "result", "subtype": "error_during_execution", "is_error": True}),
    ]
    summary = await ClaudeCodeImport(client, tenant="acme").run(capture)
    assert summary.unresolved_tools == [lost]  # the call, and so its sub-agent, never returned
    run = await client.load_run(session, "r-failing")
    lanes = {lane.name: lane.id for lane in run.lanes}
    ends = {
        name: [
            (e.event_type, e.payload)
            for e in run.events
            if e.lane_id == lane and e.event_type != "turn.started" and e.event_type.startswith("turn.")
        ]
        for name, lane in lanes.items()
    }
    assert ends[f"sub-{failing}"] == [
        ("turn.failed", {"turn_no": 1, "error": {"code": "tool_error", "message": "boom"}})
    ]
    assert ends[f"sub-{lost}"] == []
    assert ends["main"] == [("turn.failed", {"turn_no": 1})]
