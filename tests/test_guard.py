"""The attempt guard against a real nats-server and sequencer: what it
commits, in which order, with which causes; that nothing external runs when
the ledger cannot commit the request; retries; and superseding an attempt a
crash left unresolved. (The kill -9 test of a harness using the guard is
tests/test_checkpoint_harness.py.)"""

from __future__ import annotations

import asyncio

import pytest

from laneledger.contract.errors import InvalidRequest, LaneConflict, LedgerUnavailable
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.sdk.guarantees import HOOKS, AdapterGuarantees
from laneledger.sdk.guard import OUTCOME_UNKNOWN, PLAIN_LOOP_GUARANTEES, Guard
from laneledger.sdk.spine import spine_role
from laneledger.services.checkpoint.recovery import unresolved_attempts
from laneledger.services.checkpoint.runread import read_run


class Crash(BaseException):
    """A process dying mid-call, as the guard sees it: not an Exception."""


async def open_guard(client, actor, session="s-guard", run="r1") -> Guard:
    recorder = await LaneRecorder.open(client, "acme", session, run, "main", actor_id=actor.id)
    return Guard(recorder, actor.id)


async def lane_events(client, guard):
    return (await client.load_lane(guard.lane_id, limit=1000)).events


async def test_a_turn_commits_requests_before_the_calls_and_follows_the_spine(client, actor):
    guard = await open_guard(client, actor)
    started = await guard.start_run({"task": "t"})
    prompt = await guard.prompt("fix the test")
    seen_heads = []
    async with guard.turn() as turn:
        async with turn.model_call("claude-sonnet-4", provider="anthropic") as call:
            async with call.attempt() as attempt:
                # The request is committed before the body runs.
                seen_heads.append((await client.get_lane(guard.lane_id)).last_seq)
                attempt.inference(
                    text="I will read then write",
                    thinking="plan",
                    input_tokens=1200,
                    output_tokens=80,
                    cost="0.0048",
                )

        async def tool(name: str, effect: str) -> None:
            async with turn.tool_call(name, effect=effect, idempotency="none", args={"p": name}) as c:
                async with c.attempt() as a:
                    await asyncio.sleep(0)  # let the other tool call interleave with this one
                    a.complete(result=f"{name} ok")

        await asyncio.gather(tool("Read", "read"), tool("Write", "write"))
    events = await lane_events(client, guard)
    by_id = {e.id: e for e in events}
    types = [e.event_type for e in events]
    assert types[:5] == [
        "run.started",
        "context.prompt_composed",
        "turn.started",
        "action.started",
        "attempt.requested",
    ]
    assert seen_heads == [5]  # the model call's request was seq 5 when the body ran
    assert types[-1] == "turn.completed"

    # The guarantees ride run.started as data a reader can parse back.
    assert AdapterGuarantees.from_payload(by_id[started["id"]].payload["adapter"]) == PLAIN_LOOP_GUARANTEES
    assert set(PLAIN_LOOP_GUARANTEES.hooks) == set(HOOKS)

    # The spine: model request <- prompt; tool requests <- the inference; outcomes <- requests.
    inference_req = next(
        e for e in events if e.event_type == "attempt.requested" and e.payload["action_type"] == "model_call"
    )
    inference = next(
        e for e in events if e.event_type == "attempt.completed" and e.payload["action_type"] == "model_call"
    )
    assert inference_req.causation_id == prompt["id"]
    assert inference.causation_id == inference_req.id
    assert inference.payload["outcome"]["text"] == "I will read then write"
    assert inference.payload["outcome"]["output_tokens"] == 80
    [cost] = [e for e in events if e.event_type == "cost.recorded"]
    assert cost.payload["amount"] == "0.0048" and cost.causation_id == inference.id
    assert cost.subject_id == inference.subject_id
    tool_reqs = [
        e for e in events if e.event_type == "attempt.requested" and e.payload["action_type"] == "tool_call"
    ]
    assert sorted(e.payload["name"] for e in tool_reqs) == ["Read", "Write"]
    assert all(e.causation_id == inference.id for e in tool_reqs)  # siblings
    for done in (e for e in events if e.event_type == "attempt.completed"):
        assert by_id[done.causation_id].event_type == "attempt.requested"
        assert by_id[done.causation_id].subject_id == done.subject_id
    assert [spine_role(e.event_type, e.payload) for e in events if spine_role(e.event_type, e.payload)].count(
        "inference"
    ) == 2
    assert spine_role(by_id[prompt["id"]].event_type, by_id[prompt["id"]].payload) == "prompt"

    # A second round's inference points at the first inference, not at a tool.
    async with guard.turn() as turn:
        async with turn.model_call("claude-sonnet-4") as call:
            async with call.attempt() as attempt:
                attempt.inference(text="done")
    events = await lane_events(client, guard)
    second_req = [
        e for e in events if e.event_type == "attempt.requested" and e.payload["action_type"] == "model_call"
    ][-1]
    assert second_req.causation_id == inference.id


