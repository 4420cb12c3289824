"""The answers of the history routes (``handlers/history.py``): pages of committed
events, with the session's or run's structure, and a run's inspection."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from laneledger.contract.model import Action, Attempt, CommittedEvent, ForkOrigin, Id, Lane, Turn

from . import STRUCTURE_COMPLETE, Answer, Count, Position


class EventPage(Answer, kw_only=True):
    """One page of committed events, keyed by position (a lane's by seq)."""

    direction: Literal["forward", "backward"]
    events: list[CommittedEvent]
    next_cursor: Annotated[
        int | None, Meta(description="key of the page's last event; null for an empty page")
    ]
    has_more: bool
    applied_position: Count


class LaneEvents(EventPage, kw_only=True):
    lane_id: Id
    with_origin: Annotated[Literal[True], Meta(description="present when with_origin=true")] | UnsetType = (
        UNSET
    )
    origins: (
        Annotated[list[ForkOrigin], Meta(description="with_origin: the fork points, the lane's own first")]
        | UnsetType
    ) = UNSET


class StructuredPage(EventPage, kw_only=True):
    """A page with the structure (lanes, turns, actions, attempts) it is of."""

    lanes: list[Lane]
    turns: list[Turn]
    actions: list[Action]
    attempts: list[Attempt]
    structure_complete: Annotated[bool, STRUCTURE_COMPLETE]


class Session(StructuredPage, kw_only=True):
    session_id: Id
    tenant: Id
    run_ids: list[Id]


class Run(StructuredPage, kw_only=True):
    session_id: Id
    run_id: Id


class UnresolvedAttempt(Answer, kw_only=True):
    attempt_id: Id
    attempt: Attempt | None
    action: Action | None
    requested_position: Position
    requested_event: CommittedEvent
    reconcile_before_retry: Annotated[
        bool,
        Meta(
            description="true when the action may have had an effect that a retry would repeat "
            "(effect write/unknown, idempotency not inherent/keyed, or the action is unknown)"
        ),
    ]


class Inspection(Answer, kw_only=True):
    session_id: Id
    run_id: Id
    applied_position: Count
    structure_complete: Annotated[bool, STRUCTURE_COMPLETE]
    terminal_events: list[CommittedEvent]
    linked_checkpoints: list[CommittedEvent]
    unresolved_attempts: list[UnresolvedAttempt]
