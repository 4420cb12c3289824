"""The Claude Agent SDK hooks recorder (laneledger.adapters.claude_agent),
called with the SDK's own hook input types against a real nats-server and
sequencer."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    HookContext,
    HookMatcher,
    PostToolUseFailureHookInput,
    PostToolUseHookInput,
    PreToolUseHookInput,
    StopHookInput,
    SubagentStartHookInput,
    SubagentStopHookInput,
)
from ledger_fixtures import start_sequencer

from laneledger.adapters.claude_agent import DENIED, HOOK_GUARANTEES, ClaudeAgentRecorder
from laneledger.audit.ledger import audit_ledger
from laneledger.contract.errors import EntityNotFound, InvalidRequest, LedgerError
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.guarantees import HOOKS
from laneledger.sdk.spine import SPAWNED_BY
from laneledger.services.sequencer.service import SequencerSettings

BASE = {"session_id": "sess-1", "transcript_path": "/tmp/t.jsonl", "cwd": "/work"}
CONTEXT = HookContext(signal=None)


def pre(tool_use_id: str, name: str = "Bash", session: str = "sess-1", **extra: Any) -> PreToolUseHookInput:
    return PreToolUseHookInput(
        **{**BASE, "session_id": session},
        hook_event_name="PreToolUse",
        tool_name=name,
        tool_input={"command": "ls", **extra.pop("tool_input", {})},
        tool_use_id=tool_use_id,
        **extra,
    )


def post(tool_use_id: str, response: Any, name: str = "Bash", **extra: Any) -> PostToolUseHookInput:
    return PostToolUseHookInput(
        **BASE,
        hook_event_name="PostToolUse",
        tool_name=name,
        tool_input=extra.pop("tool_input", {}),
        tool_response=response,
        tool_use_id=tool_use_id,
        **extra,
    )


async def call(hooks: dict[str, list[HookMatcher]], data: Any) -> Any:
    """Call every callback the SDK would for this hook event; the last output."""
    out: Any = None
    for matcher in hooks[data["hook_event_name"]]:
        for callback in matcher.hooks:
            out = await callback(data, data.get("tool_use_id"), CONTEXT)
    return out


def events_of(view: Any) -> list[Any]:
    return sorted(view.events, key=lambda e: e.position)


async def test_tool_calls_subagents_and_stop_record_the_spine(client, sequencer, tmp_path: Path):
    recorder = ClaudeAgentRecorder(client, tenant="acme")
    hooks = recorder.hooks()
    assert set(hooks) >= {
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "SubagentStart",
        "SubagentStop",
        "Stop",
    }

    big = "x" * 5000  # over 1 KiB: a content reference, not inline
    assert await call(hooks, pre("tu-1", tool_input={"blob": big})) == {}
    # The request is committed before the tool runs (the hook returned).
    view = await client.load_session("sess-1", tenant="acme")
    requested = [e for e in view.events if e.event_type == "attempt.requested"]
    assert [e.payload["tool_use_id"] for e in requested] == ["tu-1"]
    assert requested[0].payload["input"]["command"] == "ls"
    assert requested[0].payload["input"]["blob"] != big  # externalized
    await call(hooks, post("tu-1", {"stdout": "a\nb"}, tool_input={"command": "ls"}, duration_ms=12))
    await call(hooks, pre("tu-2", name="Read"))
    await call(
        hooks,
        PostToolUseFailureHookInput(
            **BASE,
            hook_event_name="PostToolUseFailure",
            tool_name="Read",
            tool_input={"command": "ls"},
            tool_use_id="tu-2",
            error="no such file",
        ),
    )
    # A sub-agent spawned by a Task call.
    await call(hooks, pre("tu-task", name="Task", tool_input={"prompt": "look around"}))
    await call(
        hooks,
        SubagentStartHookInput(
            **BASE, hook_event_name="SubagentStart", agent_id="ag-1", agent_type="explorer"
        ),
    )
    await call(hooks, pre("tu-sub", name="Grep", agent_id="ag-1", agent_type="explorer"))
    await call(hooks, post("tu-sub", "hit", name="Grep", agent_id="ag-1", agent_type="explorer"))
    await call(
        hooks,
        SubagentStopHookInput(
            **BASE,
            hook_event_name="SubagentStop",
            stop_hook_active=False,
            agent_id="ag-1",
            agent_transcript_path="/tmp/a.jsonl",
            agent_type="explorer",
        ),
    )
    await call(hooks, post("tu-task", "done", name="Task"))
    await call(hooks, StopHookInput(**BASE, hook_event_name="Stop", stop_hook_active=False))

    view = await client.load_session("sess-1", tenant="acme")
    events = events_of(view)
    by_id = {e.id: e for e in events}
    lanes = {lane.id: lane for lane in view.lanes}
    main = next(lane for lane in view.lanes if lane.name == "main")
    sub = next(lane for lane in view.lanes if lane.name == "sub-ag-1")
    assert sub.kind == "subagent" and sub.parent_lane_id == main.id
    types = [e.event_type for e in events if e.lane_id == main.id]
    assert types[:4] == ["session.started", "run.started", "turn.started", "context.prompt_composed"]
    assert types[-2:] == ["turn.completed", "run.completed"]
    run_started = next(e for e in events if e.event_type == "run.started")
    assert run_started.payload["adapter"] == HOOK_GUARANTEES.to_payload()

    # Each tool call: request caused by its agent's prompt, terminal by its request.
    def settled(tool_use_id: str) -> tuple[Any, Any]:
        req = next(
            e
            for e in events
            if e.event_type == "attempt.requested" and e.payload["tool_use_id"] == tool_use_id
        )
        end = next(
            e
            for e in events
            if e.event_type in ("attempt.completed", "attempt.failed") and e.subject_id == req.subject_id
        )
        assert end.causation_id == req.id
        assert by_id[req.causation_id].event_type == "context.prompt_composed"
        assert by_id[req.causation_id].lane_id == req.lane_id
        return req, end

    assert settled("tu-1")[1].payload["outcome"] == {"result": {"stdout": "a\nb"}}
    assert settled("tu-1")[1].payload["duration_ms"] == 12
    assert settled("tu-2")[1].payload["error"] == {"code": "tool_error", "message": "no such file"}
    task_req, _ = settled("tu-task")
    sub_req, _ = settled("tu-sub")
    assert sub_req.lane_id == sub.id
    # §2b: the sub-agent's prompt names the spawning call and hangs off it.
    sub_prompt = next(e for e in events if e.lane_id == sub.id and e.event_type == "context.prompt_composed")
    assert sub_prompt.payload["prompt_kind"] == "subagent"
    assert sub_prompt.payload[SPAWNED_BY] == task_req.id
    main_prompt = next(
        e for e in events if e.lane_id == main.id and e.event_type == "context.prompt_composed"
    )
    assert sub_prompt.causation_id == main_prompt.id  # the parent's latest spine node (no inferences seen)
    assert [e.event_type for e in events if e.lane_id == sub.id][-1] == "turn.completed"
    assert {a.id for a in view.attempts} == {
        e.subject_id for e in events if e.event_type == "attempt.requested"
    }
    assert all(e.lane_id in lanes for e in events)

    # Every hook delivered again records nothing new.
    count = len(events)
    await call(hooks, pre("tu-1", tool_input={"blob": big}))
    await call(hooks, StopHookInput(**BASE, hook_event_name="Stop", stop_hook_active=False))
    await call(
        hooks,
        SubagentStartHookInput(
            **BASE, hook_event_name="SubagentStart", agent_id="ag-1", agent_type="explorer"
        ),
    )
    assert len((await client.load_session("sess-1", tenant="acme")).events) == count

    audit = audit_ledger(tmp_path / "ledger.db")
    assert audit.events == count
    # Every event but the main lane's four opening ones names its cause.
    assert audit.causal_links == count - 4
    assert audit.warning_count == 0


async def test_a_ledger_that_is_down_denies_the_tool_and_loses_nothing(
    nats_server, nc, sequencer, tmp_path: Path
):
    """Failure injection for the strict claim: with the sequencer stopped the
    request cannot commit, so the tool is denied and never runs; once the
    sequencer is back the queued request commits with its denial, and a
    resent hook records once."""
    async with await LedgerClient.connect(nats_server.url, timeout=2.0) as client:
        recorder = ClaudeAgentRecorder(client, tenant="acme", timeout=1.0)
        hooks = recorder.hooks()
        ran: list[str] = []

        async def tool(tool_use_id: str) -> Any:
            out = await call(hooks, pre(tool_use_id, session="sess-down"))
            decision = (out.get("hookSpecificOutput") or {}).get("permissionDecision")
            if decision != "deny":
                ran.append(tool_use_id)
            return out

        assert await tool("ok-1") == {}
        await sequencer.stop()
        out = await tool("down-1")
        assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert "laneledger could not record" in out["hookSpecificOutput"]["permissionDecisionReason"]
        assert ran == ["ok-1"]

        back = await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings())
        try:
            # The sequencer did not answer the call's commands, so nothing of it
            # was submitted: nothing of it commits now that the sequencer is
            # back, and no request is left open but ok-1's (its PostToolUse
            # never came).
            await asyncio.sleep(1.0)
            events = events_of(await client.load_session("sess-down", tenant="acme"))
            assert [e for e in events if e.payload.get("tool_use_id") == "down-1"] == []
            assert [e.payload["tool_use_id"] for e in events if e.event_type == "attempt.requested"] == [
                "ok-1"
            ]
            count = len(events)
            # The denied call tried again records, once; so does a new call
            # whose hook is delivered twice.
            assert await tool("down-1") == {}
            assert await tool("down-1") == {}
            assert await tool("ok-2") == {}
            assert await tool("ok-2") == {}
            assert ran == ["ok-1", "down-1", "down-1", "ok-2", "ok-2"]
            after = events_of(await client.load_session("sess-down", tenant="acme"))
            assert len(after) == count + 4  # action.started + attempt.requested, twice
            assert [e.payload["tool_use_id"] for e in after if e.event_type == "attempt.requested"] == [
                "ok-1",
                "down-1",
                "ok-2",
            ]
            audit = audit_ledger(tmp_path / "ledger.db")
            assert audit.events == len(after)
        finally:
            await back.stop()


async def test_parallel_tool_calls_each_record_once(client, sequencer, tmp_path: Path):
    """The SDK fires the hooks of parallel tool calls concurrently: each
    appends at the head it finds and retries on a lane conflict."""
    hooks = ClaudeAgentRecorder(client, tenant="acme").hooks()
    ids = [f"par-{i}" for i in range(6)]
    outs = await asyncio.gather(*(call(hooks, pre(i, session="sess-par")) for i in ids))
    assert outs == [{}] * len(ids)
    await asyncio.gather(*(call(hooks, pre(i, session="sess-par")) for i in ids))  # resent, concurrently
    events = (await client.load_session("sess-par", tenant="acme")).events
    requested = sorted(e.payload["tool_use_id"] for e in events if e.event_type == "attempt.requested")
    assert requested == ids
    assert audit_ledger(tmp_path / "ledger.db").events == len(events) == 4 + 2 * len(ids)


async def test_a_malformed_hook_input_is_a_typed_error(client, sequencer):
    recorder = ClaudeAgentRecorder(client, tenant="acme")
    with pytest.raises(InvalidRequest, match="tool_use_id"):
        await recorder.handle(
            {**BASE, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {}}
        )
    # Through the SDK's callback a PreToolUse that cannot be recorded is a deny.
    out = await call(
        recorder.hooks(),
        {
            **BASE,
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": 3,
            "tool_use_id": "tu-x",
        },
    )
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "tool_input" in out["hookSpecificOutput"]["permissionDecisionReason"]
    with pytest.raises(InvalidRequest, match="session_id"):
        await recorder.handle({"hook_event_name": "Stop"})
    with pytest.raises(InvalidRequest, match="JSON object"):
        await recorder.handle(["not", "an", "object"])  # type: ignore[arg-type]
    # Nothing was recorded: not even the session.
    with pytest.raises(EntityNotFound):
        await client.load_session("sess-1", tenant="acme")


def test_guarantees_state_every_hook():
    assert set(HOOK_GUARANTEES.hooks) == set(HOOKS)
    # Every strict claim has its failure-injection test in this file; a hook
    # raised to strict needs one before it joins this set. The run's end
    # (Stop) and a tool call's outcome (PostToolUse) come after the work and
    # cannot stop anything: best effort.
    strict = {hook for hook, level in HOOK_GUARANTEES.hooks.items() if level == "strict"}
    assert strict == {"requested_before_call"}
    assert HOOK_GUARANTEES.hooks["run"] == HOOK_GUARANTEES.hooks["tool_call"] == "best_effort"


def stop(session: str) -> StopHookInput:
    return StopHookInput(**{**BASE, "session_id": session}, hook_event_name="Stop", stop_hook_active=False)


def count(events: list[Any], event_type: str) -> int:
    return sum(1 for e in events if e.event_type == event_type)


async def test_a_session_whose_start_finds_the_ledger_down_starts_once_and_a_lost_stop_is_resent(
    nats_server, nc, sequencer, tmp_path: Path
):
    """Failure injection for a session's start (part of the strict request):
    the first PreToolUse of a session finds the sequencer stopped, so the
    tool is denied and nothing of the session is recorded; resent once the
    sequencer is back, the run starts once. Then the best-effort end: a Stop
    with the sequencer stopped raises the typed error to the caller, and the
    Stop sent again records run.completed once."""
    async with await LedgerClient.connect(nats_server.url, timeout=2.0) as client:
        hooks = ClaudeAgentRecorder(client, tenant="acme", timeout=1.0).hooks()
        await sequencer.stop()
        out = await call(hooks, pre("first", session="sess-cold"))
        assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
        back = await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings())
        try:
            await asyncio.sleep(1.0)  # anything that got through would have committed by now
            with pytest.raises(EntityNotFound):  # not even the session
                await client.load_session("sess-cold", tenant="acme")
            assert await call(hooks, pre("first", session="sess-cold")) == {}
            assert await call(hooks, pre("first", session="sess-cold")) == {}  # resent
            events = events_of(await client.load_session("sess-cold", tenant="acme"))
            assert [e.event_type for e in events] == [
                "session.started",
                "run.started",
                "turn.started",
                "context.prompt_composed",
                "action.started",
                "attempt.requested",
            ]
        finally:
            await back.stop()
        with pytest.raises(LedgerError):  # the typed error reaches the caller
            await call(hooks, stop("sess-cold"))
        back = await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings())
        try:
            await asyncio.sleep(1.0)
            events = events_of(await client.load_session("sess-cold", tenant="acme"))
            assert count(events, "run.completed") == 0
            assert await call(hooks, stop("sess-cold")) == {}
            assert await call(hooks, stop("sess-cold")) == {}  # resent
            events = events_of(await client.load_session("sess-cold", tenant="acme"))
            assert [count(events, t) for t in ("run.started", "run.completed", "turn.completed")] == [1, 1, 1]
            assert [e.event_type for e in events][-2:] == ["turn.completed", "run.completed"]
            audit = audit_ledger(tmp_path / "ledger.db")
            assert audit.events == len(events) and audit.warning_count == 0
        finally:
            await back.stop()


async def test_a_start_and_a_stop_that_commit_late_are_recorded_once(
    nats_server, sequencer_proc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Failure injection at the boundary: the sequencer process is frozen
    (SIGSTOP) just as the hook sends its append, which JetStream keeps. A
    session's start: the tool is denied, the start commits once the
    sequencer runs again, and the PreToolUse sent again starts nothing new.
    A Stop: the typed error reaches the caller, the Stop commits late, and
    the Stop sent again records run.completed once."""
    async with await LedgerClient.connect(nats_server.url, timeout=1.0) as client:
        recorder = ClaudeAgentRecorder(client, tenant="acme", timeout=0.5)
        hooks = recorder.hooks()
        pid = sequencer_proc.pid
        assert pid is not None
        append = client.append
        freeze: list[bool] = []

        async def frozen_append(*args: Any, **kwargs: Any) -> Any:
            if freeze:
                freeze.clear()
                os.kill(pid, signal.SIGSTOP)
            return await append(*args, **kwargs)

        monkeypatch.setattr(client, "append", frozen_append)

        async def settled(n: int) -> list[Any]:
            for _ in range(100):
                try:
                    events = events_of(await client.load_session("sess-late", tenant="acme"))
                except EntityNotFound:
                    events = []
                if len(events) >= n:
                    return events
                await asyncio.sleep(0.1)
            raise AssertionError(f"{n} events never committed")

        try:
            freeze.append(True)
            out = await call(hooks, pre("late-1", session="sess-late"))
            assert not freeze, "the start's append was sent"
            os.kill(pid, signal.SIGCONT)
            assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
            events = await settled(4)  # the start, committed late; nothing of the denied call
            assert [e.event_type for e in events] == [
                "session.started",
                "run.started",
                "turn.started",
                "context.prompt_composed",
            ]
            assert await call(hooks, pre("late-1", session="sess-late")) == {}
            events = await settled(6)
            assert count(events, "run.started") == count(events, "session.started") == 1

            freeze.append(True)
            with pytest.raises(LedgerError):
                await call(hooks, stop("sess-late"))
            assert not freeze, "the Stop's append was sent"
            os.kill(pid, signal.SIGCONT)
            events = await settled(8)
            assert [e.event_type for e in events][-2:] == ["turn.completed", "run.completed"]
            assert await call(hooks, stop("sess-late")) == {}
        finally:
            os.kill(pid, signal.SIGCONT)
        events = events_of(await client.load_session("sess-late", tenant="acme"))
        assert len(events) == 8 and count(events, "run.completed") == 1
    sequencer_proc.stop()
    audit = audit_ledger(tmp_path / "ledger.db")
    assert audit.events == 8 and audit.warning_count == 0


