"""A session's causal graph (Korg agent event spec §2, §2a, §2b) as plain data.

Pure: built from committed events (decoded bodies) and the session's actions
and attempts; no I/O. The tail's causal-tree read, rewind (``rewind.py``) and
the korg-ledger-v1 export all read a session through this one model.

* A **node** is one committed event; its **cause** is the event its
  ``causation_id`` names (Korg's ``triggered_by``), as a ledger position.
* A **spine** is a lane: one agent's linked list of inferences with its tool
  calls hanging off them (§2a). The main agent and each sub-agent have their
  own lane (Korg events: one lane per ``source_agent``).
* A node's **role** says what it is to the content-aware rewind rules:
  ``prompt``, ``inference``, ``tool``, ``rewind`` or ``other``
  (``role_of``; normative text: ``spec/object-model.md``, "Causality").
* A **spawn** links a sub-agent spine to the tool call of its parent spine
  whose return value is that sub-agent's result (``Graph.spawners``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from laneledger.contract.vocabulary import REWOUND
from laneledger.sdk.spine import spawned_by, spine_role

KORG_TOOL_CALL = "ext.korg.agent_tool_call"

PROMPT, INFERENCE, TOOL, REWIND, OTHER = "prompt", "inference", "tool", "rewind", "other"
ROLES = (PROMPT, INFERENCE, TOOL, REWIND, OTHER)
# Claude Code's wire name for its sub-agent tool is "Agent", its display name
# "Task" (Korg §2b): either names a spawn.
SPAWN_TOOLS = frozenset({"Agent", "Task"})
SUMMARY_CHARS = 120


@dataclass(frozen=True, slots=True)
class Subject:
    """What an action (or one of its attempts) is: the action type and the
    tool or model name, verbatim."""

    action_type: str
    name: str


@dataclass(frozen=True, slots=True)
class Node:
    position: int
    event_id: str
    lane_id: str
    seq: int
    actor_id: str
    event_type: str
    role: str
    name: str  # the tool or model name, or the event type when there is none
    summary: str
    cause_id: str | None = None
    cause: int | None = None  # position of the cause; None for a root
    # A sub-agent's prompt may name its spawning tool call exactly
    # (``laneledger.sdk.spine.spawned_by``): its position.
    spawned_by: int | None = None

    @property
    def spawn_named(self) -> bool:
        return self.role == TOOL and self.name in SPAWN_TOOLS


def subjects_of(actions: Iterable[Any], attempts: Iterable[Any]) -> dict[str, Subject]:
    """Subject id (action or attempt) -> its action's type and name, from the
    session structure (objects with the ``Action`` / ``Attempt`` fields)."""
    by_action = {a.id: Subject(a.action_type, a.name) for a in actions}
    found = dict(by_action)
    for attempt in attempts:
        subject = by_action.get(attempt.action_id)
        if subject is not None:
            found[attempt.id] = subject
    return found


def role_of(event_type: str, payload: Mapping[str, Any], subject: Subject | None) -> tuple[str, str]:
    """``(role, name)`` of one event.

    * a Korg tool call (``ext.korg.agent_tool_call``): by its ``tool_name`` —
      ``user_prompt`` is a prompt, ``llm_inference`` an inference, anything
      else a tool call named verbatim;
    * ``session.rewound``: a rewind (never part of the rules);
    * a node of the SDK's spines (``laneledger.sdk.spine.spine_role``): a prompt,
      or an attempt event whose ``payload.action_type`` says inference or
      tool call;
    * an event about an action or attempt: ``model_call`` is an inference,
      ``tool_call`` a tool call, named by the action's name;
    * anything else: ``other``, named by its type.
    """
    if event_type == KORG_TOOL_CALL:
        tool = payload.get("tool_name")
        if not isinstance(tool, str) or not tool:
            return OTHER, event_type
        if tool == "user_prompt":
            return PROMPT, tool
        if tool == "llm_inference":
            return INFERENCE, tool
        return TOOL, tool
    if event_type == REWOUND:
        return REWIND, event_type
    spine = spine_role(event_type, payload)
    if spine is not None:
        role = {"prompt": PROMPT, "inference": INFERENCE, "tool_call": TOOL}[spine]
        name = payload.get("name")
        if isinstance(name, str) and name:
            return role, name
        return role, subject.name if subject is not None else event_type
    if subject is not None:
        if subject.action_type == "model_call":
            return INFERENCE, subject.name
        if subject.action_type == "tool_call":
            return TOOL, subject.name
    return OTHER, event_type


def summary_of(event_type: str, role: str, name: str, payload: Mapping[str, Any]) -> str:
    """One short line for a tree view (at most ``SUMMARY_CHARS``)."""
    if event_type == KORG_TOOL_CALL:
        text = name + ("" if payload.get("success", True) is not False else " (failed)")
    elif event_type == REWOUND:
        text = f"rewound to position {payload.get('target_position')}"
    elif name != event_type:
        text = f"{event_type} {name}"
    else:
        text = event_type
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def node_of(body: Mapping[str, Any], subjects: Mapping[str, Subject], positions: Mapping[str, int]) -> Node:
    """The node of one committed event (a decoded body). ``positions`` maps
    event ids to positions, to resolve the cause; a cause it lacks (another
    session, which the sequencer refuses anyway) leaves ``cause`` None."""
    payload = body.get("payload") or {}
    event_type = body["event_type"]
    role, name = role_of(event_type, payload, subjects.get(body.get("subject_id", "")))
    cause_id = body.get("causation_id")
    spawner = spawned_by(event_type, payload)
    return Node(
        position=body["position"],
        event_id=body["id"],
        lane_id=body["lane_id"],
        seq=body["seq"],
        actor_id=body["actor_id"],
        event_type=event_type,
        role=role,
        name=name,
        summary=summary_of(event_type, role, name, payload),
        cause_id=cause_id,
        cause=positions.get(cause_id) if cause_id else None,
        spawned_by=positions.get(spawner) if spawner else None,
    )


def nodes_of(bodies: Iterable[Mapping[str, Any]], subjects: Mapping[str, Subject]) -> list[Node]:
    """Nodes of a whole session's events, in position order."""
    ordered = sorted(bodies, key=lambda b: b["position"])
    positions = {b["id"]: b["position"] for b in ordered}
    return [node_of(b, subjects, positions) for b in ordered]


