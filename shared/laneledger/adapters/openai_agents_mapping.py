"""How an OpenAI Agents SDK trace becomes ledger events (spec/openai-agents.md).

This module sees no SDK object: ``laneledger.adapters.openai_agents`` copies
each trace and span into a ``TraceInfo`` / ``SpanInfo`` the moment the SDK
reports it, and the recorder thread hands those, in order, to one
``TraceMapper``. A trace is a run (its ``group_id``, else the trace id, the
session); each agent span is an agent with its own lane, actor and spine
(the first one lane ``main``, every later one - a handoff's target, an agent
called as a tool - a ``subagent`` lane under the agent it came from);
generation and response spans are model calls, function spans tool calls,
handoff spans tool calls whose target's prompt names them (``spawned_by``).

Every id is derived from the trace and span ids (``DerivedRecorder``), so a
job retried after the ledger came back records once.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

from laneledger.adapters.derived import DerivedRecorder
from laneledger.adapters.openai_agents_spans import (
    STRUCTURAL_SPANS,
    SpanInfo,
    ToolRequest,
    TraceInfo,
    arguments_of,
    duration_ms,
    id8,
    tokens_of,
)
from laneledger.compat.claudecode_names import DEFAULT_HUMAN
from laneledger.contract.errors import DuplicateEvent, IdempotencyViolation, InvalidRequest, LedgerError
from laneledger.contract.model import Lane
from laneledger.contract.vocabulary import DECIMAL_AMOUNT
from laneledger.sdk.client import AppendHandle, LedgerClient
from laneledger.sdk.content import prepared
from laneledger.sdk.guarantees import AdapterGuarantees, Level
from laneledger.sdk.retry import Backoff, retry
from laneledger.sdk.spine import PROMPT_EVENT, SPAWNED_BY, Spine

log = logging.getLogger(__name__)

# A report the ledger could not take yet (unreachable, slow, a quota):
# recorded again until it commits or the recorder's close deadline passes.
RECORD_BACKOFF = Backoff(first=0.1, cap=2.0)

ADAPTER = "laneledger.openai-agents"
ADAPTER_VERSION = "2"  # 2: a tool call's outcome is best effort, strict or not
RUNTIME = "openai-agents"
DENIED = "denied_unrecorded"
TOOL_ERROR = "tool_error"
MODEL_ERROR = "model_error"
# A model call's action name when its span does not name the model (yet): a
# response span names it only in its Response. Not a model: a request so
# named has no ``model``.
RESPONSES_ACTION = "openai-responses"
UNKNOWN_MODEL = "unknown"
UNNAMED_MODELS = frozenset({RESPONSES_ACTION, UNKNOWN_MODEL})
EXT = "ext.openai_agents"
MODEL_SPANS = ("generation", "response")

# (model, token counts) -> the call's price in USD as a decimal, or None.
Pricing = Callable[[str, Mapping[str, int]], Decimal | str | None]

T = TypeVar("T")

MAX_PENDING = 64  # appends submitted ahead of their receipts


def guarantees(*, strict_tools: bool, priced: bool) -> AdapterGuarantees:
    """What the recorder guarantees: everything it sees through the tracing
    processor is after the fact (the SDK calls processors without letting
    them stop anything); with the run hooks, a function tool's request is
    committed before the tool runs, or the tool does not run. Its outcome
    still comes from the processor, so ``tool_call`` (request and outcome)
    stays best effort."""
    strict_or_not: Level = "strict" if strict_tools else "best_effort"
    return AdapterGuarantees(
        adapter=ADAPTER,
        version=ADAPTER_VERSION,
        hooks={
            "run": "best_effort",
            "turn": "best_effort",
            "model_call": "best_effort",
            "tool_call": "best_effort",
            "requested_before_call": strict_or_not,
            "outcome": "best_effort",
            "cost": "best_effort" if priced else "unsupported",
            "causation": "best_effort",
            "subagent": "best_effort",
            "streaming": "unsupported",
            "hitl": "unsupported",
        },
        recovery="none",
    )


@dataclass
class AgentLane:
    """One agent span's lane, actor, turn and spine."""

    lane: Lane
    actor: str
    turn_id: str
    spine: Spine
    agent_name: str | None = None
    ended_id: str | None = None  # its turn's end event
    head: int | None = None  # the lane's head as this thread's last append left it; None: ask

    def latest(self) -> str | None:
        return self.spine.last_inference_id or self.spine.prompt_id


