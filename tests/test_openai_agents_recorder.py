"""The OpenAI Agents SDK recorder (laneledger.adapters.openai_agents): a real
``Runner.run`` of an agent with a function tool and a handoff to a second
agent, on a fake model (the SDK's ``Model`` interface, opening generation
spans as the SDK's own models do), against a real nats-server and sequencer.
The SDK's default exporter is replaced (``set_trace_processors``), so nothing
tries the network."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunConfig,
    Runner,
    UserError,
    function_tool,
    input_guardrail,
    set_trace_processors,
)
from agents.tracing import custom_span, set_tracing_disabled
from ledger_fixtures import start_sequencer
from openai_agents_fakes import FakeModel, support_agents, text, tool_call

from laneledger.adapters.openai_agents import OpenAIAgentsRecorder
from laneledger.adapters.openai_agents_mapping import DENIED, guarantees
from laneledger.audit.blobs import audit_ledger_with_blobs, open_blob_store
from laneledger.audit.ledger import audit_ledger
from laneledger.contract.errors import InvalidRequest, LedgerError
from laneledger.otel import ids
from laneledger.otel.history import map_history
from laneledger.otel.mapping import SpanMapper
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.sdk.guarantees import HOOKS
from laneledger.sdk.pubacks import AckInbox
from laneledger.sdk.spine import SPAWNED_BY
from laneledger.services.sequencer.service import SequencerSettings


def price(model: str, tokens: Any) -> Decimal:
    return Decimal("0.000001") * tokens["input_tokens"] + Decimal("0.000004") * tokens["output_tokens"]


@pytest_asyncio.fixture
async def tracing(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[[OpenAIAgentsRecorder], None]]:
    """Tracing on (``OPENAI_AGENTS_DISABLE_TRACING`` set to ``false`` and the
    SDK's switch too, which wins over the variable), with only our processor;
    no processor again afterwards."""
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "false")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    set_tracing_disabled(False)

    def use(recorder: OpenAIAgentsRecorder) -> None:
        set_trace_processors([recorder.processor])

    yield use
    set_trace_processors([])


LANELEDGER = Path(sys.executable).with_name("laneledger")  # the installed command


async def laneledger_cli(*args: str) -> tuple[int, str, str]:
    """The real ``laneledger`` command, as a subprocess (not blocking this
    loop, where the sequencer runs)."""
    proc = await asyncio.create_subprocess_exec(
        str(LANELEDGER), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def ordered(view: Any) -> list[Any]:
    return sorted(view.events, key=lambda e: e.position)


async def audit(nc: Any, db: Path, expected_events: int) -> None:
    """``laneledger verify``'s check (chains, causation, every blob, actor keys as faults)."""
    report = await audit_ledger_with_blobs(db, await open_blob_store(nc.jetstream()), strict_actors=True)
    assert report.events == expected_events
    assert report.warning_count == 0
    assert report.blob_refs >= 1


async def test_a_run_with_a_tool_and_a_handoff_records_the_spine(
    nats_server, nc, client, tracing, tmp_path: Path
) -> None:
    ran: list[str] = []
    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme", pricing=price)
    tracing(recorder)
    try:
        result = await Runner.run(
            support_agents(ran), "where is my refund?", run_config=RunConfig(group_id="conv-1")
        )
        await recorder.flush()
    finally:
        await recorder.close()
    assert result.final_output == "refund issued" and ran == ["A-17"]
    assert recorder.lost == 0

    view = await client.load_session("conv-1", tenant="acme")
    events = ordered(view)
    by_id = {e.id: e for e in events}
    main = next(lane for lane in view.lanes if lane.name == "main")
    sub = next(lane for lane in view.lanes if lane.name != "main")
    assert (sub.kind, sub.parent_lane_id) == ("subagent", main.id)
    on_main = [e for e in events if e.lane_id == main.id]
    on_sub = [e for e in events if e.lane_id == sub.id]
    model_round = [
        "action.started",
        "attempt.requested",
        "attempt.completed",
        "cost.recorded",
        "action.completed",
    ]
    tool_round = ["action.started", "attempt.requested", "attempt.completed", "action.completed"]
    assert [e.event_type for e in on_main] == [
        "run.started",
        "context.prompt_composed",
        "turn.started",
        *model_round,  # round 1: asks for lookup_order
        *tool_round,  # lookup_order
        *model_round,  # round 2: asks for the handoff
        *tool_round,  # the handoff
        "turn.completed",
        "run.completed",
    ]
    assert [e.event_type for e in on_sub] == [
        "context.prompt_composed",
        "lane.created",
        "turn.started",
        *model_round,
        "turn.completed",
    ]
    run_started, prompt, turn_started = on_main[:3]
    assert run_started.subject_id == events[0].run_id
    assert run_started.payload["adapter"] == guarantees(strict_tools=False, priced=True).to_payload()
    assert run_started.payload["group_id"] == "conv-1"
    assert (prompt.payload["prompt_kind"], prompt.payload["synthesized"]) == ("user", True)
    assert not run_started.causation_id and not prompt.causation_id  # the roots (UNSET: no cause)
    assert turn_started.causation_id == prompt.id

    infer_1, tool, infer_2, handoff = on_main[3:8], on_main[8:12], on_main[12:17], on_main[17:21]
    # §2a: round 1 hangs off the prompt, round 2 off round 1's decision.
    assert infer_1[1].causation_id == prompt.id
    assert infer_2[1].causation_id == infer_1[2].id
    for call in (infer_1, infer_2):
        requested, completed, cost = call[1], call[2], call[3]
        assert requested.payload["action_type"] == "model_call"
        assert requested.payload["model"] == "fake-triage"
        assert requested.payload["provider"] == "openai"
        assert completed.causation_id == requested.id and completed.subject_id == requested.subject_id
        assert completed.payload["outcome"]["input_tokens"] == 100
        assert completed.payload["outcome"]["output_tokens"] == 20
        assert completed.payload["outcome"]["cache_read_tokens"] == 40
        assert cost.payload["amount"] == "0.000180" and cost.payload["provider"] == "openai"
        assert cost.payload["attempt_id"] == requested.subject_id and cost.causation_id == completed.id
        assert call[4].causation_id == completed.id
    # The tool call hangs off the inference that asked for it; its result is
    # over 1 KiB, so the event holds a content reference.
    assert [e.causation_id for e in tool[:2]] == [infer_1[2].id] * 2
    assert tool[1].payload["name"] == "lookup_order"
    assert tool[2].causation_id == tool[1].id
    assert tool[2].payload["outcome"]["input"] == {"order_id": "A-17"}
    result_ref = tool[2].payload["outcome"]["result"]
    assert set(result_ref) == {"_ref", "size_bytes"} and result_ref["_ref"].startswith("sha256:")
    # The handoff is a tool call of round 2; billing's prompt names it and
    # hangs off the inference that decided it (§2b).
    assert [e.causation_id for e in handoff[:2]] == [infer_2[2].id] * 2
    assert handoff[1].payload["from_agent"] == "triage"
    assert handoff[2].payload["outcome"] == {"to_agent": "billing"}
    sub_prompt = on_sub[0]
    assert sub_prompt.payload["prompt_kind"] == "subagent"
    assert sub_prompt.payload["agent_name"] == "billing"
    assert sub_prompt.payload[SPAWNED_BY] == handoff[1].id
    assert sub_prompt.causation_id == infer_2[2].id
    assert on_sub[1].payload["parent_lane_id"] == main.id
    assert on_sub[4].causation_id == sub_prompt.id  # billing's first inference
    assert on_sub[-1].causation_id == on_sub[5].id  # its turn ends off its latest inference
    assert on_main[-2].payload["agent_name"] == "triage"
    assert on_main[-2].causation_id == infer_2[2].id
    assert on_main[-1].causation_id == on_main[-2].id
    assert all(by_id[e.causation_id].session_id == "conv-1" for e in events if e.causation_id)
    assert {a.id for a in view.attempts} == {
        e.subject_id for e in events if e.event_type == "attempt.requested"
    }

    await audit(nc, tmp_path / "ledger.db", len(events))
    assert audit_ledger(tmp_path / "ledger.db").causal_links == len(events) - 2
    # The command a user runs: chains, causation, blobs and the committed stream.
    code, out, err = await laneledger_cli(
        "verify", "--db", str(tmp_path / "ledger.db"), "--nats", nats_server.url
    )
    assert code == 0, err + out
    assert f"intact: {len(events)} events in 2 lanes" in out, out
    assert "blob references stored and matching" in out and "identical" in out, out
    assert "WARN" not in out, out


async def test_an_append_refused_behind_others_is_appended_again_in_order(
    nats_server, client, tracing, tmp_path: Path
) -> None:
    """The recorder submits appends without waiting for their receipts, at
    the lane head its own submits left. Another writer moves the main lane
    mid-run: the appends submitted at the old head are refused, and are
    appended again, in order, once each, as are those on the sub-agent's
    lane caused by them."""
    ran: list[str] = []
    calls: list[int] = []

    async def another_writer_appends() -> None:
        calls.append(1)
        if len(calls) == 2:  # before triage's second model call
            await recorder.flush()
            main = next(lane for lane in (await client.load_session("conv-moved", tenant="acme")).lanes)
            actor = await client.ensure_actor("acme", "human:someone-else", "human")
            head = (await client.get_lane(main.id, tenant="acme")).last_seq
            event = make_event(main.id, "ext.acme.note", actor_id=actor.id, payload={"by": "someone else"})
            await client.append(main, head, [event])

    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme")
    tracing(recorder)
    try:
        result = await Runner.run(
            support_agents(ran, before=another_writer_appends),
            "where is my refund?",
            run_config=RunConfig(group_id="conv-moved"),
        )
        await recorder.flush()
    finally:
        await recorder.close()
    assert result.final_output == "refund issued" and recorder.lost == 0
    view = await client.load_session("conv-moved", tenant="acme")
    events = ordered(view)
    main = next(lane for lane in view.lanes if lane.name == "main")
    on_main = [e.event_type for e in events if e.lane_id == main.id]
    model_round = ["action.started", "attempt.requested", "attempt.completed", "action.completed"]
    tool_round = ["action.started", "attempt.requested", "attempt.completed", "action.completed"]
    assert on_main == [
        "run.started",
        "context.prompt_composed",
        "turn.started",
        *model_round,
        *tool_round,
        "ext.acme.note",  # the other writer's, where it committed
        *model_round,
        *tool_round,
        "turn.completed",
        "run.completed",
    ]
    assert len({e.id for e in events}) == len(events)
    report = audit_ledger(tmp_path / "ledger.db")
    assert report.events == len(events) and report.warning_count == 0


async def test_strict_tools_commit_the_request_before_the_tool_runs(
    nats_server, nc, client, tracing, tmp_path: Path
) -> None:
    """Two parallel calls of one model answer: each tool, when it runs, finds
    its own request committed (with its call id and arguments); both hang off
    the inference that asked for them."""
    seen_by: dict[str, set[tuple[str, Any]]] = {}

    @function_tool
    async def lookup_order(order_id: str) -> str:
        """Look an order up."""
        view = await client.load_session("conv-strict", tenant="acme")
        seen_by[order_id] = {
            (e.payload["tool_call_id"], e.payload["input"]["order_id"])
            for e in view.events
            if e.event_type == "attempt.requested" and e.payload["action_type"] == "tool_call"
        }
        return "shipped"

    agent = Agent(
        name="triage",
        tools=[lookup_order],
        model=FakeModel(
            "fake-triage",
            [
                [
                    tool_call("lookup_order", '{"order_id": "B-2"}', "call-8"),
                    tool_call("lookup_order", '{"order_id": "B-3"}', "call-9"),
                ],
                [text("shipped")],
            ],
        ),
    )
    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme", strict_tools=True)
    tracing(recorder)
    try:
        result = await Runner.run(
            agent, "status?", hooks=recorder.run_hooks(), run_config=RunConfig(group_id="conv-strict")
        )
        await recorder.flush()
    finally:
        await recorder.close()
    assert result.final_output == "shipped"
    assert ("call-8", "B-2") in seen_by["B-2"] and ("call-9", "B-3") in seen_by["B-3"]
    events = ordered(await client.load_session("conv-strict", tenant="acme"))
    run_started = next(e for e in events if e.event_type == "run.started")
    assert run_started.payload["adapter"] == guarantees(strict_tools=True, priced=False).to_payload()
    inference = next(
        e for e in events if e.event_type == "attempt.completed" and e.payload["name"] == "fake-triage"
    )
    requests = [
        e for e in events if e.event_type == "attempt.requested" and e.payload["name"] == "lookup_order"
    ]
    assert sorted(e.payload["tool_call_id"] for e in requests) == ["call-8", "call-9"]
    assert {e.causation_id for e in requests} == {inference.id}  # siblings
    for request in requests:
        completed = next(
            e for e in events if e.event_type == "attempt.completed" and e.subject_id == request.subject_id
        )
        assert completed.causation_id == request.id
        assert completed.payload["outcome"] == {"result": "shipped"}
    assert not any(e.payload.get("recorded_at_end") for e in events)
    report = audit_ledger(tmp_path / "ledger.db")
    assert report.events == len(events) and report.warning_count == 0


async def test_a_ledger_that_is_down_stops_the_tool_and_loses_nothing(
    nats_server, nc, client, sequencer, tracing, tmp_path: Path
) -> None:
    """Failure injection for the strict claim: the sequencer stops while the
    model decides to call the tool, so its request cannot commit: the tool
    does not run, the run fails with the ledger's typed error as the cause,
    and once the sequencer is back everything reported meanwhile is recorded
    and no attempt is left open."""
    ran: list[str] = []
    stopped: list[bool] = []

    async def stop_the_sequencer_once() -> None:
        if not stopped:
            await recorder.flush()  # the run's start is recorded
            await sequencer.stop()
            stopped.append(True)

    recorder = await OpenAIAgentsRecorder.connect(
        nats_server.url, tenant="acme", strict_tools=True, timeout=1.0
    )
    tracing(recorder)
    try:
        with pytest.raises(UserError) as raised:
            await Runner.run(
                support_agents(ran, before=stop_the_sequencer_once),
                "where is my refund?",
                hooks=recorder.run_hooks(),
                run_config=RunConfig(group_id="conv-down"),
            )
        assert ran == []  # the tool did not run
        cause = raised.value.__cause__
        assert isinstance(cause, LedgerError) and cause.code in ("timeout", "unavailable")

        back = await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings())
        try:
            await recorder.flush(timeout=60)
            assert recorder.lost == 0
            events = ordered(await client.load_session("conv-down", tenant="acme"))
            types = [e.event_type for e in events]
            assert types[:3] == ["run.started", "context.prompt_composed", "turn.started"]
            assert types[-2:] == ["turn.failed", "run.failed"]
            assert "lookup_order" in events[-1].payload["error"]["data"]["error"]
            # The model call made while the ledger was down is recorded; of the
            # stopped tool call nothing is, so nothing is left unresolved.
            assert [e.payload["name"] for e in events if e.event_type == "attempt.completed"] == [
                "fake-triage"
            ]
            assert [e.payload["name"] for e in events if e.event_type == "attempt.requested"] == [
                "fake-triage"
            ]
            audit_report = audit_ledger(tmp_path / "ledger.db")
            assert audit_report.events == len(events) and audit_report.warning_count == 0
        finally:
            await back.stop()
    finally:
        await recorder.close(timeout=2.0)