@dataclass
class Graph:
    """A session's nodes with the indexes the rewind rules need."""

    nodes: dict[int, Node]  # position -> node, ascending
    children: dict[int, list[int]] = field(default_factory=dict)
    spines: dict[str, list[int]] = field(default_factory=dict)  # lane -> positions, ascending
    # spine -> the tool calls of its parent spine whose return value is its result
    spawners: dict[str, list[int]] = field(default_factory=dict)
    # spawn tool call -> the spines it returns
    spawned: dict[int, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> Graph:
        graph = cls(nodes={n.position: n for n in sorted(nodes, key=lambda n: n.position)})
        for node in graph.nodes.values():
            if node.role == REWIND:
                continue  # a rewind is a fact about the graph, not part of it
            graph.spines.setdefault(node.lane_id, []).append(node.position)
            if node.cause is not None:
                graph.children.setdefault(node.cause, []).append(node.position)
        for spine, positions in graph.spines.items():
            for spawner in graph._spawners_of(spine, graph.nodes[positions[0]]):
                graph.spawners.setdefault(spine, []).append(spawner)
                graph.spawned.setdefault(spawner, []).append(spine)
        return graph

    def _spawners_of(self, spine: str, first: Node) -> list[int]:
        """The spawn tool call(s) of a sub-agent spine, found from its first
        event:

        * it names its spawning tool call (``spawned_by``): that call;
        * its cause is a tool call of another spine: that call spawned it;
        * the cause is an inference of another spine (Korg §2b: the parent's
          spawn result is recorded when the sub-agent returns, as a sibling
          under that inference): the sibling tool calls recorded after the
          sub-agent began — those named ``Agent``/``Task`` when there are any,
          otherwise all of them. Two sub-agents spawned by one inference
          cannot be told apart, so each links to every such call: rewind then
          invalidates more, never less.
        """
        named_spawner = self.nodes.get(first.spawned_by) if first.spawned_by else None
        if named_spawner is not None and named_spawner.lane_id != spine:
            return [named_spawner.position]
        parent = self.nodes.get(first.cause) if first.cause is not None else None
        if parent is None or parent.lane_id == spine:
            return []
        if parent.role == TOOL:
            return [parent.position]
        if parent.role != INFERENCE:
            return []
        siblings = [
            self.nodes[p]
            for p in self.children.get(parent.position, ())
            if p > first.position and self.nodes[p].lane_id == parent.lane_id and self.nodes[p].role == TOOL
        ]
        named = [n.position for n in siblings if n.spawn_named]
        return named or [n.position for n in siblings]

    def roots(self) -> list[int]:
        return [p for p, n in self.nodes.items() if n.cause is None and n.role != REWIND]
