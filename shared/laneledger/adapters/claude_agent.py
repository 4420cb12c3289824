"""Recording what the Claude Agent SDK (and Claude Code) does, through its
hooks (spec/adapters.md, "Claude Agent SDK hooks").

    recorder = ClaudeAgentRecorder(client, tenant="acme")
    options = ClaudeAgentOptions(hooks=recorder.hooks())

The same recorder backs ``laneledger hook claude-code`` (Claude Code command
hooks: one hook JSON object on standard input, ``handle(obj)``).

Mapping, per Claude session (``session_id``): one run, a ``main`` lane with
turn 1 and a synthesized prompt as its root (the hooks do not see the prompt
the session began with). ``PreToolUse`` commits ``action.started`` and
``attempt.requested`` (the tool input, large values as content references)
before the tool runs, and answers ``permissionDecision: "deny"`` when the
ledger cannot commit; ``PostToolUse`` / ``PostToolUseFailure`` settle the
attempt and its action; ``SubagentStart`` opens a sub-agent lane (its prompt
caused by the parent's latest spine node, §2b, which is its prompt since the
hooks see no inferences; naming the spawning ``Task``/``Agent`` call in
``spawned_by`` when exactly one such call is open on the main lane); ``SubagentStop``
ends its turn; ``Stop`` ends the main turn and the run.

Every hook is stateless: ids are derived from the session id, the tool use
id and the sub-agent's agent id (``derived_id``), so each hook is one append
with a derived append id. A hook delivered twice records once: the resend is
answered with the original receipt, or refused as a duplicate, both of which
mean "recorded". The hooks see no model calls: inferences are not recorded
(``model_call`` unsupported), so a tool call's request hangs off its agent's
prompt.

When a request cannot be committed the tool is denied, and an
``attempt.failed`` (``denied_unrecorded``) is queued behind it: if the request
reaches the ledger later (the sequencer was only slow or down), the attempt
is then closed as denied, not left unresolved; if the request never reached
it, the queued failure is refused for the lane head it expects, and nothing
of the call is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneledger.adapters.derived import DerivedRecorder
from laneledger.compat.claudecode_names import DEFAULT_HUMAN, SPAWN_TOOLS, tool_effect
from laneledger.contract.errors import InvalidRequest, LedgerError
from laneledger.contract.model import Lane
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.guarantees import AdapterGuarantees
from laneledger.sdk.spine import PROMPT_EVENT, SPAWNED_BY

ADAPTER = "laneledger.claude-agent"
ADAPTER_VERSION = "2"
RUNTIME = "claude-agent"
DENIED = "denied_unrecorded"
TOOL_ERROR = "tool_error"
SUB_LANE_PREFIX = "sub-"

# Only the request is strict: PreToolUse is the one hook that precedes an
# effect and can stop it (a deny). A run's start commits before the first
# tool runs (its PreToolUse commits the start first, or denies), but its end
# comes from Stop, after the work: a Stop the ledger cannot take raises the
# typed error, which neither the SDK (an error reply to the CLI) nor Claude
# Code (exit 1, non-blocking) lets stop anything. Likewise a tool call's
# outcome (PostToolUse) is after the fact. So `run` and `tool_call` are
# best effort; tests/test_claude_agent_hooks.py proves what is strict.
HOOK_GUARANTEES = AdapterGuarantees(
    adapter=ADAPTER,
    version=ADAPTER_VERSION,
    hooks={
        "run": "best_effort",
        "turn": "best_effort",
        "model_call": "unsupported",
        "tool_call": "best_effort",
        "requested_before_call": "strict",
        "outcome": "best_effort",
        "cost": "unsupported",
        "causation": "best_effort",
        "subagent": "best_effort",
        "streaming": "unsupported",
        "hitl": "unsupported",
    },
    recovery="none",
)

HOOK_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SubagentStart", "SubagentStop", "Stop")


def _text(obj: Mapping[str, Any], field: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(
            f"a {obj.get('hook_event_name')} hook input needs {field} (a non-empty string)",
            path=f"$.{field}",
            reason="missing" if value is None else "not_a_string",
        )
    return value


def deny(reason: str) -> dict[str, Any]:
    """A PreToolUse hook output that denies the tool (Claude Code's
    ``hookSpecificOutput.permissionDecision``)."""
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


class ClaudeAgentRecorder(DerivedRecorder):
    """Records Claude Agent SDK / Claude Code hooks into ``tenant``'s ledger."""

    runtime = RUNTIME

    def __init__(
        self,
        client: LedgerClient,
        *,
        tenant: str,
        human: str = DEFAULT_HUMAN,
        timeout: float | None = None,
        data_subject: str | None = None,
    ) -> None:
        """``timeout``: how long one append waits for its receipt before the
        tool is denied (default: the client's). ``data_subject``: named on
        every event recorded (spec/erasure.md)."""
        super().__init__(client, tenant=tenant, timeout=timeout, data_subject=data_subject)
        self.human = human

    # -- the SDK's hooks ----------------------------------------------------------------

    def hooks(self) -> dict[str, list[Any]]:
        """``ClaudeAgentOptions(hooks=recorder.hooks())``: one matcher per
        recorded hook event, matching every tool."""
        from claude_agent_sdk import HookMatcher  # the optional extra

        async def callback(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
            try:
                return await self.handle(input_data)
            except LedgerError as exc:
                # A hook that raises counts as no decision for the SDK: the
                # tool would run unrecorded. Strict: a request not recorded,
                # for whatever reason, is a deny.
                if isinstance(input_data, Mapping) and input_data.get("hook_event_name") == "PreToolUse":
                    return deny(
                        f"laneledger could not record the call ({exc.code}): {exc}; the tool did not run"
                    )
                raise

        return {event: [HookMatcher(matcher=None, hooks=[callback])] for event in HOOK_EVENTS}

    async def handle(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Record one hook input; its output (``{}``, or a deny). Malformed
        input is an ``InvalidRequest``; a ledger failure on ``PreToolUse``
        is a deny, on other hooks a ``LedgerError``."""
        if not isinstance(obj, Mapping):
            raise InvalidRequest("a hook input is a JSON object", path="$", reason="not_an_object")
        event = obj.get("hook_event_name")
        session = _text(obj, "session_id")
        if event == "PreToolUse":
            return await self._pre_tool(session, obj)
        if event in ("PostToolUse", "PostToolUseFailure"):
            await self._post_tool(session, obj, failed=event == "PostToolUseFailure")
        elif event == "SubagentStart":
            await self._subagent_start(session, obj)
        elif event == "SubagentStop":
            await self._subagent_stop(session, obj)
        elif event == "Stop":
            await self._stop(session, obj)
        elif not isinstance(event, str):
            raise InvalidRequest("a hook input names its hook_event_name", path="$.hook_event_name")
        return {}  # other hooks: nothing to record

    # -- ids -----------------------------------------------------------------------------------

    def run_id(self, session: str) -> str:
        return self._id(session, "run")

    # -- lanes ------------------------------------------------------------------------------------

    async def _main(self, session: str, obj: Mapping[str, Any]) -> tuple[Lane, str]:
        """The session's main lane and actor; its start (session, run, turn
        1, a synthesized root prompt) committed on first sight."""
        actor = await self._actor("main")
        run = self.run_id(session)
        lane = await self.client.create_lane(self.tenant, session, run, "main", actor_id=actor)
        lane = await self.client.get_lane(lane.id, tenant=self.tenant)
        if lane.last_seq > 0:
            return lane, actor
        human = await self._human(self.human)
        turn = await self._turn(session, lane, "main")
        context = {k: obj[k] for k in ("cwd", "transcript_path", "permission_mode") if k in obj}
        adapter = HOOK_GUARANTEES.to_payload()
        events = [
            self._event(
                lane,
                session,
                "session.started",
                "session.started",
                session,
                {"source": "claude-agent hooks", "claude": context, "adapter": adapter},
                None,
                actor,
            ),
            self._event(lane, session, "run.started", "run.started", run, {"adapter": adapter}, None, actor),
            self._event(
                lane, session, "turn.started/main", "turn.started", turn, {"turn_no": 1}, None, actor
            ),
            self._event(
                lane,
                session,
                "prompt/main",
                PROMPT_EVENT,
                lane.id,
                {
                    "prompt_kind": "user",
                    "synthesized": True,
                    "label": "synthesized by the laneledger claude-agent hooks: "
                    "the hooks do not carry the prompt the session began with",
                },
                None,
                human,
            ),
        ]
        await self._append(lane, session, "start", events)
        return lane, actor

    async def _turn(self, session: str, lane: Lane, key: str) -> str:
        turn = await self.client.create_turn(
            lane.id, 1, turn_id=self._id(session, "turn", key), tenant=self.tenant
        )
        return turn.id

    def _sub_key(self, agent_id: str) -> str:
        return SUB_LANE_PREFIX + agent_id

    async def _sub(self, session: str, agent_id: str, agent_type: str | None) -> tuple[Lane, str]:
        key = self._sub_key(agent_id)
        actor = await self._actor(f"sub-{agent_type or 'agent'}")
        main, _ = await self._main(session, {})
        lane = await self.client.create_lane(
            self.tenant,
            session,
            self.run_id(session),
            key,
            kind="subagent",
            parent_lane_id=main.id,
            actor_id=actor,
        )
        return await self.client.get_lane(lane.id, tenant=self.tenant), actor

    async def _agent_lane(self, session: str, obj: Mapping[str, Any]) -> tuple[Lane, str, str]:
        """The lane a tool hook belongs on (its sub-agent's when it names
        one), its actor, and the lane's key (for derived ids)."""
        agent_id = obj.get("agent_id")
        if isinstance(agent_id, str) and agent_id:
            agent_type = obj.get("agent_type")
            lane, actor = await self._sub(
                session, agent_id, agent_type if isinstance(agent_type, str) else None
            )
            if lane.last_seq == 0:  # a tool hook before its SubagentStart
                await self._subagent_start(session, {**obj, "hook_event_name": "SubagentStart"})
                lane = await self.client.get_lane(lane.id, tenant=self.tenant)
            return lane, actor, self._sub_key(agent_id)
        lane, actor = await self._main(session, obj)
        return lane, actor, "main"

    # -- tools --------------------------------------------------------------------------------------

    async def _pre_tool(self, session: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        name = _text(obj, "tool_name")
        tool_use_id = _text(obj, "tool_use_id")
        tool_input = obj.get("tool_input")
        if not isinstance(tool_input, Mapping):
            raise InvalidRequest("a PreToolUse hook input needs tool_input (an object)", path="$.tool_input")
        try:
            lane, actor, key = await self._agent_lane(session, obj)
            tool = f"tool/{tool_use_id}"
            action_id, attempt_id = self._id(session, "action", tool), self._id(session, "attempt", tool)
            turn = await self._turn(session, lane, key)
            await self.client.create_action(
                lane.id,
                turn,
                "tool_call",
                name,
                effect=tool_effect(name),
                idempotency="unknown",
                action_id=action_id,
                tenant=self.tenant,
            )
            await self.client.create_attempt(lane.id, action_id, 1, attempt_id=attempt_id, tenant=self.tenant)
            prompt = self._id(session, "event", f"prompt/{key}")
            base = {"action_type": "tool_call", "name": name, "tool_use_id": tool_use_id}
            started = self._event(
                lane, session, f"{tool}/action", "action.started", action_id, base, prompt, actor
            )
            requested = self._event(
                lane,
                session,
                f"{tool}/requested",
                "attempt.requested",
                attempt_id,
                {**base, "attempt_no": 1, "input": dict(tool_input)},
                prompt,
                actor,
            )
            head = (await self.client.get_lane(lane.id, tenant=self.tenant)).last_seq
        except LedgerError as exc:
            return deny(f"laneledger could not record the call ({exc.code}): {exc}; the tool did not run")
        try:
            await self._append(lane, session, f"{tool}/requested", [started, requested], head=head)
        except LedgerError as exc:
            await self._queue_denied(lane, session, tool, requested, head + 2, name, actor)
            return deny(f"laneledger could not record the call ({exc.code}): {exc}; the tool did not run")
        return {}

    async def _queue_denied(
        self, lane: Lane, session: str, tool: str, requested: dict[str, Any], head: int, name: str, actor: str
    ) -> None:
        """Queue the denied attempt's failure right behind its request
        (``submit``, not awaiting the receipt): it commits only if the
        request does."""
        failed = self._event(
            lane,
            session,
            f"{tool}/failed",
            "attempt.failed",
            requested["subject_id"],
            {
                "action_type": "tool_call",
                "name": name,
                "attempt_no": 1,
                "error": {
                    "code": DENIED,
                    "message": "denied: the ledger could not commit the request in time",
                },
            },
            requested["id"],
            actor,
        )
        await self._queue_behind(lane, session, f"{tool}/failed", failed, head)

    async def _post_tool(self, session: str, obj: Mapping[str, Any], *, failed: bool) -> None:
        name = _text(obj, "tool_name")
        tool_use_id = _text(obj, "tool_use_id")
        lane, actor, _ = await self._agent_lane(session, obj)
        tool = f"tool/{tool_use_id}"
        action_id, attempt_id = self._id(session, "action", tool), self._id(session, "attempt", tool)
        requested = self._id(session, "event", f"{tool}/requested")
        base: dict[str, Any] = {"action_type": "tool_call", "name": name, "attempt_no": 1}
        duration = obj.get("duration_ms")
        if isinstance(duration, int):
            base["duration_ms"] = duration
        if failed:
            error: dict[str, Any] = {"code": TOOL_ERROR, "message": str(obj.get("error", ""))}
            if obj.get("is_interrupt") is True:
                error["is_interrupt"] = True
            terminal = self._event(
                lane,
                session,
                f"{tool}/failed",
                "attempt.failed",
                attempt_id,
                {**base, "error": error},
                requested,
                actor,
            )
        else:
            terminal = self._event(
                lane,
                session,
                f"{tool}/completed",
                "attempt.completed",
                attempt_id,
                {**base, "outcome": {"result": obj.get("tool_response")}},
                requested,
                actor,
            )
        ended = self._event(
            lane,
            session,
            f"{tool}/action.ended",
            "action.failed" if failed else "action.completed",
            action_id,
            {"action_type": "tool_call", "name": name, "attempts": 1},
            terminal["id"],
            actor,
        )
        await self._append(lane, session, f"{tool}/settled", [terminal, ended])

    # -- sub-agents and the end --------------------------------------------------------------------

    async def _open_spawn(self, main: Lane) -> str | None:
        """The request event id of the one spawning call (Task/Agent) open on
        the main lane, or None when there is none or several."""
        requested: dict[str, str] = {}
        settled: set[str] = set()
        after = 0
        while True:
            page = await self.client.load_lane(main.id, after, tenant=self.tenant)
            for e in page.events:
                if e.event_type == "attempt.requested" and e.payload.get("name") in SPAWN_TOOLS:
                    requested[e.subject_id] = e.id
                elif e.event_type in ("attempt.completed", "attempt.failed"):
                    settled.add(e.subject_id)
            if not page.has_more or not page.events:
                break
            after = page.events[-1].seq
        open_ = [eid for subject, eid in requested.items() if subject not in settled]
        return open_[0] if len(open_) == 1 else None

    async def _subagent_start(self, session: str, obj: Mapping[str, Any]) -> None:
        agent_id = _text(obj, "agent_id")
        agent_type = obj.get("agent_type")
        agent_type = agent_type if isinstance(agent_type, str) else None
        main, _ = await self._main(session, obj)
        lane, actor = await self._sub(session, agent_id, agent_type)
        key = self._sub_key(agent_id)
        turn = await self._turn(session, lane, key)
        payload: dict[str, Any] = {
            "prompt_kind": "subagent",
            "synthesized": True,
            "label": "synthesized by the laneledger claude-agent hooks: "
            "SubagentStart does not carry the task",
            "agent_id": agent_id,
        }
        if agent_type is not None:
            payload["agent_type"] = agent_type
        spawn = await self._open_spawn(main)
        if spawn is not None:
            payload[SPAWNED_BY] = spawn
        # §2b: the parent's most recent inference when the sub-agent begins
        # (Spine.spawn_cause); the hooks see no inferences, so the parent's prompt.
        cause = self._id(session, "event", "prompt/main")
        prompt = self._event(lane, session, f"prompt/{key}", PROMPT_EVENT, lane.id, payload, cause, actor)
        created = self._event(
            lane,
            session,
            f"lane.created/{key}",
            "lane.created",
            lane.id,
            {"name": key, "kind": "subagent", "parent_lane_id": main.id, "agent_id": agent_id},
            prompt["id"],
            actor,
        )
        started = self._event(
            lane, session, f"turn.started/{key}", "turn.started", turn, {"turn_no": 1}, prompt["id"], actor
        )
        await self._append(lane, session, f"start/{key}", [prompt, created, started])

    async def _subagent_stop(self, session: str, obj: Mapping[str, Any]) -> None:
        agent_id = _text(obj, "agent_id")
        lane, actor, key = await self._agent_lane(session, obj)
        turn = await self._turn(session, lane, key)
        payload: dict[str, Any] = {"turn_no": 1}
        if isinstance(obj.get("last_assistant_message"), str):
            payload["last_assistant_message"] = obj["last_assistant_message"]
        ended = self._event(
            lane,
            session,
            f"turn.ended/{key}",
            "turn.completed",
            turn,
            payload,
            self._id(session, "event", f"prompt/{self._sub_key(agent_id)}"),
            actor,
        )
        await self._append(lane, session, f"stop/{key}", [ended])

    async def _stop(self, session: str, obj: Mapping[str, Any]) -> None:
        lane, actor = await self._main(session, obj)
        turn = await self._turn(session, lane, "main")
        prompt = self._id(session, "event", "prompt/main")
        payload: dict[str, Any] = {"turn_no": 1}
        if isinstance(obj.get("last_assistant_message"), str):
            payload["last_assistant_message"] = obj["last_assistant_message"]
        ended = self._event(lane, session, "turn.ended/main", "turn.completed", turn, payload, prompt, actor)
        completed = self._event(
            lane, session, "run.completed", "run.completed", self.run_id(session), {}, ended["id"], actor
        )
        await self._append(lane, session, "stop", [ended, completed])