@dataclass
class Call:
    """A model or tool call whose request is recorded."""

    lane: AgentLane
    action_type: str
    name: str
    action_id: str
    attempt_id: str
    requested_id: str
    has_input: bool


@dataclass
class Pending:
    """An append submitted and not yet settled; ``handle`` None: to append again."""

    agent: AgentLane
    run: str
    key: str
    events: list[dict[str, Any]]
    handle: AppendHandle | None


@dataclass
class Handoff:
    """A handoff that ended, waiting for its target's agent span."""

    to_agent: str | None
    requested_id: str
    source: AgentLane


@dataclass
class TraceState:
    info: TraceInfo
    session: str
    main: AgentLane
    main_claimed: bool = False
    agents: dict[str, AgentLane] = field(default_factory=dict)  # agent span id ->
    parents: dict[str, str | None] = field(default_factory=dict)  # span id -> parent span id
    calls: dict[str, Call] = field(default_factory=dict)  # span id ->
    denied: set[str] = field(default_factory=set)  # function spans whose tool was stopped
    handoffs: list[Handoff] = field(default_factory=list)
    error: dict[str, Any] | None = None  # the first agent span's error: the run failed


class TraceMapper(DerivedRecorder):
    """Turns trace and span reports into appends; runs on the recorder thread."""

    runtime = RUNTIME

    def __init__(
        self,
        client: LedgerClient,
        *,
        tenant: str,
        strict_tools: bool,
        pricing: Pricing | None = None,
        provider: str = "openai",
        sdk_version: str = "unknown",
        human: str = DEFAULT_HUMAN,
        timeout: float | None = None,
        data_subject: str | None = None,
    ) -> None:
        super().__init__(client, tenant=tenant, timeout=timeout, data_subject=data_subject)
        self.strict_tools = strict_tools
        self.pricing = pricing
        self.provider = provider
        self.sdk_version = sdk_version
        self.human = human
        self.guarantees = guarantees(strict_tools=strict_tools, priced=pricing is not None)
        self.traces: dict[str, TraceState] = {}
        self.give_up_at: float | None = None  # set when the recorder closes: stop retrying then
        self.lost = 0  # reports dropped: the ledger stayed down past close, or refused them
        self.pending: deque[Pending] = deque()  # submitted, receipts not yet seen

    # -- retrying -------------------------------------------------------------------------

    async def retrying(self, what: str, job: Callable[[], Awaitable[T]]) -> T | None:
        """Run ``job`` until it succeeds: on a retryable error (the ledger
        unreachable or slow, a tenant quota reached) it is run again (derived
        ids make that safe), backing off, until the recorder closes and its
        deadline passes; any other refusal drops it (a bug here, logged)."""
        try:
            return await retry(job, RECORD_BACKOFF, retry_on=self._worth_retrying)
        except LedgerError as exc:
            self.lost += 1
            if exc.retryable:
                log.warning("laneledger: gave up recording %s: %s", what, exc)
            else:
                log.warning("laneledger: the ledger refused %s: %s", what, exc)
            return None

    def _worth_retrying(self, exc: Exception) -> bool:
        past_close = self.give_up_at is not None and time.monotonic() >= self.give_up_at
        return isinstance(exc, LedgerError) and exc.retryable and not past_close

    # -- traces -------------------------------------------------------------------------

    async def trace_started(self, info: TraceInfo) -> None:
        """The run's start on lane ``main``: ``run.started`` (the guarantees),
        the synthesized root prompt (no callback carries the run's input),
        turn 1."""
        session = info.group_id or info.trace_id
        run = info.trace_id
        actor = await self._actor("main", self.sdk_version)
        human = await self._human(self.human)
        lane = await self.client.create_lane(self.tenant, session, run, "main", actor_id=actor)
        turn = await self._turn(info.trace_id, lane, "main")
        main = AgentLane(lane, actor, turn, Spine())
        started: dict[str, Any] = {
            "adapter": self.guarantees.to_payload(),
            "workflow_name": info.workflow_name,
        }
        if info.group_id is not None:
            started["group_id"] = info.group_id
        if info.metadata:
            started["metadata"] = info.metadata
        prompt = self._event(
            lane,
            run,
            "prompt/main",
            PROMPT_EVENT,
            lane.id,
            {
                "prompt_kind": "user",
                "synthesized": True,
                "label": "synthesized by the laneledger openai-agents recorder: "
                "traces do not carry the run's input",
            },
            None,
            human,
        )
        events = [
            self._event(lane, run, "run.started", "run.started", run, started, None, actor),
            prompt,
            self._event(
                lane, run, "turn.started/main", "turn.started", turn, {"turn_no": 1}, prompt["id"], actor
            ),
        ]
        await self._commit(main, run, "start", events)
        main.spine.prompted(prompt["id"])
        self.traces[info.trace_id] = TraceState(info, session, main)

    async def trace_ended(self, info: TraceInfo) -> None:
        state = self.traces.get(info.trace_id)
        if state is None:
            return
        main, run = state.main, info.trace_id
        if state.error is None:
            end = self._event(
                main.lane,
                run,
                "run.ended",
                "run.completed",
                run,
                {},
                main.ended_id or main.latest(),
                main.actor,
            )
        else:
            end = self._event(
                main.lane,
                run,
                "run.ended",
                "run.failed",
                run,
                {"error": state.error},
                main.ended_id or main.latest(),
                main.actor,
            )
        await self._commit(main, run, "end", [end])
        del self.traces[info.trace_id]

    # -- spans --------------------------------------------------------------------------------

    async def span_started(self, span: SpanInfo) -> None:
        state = self.traces.get(span.trace_id)
        if state is None:
            return  # its trace was not recorded (started before the processor was set)
        state.parents[span.span_id] = span.parent_id
        kind = span.kind
        if kind == "agent":
            await self._agent_started(state, span)
        elif kind in MODEL_SPANS:
            await self._request(state, span, "model_call", self._model_name(span))
        elif kind == "function" and not self.strict_tools:
            await self._request(state, span, "tool_call", str(span.data.get("name") or "function"))
        elif kind == "handoff":
            await self._request(state, span, "tool_call", "handoff")

    async def span_ended(self, span: SpanInfo) -> None:
        state = self.traces.get(span.trace_id)
        if state is None:
            return
        state.parents.setdefault(span.span_id, span.parent_id)
        kind = span.kind
        if kind == "agent":
            await self._agent_ended(state, span)
        elif kind in MODEL_SPANS:
            await self._settle(state, span, "model_call", self._model_name(span))
        elif kind == "function":
            if span.span_id not in state.denied:
                await self._settle(state, span, "tool_call", str(span.data.get("name") or "function"))
        elif kind == "handoff":
            call = await self._settle(state, span, "tool_call", "handoff")
            to_agent = span.data.get("to_agent")
            state.handoffs.append(
                Handoff(to_agent if isinstance(to_agent, str) else None, call.requested_id, call.lane)
            )
        elif kind not in STRUCTURAL_SPANS:
            await self._note(state, span)

    async def tool_requested(self, request: ToolRequest) -> None:
        """Strict: commit a function tool's request before it runs, or raise
        (the hook re-raises, the SDK does not run the tool). A request whose
        receipt did not come has its ``attempt.failed`` (``denied_unrecorded``)
        queued right behind it, so if it commits later it is closed, not left
        open; if it never reached the ledger, neither does the failure."""
        state = self.traces.get(request.trace_id)
        if state is None:
            raise InvalidRequest(
                "the tool's run has no recorded trace (is tracing disabled, or the processor not set?)",
                trace_id=request.trace_id,
            )
        # Everything before the request committed first, so its head and its
        # causes are known.
        await self.settle()
        state.parents.setdefault(request.span_id, None)
        agent = self._lane_of(state, request.span_id)
        run, key = request.trace_id, request.span_id
        extra: dict[str, Any] = {"input": arguments_of(request.arguments)}
        if request.tool_call_id is not None:
            extra["tool_call_id"] = request.tool_call_id
        state.denied.add(key)  # until the request commits: the tool is stopped otherwise
        call, events = await self._request_events(
            state, agent, key, "tool_call", request.name, extra, occurred_at=None
        )
        head = agent.head
        if head is None:
            head = (await self.client.get_lane(agent.lane.id, tenant=self.tenant)).last_seq
        agent.head = None  # unknown until the append is answered
        try:
            agent.head = await self._append(agent.lane, run, f"{key}/requested", events, head=head)
        except LedgerError:
            failed = self._event(
                agent.lane,
                run,
                f"{key}/terminal",
                "attempt.failed",
                call.attempt_id,
                {
                    "action_type": "tool_call",
                    "name": request.name,
                    "attempt_no": 1,
                    "error": {"code": DENIED, "message": "stopped: the ledger could not commit the request"},
                },
                call.requested_id,
                agent.actor,
            )
            await self._queue_behind(agent.lane, run, f"{key}/denied", failed, head + len(events))
            raise
        state.denied.discard(key)
        state.calls[key] = call

    def tool_withdrawn(self, trace_id: str, span_id: str) -> None:
        """A tool request the hook stopped waiting for before it began: the
        tool does not run, and its span records nothing."""
        state = self.traces.get(trace_id)
        if state is not None:
            state.denied.add(span_id)

    # -- agents -------------------------------------------------------------------------------

    async def _commit(self, agent: AgentLane, run: str, key: str, events: list[dict[str, Any]]) -> None:
        """Submit an append on the agent's lane at the head this thread's
        submits left it at, without waiting for its receipt (``settle``
        does): this thread is the lane's only writer, but for a denial queued
        behind a request, which a lane conflict reveals."""
        if (
            agent.head is None
        ):  # a new lane, or a submit that failed: ask (a stale answer conflicts, and settles)
            agent.head = (await self.client.get_lane(agent.lane.id, tenant=self.tenant)).last_seq
        ready = [prepared(e, self.client.redactor) for e in events]
        head, agent.head = agent.head, None  # unknown if the submit fails
        handle = await self.client.submit(agent.lane, head, ready, append_id=self._id(run, "append", key))
        agent.head = head + len(events)
        self.pending.append(Pending(agent, run, key, events, handle))
        if len(self.pending) >= MAX_PENDING:
            await self.settle()

    async def settle(self) -> None:
        """Wait for the receipts of the submitted appends, in order. One the
        ledger refused (or did not answer) is appended again, at the lane's
        real head, before the ones after it: those submitted behind it on its
        lane (refused for the head they expected) and those caused by its
        events follow it again the same way, so the ledger gets every event,
        in order, once. Raises while the ledger is unreachable (the pending
        appends stay, for the next try)."""
        while self.pending:
            p = self.pending[0]
            if p.handle is not None:
                try:
                    await p.handle.receipt(self.timeout)
                except (DuplicateEvent, IdempotencyViolation):
                    pass  # recorded already
                except LedgerError:
                    p.handle = None  # refused or unanswered: append it again, below
                else:
                    self.pending.popleft()
                    continue
            if p.handle is None:
                p.agent.head = None
                try:
                    p.agent.head = await self._append(p.agent.lane, p.run, p.key, p.events)
                except LedgerError as exc:
                    if exc.retryable:
                        raise
                    # Refused for what it is (a bug here): it must not hold up the rest.
                    self.lost += 1
                    log.warning("laneledger: the ledger refused %s: %s", p.key, exc)
            self.pending.popleft()

    async def _turn(self, run: str, lane: Lane, key: str) -> str:
        turn = await self.client.create_turn(
            lane.id, 1, turn_id=self._id(run, "turn", key), tenant=self.tenant
        )
        return turn.id

    def _lane_of(self, state: TraceState, span_id: str | None) -> AgentLane:
        """The lane of the nearest agent span at or above ``span_id``; main
        when there is none."""
        seen: set[str] = set()
        while span_id is not None and span_id not in seen:
            seen.add(span_id)
            if span_id in state.agents:
                return state.agents[span_id]
            span_id = state.parents.get(span_id)
        return state.main

    def _spawning_call(self, state: TraceState, span_id: str | None) -> Call | None:
        """The nearest recorded tool call above ``span_id`` (an agent run as a tool)."""
        seen: set[str] = set()
        while span_id is not None and span_id not in seen:
            seen.add(span_id)
            call = state.calls.get(span_id)
            if call is not None and call.action_type == "tool_call":
                return call
            if span_id in state.agents:
                return None
            span_id = state.parents.get(span_id)
        return None

    async def _agent_started(self, state: TraceState, span: SpanInfo) -> None:
        name = span.data.get("name")
        name = name if isinstance(name, str) else None
        if not state.main_claimed:
            state.main_claimed = True
            state.main.agent_name = name
            state.agents[span.span_id] = state.main
            return
        handoff = next((h for h in state.handoffs if h.to_agent in (name, None)), None)
        spawned_by: str | None
        if handoff is not None:
            parent, spawned_by = handoff.source, handoff.requested_id
        else:
            parent = self._lane_of(state, span.parent_id)
            spawning = self._spawning_call(state, span.parent_id)
            spawned_by = spawning.requested_id if spawning is not None else None
        run, key = span.trace_id, f"sub-{span.span_id}"
        actor = await self._actor(f"sub-{id8(span.span_id)}", self.sdk_version)
        lane = await self.client.create_lane(
            self.tenant,
            state.session,
            run,
            key,
            kind="subagent",
            parent_lane_id=parent.lane.id,
            actor_id=actor,
        )
        turn = await self._turn(run, lane, key)
        payload: dict[str, Any] = {
            "prompt_kind": "subagent",
            "synthesized": True,
            "label": "synthesized by the laneledger openai-agents recorder: "
            "an agent span does not carry its input",
            "agent_name": name,
            "via": "handoff" if handoff is not None else "nested",
        }
        if spawned_by is not None:
            payload[SPAWNED_BY] = spawned_by
        # §2b: the parent's latest inference when the sub-agent begins.
        prompt = self._event(
            lane,
            run,
            f"prompt/{key}",
            PROMPT_EVENT,
            lane.id,
            payload,
            parent.spine.spawn_cause(),
            actor,
            span.started_at,
        )
        created = self._event(
            lane,
            run,
            f"lane.created/{key}",
            "lane.created",
            lane.id,
            {"name": key, "kind": "subagent", "parent_lane_id": parent.lane.id, "agent_name": name},
            prompt["id"],
            actor,
            span.started_at,
        )
        started = self._event(
            lane,
            run,
            f"turn.started/{key}",
            "turn.started",
            turn,
            {"turn_no": 1},
            prompt["id"],
            actor,
            span.started_at,
        )
        agent = AgentLane(lane, actor, turn, Spine(prompt_id=prompt["id"]), name)
        await self._commit(agent, run, f"start/{key}", [prompt, created, started])
        if handoff is not None:
            state.handoffs.remove(handoff)
        state.agents[span.span_id] = agent

    async def _agent_ended(self, state: TraceState, span: SpanInfo) -> None:
        agent = state.agents.get(span.span_id)
        if agent is None:
            return
        payload: dict[str, Any] = {"turn_no": 1, "agent_name": agent.agent_name}
        for field_name in ("tools", "handoffs", "output_type"):
            if span.data.get(field_name) is not None:
                payload[field_name] = span.data[field_name]
        if span.error is not None:
            payload["error"] = span.error
        key = "main" if agent is state.main else f"sub-{span.span_id}"
        end = self._event(
            agent.lane,
            span.trace_id,
            f"turn.ended/{key}",
            "turn.failed" if span.error is not None else "turn.completed",
            agent.turn_id,
            payload,
            agent.latest(),
            agent.actor,
            span.ended_at,
        )
        await self._commit(agent, span.trace_id, f"end/{key}", [end])
        agent.ended_id = end["id"]
        if span.error is not None and state.error is None:
            state.error = span.error

    # -- model and tool calls --------------------------------------------------------------

    def _model_name(self, span: SpanInfo) -> str:
        model = span.data.get("model")
        if isinstance(model, str) and model:
            return model
        return RESPONSES_ACTION if span.kind == "response" else UNKNOWN_MODEL

    async def _request_events(
        self,
        state: TraceState,
        agent: AgentLane,
        key: str,
        action_type: str,
        name: str,
        extra: Mapping[str, Any],
        *,
        occurred_at: str | None,
    ) -> tuple[Call, list[dict[str, Any]]]:
        """The action and attempt (created now) and their ``action.started``
        and ``attempt.requested``, caused per the spine: an inference by the
        previous inference (or the prompt), a tool call by the inference
        that asked for it."""
        run = state.info.trace_id
        model_call = action_type == "model_call"
        action_id, attempt_id = self._id(run, "action", key), self._id(run, "attempt", key)
        await self.client.create_action(
            agent.lane.id,
            agent.turn_id,
            action_type,
            name,
            effect="none" if model_call or name == "handoff" else "unknown",
            idempotency="not_applicable" if model_call else "unknown",
            action_id=action_id,
            tenant=self.tenant,
        )
        await self.client.create_attempt(
            agent.lane.id, action_id, 1, attempt_id=attempt_id, tenant=self.tenant
        )
        cause = agent.spine.inference_cause() if model_call else agent.spine.tool_cause()
        base: dict[str, Any] = {"action_type": action_type, "name": name}
        started = self._event(
            agent.lane,
            run,
            f"{key}/action",
            "action.started",
            action_id,
            base,
            cause,
            agent.actor,
            occurred_at,
        )
        request_payload = {**base, "attempt_no": 1, "span_id": key, **extra}
        if model_call:
            # The model as the request knows it: a generation span names it
            # from its start, a response span only once the response is in
            # (then the outcome's ``model`` names it), so ``name`` may be a
            # placeholder that is not put forward as the model.
            if name not in UNNAMED_MODELS:
                request_payload["model"] = name
            request_payload["provider"] = self.provider
        requested = self._event(
            agent.lane,
            run,
            f"{key}/requested",
            "attempt.requested",
            attempt_id,
            request_payload,
            cause,
            agent.actor,
            occurred_at,
        )
        call = Call(agent, action_type, name, action_id, attempt_id, requested["id"], "input" in extra)
        return call, [started, requested]

    async def _request(self, state: TraceState, span: SpanInfo, action_type: str, name: str) -> Call:
        agent = self._lane_of(state, span.parent_id)
        extra: dict[str, Any] = {}
        if span.data.get("input") is not None:
            extra["input"] = (
                arguments_of(span.data["input"]) if action_type == "tool_call" else span.data["input"]
            )
        if span.kind == "handoff" and span.data.get("from_agent") is not None:
            extra["from_agent"] = span.data["from_agent"]
        call, events = await self._request_events(
            state, agent, span.span_id, action_type, name, extra, occurred_at=span.started_at
        )
        await self._commit(agent, span.trace_id, f"{span.span_id}/requested", events)
        state.calls[span.span_id] = call
        return call

    async def _settle(self, state: TraceState, span: SpanInfo, action_type: str, name: str) -> Call:
        """The call's ``attempt.completed`` / ``.failed`` and its action's end
        (a model call's ``cost.recorded`` with them, when priced). A call
        whose request is not recorded (a function tool the run hooks did not
        see) has it recorded now, marked ``recorded_at_end``."""
        call = state.calls.get(span.span_id)
        if call is None:
            agent = self._lane_of(state, span.parent_id)
            call, events = await self._request_events(
                state,
                agent,
                span.span_id,
                action_type,
                name,
                {"recorded_at_end": True},
                occurred_at=span.started_at,
            )
        else:
            events = []
        agent, run, key = call.lane, span.trace_id, span.span_id
        base: dict[str, Any] = {"action_type": action_type, "name": call.name, "attempt_no": 1}
        duration = duration_ms(span)
        if duration is not None:
            base["duration_ms"] = duration
        model_call = action_type == "model_call"
        if span.error is not None:
            error = {"code": MODEL_ERROR if model_call else TOOL_ERROR, **span.error}
            terminal = self._event(
                agent.lane,
                run,
                f"{key}/terminal",
                "attempt.failed",
                call.attempt_id,
                {**base, "error": error},
                call.requested_id,
                agent.actor,
                span.ended_at,
            )
        else:
            outcome = self._outcome(span, call)
            terminal = self._event(
                agent.lane,
                run,
                f"{key}/terminal",
                "attempt.completed",
                call.attempt_id,
                {**base, "outcome": outcome},
                call.requested_id,
                agent.actor,
                span.ended_at,
            )
        events.append(terminal)
        if model_call and span.error is None:
            cost = self._cost(call, span)
            if cost is not None:
                events.append(
                    self._event(
                        agent.lane,
                        run,
                        f"{key}/cost",
                        "cost.recorded",
                        call.attempt_id,
                        cost,
                        terminal["id"],
                        agent.actor,
                        span.ended_at,
                    )
                )
        ended = self._event(
            agent.lane,
            run,
            f"{key}/action.ended",
            "action.failed" if span.error is not None else "action.completed",
            call.action_id,
            {"action_type": action_type, "name": call.name, "attempts": 1},
            terminal["id"],
            agent.actor,
            span.ended_at,
        )
        events.append(ended)
        await self._commit(agent, run, f"{key}/settled", events)
        state.calls.pop(key, None)
        if model_call and span.error is None:
            agent.spine.inferred(terminal["id"])
        return call

    def _outcome(self, span: SpanInfo, call: Call) -> dict[str, Any]:
        data = span.data
        if call.action_type == "model_call":
            outcome: dict[str, Any] = {"output": data.get("output")}
            if data.get("response_id") is not None:
                outcome["response_id"] = data["response_id"]
            if data.get("model") and data["model"] != call.name:
                outcome["model"] = data["model"]
            usage = data.get("usage")
            if usage:
                outcome["usage"] = usage
                outcome.update(tokens_of(usage))
            return outcome
        if span.kind == "handoff":
            return {"to_agent": data.get("to_agent")}
        outcome = {"result": data.get("output")}
        if not call.has_input and data.get("input") is not None:
            outcome["input"] = arguments_of(data["input"])
        return outcome

    def _cost(self, call: Call, span: SpanInfo) -> dict[str, Any] | None:
        if self.pricing is None:
            return None
        tokens = tokens_of(span.data.get("usage"))
        # A response span names its model only once the response is in.
        named = span.data.get("model")
        model = named if isinstance(named, str) and named else call.name
        amount = self.pricing(model, tokens)
        if amount is None:
            return None
        # A Decimal in plain notation (str() may give "1E-7"); an amount the
        # ledger would refuse is left out, not sent to spoil the append it rides.
        text = format(amount, "f") if isinstance(amount, Decimal) else str(amount)
        if DECIMAL_AMOUNT.match(text) is None:
            log.warning(
                "laneledger: pricing gave %r for %s, not a decimal amount: no cost recorded", amount, model
            )
            return None
        return {
            "provider": self.provider,
            "model": model,
            "amount": text,
            "currency": "USD",
            **tokens,
            "action_id": call.action_id,
            "attempt_id": call.attempt_id,
        }

    async def _note(self, state: TraceState, span: SpanInfo) -> None:
        """A guardrail, custom or other span: an extension event on its
        agent's lane, hung off the agent's latest spine node."""
        agent = self._lane_of(state, span.parent_id)
        kind = span.kind
        event_type = f"{EXT}.{kind}" if kind in ("guardrail", "custom") else f"{EXT}.span"
        payload: dict[str, Any] = {"span_id": span.span_id, **span.data}
        if span.error is not None:
            payload["error"] = span.error
        event = self._event(
            agent.lane,
            span.trace_id,
            f"{span.span_id}/note",
            event_type,
            agent.lane.id,
            payload,
            agent.latest(),
            agent.actor,
            span.ended_at,
        )
        await self._commit(agent, span.trace_id, f"{span.span_id}/note", [event])