async def test_a_failed_attempt_records_the_error_and_a_retry_is_the_next_attempt(client, actor):
    guard = await open_guard(client, actor, session="s-retry")
    await guard.prompt("p")
    calls = []
    async with guard.turn() as turn:
        async with turn.tool_call("lookup", effect="read", idempotency="inherent") as call:
            with pytest.raises(TimeoutError, match="slow upstream"):  # noqa: PT012 - it must pass through the guard's blocks
                async with call.attempt():
                    calls.append(1)
                    raise TimeoutError("slow upstream")
            async with call.attempt() as attempt:
                calls.append(2)
                attempt.complete(result="found")
    assert calls == [1, 2]
    events = await lane_events(client, guard)
    attempts = [e for e in events if e.event_type.startswith("attempt.")]
    assert [(e.event_type, e.payload["attempt_no"]) for e in attempts] == [
        ("attempt.requested", 1),
        ("attempt.failed", 1),
        ("attempt.requested", 2),
        ("attempt.completed", 2),
    ]
    failed = attempts[1]
    assert failed.payload["error"] == {"type": "TimeoutError", "message": "slow upstream"}
    assert attempts[2].causation_id == failed.id  # a retry points at the failure (Korg §2)
    assert attempts[0].subject_id != attempts[2].subject_id
    run = await client.load_run("s-retry", "r1")
    assert sorted(a.attempt_no for a in run.attempts) == [1, 2]
    assert len({a.action_id for a in run.attempts}) == 1
    assert events[-2].event_type == "action.completed" and events[-1].event_type == "turn.completed"
    assert unresolved_attempts(await read_run(client, run.session_id, run.run_id)) == []


async def test_no_external_call_runs_when_the_request_cannot_be_committed(client, actor, nats_server):
    guard = await open_guard(client, actor, session="s-nocommit")
    await guard.prompt("p")
    ran = []
    async with guard.turn() as turn:
        async with turn.tool_call("send_email", effect="write", idempotency="none") as call:
            # Another writer moved the lane: the request is refused, typed.
            other = LaneRecorder(client, guard.recorder.lane)
            other.head = guard.recorder.head
            await other.append([other.event("ext.acme.note", actor_id=actor.id)])
            with pytest.raises(LaneConflict):
                async with call.attempt():
                    ran.append("send_email")
            await guard.recorder.reload()
    assert ran == []
    # With the ledger unreachable (its connection gone), the same: the typed
    # error, no call.
    cut_off = await LedgerClient.connect(nats_server.url, timeout=2.0)
    lone = Guard(
        await LaneRecorder.open(cut_off, "acme", "s-nocommit", "r1", "main", actor_id=actor.id), actor.id
    )
    with pytest.raises(LedgerUnavailable, match="connection closed"):  # noqa: PT012 - it must pass through the guard's blocks
        async with lone.turn(2) as turn:
            async with turn.tool_call("send_email", effect="write", idempotency="none") as call:
                await cut_off.nc.close()
                async with call.attempt():
                    ran.append("send_email again")
    assert ran == []


