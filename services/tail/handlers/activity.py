"""``GET /api/v1/sessions/{session_id}/activity``: what a session's lifecycle
events say about its turns, actions and attempts — outcome, duration, cost —
and its human-in-the-loop pauses, for the console's session view.

It is read from the read model alone, without the sequencer: the structure
(session endpoint) says which attempt belongs to which action and turn, this
says how each one went, also for attempts whose events were appended without
the structure behind them.

A span is opened by ``<kind>.started`` (``attempt.requested`` for an
attempt) and closed by the kind's terminal event (``vocabulary.json``);
its subject id is the turn, action or attempt id. ``outcome`` is the
terminal event's last word (``completed``/``failed``) or null while it is
open; ``duration_ms`` runs between the two events' ``occurred_at`` (the
producer's clock, which timed the work). ``cost.recorded`` events are
added to the attempt and the action their payload names. A pause
(``hitl.paused``) is pending until a ``hitl.responded`` with its
``pause_id``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import EntityNotFound, IntegrityError
from laneledger.contract.vocabulary import COST_SUM, TERMINAL_EVENT_TYPES
from laneledger.runtime.httpjson import json_response

from ..answers import activity as answer
from ..answers.costs import Money
from ..api import decode_parameters
from ..projections import events
from ..queries import OwnedSessionQuery
from ..routes import ReadModelRoutes

OPENERS = {"turn.started": "turn", "action.started": "action", "attempt.requested": "attempt"}
CLOSERS = {t: kind for kind in ("turn", "action", "attempt") for t in TERMINAL_EVENT_TYPES[kind]}
HITL = ("hitl.paused", "hitl.responded")
TYPES = (*OPENERS, *CLOSERS, "cost.recorded", *HITL)


class Event(msgspec.Struct):
    """The fields of a lifecycle event this view uses."""

    position: int
    lane_id: str
    run_id: str
    subject_id: str
    event_type: str
    occurred_at: str
    payload: dict[str, Any] = {}
    erased: dict[str, Any] | None = None  # its content erased (spec/erasure.md)


_decode = msgspec.json.Decoder(Event)


def _ms_between(start: str, end: str) -> int | None:
    try:
        delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    except ValueError:
        return None
    return round(delta.total_seconds() * 1000)


class OpenSpan:
    """A turn, action or attempt as its events are read: opened, closed, costed."""

    __slots__ = (
        "cost",
        "ended_at",
        "ended_position",
        "id",
        "lane_id",
        "outcome",
        "run_id",
        "started_at",
        "started_position",
    )

    def __init__(self, subject: str, e: Event | None) -> None:
        self.id = subject
        self.lane_id = e.lane_id if e else None
        self.run_id = e.run_id if e else None
        self.started_position = e.position if e else None
        self.started_at = e.occurred_at if e else None
        self.outcome: answer.Outcome | None = None
        self.ended_position: int | None = None
        self.ended_at: str | None = None
        self.cost: dict[str, Decimal] = defaultdict(Decimal)

    def close(self, e: Event) -> None:
        self.outcome = "failed" if e.event_type.endswith(".failed") else "completed"
        self.ended_position = e.position
        self.ended_at = e.occurred_at
        if self.lane_id is None:  # closed without an opening event
            self.lane_id, self.run_id = e.lane_id, e.run_id

    def answer(self) -> answer.Span:
        duration = _ms_between(self.started_at, self.ended_at) if self.started_at and self.ended_at else None
        return answer.Span(
            id=self.id,
            lane_id=self.lane_id,
            run_id=self.run_id,
            started_position=self.started_position,
            started_at=self.started_at,
            outcome=self.outcome,
            ended_position=self.ended_position,
            ended_at=self.ended_at,
            duration_ms=duration,
            cost=_money(self.cost),
        )


def _money(sums: dict[str, Decimal]) -> list[Money]:
    return [Money(currency=c, amount=str(a)) for c, a in sorted(sums.items())]


class Activity(ReadModelRoutes):
    def route(self) -> web.RouteDef:
        return web.get("/api/v1/sessions/{session_id}/activity", self.activity, name="activity")

    async def activity(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, OwnedSessionQuery)
        session_id = query.session_id
        applied = self._feed.applied
        # A session of another tenant is 404 (access.py); of several, one is named.
        scope = await self._owner(request, query.tenant, "session", session_id)
        body = await self._read(self._build, session_id, applied, scope.tenant)
        return json_response(body)

    def _build(self, session_id: str, applied: int, tenant: str | None = None) -> answer.Activity:
        if not events.any_event(self._model, events.Selection(tenant, session_id), upto=applied):
            raise EntityNotFound("no events of this session (yet)", kind="session", id=session_id)
        spans: dict[str, dict[str, OpenSpan]] = {"turn": {}, "action": {}, "attempt": {}}
        pauses: dict[str, answer.Pause] = {}
        totals: dict[str, Decimal] = defaultdict(Decimal)
        lifecycle = events.bodies_of_types(
            self._model, events.Selection(tenant, session_id), TYPES, upto=applied
        )
        for _, raw in lifecycle:
            e = _decode.decode(raw)
            kind = OPENERS.get(e.event_type)
            if kind is not None:
                spans[kind].setdefault(e.subject_id, OpenSpan(e.subject_id, e))
            elif (kind := CLOSERS.get(e.event_type)) is not None:
                span = spans[kind].setdefault(e.subject_id, OpenSpan(e.subject_id, None))
                if span.outcome is None:
                    span.close(e)
            elif e.event_type == "cost.recorded":
                self._cost(e, spans, totals)
            else:
                self._hitl(e, pauses)
        return answer.Activity(
            session_id=session_id,
            applied_position=applied,
            turns=[s.answer() for s in spans["turn"].values()],
            actions=[s.answer() for s in spans["action"].values()],
            attempts=[s.answer() for s in spans["attempt"].values()],
            pauses=list(pauses.values()),
            cost=_money(totals),
        )

    @staticmethod
    def _cost(e: Event, spans: dict[str, dict[str, OpenSpan]], totals: dict[str, Decimal]) -> None:
        if e.erased is not None:
            return  # its content, the amount with it, is erased: it adds nothing
        p = e.payload
        try:  # the sequencer checked the payload (vocabulary.json)
            amount, currency = Decimal(str(p["amount"])), str(p["currency"])
        except (KeyError, InvalidOperation):
            raise IntegrityError(
                "a cost.recorded event does not read as a cost", kind="cost_unreadable", position=e.position
            ) from None
        totals[currency] = COST_SUM.add(totals[currency], amount)
        for kind, key in (("attempt", "attempt_id"), ("action", "action_id")):
            subject = p.get(key)
            if isinstance(subject, str):
                span = spans[kind].setdefault(subject, OpenSpan(subject, None))
                span.cost[currency] = COST_SUM.add(span.cost[currency], amount)

    @staticmethod
    def _hitl(e: Event, pauses: dict[str, answer.Pause]) -> None:
        pause_id = e.payload.get("pause_id")
        if not isinstance(pause_id, str):
            return
        if e.event_type == "hitl.paused":
            pauses.setdefault(
                pause_id,
                answer.Pause(
                    pause_id=pause_id,
                    lane_id=e.lane_id,
                    run_id=e.run_id,
                    position=e.position,
                    paused_at=e.occurred_at,
                    trigger=e.payload.get("trigger"),
                    decision=None,
                    responded_position=None,
                ),
            )
        elif pause_id in pauses and pauses[pause_id].decision is None:
            pauses[pause_id].decision = e.payload.get("decision")
            pauses[pause_id].responded_position = e.position
