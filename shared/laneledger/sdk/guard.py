"""The attempt guard: recording a plain Python agent loop safely
(spec/adapters.md).

Nested async context managers, turn → action → attempt::

    guard = Guard(recorder, actor_id)
    await guard.start_run()                     # run.started, with the guarantees
    await guard.prompt("fix the failing test")  # the root of the spine
    async with guard.turn() as turn:
        async with turn.model_call("claude-sonnet-4", provider="anthropic") as call:
            async with call.attempt() as attempt:
                reply = await model(...)        # runs only once the request is committed
                attempt.inference(text=reply.text, input_tokens=..., output_tokens=...,
                                  cost="0.0123")
        async with turn.tool_call("send_email", effect="write", idempotency="none") as call:
            async with call.attempt() as attempt:
                attempt.complete(result=await send(...))

Entering an attempt commits ``attempt.requested`` and only then runs the body:
when the ledger cannot commit, the typed error propagates out of ``async
with`` and the external call never happens. Leaving commits
``attempt.completed`` (with the outcome) or ``attempt.failed`` (with the
error, which is then re-raised). Another ``call.attempt()`` is a retry: the
next attempt number under the same action, caused by the failure (Korg §2).

After a crash, the recovery plan names the attempts that have a request and
no outcome. ``guard.resume(unresolved)`` retries a retry-safe one: its first
attempt closes the old one as failed with an ``outcome_unknown`` error naming
the new attempt, in the same atomic append as the new request.
``guard.hold(unresolved)`` asks a human instead (``hitl.paused``), and
``guard.close_unknown(unresolved)`` records that nobody will retry it.

Causation follows ``laneledger.sdk.spine``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from decimal import Decimal
from types import TracebackType
from typing import Any

from laneledger.contract.errors import InvalidRequest, LedgerError
from laneledger.contract.ids import new_id
from laneledger.contract.model import AppendCommitted, UnresolvedAttempt
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.sdk.guarantees import AdapterGuarantees
from laneledger.sdk.spine import PROMPT_EVENT, PROMPT_KINDS, SPAWNED_BY, Spine

ADAPTER = "laneledger.guard"  # the adapter's name on the wire (run.started), not a module path
ADAPTER_VERSION = "1"
OUTCOME_UNKNOWN = "outcome_unknown"

PLAIN_LOOP_GUARANTEES = AdapterGuarantees(
    adapter=ADAPTER,
    version=ADAPTER_VERSION,
    hooks={
        "run": "strict",
        "turn": "strict",
        "model_call": "strict",
        "tool_call": "strict",
        "requested_before_call": "strict",
        "outcome": "strict",
        "cost": "strict",
        "causation": "strict",
        "subagent": "strict",
        "streaming": "unsupported",
        "hitl": "best_effort",
    },
    recovery="snapshot_and_outcome_replay",
)


def error_payload(exc: BaseException) -> dict[str, Any]:
    """How a failed attempt names its error: type, message, and the ledger
    code when it is a ledger error."""
    error: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, LedgerError):
        error["code"] = exc.code
    return error


class Guard:
    """Records one agent (one lane, one actor) through turn → action →
    attempt scopes. Appends go through the ``LaneRecorder``, which serializes
    them, so concurrent tool calls of one turn are fine."""

    def __init__(
        self,
        recorder: LaneRecorder,
        actor_id: str,
        *,
        guarantees: AdapterGuarantees = PLAIN_LOOP_GUARANTEES,
        spine: Spine | None = None,
        next_turn_no: int = 1,
    ) -> None:
        self.recorder = recorder
        self.actor_id = actor_id
        self.guarantees = guarantees
        self.spine = spine or Spine()
        self.next_turn_no = next_turn_no
        self.last_receipt: AppendCommitted | None = None

    @classmethod
    async def open(
        cls,
        client: LedgerClient,
        tenant: str,
        session_id: str,
        run_id: str,
        name: str,
        actor_id: str,
        **options: Any,
    ) -> Guard:
        """A guard on lane ``name`` (created if new, resumed if not), owned by
        ``actor_id``; after a restart its turn numbers continue after the
        lane's last turn."""
        recorder = await LaneRecorder.open(client, tenant, session_id, run_id, name, actor_id=actor_id)
        turns = [
            t.turn_no
            for t in (await client.load_structure(session_id, run_id, tenant=tenant)).turns
            if t.lane_id == recorder.lane.id
        ]
        return cls(recorder, actor_id, next_turn_no=max(turns, default=0) + 1, **options)

    @property
    def client(self) -> LedgerClient:
        return self.recorder.client

    @property
    def lane_id(self) -> str:
        return self.recorder.lane.id

    @property
    def tenant(self) -> str:
        return self.recorder.lane.tenant

    def event(
        self,
        event_type: str,
        subject_id: str,
        payload: Mapping[str, Any] | None = None,
        cause: str | None = None,
    ) -> dict[str, Any]:
        return self.recorder.event(
            event_type,
            actor_id=self.actor_id,
            subject_id=subject_id,
            payload=payload or {},
            causation_id=cause,
        )

    async def commit(self, *events: dict[str, Any]) -> AppendCommitted:
        receipt = await self.recorder.append(list(events))
        assert isinstance(receipt, AppendCommitted)
        self.last_receipt = receipt  # e.g. for a checkpoint anchor (checkpoints.anchor_of)
        return receipt

    # -- run and prompt ---------------------------------------------------------------

    async def start_run(self, payload: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``run.started`` with the adapter's guarantees in ``payload.adapter``."""
        event = self.event(
            "run.started",
            self.recorder.lane.run_id,
            {**(payload or {}), "adapter": self.guarantees.to_payload()},
        )
        await self.commit(event)
        return event

    async def prompt(
        self,
        text: str | None = None,
        *,
        kind: str = "user",
        synthesized: bool = False,
        cause: str | None = None,
        **payload: Any,
    ) -> dict[str, Any]:
        """The spine's root (or a sub-agent's task, ``kind="subagent"``). A
        prompt the harness did not observe must say so: ``synthesized=True``."""
        if kind not in PROMPT_KINDS:
            raise InvalidRequest(f"a prompt's kind is one of {', '.join(PROMPT_KINDS)}", kind=kind)
        body: dict[str, Any] = {"prompt_kind": kind, "synthesized": synthesized, **payload}
        if text is not None:
            body["text"] = text
        event = self.event(PROMPT_EVENT, self.lane_id, body, cause)
        await self.commit(event)
        self.spine.prompted(event["id"])
        return event

    async def spawn(
        self,
        name: str,
        actor_id: str,
        task: str | None = None,
        *,
        spawned_by: AttemptScope | None = None,
        **prompt: Any,
    ) -> Guard:
        """A sub-agent on its own lane (kind ``subagent``, parent this lane)
        and actor; its prompt points at this agent's latest inference (§2b)
        and names the spawning tool call's attempt (``spawned_by``), when
        given."""
        lane = self.recorder.lane
        recorder = await LaneRecorder.open(
            self.client,
            lane.tenant,
            lane.session_id,
            lane.run_id,
            name,
            kind="subagent",
            parent_lane_id=lane.id,
            actor_id=actor_id,
        )
        child = Guard(recorder, actor_id, guarantees=self.guarantees)
        if spawned_by is not None:
            prompt[SPAWNED_BY] = spawned_by.requested_id
        await child.prompt(task, kind="subagent", cause=self.spine.spawn_cause(), **prompt)
        return child

    # -- scopes -----------------------------------------------------------------------------

    def turn(self, turn_no: int | None = None, *, turn_id: str | None = None) -> TurnScope:
        """The next turn, or turn ``turn_no``. With ``turn_id`` it re-enters a
        turn an earlier process started (after a crash): no new turn, no
        second ``turn.started``; leaving it ends the turn as usual."""
        if turn_no is None:
            turn_no = self.next_turn_no
        self.next_turn_no = max(self.next_turn_no, turn_no + 1)
        return TurnScope(self, turn_no, turn_id=turn_id)

    def resume(self, unresolved: UnresolvedAttempt) -> ActionScope:
        """Retry an attempt left unresolved by a crash. Its first attempt
        closes the old one (``attempt.failed``, ``outcome_unknown``, naming
        the new attempt) in the same append as the new request. Refuses an
        attempt that is not retry-safe: that one needs ``hold`` or
        ``close_unknown``."""
        if not unresolved.retry_safe:
            raise InvalidRequest(
                f"attempt {unresolved.attempt_id} ({unresolved.name}) is not safe to retry "
                f"({unresolved.reason}): hold it for a human or close it as unknown",
                attempt_id=unresolved.attempt_id,
                reason=unresolved.reason,
            )
        scope = ActionScope(
            self,
            unresolved.turn_id or "",
            unresolved.action_type or "tool_call",
            unresolved.name or "",
            action_id=unresolved.action_id,
        )
        scope.attempts = unresolved.attempt_no
        scope.superseded = unresolved
        scope.last_failure = None
        return scope

    async def hold(self, unresolved: UnresolvedAttempt, *, pause_id: str | None = None) -> dict[str, Any]:
        """Ask a human about an unresolved attempt (``hitl.paused``); the
        attempt stays unresolved until someone decides."""
        event = self.event(
            "hitl.paused",
            self.lane_id,
            {
                "pause_id": pause_id or new_id(),
                "trigger": "unresolved_attempt",
                "proposed_action": {
                    "attempt_id": unresolved.attempt_id,
                    "action_id": unresolved.action_id,
                    "name": unresolved.name,
                    "effect": unresolved.effect,
                    "reason": unresolved.reason,
                },
            },
            unresolved.requested_event_id,
        )
        await self.commit(event)
        return event

    async def close_unknown(self, unresolved: UnresolvedAttempt, *, reason: str) -> dict[str, Any]:
        """Close an unresolved attempt that will not be retried: failed, with
        an ``outcome_unknown`` error and no successor; its action fails too."""
        failed = self.event(
            "attempt.failed",
            unresolved.attempt_id,
            {
                "action_type": unresolved.action_type,
                "name": unresolved.name,
                "attempt_no": unresolved.attempt_no,
                "error": {"code": OUTCOME_UNKNOWN, "message": reason, "superseded_by": None},
            },
            unresolved.requested_event_id,
        )
        await self.commit(
            failed, self.event("action.failed", unresolved.action_id, {"name": unresolved.name}, failed["id"])
        )
        return failed


class TurnScope:
    """``turn.started`` on entry; ``turn.completed`` or ``turn.failed`` on exit."""

    def __init__(self, guard: Guard, turn_no: int, *, turn_id: str | None = None) -> None:
        self.guard = guard
        self.turn_no = turn_no
        self.turn_id = turn_id or ""
        self.outcome: dict[str, Any] = {}
        self._resumed = turn_id is not None

    def complete(self, **outcome: Any) -> None:
        """Fields for the ``turn.completed`` payload."""
        self.outcome.update(outcome)

    async def __aenter__(self) -> TurnScope:
        g = self.guard
        if self._resumed:
            return self
        turn = await g.client.create_turn(g.lane_id, self.turn_no, tenant=g.tenant)
        self.turn_id = turn.id
        await g.commit(g.event("turn.started", turn.id, {"turn_no": self.turn_no}, g.spine.tool_cause()))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        g = self.guard
        if exc is None:
            await g.commit(
                g.event(
                    "turn.completed",
                    self.turn_id,
                    {**self.outcome, "turn_no": self.turn_no},
                    g.spine.last_inference_id,
                )
            )
        elif isinstance(exc, Exception):
            await _record_failure(
                g,
                g.event(
                    "turn.failed",
                    self.turn_id,
                    {"turn_no": self.turn_no, "error": error_payload(exc)},
                    g.spine.last_inference_id,
                ),
                exc,
            )

    def model_call(self, model: str, *, provider: str | None = None) -> ActionScope:
        """An inference: effect ``none``, so always safe to retry."""
        return ActionScope(
            self.guard,
            self.turn_id,
            "model_call",
            model,
            effect="none",
            idempotency="not_applicable",
            provider=provider,
        )

    def tool_call(
        self,
        name: str,
        *,
        effect: str,
        idempotency: str,
        idempotency_key: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> ActionScope:
        """A tool call. ``effect`` and ``idempotency`` decide whether recovery
        may retry it unasked (spec/checkpoint.md, "Retry safety")."""
        return ActionScope(
            self.guard,
            self.turn_id,
            "tool_call",
            name,
            effect=effect,
            idempotency=idempotency,
            idempotency_key=idempotency_key,
            args=args,
        )


class ActionScope:
    """``action.started`` on entry; ``action.completed`` when its last attempt
    completed, ``action.failed`` otherwise."""

    def __init__(
        self,
        guard: Guard,
        turn_id: str,
        action_type: str,
        name: str,
        *,
        effect: str = "unknown",
        idempotency: str = "unknown",
        idempotency_key: str | None = None,
        provider: str | None = None,
        args: Mapping[str, Any] | None = None,
        action_id: str | None = None,
    ) -> None:
        self.guard = guard
        self.turn_id = turn_id
        self.action_type = action_type
        self.name = name
        self.effect = effect
        self.idempotency = idempotency
        self.idempotency_key = idempotency_key
        self.provider = provider
        self.args = dict(args) if args is not None else None
        self.action_id = action_id or ""
        self.attempts = 0  # the highest attempt number so far
        self.cause: str | None = None  # what this action's first request points at
        self.last_failure: str | None = None  # a retry is caused by the previous failure
        self.last_terminal: str | None = None
        self.succeeded = False
        self.superseded: UnresolvedAttempt | None = None
        self._resumed = action_id is not None

    async def __aenter__(self) -> ActionScope:
        g = self.guard
        self.cause = g.spine.inference_cause() if self.action_type == "model_call" else g.spine.tool_cause()
        if self._resumed:
            return self  # the action and its action.started exist already
        action = await g.client.create_action(
            g.lane_id,
            self.turn_id,
            self.action_type,
            self.name,
            effect=self.effect,
            idempotency=self.idempotency,
            idempotency_key=self.idempotency_key,
            tenant=g.tenant,
        )
        self.action_id = action.id
        payload: dict[str, Any] = {"action_type": self.action_type, "name": self.name}
        if self.args is not None:
            payload["args"] = self.args
        await g.commit(g.event("action.started", action.id, payload, self.cause))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        g = self.guard
        if exc is not None and not isinstance(exc, Exception):
            return  # cancelled or exiting: the outcome is unknown, recovery decides
        payload = {"action_type": self.action_type, "name": self.name, "attempts": self.attempts}
        if exc is None and self.succeeded:
            await g.commit(g.event("action.completed", self.action_id, payload, self.last_terminal))
            return
        failed = g.event(
            "action.failed",
            self.action_id,
            {**payload, **({"error": error_payload(exc)} if exc is not None else {})},
            self.last_terminal,
        )
        if exc is None:
            await g.commit(failed)
        else:
            await _record_failure(g, failed, exc)

    def attempt(self) -> AttemptScope:
        """The next physical try: attempt number = the previous one + 1."""
        self.attempts += 1
        return AttemptScope(self, self.attempts)


class AttemptScope:
    """One physical try. The request is committed before the body runs."""

    def __init__(self, action: ActionScope, attempt_no: int) -> None:
        self.action = action
        self.attempt_no = attempt_no
        self.attempt_id = ""
        self.requested_id = ""
        self.outcome: dict[str, Any] = {}
        self._cost: dict[str, Any] | None = None
        self._started = 0.0

    def _base(self) -> dict[str, Any]:
        a = self.action
        base = {"action_type": a.action_type, "name": a.name, "attempt_no": self.attempt_no}
        if a.action_type == "model_call":
            base["model"] = a.name
            if a.provider is not None:  # so a reader (the OTel mapping) names it without the cost
                base["provider"] = a.provider
        return base

    async def __aenter__(self) -> AttemptScope:
        a, g = self.action, self.action.guard
        attempt = await g.client.create_attempt(g.lane_id, a.action_id, self.attempt_no, tenant=g.tenant)
        self.attempt_id = attempt.id
        events = []
        cause = a.last_failure or a.cause
        if a.superseded is not None:
            old = a.superseded
            closed = g.event(
                "attempt.failed",
                old.attempt_id,
                {
                    "action_type": old.action_type,
                    "name": old.name,
                    "attempt_no": old.attempt_no,
                    "error": {
                        "code": OUTCOME_UNKNOWN,
                        "superseded_by": attempt.id,
                        "message": f"unresolved after a crash; superseded by attempt "
                        f"{self.attempt_no} ({attempt.id})",
                    },
                },
                old.requested_event_id,
            )
            events.append(closed)
            cause = closed["id"]
        request = g.event("attempt.requested", attempt.id, self._base(), cause)
        events.append(request)
        # If this raises, the caller's body - the external call - never runs.
        await g.commit(*events)
        a.superseded = None
        self.requested_id = request["id"]
        self._started = time.monotonic()
        return self

    def complete(self, **outcome: Any) -> None:
        """The attempt's outcome, committed with ``attempt.completed``."""
        self.outcome.update(outcome)

    def inference(
        self,
        *,
        text: str | None = None,
        thinking: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        cost: str | Decimal | None = None,
        currency: str = "USD",
        **outcome: Any,
    ) -> None:
        """A model call's outcome: its text and thinking, its tokens, and its
        cost (a decimal string; then a ``cost.recorded`` commits with it)."""
        if self.action.action_type != "model_call":
            raise InvalidRequest("inference() is for model calls", action_type=self.action.action_type)
        tokens = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_tokens": cache_read_tokens,
            "cache_write_tokens": cache_write_tokens,
        }
        tokens = {k: v for k, v in tokens.items() if v is not None}
        fields = {"text": text, "thinking": thinking}
        self.outcome.update({k: v for k, v in fields.items() if v is not None}, **tokens, **outcome)
        if cost is not None:
            if self.action.provider is None:
                raise InvalidRequest("a cost needs the model call's provider", field="provider")
            self._cost = {
                "provider": self.action.provider,
                "model": self.action.name,
                "amount": str(cost),
                "currency": currency,
                **tokens,
                "action_id": self.action.action_id,
                "attempt_id": self.attempt_id,
            }

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        a, g = self.action, self.action.guard
        if exc is not None and not isinstance(exc, Exception):
            return  # cancelled or exiting mid-call: left unresolved on purpose
        duration_ms = int((time.monotonic() - self._started) * 1000)
        if exc is not None:
            failed = g.event(
                "attempt.failed",
                self.attempt_id,
                {**self._base(), "duration_ms": duration_ms, "error": error_payload(exc)},
                self.requested_id,
            )
            a.last_failure = a.last_terminal = failed["id"]
            a.succeeded = False
            await _record_failure(g, failed, exc)
            return
        completed = g.event(
            "attempt.completed",
            self.attempt_id,
            {**self._base(), "duration_ms": duration_ms, "outcome": self.outcome},
            self.requested_id,
        )
        events = [completed]
        if self._cost is not None:
            events.append(g.event("cost.recorded", self.attempt_id, self._cost, completed["id"]))
        await g.commit(*events)
        a.last_terminal = completed["id"]
        a.succeeded = True
        if a.action_type == "model_call":
            g.spine.inferred(completed["id"])


async def _record_failure(guard: Guard, event: dict[str, Any], exc: Exception) -> None:
    """Commit a failure event while ``exc`` propagates. When the ledger cannot
    take it either, the caller still gets ``exc`` (with a note): the attempt
    then stays unresolved, which recovery reports."""
    try:
        await guard.commit(event)
    except LedgerError as ledger_exc:
        exc.add_note(f"laneledger: could not record {event['event_type']}: {ledger_exc}")
