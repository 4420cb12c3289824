"""The answer of a session's activity (``handlers/activity.py``): its turns, actions
and attempts as spans, and its human-in-the-loop pauses."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from laneledger.contract.model import Id, Timestamp

from . import Answer, Count, Position
from .costs import Money

Outcome = Literal["completed", "failed"]


class Span(Answer, kw_only=True):
    id: Id
    lane_id: Id | None
    run_id: Id | None
    started_position: Position | None
    started_at: Timestamp | None
    outcome: Annotated[Outcome | None, Meta(description="null while open (an unresolved attempt)")]
    ended_position: Position | None
    ended_at: Timestamp | None
    duration_ms: Annotated[int | None, Meta(description="between the two events' occurred_at")]
    cost: list[Money]


class Pause(Answer, kw_only=True):
    pause_id: str
    lane_id: Id
    run_id: Id
    position: Position
    paused_at: Timestamp
    trigger: str | None
    decision: Annotated[str | None, Meta(description="null: pending")]
    responded_position: Position | None


class Activity(Answer, kw_only=True):
    session_id: Id
    applied_position: Count
    turns: list[Span]
    actions: list[Span]
    attempts: list[Span]
    pauses: list[Pause]
    cost: list[Money]
