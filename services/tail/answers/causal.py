"""The answers of a session's causal tree (``handlers/causal.py``) and of an event's
causation (``handlers/causation.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from laneledger.contract.model import ForkOrigin, Id

from . import STRUCTURE_COMPLETE, Answer, Count, Position


class CausalNode(Answer, kw_only=True):
    position: Position
    event_id: Id
    lane_id: Id
    seq: Position
    actor_id: Id
    event_type: str
    role: Literal["prompt", "inference", "tool", "rewind", "other"]
    name: Annotated[str, Meta(description="tool or model name, else the event type")]
    summary: Annotated[str, Meta(max_length=120)]
    cause: Annotated[
        Position | None, Meta(description="position of the event causation_id names; null: a root")
    ]
    cause_id: Id | None
    invalidated: Annotated[bool, Meta(description="a session.rewound event of the session covers it")]


class CausalSpine(Answer, kw_only=True):
    lane_id: Id
    events: Count
    first_position: Position
    last_position: Position
    first_cause: Annotated[
        Position | None,
        Meta(
            description="position the spine's first event points at: where a sub-agent hangs off "
            "its parent (Korg §2b)"
        ),
    ]
    spawned_by: Annotated[
        Position | None,
        Meta(
            description="position of the spawning tool call, when the spine's first event names it "
            "(laneledger.sdk.spine)"
        ),
    ]
    name: Id | None
    kind: str | None
    parent_lane_id: Id | None
    actor_id: Id | None
    forked_from: ForkOrigin | None


class CausalRewind(Answer, kw_only=True):
    position: Position
    actor_id: Id
    target_position: Position
    invalidated: list[tuple[Position, Position]]
    invalidated_count: Count


class CausalTree(Answer, kw_only=True):
    session_id: Id
    applied_position: Count
    structure_complete: Annotated[bool, STRUCTURE_COMPLETE]
    exclude_invalidated: bool
    spines: list[CausalSpine]
    rewinds: list[CausalRewind]
    roots: Annotated[list[Position], Meta(description="this page's nodes without a cause")]
    nodes: list[CausalNode]
    next_cursor: int | None
    has_more: bool


class EventRef(Answer, kw_only=True):
    position: Count
    event_id: Id
    event_type: Id
    lane_id: Id
    seq: Count
    session_id: Id


class EventCausation(Answer, kw_only=True):
    position: Count
    event_id: Id
    causation_id: Id | None
    cause: EventRef | None
    caused: list[EventRef]
    more_caused: bool
