"""The answer of a session's timeline (``handlers/timeline.py``): its turns and
attempts as spans on a time axis, by lane."""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, UnsetType

from laneledger.contract.model import Id

from . import Answer, Count, Position

Millis = int | None  # milliseconds from the timeline's origin; null: no time known


class TimelineLink(Answer, kw_only=True):
    """Where a lane hangs off another: the event that spawned it."""

    position: Position
    lane_id: Id
    at: str
    ms: Millis


class TimelineLane(Answer, kw_only=True):
    lane_id: Id
    run_id: str | None
    name: str | None
    kind: str | None
    parent_lane_id: str | None
    actor_id: str | None
    forked: bool
    events: Position
    first_position: Position
    last_position: Position
    first_at: str
    last_at: str
    first_ms: Millis
    last_ms: Millis
    spawned_from: TimelineLink | None
    spawned_by: TimelineLink | None


class TimelineSpan(Answer, kw_only=True):
    kind: Literal["turn", "attempt"]
    id: Id
    lane_id: Id
    name: str
    started_position: Position
    started_at: str
    start_ms: Millis
    outcome: Literal["completed", "failed"] | None
    ended_position: Position | None
    ended_at: str | None
    end_ms: Millis
    invalidated: bool
    # a turn's number; an attempt's action, number and the attempt it retries
    turn_no: int | UnsetType | None = UNSET
    action_type: str | UnsetType | None = UNSET
    action_id: str | UnsetType | None = UNSET
    attempt_no: int | UnsetType | None = UNSET
    retry_of: str | UnsetType | None = UNSET


class Timeline(Answer, kw_only=True):
    session_id: Id
    applied_position: Count
    origin_at: str
    end_ms: int
    lanes: list[TimelineLane]
    spans: list[TimelineSpan]
    next_cursor: Position | None
    has_more: bool
