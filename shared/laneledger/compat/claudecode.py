"""Claude Code stream-json captures as ledger sessions (spec/claude-code.md).

``claude -p --output-format stream-json --verbose`` writes one JSON object
per line. ``ClaudeCodeImport`` reads such lines (from a file or a live pipe),
maps them to laneledger's objects and events, and appends them through the
sequencer:

- the ``system``/``init`` line starts the session (``session.started``,
  ``run.started`` with the adapter's guarantees) and a synthesized root
  prompt, labelled as synthesized (stream-json does not carry the prompt);
- each assistant message — one ``message.id``, repeated on several lines, one
  per content block — is one inference (a ``model_call`` attempt) with its
  text, thinking and usage; its ``tool_use`` blocks are tool calls requested
  by it, closed by the matching ``tool_result`` (``tool_use_id``);
- lines with ``parent_tool_use_id`` belong to the sub-agent that tool call
  spawned: its own lane (named by the full id), actor and spine (Korg §2b),
  however many run in parallel or nest; its turn ends when the spawning
  call's result comes back;
- the session's root prompt (and any later prompt the user types on the main
  agent) is the human's: a ``human:`` actor, as Korg's adapter records it;
- the ``result`` line completes the run, with cost, turns and duration;
- hooks, task progress, rate limits, other system lines and unknown line
  types are kept as ``ext.claude_code.*`` events; only ``stream_event``
  (partial deltas of messages that follow in full) is dropped, and counted.

Every id (lanes aside, which are keyed by name), every ``append_id`` and
every ``occurred_at`` derive from the capture, so importing the same capture
again gets the original receipts back instead of duplicates.
This module is the mapping; the lines are decoded and checked first, in
``laneledger.compat.claudecode_lines``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field
from typing import Any

from laneledger.compat.claudecode_lines import (
    SUB_LANE_PREFIX,
    AssistantLine,
    CaptureLine,
    RateLimitLine,
    ResultLine,
    StreamEventLine,
    SystemLine,
    ToolUseBlock,
    UserLine,
    decode_as,
    decode_line,
    duration_ms,
    epoch_ms,
    parse_line,
    text_of,
    timestamp_of,
)
from laneledger.compat.claudecode_names import (
    DEFAULT_HUMAN,
    IMPORT_GUARANTEES,
    RUNTIME,
    SPAWN_TOOLS,
    is_human_key,
    subagent_display_id,
    tool_effect,
)
from laneledger.compat.claudecode_payloads import inference_outcome, result_costs, run_outcome
from laneledger.contract.clock import system_clock
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.ids import derived_id
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.sdk.spine import PROMPT_EVENT, SPAWNED_BY, Spine

EXTENSION_TYPES = {
    "hook": "ext.claude_code.hook",  # system hook_* lines
    "task": "ext.claude_code.task",  # system task_* lines (sub-agent progress)
    "rate_limit": "ext.claude_code.rate_limit",  # rate_limit_event lines
    "system": "ext.claude_code.system",  # any other system subtype
    "unknown": "ext.claude_code.unknown",  # a line type this importer does not know
    "unmatched": "ext.claude_code.unmatched_tool_result",
    "late": "ext.claude_code.late_message_block",  # a block of a message already recorded
}
# Lines before the init line (SessionStart hooks) are held until it comes; a
# capture without one is refused rather than held without bound.
MAX_LINES_BEFORE_INIT = 1000


@dataclass
class Agent:
    """One Claude Code agent (main or a sub-agent): its lane, actor and spine."""

    key: str  # its lane's name: "main", or "sub-" + the full parent_tool_use_id
    recorder: LaneRecorder
    actor_id: str
    turn_id: str
    spine: Spine = field(default_factory=Spine)
    appends: int = 0
    turn_open: bool = True


@dataclass
class PendingTool:
    agent: Agent
    action_id: str
    attempt_id: str
    requested_id: str
    inference_id: str
    name: str
    spawn_prompt: str | None
    line_no: int


@dataclass
class Message:
    """An assistant message being reassembled from its streaming repeats."""

    agent_key: str
    message_id: str
    model: str
    blocks: list[dict[str, Any]]
    usage: dict[str, Any]
    stop_reason: Any
    line_no: int
    timestamp: str | None


@dataclass
class ImportSummary:
    session_id: str = ""
    run_id: str = ""
    lines: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    appends: int = 0
    replayed: int = 0
    events: int = 0
    lanes: dict[str, str] = field(default_factory=dict)  # agent key -> lane id
    unresolved_tools: list[str] = field(default_factory=list)


class ClaudeCodeImport:
    """Feed lines with ``await imp.line(raw, n)`` (or ``run(lines)``), then
    ``await imp.finish()``."""

    def __init__(
        self,
        client: LedgerClient,
        *,
        tenant: str,
        session_id: str | None = None,
        run_id: str | None = None,
        human: str = DEFAULT_HUMAN,
    ) -> None:
        """``human``: the key of the human actor the user's prompts are
        recorded by (``human:<identifier>``)."""
        if not is_human_key(human):
            raise InvalidRequest(
                "the human's actor key is human:<identifier>", path="human", found=human, reason="not_human"
            )
        self.client = client
        self.tenant = tenant
        self.human = human
        self._human_id = ""
        self.summary = ImportSummary()
        self._session_override = session_id
        self._run_override = run_id
        self._before_init: list[tuple[dict[str, Any], int]] = []
        self._init: dict[str, Any] | None = None
        self._version = "unknown"
        self._anchor = ""
        self._anchor_ms = 0
        self._clock = ""  # occurred_at for lines without their own timestamp
        self._agents: dict[str, Agent] = {}  # by key
        self._display_ids: set[str] = set()  # the <id8> of each sub-agent's actor key
        self._pending: dict[str, PendingTool] = {}  # tool_use_id -> a call without its result
        self._spawned: dict[str, PendingTool] = {}  # tool_use_id -> a Task/Agent call
        self._messages: dict[str, Message] = {}  # agent key -> the message being assembled
        self._flushed: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (agent, message id) -> blocks

    # -- driving ---------------------------------------------------------------------------

    async def run(self, lines: Iterable[str | bytes] | AsyncIterable[str | bytes]) -> ImportSummary:
        line_no = 0
        if isinstance(lines, AsyncIterable):
            async for raw in lines:
                line_no += 1
                await self.line(raw, line_no)
        else:
            for raw in lines:
                line_no += 1
                await self.line(raw, line_no)
        return await self.finish()

    async def line(self, raw: str | bytes, line_no: int) -> None:
        obj = parse_line(raw, line_no)
        if obj is None:
            return
        self.summary.lines += 1
        kind = obj["type"] if obj["type"] != "system" else f"system/{obj.get('subtype')}"
        self.summary.by_kind[kind] += 1
        if self._init is None:
            if obj["type"] == "system" and obj.get("subtype") == "init":
                await self._start(obj, line_no)
                for held, held_no in self._before_init:
                    await self._dispatch(held, held_no)
                self._before_init.clear()
            elif len(self._before_init) >= MAX_LINES_BEFORE_INIT:
                raise InvalidRequest(
                    f"no system/init line in the first {MAX_LINES_BEFORE_INIT} lines",
                    line=line_no,
                    reason="no_init",
                )
            else:
                self._before_init.append((obj, line_no))
            return
        await self._dispatch(obj, line_no)

    async def finish(self) -> ImportSummary:
        if self._init is None:
            raise InvalidRequest(
                "the capture has no system/init line (is it `claude -p "
                "--output-format stream-json --verbose` output?)",
                line=None,
                reason="no_init",
                lines=self.summary.lines,
            )
        for key in list(self._messages):
            await self._flush_message(key)
        self.summary.unresolved_tools = sorted(self._pending)
        return self.summary

    # -- ids and events -------------------------------------------------------------------------

    def _id(self, *parts: str) -> str:
        return derived_id(
            RUNTIME, self.summary.session_id, self.summary.run_id, *parts, at_ms=self._anchor_ms
        )

    def _at(self, obj: dict[str, Any]) -> str:
        stamp = timestamp_of(obj)
        if stamp is not None:
            self._clock = stamp
        return self._clock

    def _event(
        self,
        agent: Agent,
        event_type: str,
        subject_id: str,
        payload: dict[str, Any],
        cause: str | None,
        at: str,
        key: str,
        *,
        actor_id: str | None = None,
    ) -> dict[str, Any]:
        return agent.recorder.event(
            event_type,
            actor_id=actor_id or agent.actor_id,
            subject_id=subject_id,
            payload=payload,
            causation_id=cause,
            occurred_at=at,
            event_id=self._id("event", key),
        )

    def _prompt(self, agent: Agent, text: str, at: str, key: str) -> dict[str, Any]:
        """An observed prompt of the user kind: on the main agent the human
        typed it; on a sub-agent, its parent agent wrote it."""
        return self._event(
            agent,
            PROMPT_EVENT,
            agent.recorder.lane.id,
            {"prompt_kind": "user", "synthesized": False, "text": text},
            agent.spine.inference_cause(),
            at,
            key,
            actor_id=self._human_id if agent.key == "main" else None,
        )

    async def _append(self, agent: Agent, events: list[dict[str, Any]]) -> None:
        agent.appends += 1
        receipt = await agent.recorder.append(
            events, append_id=self._id("append", agent.key, str(agent.appends))
        )
        self.summary.appends += 1
        self.summary.events += len(events)
        self.summary.replayed += int(bool(getattr(receipt, "replayed", False)))

    # -- the session and its agents ----------------------------------------------------------------

    async def _start(self, init: dict[str, Any], line_no: int) -> None:
        self._init = init
        session = self._session_override or init.get("session_id")
        session = decode_as(session, str, line_no, at="$.session_id")
        self._version = str(init.get("claude_code_version") or init.get("version") or "unknown")
        run = self._run_override or init.get("uuid")
        if not isinstance(run, str) or not run:
            run = "cc-" + derived_id(RUNTIME, json.dumps(init, sort_keys=True))
        self.summary.session_id, self.summary.run_id = session, run
        actor = await self._actor("main")
        self._human_id = (await self.client.ensure_actor(self.tenant, self.human, "human", adopt=True)).id
        recorder = await LaneRecorder.open(self.client, self.tenant, session, run, "main", actor_id=actor)
        # occurred_at: the capture's own timestamps where it has them, else
        # the time of the first import — read back from the session.started it
        # committed, so a re-import produces the same bytes.
        if recorder.head > 0:
            first = (await self.client.load_lane(recorder.lane.id, 0, limit=1, tenant=self.tenant)).events[0]
            self._anchor = first.occurred_at
        else:
            self._anchor = timestamp_of(init) or system_clock()
        self._clock = self._anchor
        self._anchor_ms = epoch_ms(self._anchor)
        turn = await self.client.create_turn(
            recorder.lane.id, 1, turn_id=self._id("turn", "main"), tenant=self.tenant
        )
        main = Agent("main", recorder, actor, turn.id)
        self._agents["main"] = main
        self.summary.lanes["main"] = recorder.lane.id
        at = self._clock
        init_fields = {
            k: init[k]
            for k in (
                "session_id",
                "model",
                "tools",
                "cwd",
                "permissionMode",
                "mcp_servers",
                "agents",
                "slash_commands",
                "output_style",
                "apiKeySource",
                "claude_code_version",
            )
            if k in init
        }
        started = self._event(
            main,
            "session.started",
            session,
            {
                "source": "claude-code stream-json",
                "claude_code": init_fields,
                "adapter": IMPORT_GUARANTEES.to_payload(),
            },
            None,
            at,
            "session.started",
        )
        run_started = self._event(
            main,
            "run.started",
            run,
            {"model": init.get("model"), "version": self._version, "adapter": IMPORT_GUARANTEES.to_payload()},
            None,
            at,
            "run.started",
        )
        turn_started = self._event(
            main, "turn.started", turn.id, {"turn_no": 1}, None, at, "turn.started/main"
        )
        prompt = self._event(
            main,
            PROMPT_EVENT,
            recorder.lane.id,
            {
                "prompt_kind": "user",
                "synthesized": True,
                "label": "synthesized by laneledger import claude-code: a stream-json capture does "
                "not carry the prompt the session was started with",
            },
            None,
            at,
            "prompt/main",
            actor_id=self._human_id,  # the root is the human's (Korg §2b: source=human:…)
        )
        await self._append(main, [started, run_started, turn_started, prompt])
        main.spine.prompted(prompt["id"])

    async def _actor(self, key: str) -> str:
        actor = await self.client.ensure_actor(  # a Korg post may have registered it first
            self.tenant,
            f"agent:{RUNTIME}/{key}@{self._version}",
            "agent",
            attributes={"runtime": RUNTIME, "version": self._version},
            adopt=True,
        )
        return actor.id

    async def _subagent(self, ptuid: str, obj: dict[str, Any], prompt_text: str | None) -> Agent:
        """The sub-agent spawned by tool call ``ptuid``, started on first sight:
        its lane under the spawning agent's, its actor, and its prompt caused
        by the spawning inference (§2b)."""
        key = _sub_key(ptuid)
        if key in self._agents:
            return self._agents[key]
        await self._flush_holding(ptuid)
        spawn = self._pending.get(ptuid) or self._spawned.get(ptuid)
        parent = spawn.agent if spawn is not None else self._agents["main"]
        display_id = subagent_display_id(ptuid, self._display_ids)
        self._display_ids.add(display_id)
        actor = await self._actor(f"sub-{display_id}")
        recorder = await LaneRecorder.open(
            self.client,
            self.tenant,
            self.summary.session_id,
            self.summary.run_id,
            key,
            kind="subagent",
            parent_lane_id=parent.recorder.lane.id,
            actor_id=actor,
        )
        turn = await self.client.create_turn(
            recorder.lane.id, 1, turn_id=self._id("turn", key), tenant=self.tenant
        )
        agent = Agent(key, recorder, actor, turn.id)
        self._agents[key] = agent
        self.summary.lanes[key] = recorder.lane.id
        at = self._at(obj)
        cause = spawn.inference_id if spawn is not None else parent.spine.spawn_cause()
        payload: dict[str, Any] = {"prompt_kind": "subagent", "parent_tool_use_id": ptuid}
        if spawn is not None:
            payload[SPAWNED_BY] = spawn.requested_id
        if prompt_text is not None:
            payload.update(synthesized=False, text=prompt_text)
        else:
            payload.update(
                synthesized=True,
                label="synthesized by laneledger import claude-code: "
                "the sub-agent's prompt line is not in the capture",
                text=spawn.spawn_prompt if spawn is not None else None,
            )
        prompt = self._event(agent, PROMPT_EVENT, recorder.lane.id, payload, cause, at, f"prompt/{key}")
        lane_created = self._event(
            agent,
            "lane.created",
            recorder.lane.id,
            {
                "name": key,
                "kind": "subagent",
                "parent_lane_id": parent.recorder.lane.id,
                "parent_tool_use_id": ptuid,
            },
            prompt["id"],
            at,
            f"lane.created/{key}",
        )
        turn_started = self._event(
            agent, "turn.started", turn.id, {"turn_no": 1}, prompt["id"], at, f"turn.started/{key}"
        )
        await self._append(agent, [prompt, lane_created, turn_started])
        agent.spine.prompted(prompt["id"])
        return agent

    async def _agent_for(self, ptuid: str | None, obj: dict[str, Any]) -> Agent:
        """The agent of a line (``obj``, with its decoded ``ptuid``)."""
        if ptuid is None:
            return self._agents["main"]
        return await self._subagent(ptuid, obj, None)

    async def _end_subagent(self, ptuid: str, failed: bool, message: str, at: str) -> None:
        """The spawning call's result is the sub-agent's return: its turn
        ends (failed with the call), after its last message is recorded."""
        agent = self._agents.get(_sub_key(ptuid))
        if agent is None or not agent.turn_open:
            return
        await self._flush_message(agent.key)
        payload: dict[str, Any] = {"turn_no": 1}
        if failed:
            payload["error"] = {"code": "tool_error", "message": message}
        ended = self._event(
            agent,
            "turn.failed" if failed else "turn.completed",
            agent.turn_id,
            payload,
            agent.spine.inference_cause(),
            at,
            f"turn.ended/{agent.key}",
        )
        await self._append(agent, [ended])
        agent.turn_open = False

    # -- lines ------------------------------------------------------------------------------------

    async def _dispatch(self, obj: dict[str, Any], line_no: int) -> None:
        line = decode_line(obj, line_no)
        if isinstance(line, AssistantLine):
            await self._assistant(line, obj, line_no)
            return
        # Any other line ends the message being assembled for its agent (and a
        # result line, every one).
        ptuid = line.parent_tool_use_id
        agent_key = "main" if ptuid is None else _sub_key(ptuid)
        for key in list(self._messages):
            if isinstance(line, ResultLine) or key == agent_key:
                await self._flush_message(key)
        if isinstance(line, UserLine):
            await self._user(line, obj, line_no)
        elif isinstance(line, ResultLine):
            await self._result(line, obj, line_no)
        elif isinstance(line, StreamEventLine):
            self.summary.dropped["stream_event"] += 1
        elif isinstance(line, SystemLine):
            subtype = str(line.subtype or "")
            group = (
                "hook" if subtype.startswith("hook_") else "task" if subtype.startswith("task_") else "system"
            )
            await self._extension(EXTENSION_TYPES[group], line, obj, line_no)
        elif isinstance(line, RateLimitLine):
            await self._extension(EXTENSION_TYPES["rate_limit"], line, obj, line_no)
        else:
            await self._extension(EXTENSION_TYPES["unknown"], line, obj, line_no)

    async def _extension(self, event_type: str, line: CaptureLine, obj: dict[str, Any], line_no: int) -> None:
        """A line kept as it came, on its agent's lane, hanging off the spine."""
        agent = await self._agent_for(line.parent_tool_use_id, obj)
        event = self._event(
            agent,
            event_type,
            agent.recorder.lane.id,
            {"line_no": line_no, "line": obj},
            agent.spine.inference_cause(),
            self._at(obj),
            f"line/{line_no}",
        )
        await self._append(agent, [event])

    async def _assistant(self, line: AssistantLine, obj: dict[str, Any], line_no: int) -> None:
        message = line.message
        message_id, content = message.id, message.content
        agent = await self._agent_for(line.parent_tool_use_id, obj)
        if (agent.key, message_id) in self._flushed:
            # A repeat of a message already recorded: nothing new is dropped.
            new = [
                b for b in content if isinstance(b, dict) and b not in self._flushed[agent.key, message_id]
            ]
            if new:
                await self._extension(EXTENSION_TYPES["late"], line, obj, line_no)
            else:
                self.summary.dropped["repeat"] += 1
            return
        current = self._messages.get(agent.key)
        if current is not None and current.message_id != message_id:
            await self._flush_message(agent.key)
            current = None
        if current is None:
            current = Message(
                agent.key, message_id, str(message.model or "unknown"), [], {}, None, line_no, None
            )
            self._messages[agent.key] = current
        # Streaming repeats: the same message id on several lines, each with
        # one block (or the content so far). Keep each block once.
        for block in content:
            if isinstance(block, dict) and block not in current.blocks:
                current.blocks.append(block)
        if isinstance(message.usage, dict):
            current.usage = message.usage
        if message.stop_reason is not None:
            current.stop_reason = message.stop_reason
        current.timestamp = self._at(obj)

    async def _flush_holding(self, tool_use_id: str) -> None:
        """Record the message that asked for ``tool_use_id``, if it is still
        being assembled: its result or its sub-agent is about to refer to it."""
        for key, message in list(self._messages.items()):
            if any(b.get("type") == "tool_use" and b.get("id") == tool_use_id for b in message.blocks):
                await self._flush_message(key)

    async def _flush_message(self, agent_key: str) -> None:
        message = self._messages.pop(agent_key, None)
        if message is None:
            return
        self._flushed[agent_key, message.message_id] = message.blocks
        agent = self._agents[agent_key]
        key = f"msg/{message.message_id}"
        action_id, attempt_id = self._id("action", key), self._id("attempt", key)
        lane_id = agent.recorder.lane.id
        await self.client.create_action(
            lane_id,
            agent.turn_id,
            "model_call",
            message.model,
            effect="none",
            idempotency="not_applicable",
            action_id=action_id,
            tenant=self.tenant,
        )
        await self.client.create_attempt(lane_id, action_id, 1, attempt_id=attempt_id, tenant=self.tenant)
        at = message.timestamp or self._clock
        base = {
            "action_type": "model_call",
            "name": message.model,
            "model": message.model,
            "attempt_no": 1,
            "message_id": message.message_id,
        }
        requested = self._event(
            agent,
            "attempt.requested",
            attempt_id,
            base,
            agent.spine.inference_cause(),
            at,
            f"{key}/requested",
        )
        outcome = inference_outcome(message.blocks, message.usage, message.stop_reason)
        completed = self._event(
            agent,
            "attempt.completed",
            attempt_id,
            {**base, "outcome": outcome},
            requested["id"],
            at,
            f"{key}/completed",
        )
        events = [requested, completed]
        for block in message.blocks:
            if block.get("type") != "tool_use":
                continue
            events.append(await self._tool_requested(agent, block, completed["id"], at, message.line_no))
        await self._append(agent, events)
        agent.spine.inferred(completed["id"])

    async def _tool_requested(
        self, agent: Agent, block: dict[str, Any], inference_id: str, at: str, line_no: int
    ) -> dict[str, Any]:
        tool_use = decode_as(block, ToolUseBlock, line_no, at="$.message.content[]")
        tool_use_id, name = tool_use.id, tool_use.name
        key = f"tool/{tool_use_id}"
        action_id, attempt_id = self._id("action", key), self._id("attempt", key)
        lane_id = agent.recorder.lane.id
        await self.client.create_action(
            lane_id,
            agent.turn_id,
            "tool_call",
            name,
            effect=tool_effect(name),
            idempotency="unknown",
            action_id=action_id,
            tenant=self.tenant,
        )
        await self.client.create_attempt(lane_id, action_id, 1, attempt_id=attempt_id, tenant=self.tenant)
        tool_input: dict[str, Any] = tool_use.input if isinstance(tool_use.input, dict) else {}
        requested = self._event(
            agent,
            "attempt.requested",
            attempt_id,
            {
                "action_type": "tool_call",
                "name": name,
                "attempt_no": 1,
                "tool_use_id": tool_use_id,
                "input": tool_input,
            },
            inference_id,
            at,
            f"{key}/requested",
        )
        spawn_prompt = tool_input.get("prompt") if name in SPAWN_TOOLS else None
        pending = PendingTool(
            agent,
            action_id,
            attempt_id,
            requested["id"],
            inference_id,
            name,
            spawn_prompt if isinstance(spawn_prompt, str) else None,
            line_no,
        )
        self._pending[tool_use_id] = pending
        if name in SPAWN_TOOLS:
            self._spawned[tool_use_id] = pending  # its sub-agent may outlive the pending call
        return requested

    async def _user(self, line: UserLine, obj: dict[str, Any], line_no: int) -> None:
        content = line.message.content
        ptuid = line.parent_tool_use_id
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        text = text_of(content)
        if text is not None and not results:
            if ptuid is not None and _sub_key(ptuid) not in self._agents:
                await self._subagent(ptuid, obj, text)  # §2b: the sub-agent's prompt
                return
            agent = await self._agent_for(ptuid, obj)
            await self._append(agent, [self._prompt(agent, text, self._at(obj), f"line/{line_no}")])
            return
        if not results:
            await self._extension(EXTENSION_TYPES["unknown"], line, obj, line_no)
            return
        for index, block in enumerate(results):
            tool_use_id = block.get("tool_use_id")
            pending = None
            if isinstance(tool_use_id, str):
                await self._flush_holding(tool_use_id)
                pending = self._pending.pop(tool_use_id, None)
            if pending is None or not isinstance(tool_use_id, str):
                agent = await self._agent_for(ptuid, obj)
                event = self._event(
                    agent,
                    EXTENSION_TYPES["unmatched"],
                    agent.recorder.lane.id,
                    {"line_no": line_no, "block": block},
                    agent.spine.inference_cause(),
                    self._at(obj),
                    f"line/{line_no}/{index}",
                )
                await self._append(agent, [event])
                continue
            failed = block.get("is_error") is True
            payload: dict[str, Any] = {
                "action_type": "tool_call",
                "name": pending.name,
                "attempt_no": 1,
                "tool_use_id": tool_use_id,
                "success": not failed,
            }
            duration = duration_ms(line.tool_use_result)
            if duration is not None:
                payload["duration_ms"] = duration
            result = block.get("content")
            if failed:
                payload["error"] = {"code": "tool_error", "message": text_of(result) or ""}
            else:
                payload["outcome"] = {"content": result}
            if pending.name in SPAWN_TOOLS:
                await self._end_subagent(tool_use_id, failed, text_of(result) or "", self._at(obj))
            event = self._event(
                pending.agent,
                "attempt.failed" if failed else "attempt.completed",
                pending.attempt_id,
                payload,
                pending.requested_id,
                self._at(obj),
                f"tool/{tool_use_id}/result",
            )
            await self._append(pending.agent, [event])
        if text is not None:  # text next to tool results (e.g. an interruption notice)
            agent = await self._agent_for(ptuid, obj)
            await self._append(agent, [self._prompt(agent, text, self._at(obj), f"line/{line_no}/text")])

    async def _result(self, line: ResultLine, obj: dict[str, Any], line_no: int) -> None:
        main = self._agents["main"]
        at = self._at(obj)
        cause = main.spine.inference_cause()
        events = []
        for key, cost in result_costs(line, (self._init or {}).get("model"), line_no):
            events.append(
                self._event(
                    main, "cost.recorded", self.summary.run_id, cost, cause, at, f"result/{line_no}/{key}"
                )
            )
        failed, summary = run_outcome(line, obj, line_no)
        events.append(
            self._event(
                main,
                "turn.failed" if failed else "turn.completed",
                main.turn_id,
                {"turn_no": 1},
                cause,
                at,
                f"result/{line_no}/turn",
            )
        )
        events.append(
            self._event(
                main,
                "run.failed" if failed else "run.completed",
                self.summary.run_id,
                summary,
                cause,
                at,
                f"result/{line_no}/run",
            )
        )
        await self._append(main, events)


def _sub_key(ptuid: str) -> str:
    """A sub-agent's key and lane name: its full parent tool-use id."""
    return SUB_LANE_PREFIX + ptuid
