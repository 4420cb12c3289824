"""The answer of the sessions index (``handlers/sessions.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from laneledger.contract.model import Id

from . import Answer, Count
from .costs import Money


class SessionSummary(Answer, kw_only=True):
    tenant: Id
    session_id: Id
    first_position: Count
    last_position: Count
    first_event_at: Annotated[str, Meta(description="committed_at of its first event")]
    last_event_at: Annotated[str, Meta(description="committed_at of its last event")]
    events: Count
    runs: Count
    lanes: Count
    status: Annotated[
        Literal["running", "completed", "failed"],
        Meta(
            description="failed once a run failed; completed once the session completed or every run "
            "ended; else running"
        ),
    ]
    attempts_open: Annotated[Count, Meta(description="attempts requested and not settled")]
    pauses_pending: Annotated[Count, Meta(description="hitl.paused without its hitl.responded")]
    cost: list[Money]


class SessionPage(Answer, kw_only=True):
    applied_position: Count
    sessions: list[SessionSummary]
    next_before: Annotated[
        int | None, Meta(description="pass as before= for the next page; null on the last")
    ]