async def test_a_request_that_commits_after_the_tool_was_stopped_is_closed(
    nats_server, sequencer_proc, tracing, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failure injection at the boundary: the sequencer process is frozen
    (SIGSTOP) just as the tool's request is published, so the request reaches
    JetStream but its receipt does not come in time and the tool is stopped;
    once the sequencer runs again the request commits, and the failure
    queued behind it closes it as ``denied_unrecorded``: no attempt is left
    open for a tool that never ran. (Frozen by the publisher, not when a tap
    sees the message: a sequencer quicker than the tap would commit first.)"""
    ran: list[str] = []
    recorder = await OpenAIAgentsRecorder.connect(
        nats_server.url, tenant="acme", strict_tools=True, timeout=1.0
    )
    tracing(recorder)
    pid = sequencer_proc.pid
    assert pid is not None
    frozen = threading.Event()  # set on the recorder's thread
    publish = AckInbox.publish

    async def freeze_then_publish(inbox: AckInbox, subject: str, body: bytes, headers: Any = None) -> Any:
        if b'"attempt.requested"' in body and b"lookup_order" in body and not frozen.is_set():
            os.kill(pid, signal.SIGSTOP)
            frozen.set()
        return await publish(inbox, subject, body, headers)

    monkeypatch.setattr(AckInbox, "publish", freeze_then_publish)
    try:
        with pytest.raises(UserError) as raised:
            await Runner.run(
                support_agents(ran),
                "where is my refund?",
                hooks=recorder.run_hooks(),
                run_config=RunConfig(group_id="conv-frozen"),
            )
        assert frozen.is_set() and ran == []
        assert isinstance(raised.value.__cause__, LedgerError)
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        await recorder.flush(timeout=60)
    finally:
        await recorder.close(timeout=5.0)
    assert recorder.lost == 0
    async with await LedgerClient.connect(nats_server.url) as client:
        events = ordered(await client.load_session("conv-frozen", tenant="acme"))
    requested = next(
        e for e in events if e.event_type == "attempt.requested" and e.payload["name"] == "lookup_order"
    )
    closed = [e for e in events if e.event_type == "attempt.failed" and e.subject_id == requested.subject_id]
    assert [(e.causation_id, e.payload["error"]["code"]) for e in closed] == [(requested.id, DENIED)]
    assert [e.event_type for e in events][-2:] == ["turn.failed", "run.failed"]
    sequencer_proc.stop()
    report = audit_ledger(tmp_path / "ledger.db")
    assert report.events == len(events) and report.warning_count == 0


async def test_an_agent_run_as_a_tool_its_guardrail_and_a_custom_span(
    nats_server, nc, client, tracing, tmp_path: Path
) -> None:
    """An agent called as a tool (``Agent.as_tool``) is a sub-agent spawned by
    that tool call; a guardrail and a custom span are extension events on
    their agent's lane."""

    @input_guardrail
    def polite(context: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info="ok", tripwire_triggered=False)

    @function_tool
    def audit_trail(note: str) -> str:
        """Note something down."""
        with custom_span("audit", {"note": note}):
            return "noted"

    researcher = Agent(
        name="researcher",
        tools=[audit_trail],
        model=FakeModel(
            "fake-researcher", [[tool_call("audit_trail", '{"note": "n1"}', "call-r1")], [text("found it")]]
        ),
    )
    lead = Agent(
        name="lead",
        input_guardrails=[polite],
        tools=[researcher.as_tool(tool_name="research", tool_description="Research something.")],
        model=FakeModel(
            "fake-lead", [[tool_call("research", '{"input": "look"}', "call-l1")], [text("summary")]]
        ),
    )
    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme")
    tracing(recorder)
    try:
        result = await Runner.run(lead, "research this", run_config=RunConfig(group_id="conv-nested"))
        await recorder.flush()
    finally:
        await recorder.close()
    assert result.final_output == "summary"
    view = await client.load_session("conv-nested", tenant="acme")
    events = ordered(view)
    main = next(lane for lane in view.lanes if lane.name == "main")
    sub = next(lane for lane in view.lanes if lane.name != "main")
    assert (sub.kind, sub.parent_lane_id) == ("subagent", main.id)
    research = next(
        e for e in events if e.event_type == "attempt.requested" and e.payload["name"] == "research"
    )
    assert research.lane_id == main.id
    sub_prompt = next(e for e in events if e.lane_id == sub.id and e.event_type == "context.prompt_composed")
    assert (sub_prompt.payload["agent_name"], sub_prompt.payload["via"]) == ("researcher", "nested")
    assert sub_prompt.payload[SPAWNED_BY] == research.id
    assert sub_prompt.causation_id == research.causation_id  # the lead's inference that asked for it
    audit_call = next(
        e for e in events if e.event_type == "attempt.requested" and e.payload["name"] == "audit_trail"
    )
    assert audit_call.lane_id == sub.id
    note = next(e for e in events if e.event_type == "ext.openai_agents.custom")
    assert (note.lane_id, note.payload["name"], note.payload["data"]) == (sub.id, "audit", {"note": "n1"})
    guard = next(e for e in events if e.event_type == "ext.openai_agents.guardrail")
    assert (guard.lane_id, guard.payload["name"], guard.payload["triggered"]) == (main.id, "polite", False)
    # The research call ends after its sub-agent's turn.
    research_end = next(
        e for e in events if e.event_type == "attempt.completed" and e.subject_id == research.subject_id
    )
    sub_end = next(e for e in events if e.lane_id == sub.id and e.event_type == "turn.completed")
    assert sub_end.position < research_end.position
    assert research_end.payload["outcome"]["result"] == "found it"
    report = audit_ledger(tmp_path / "ledger.db")
    assert report.events == len(events) and report.warning_count == 0


async def test_concurrent_runs_each_record_their_own_spine(
    nats_server, client, tracing, tmp_path: Path
) -> None:
    """Runs in parallel on one loop: each trace is its own run and session,
    with the same shape as one run alone; strict tool requests of both
    commit through the one recorder thread."""
    ran: list[str] = []
    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme", strict_tools=True)
    tracing(recorder)
    sessions = [f"conv-par-{i}" for i in range(4)]
    try:
        results = await asyncio.gather(
            *(
                Runner.run(
                    support_agents(ran),
                    "where is my refund?",
                    hooks=recorder.run_hooks(),
                    run_config=RunConfig(group_id=session),
                )
                for session in sessions
            )
        )
        await recorder.flush()
    finally:
        await recorder.close()
    assert [r.final_output for r in results] == ["refund issued"] * 4 and ran == ["A-17"] * 4
    total = 0
    shapes = set()
    for session in sessions:
        view = await client.load_session(session, tenant="acme")
        events = ordered(view)
        total += len(events)
        kind_of = {lane.id: lane.kind for lane in view.lanes}
        shapes.add(
            tuple(
                (
                    kind,
                    tuple(
                        (e.event_type, e.payload["name"] if e.event_type.startswith("attempt.") else None)
                        for e in events
                        if kind_of[e.lane_id] == kind
                    ),
                )
                for kind in ("main", "subagent")
            )
        )
        assert len({e.run_id for e in events}) == 1 and len(view.lanes) == 2
    assert len(shapes) == 1  # every run's lanes recorded alike
    report = audit_ledger(tmp_path / "ledger.db")
    assert report.events == total and report.warning_count == 0


async def test_a_response_span_is_a_model_call_with_its_model_and_usage(
    nats_server, client, tracing, tmp_path: Path
) -> None:
    priced: list[str] = []

    def price_by_model(model: str, tokens: Any) -> str:
        priced.append(model)
        return "0.01"

    agent = Agent(name="solo", model=FakeModel("gpt-fake", [[text("hi")]]))
    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme", pricing=price_by_model)
    tracing(recorder)
    try:
        await Runner.run(agent, "hello", run_config=RunConfig(group_id="conv-responses"))
        await recorder.flush()
    finally:
        await recorder.close()
    events = ordered(await client.load_session("conv-responses", tenant="acme"))
    requested = next(e for e in events if e.event_type == "attempt.requested")
    completed = next(e for e in events if e.event_type == "attempt.completed")
    cost = next(e for e in events if e.event_type == "cost.recorded")
    # The model is known once the response is in: the outcome and the cost name it.
    assert requested.payload["name"] == "openai-responses"
    assert "model" not in requested.payload  # a placeholder is not put forward as the model
    assert requested.payload["provider"] == "openai"
    outcome = completed.payload["outcome"]
    assert (outcome["model"], outcome["response_id"]) == ("gpt-fake", "resp_1")
    assert (outcome["input_tokens"], outcome["output_tokens"], outcome["cache_read_tokens"]) == (7, 3, 2)
    assert outcome["output"][0]["content"][0]["text"] == "hi"
    assert (cost.payload["model"], cost.payload["amount"]) == ("gpt-fake", "0.01") and priced == ["gpt-fake"]
    assert audit_ledger(tmp_path / "ledger.db").events == len(events)


async def test_strict_tools_with_tracing_off_stop_the_tool(nats_server, sequencer, tracing) -> None:
    """With the run hooks a tool whose run is not traced cannot be recorded,
    so it does not run."""
    ran: list[str] = []
    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme", strict_tools=True)
    tracing(recorder)
    try:
        with pytest.raises(UserError) as raised:
            await Runner.run(
                support_agents(ran),
                "where is my refund?",
                hooks=recorder.run_hooks(),
                run_config=RunConfig(tracing_disabled=True),
            )
    finally:
        await recorder.close()
    assert ran == []
    assert isinstance(raised.value.__cause__, InvalidRequest)
    assert "outside a recorded trace" in str(raised.value.__cause__)


async def test_a_price_the_ledger_would_refuse_is_left_out(
    nats_server, client, tracing, tmp_path: Path
) -> None:
    """``pricing`` answers "abc" for triage's model and a Decimal that
    ``str`` spells in exponent form for billing's: the first is not
    recorded (and spoils nothing else), the second in plain notation."""

    def pricing(model: str, tokens: Any) -> Any:
        return "abc" if model == "fake-triage" else Decimal("1E-7")

    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme", pricing=pricing)
    tracing(recorder)
    try:
        await Runner.run(support_agents([]), "refund?", run_config=RunConfig(group_id="conv-priced"))
        await recorder.flush()
    finally:
        await recorder.close()
    assert recorder.lost == 0
    events = ordered(await client.load_session("conv-priced", tenant="acme"))
    costs = [(e.payload["model"], e.payload["amount"]) for e in events if e.event_type == "cost.recorded"]
    assert costs == [("fake-billing", "0.0000001")]
    assert (
        len([e for e in events if e.event_type == "attempt.completed"]) == 5
    )  # 3 model calls, tool, handoff
    assert audit_ledger(tmp_path / "ledger.db").events == len(events)


async def test_run_hooks_need_a_strict_recorder(nats_server, sequencer) -> None:
    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme")
    try:
        with pytest.raises(InvalidRequest, match="strict_tools"):
            recorder.run_hooks()
    finally:
        await recorder.close()


async def test_a_recorder_that_cannot_connect_says_so() -> None:
    with pytest.raises(LedgerError) as raised:
        await OpenAIAgentsRecorder.connect("nats://127.0.0.1:1", tenant="acme", connect_timeout=0.5)
    assert raised.value.code == "unavailable"
    never_started = OpenAIAgentsRecorder("nats://127.0.0.1:1", tenant="acme")
    never_started.close_sync(timeout=1.0)  # returns: there is no thread to stop


def test_guarantees_state_every_hook() -> None:
    for strict in (False, True):
        stated = guarantees(strict_tools=strict, priced=False)
        assert set(stated.hooks) == set(HOOKS)
        assert stated.hooks["requested_before_call"] == ("strict" if strict else "best_effort")
        # Only what the failure-injection tests above prove is strict: the request before the call.
        assert {hook for hook, level in stated.hooks.items() if level == "strict"} <= {
            "requested_before_call"
        }
        assert stated.hooks["cost"] == "unsupported"
    assert guarantees(strict_tools=False, priced=True).hooks["cost"] == "best_effort"


async def test_a_recorded_run_maps_to_genai_spans(nats_server, client, tracing) -> None:
    """The OpenTelemetry mapping (spec/otel.md) over what this recorder
    recorded: a Responses API agent (its request names no model; the
    response does) calls a strict tool and hands off to a Chat Completions
    agent. The spans' names and gen_ai.* attributes, as exported."""
    ran: list[str] = []

    @function_tool
    async def lookup_order(order_id: str) -> str:
        """Look an order up."""
        ran.append(order_id)
        return "shipped"

    billing = Agent(name="billing", model=FakeModel("fake-billing", [[text("refund issued")]]))
    triage = Agent(
        name="triage",
        tools=[lookup_order],
        handoffs=[billing],
        model=FakeModel(
            "gpt-triage",
            [
                [tool_call("lookup_order", '{"order_id": "A-17"}', "call-1")],
                [tool_call("transfer_to_billing", "{}", "call-2")],
            ],
        ),
    )
    recorder = await OpenAIAgentsRecorder.connect(nats_server.url, tenant="acme", strict_tools=True)
    tracing(recorder)
    try:
        result = await Runner.run(
            triage,
            "where is my refund?",
            hooks=recorder.run_hooks(),
            run_config=RunConfig(group_id="conv-otel"),
        )
        await recorder.flush()
    finally:
        await recorder.close()
    assert result.final_output == "refund issued" and ran == ["A-17"] and recorder.lost == 0

    structure = await client.load_structure("conv-otel", tenant="acme")
    main = next(lane for lane in structure.lanes if lane.name == "main")
    sub = next(lane for lane in structure.lanes if lane.name != "main")
    found = await map_history(client, SpanMapper(tail_url="http://tail.test"), "conv-otel", tenant="acme")
    assert found.open_spans == 0
    spans = sorted(found.spans, key=lambda span: span.start_ns)
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    assert {name: len(group) for name, group in by_name.items()} == {
        "chat fake-billing": 1,
        "chat gpt-triage": 2,  # named by the model that answered: the request names none
        "execute_tool handoff": 1,
        "execute_tool lookup_order": 1,
        f"invoke_agent {sub.name}": 1,
        "invoke_agent main": 1,
    }
    (run,) = by_name["invoke_agent main"]
    trace = ids.trace_id("acme", "conv-otel", run.attributes["laneledger.run_id"])
    assert {span.trace_id for span in spans} == {trace} and run.parent_span_id is None
    for span in spans:
        assert span.attributes["gen_ai.conversation.id"] == "conv-otel"
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert (run.attributes["gen_ai.agent.name"], run.attributes["gen_ai.agent.id"]) == ("main", main.actor_id)

    for chat in by_name["chat gpt-triage"]:
        a = chat.attributes
        assert a["gen_ai.operation.name"] == "chat" and chat.kind == "client"
        assert a["gen_ai.provider.name"] == "openai"
        assert "gen_ai.request.model" not in a  # the request did not know it
        assert a["gen_ai.response.model"] == "gpt-triage"
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (7, 3)
        assert a["gen_ai.agent.name"] == "main" and chat.parent_span_id == run.span_id
    (billing_chat,) = by_name["chat fake-billing"]
    a = billing_chat.attributes
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "fake-billing"
    assert "gen_ai.response.model" not in a  # a generation span's model is the request's
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (100, 20)
    (sub_span,) = by_name[f"invoke_agent {sub.name}"]
    assert a["gen_ai.agent.name"] == sub.name and billing_chat.parent_span_id == sub_span.span_id
    assert sub_span.attributes["gen_ai.agent.id"] == sub.actor_id

    (tool,) = by_name["execute_tool lookup_order"]
    assert tool.attributes["gen_ai.tool.name"] == "lookup_order"
    assert tool.attributes["gen_ai.tool.call.id"] == "call-1"  # the SDK's call id, not the attempt id
    assert tool.attributes["gen_ai.agent.name"] == "main" and tool.parent_span_id == run.span_id
    (handoff,) = by_name["execute_tool handoff"]
    assert handoff.attributes["gen_ai.tool.call.id"] == handoff.attributes["laneledger.subject_id"]
    assert sub_span.parent_span_id == handoff.span_id  # the sub-agent hangs off the call that spawned it
    assert "shipped" not in repr([span.attributes for span in spans]), "no content inline"
