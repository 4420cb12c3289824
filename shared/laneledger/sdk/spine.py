"""The Korg causal spines on the producer side (seed 000 §2, §2a, §2b).

Which event causes which (``causation_id``) is decided where the events are
made: by the attempt guard (``laneledger.sdk.guard``), the Claude Code importer
(``laneledger.compat.claudecode``) and any harness that keeps a ``Spine``. Readers
(the causal tree, rewind) recognise the nodes with ``spine_role``.

The shape, per agent (one agent = one lane and one actor):

- the **prompt** is the root: ``context.prompt_composed`` with
  ``payload.prompt_kind`` ``"user"`` (a main agent's task) or ``"subagent"``
  (a sub-agent's task, §2b), no cause on a main lane;
- an **inference** is a ``model_call`` attempt: its ``attempt.requested``
  points at the previous inference's terminal event (§2a: round N is caused
  by round N−1's decision, not by a tool result), or at the prompt for the
  first round; its ``attempt.completed`` points at its own request and is the
  node later events hang off;
- a **tool call** is a ``tool_call`` attempt: its ``attempt.requested``
  points at the inference that asked for it, so parallel calls are siblings;
  its terminal event points at its request. A retry (attempt N+1) points at
  the failure of attempt N (§2);
- a **sub-agent**'s prompt points at the parent's most recent inference when
  the sub-agent starts (§2b) — the spawning one — and names the spawning tool
  call exactly: ``payload.spawned_by`` is the event id of that call's
  ``attempt.requested`` (``spawned_by``), so a reader links the two spines
  without guessing; from there the sub-agent has its own spine.

Attempt events say which kind they are in ``payload.action_type`` (the
action's type), so a reader needs no join to tell an inference from a tool
call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

PROMPT_EVENT = "context.prompt_composed"
SPAWNED_BY = "spawned_by"
PROMPT_KINDS = ("user", "subagent")

Role = Literal["prompt", "inference", "tool_call"]


def spine_role(event_type: str, payload: Mapping[str, Any]) -> Role | None:
    """What an event is on its agent's spine, or None when it is not a
    spine node (lifecycle, cost, extensions, …). Both the request and the
    terminal event of an attempt carry the attempt's role; they share the
    attempt as ``subject_id``."""
    if event_type == PROMPT_EVENT and payload.get("prompt_kind") in PROMPT_KINDS:
        return "prompt"
    if event_type.startswith("attempt."):
        kind = payload.get("action_type")
        if kind == "model_call":
            return "inference"
        if kind == "tool_call":
            return "tool_call"
    return None


def spawned_by(event_type: str, payload: Mapping[str, Any]) -> str | None:
    """The event id of the tool call request that spawned this sub-agent
    prompt, when it names one."""
    if event_type != PROMPT_EVENT or payload.get("prompt_kind") != "subagent":
        return None
    found = payload.get(SPAWNED_BY)
    return found if isinstance(found, str) else None


@dataclass
class Spine:
    """One agent's §2a linked list, as event ids: the prompt it started from
    and its latest inference node."""

    prompt_id: str | None = None
    last_inference_id: str | None = None

    def inference_cause(self) -> str | None:
        """The cause of the next inference's request: the previous
        inference, or the prompt before the first one."""
        return self.last_inference_id or self.prompt_id

    def tool_cause(self) -> str | None:
        """The cause of a tool call's request: the inference that asked for
        it (the prompt, for a tool called before any inference)."""
        return self.last_inference_id or self.prompt_id

    def inferred(self, event_id: str) -> None:
        """An inference ended with ``event_id``: the next round hangs off it."""
        self.last_inference_id = event_id

    def prompted(self, event_id: str) -> None:
        self.prompt_id = event_id

    def spawn_cause(self) -> str | None:
        """The cause of a sub-agent's prompt (§2b): this agent's most recent
        inference when the sub-agent begins."""
        return self.last_inference_id or self.prompt_id