async def test_a_crashed_attempt_is_superseded_by_a_retry_or_held(client, actor):
    guard = await open_guard(client, actor, session="s-crash")
    await guard.prompt("p")
    with pytest.raises(Crash):  # noqa: PT012 - it must pass through the guard's blocks
        async with guard.turn() as turn:
            async with turn.tool_call("lookup", effect="read", idempotency="none") as read:
                async with read.attempt():
                    raise Crash()
    with pytest.raises(Crash):  # noqa: PT012 - it must pass through the guard's blocks
        async with guard.turn() as turn:
            async with turn.tool_call("charge_card", effect="write", idempotency="none") as write:
                async with write.attempt():
                    raise Crash()
    run = await client.load_run("s-crash", "r1")
    read_u, write_u = unresolved_attempts(await read_run(client, run.session_id, run.run_id))
    assert (read_u.name, read_u.retry_safe) == ("lookup", True)
    assert (write_u.name, write_u.retry_safe) == ("charge_card", False)

    # The restarted harness (a new guard, as after a restart) retries the read…
    again = await Guard.open(client, "acme", "s-crash", "r1", "main", actor.id)
    assert again.next_turn_no == 3 and again.recorder.head == guard.recorder.head
    async with again.resume(read_u) as call:
        async with call.attempt() as attempt:
            assert attempt.attempt_no == 2
            attempt.complete(result="found")
    # …and never the write: resume refuses it, hold asks a human.
    with pytest.raises(InvalidRequest, match="not safe to retry"):
        again.resume(write_u)
    paused = await again.hold(write_u)

    events = await lane_events(client, again)
    by_subject = {}
    for e in events:
        by_subject.setdefault(e.subject_id, []).append(e)
    closed = next(e for e in by_subject[read_u.attempt_id] if e.event_type == "attempt.failed")
    new_request = next(
        e for e in events if e.event_type == "attempt.requested" and e.payload["attempt_no"] == 2
    )
    assert closed.payload["error"]["code"] == OUTCOME_UNKNOWN
    assert closed.payload["error"]["superseded_by"] == new_request.subject_id
    assert closed.append_id == new_request.append_id  # one atomic append
    assert closed.causation_id == read_u.requested_event_id and new_request.causation_id == closed.id
    assert [e.event_type for e in by_subject[read_u.action_id]][-1] == "action.completed"
    [pause] = [e for e in events if e.event_type == "hitl.paused"]
    assert pause.id == paused["id"] and pause.payload["proposed_action"]["attempt_id"] == write_u.attempt_id

    run = await client.load_run("s-crash", "r1")
    assert [
        u.attempt_id for u in unresolved_attempts(await read_run(client, run.session_id, run.run_id))
    ] == [write_u.attempt_id]
    # A human decided not to retry it: closed as unknown, with no successor.
    await again.close_unknown(write_u, reason="operator: do not charge twice")
    run = await client.load_run("s-crash", "r1")
    assert unresolved_attempts(await read_run(client, run.session_id, run.run_id)) == []
    last = [e for e in run.events if e.subject_id == write_u.attempt_id][-1]
    assert last.payload["error"] == {
        "code": OUTCOME_UNKNOWN,
        "message": "operator: do not charge twice",
        "superseded_by": None,
    }


def test_guarantees_state_every_hook_with_a_known_level():
    hooks = dict(PLAIN_LOOP_GUARANTEES.hooks)
    with pytest.raises(InvalidRequest, match="every hook") as missing:
        AdapterGuarantees(
            adapter="x", version="1", hooks={k: v for k, v in hooks.items() if k != "cost"}, recovery="none"
        )
    assert missing.value.details["missing"] == ["cost"]
    with pytest.raises(InvalidRequest, match="strict, best_effort or unsupported"):
        AdapterGuarantees(adapter="x", version="1", hooks={**hooks, "cost": "mostly"}, recovery="none")
    with pytest.raises(InvalidRequest, match="recovery kind"):
        AdapterGuarantees(adapter="x", version="1", hooks=hooks, recovery="magic")
    with pytest.raises(InvalidRequest, match="not adapter guarantees"):
        AdapterGuarantees.from_payload({"adapter": "x"})


async def test_a_spawned_subagent_has_its_own_lane_actor_and_spine(client, actor):
    guard = await open_guard(client, actor, session="s-spawn")
    await guard.prompt("p")
    helper = await client.ensure_actor("acme", "agent:tests/sub-helper@1", "agent")
    async with guard.turn() as turn:
        async with turn.model_call("m") as call:
            async with call.attempt() as attempt:
                attempt.inference(text="delegate")
        async with turn.tool_call("Task", effect="unknown", idempotency="none") as call:
            async with call.attempt() as spawn:
                sub = await guard.spawn("helper", helper.id, "find add()", spawned_by=spawn)
                async with sub.turn() as sub_turn:
                    async with sub_turn.model_call("m-small") as sub_call:
                        async with sub_call.attempt() as sub_attempt:
                            sub_attempt.inference(text="found it")
                spawn.complete(result="found it")
    run = await client.load_run("s-spawn", "r1")
    lanes = {lane.name: lane for lane in run.lanes}
    assert lanes["helper"].kind == "subagent" and lanes["helper"].parent_lane_id == guard.lane_id
    assert lanes["helper"].actor_id == helper.id
    by_id = {e.id: e for e in run.events}
    inference = next(
        e
        for e in run.events
        if e.lane_id == guard.lane_id
        and e.event_type == "attempt.completed"
        and e.payload["action_type"] == "model_call"
    )
    sub_events = [e for e in run.events if e.lane_id == lanes["helper"].id]
    first = sub_events[0]
    assert spine_role(first.event_type, first.payload) == "prompt"
    assert first.causation_id == inference.id  # §2b: the parent's spawning inference
    assert first.payload["spawned_by"] == spawn.requested_id
    assert by_id[spawn.requested_id].payload["name"] == "Task"
    sub_request = next(e for e in sub_events if e.event_type == "attempt.requested")
    assert sub_request.causation_id == first.id and {e.actor_id for e in sub_events} == {helper.id}