async def test_a_request_that_commits_after_its_deny_is_closed_as_denied(
    nats_server, sequencer_proc, tmp_path: Path
):
    """Failure injection at the boundary: the sequencer process is frozen
    (SIGSTOP) just before the request goes to NATS, so the hook's wait for
    the receipt runs out and the tool is denied; once the sequencer runs
    again the request commits - and the queued denial closes it, so no
    attempt is left open for a tool that never ran."""
    async with await LedgerClient.connect(nats_server.url, timeout=1.0) as client:
        recorder = ClaudeAgentRecorder(client, tenant="acme", timeout=0.5)
        assert await recorder.handle(pre("warm", session="sess-frozen")) == {}
        pid = sequencer_proc.pid
        assert pid is not None
        append = client.append

        async def append_frozen(*args: Any, **kwargs: Any) -> Any:
            # The hook's commands are done; the sequencer stops before it can
            # see the request (freezing it when a tap saw the request raced
            # the sequencer, which on a fast disk committed first).
            os.kill(pid, signal.SIGSTOP)
            return await append(*args, **kwargs)

        client.append = append_frozen  # type: ignore[method-assign]
        denied = "frozen"  # the tool call's id
        try:
            out = await recorder.handle(pre(denied, session="sess-frozen"))
        finally:
            os.kill(pid, signal.SIGCONT)
            client.append = append  # type: ignore[method-assign]
        assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
        requested: dict[str, Any] = {}
        for _ in range(100):
            events = events_of(await client.load_session("sess-frozen", tenant="acme"))
            requested = {e.payload["tool_use_id"]: e for e in events if e.event_type == "attempt.requested"}
            failed = [e for e in events if e.event_type == "attempt.failed"]
            if failed:
                break
            await asyncio.sleep(0.1)
        req = requested[denied]
        assert [(f.subject_id, f.causation_id, f.payload["error"]["code"]) for f in failed] == [
            (req.subject_id, req.id, DENIED)
        ]
        # Resent after the fact, the denied call's hook records nothing more.
        count = len(events)
        await recorder.handle(pre(denied, session="sess-frozen"))
        assert len((await client.load_session("sess-frozen", tenant="acme")).events) == count
    sequencer_proc.stop()
    audit = audit_ledger(tmp_path / "ledger.db")
    assert audit.events == count and audit.warning_count == 0


async def test_a_recorder_with_a_data_subject_names_it_on_every_event_and_erasure_finds_them(
    client, sequencer
):
    """spec/erasure.md, "Data subjects": what the harness records for one
    person is found and erased by that person's id."""
    recorder = ClaudeAgentRecorder(client, tenant="acme", data_subject="customer-42")
    hooks = recorder.hooks()
    await call(hooks, pre("tu-1", tool_input={"command": "cat ~/customer.txt"}))
    await call(
        hooks, post("tu-1", {"stdout": "ada@example.org"}, tool_input={"command": "ls"}, duration_ms=1)
    )
    view = await client.load_session("sess-1", tenant="acme")
    assert view.events and {e.data_subject for e in view.events} == {"customer-42"}
    actor = await client.ensure_actor("acme", "human:dpo", "human")
    done = await client.erase(data_subject="customer-42", actor_id=actor.id, reason="Art. 17")
    assert done.erased == len(view.events)
    after = await client.load_session("sess-1", tenant="acme")
    assert all(e.payload == {} for e in after.events)
