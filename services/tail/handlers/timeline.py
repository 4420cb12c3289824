"""``GET /api/v1/sessions/{session_id}/timeline``: a session's turns and
attempts as spans on a time axis, lane by lane, for the console's timeline.

What it answers (normative text: ``spec/tail.md``, "Timeline"):

* ``lanes``: every lane of the session with events (main agents,
  sub-agents, forks), in order of their first event, with the sequencer's
  name, kind, parent lane and actor, their first and last event (position,
  time) and where they were spawned from: the event their first event's
  ``causation_id`` names (Korg §2b), and the spawning tool call when the
  first event names it (``payload.spawned_by``). Not paged: one per lane.
* ``spans``: one per turn (``turn.started``) and per attempt
  (``attempt.requested``), **paged by the position of that opening event**
  (``cursor``, ``limit``), with the kind's first terminal event (outcome
  ``completed``/``failed``, or null while open: unresolved), its
  ``attempt_no`` and, for a retry, the attempt it retries (``retry_of``, from
  the sequencer's structure: the attempt of the same action numbered one
  less). A closing event without an opening one has no start and no span.

Times are the events' ``occurred_at`` (the producer's clock, as in the
activity view), given as ISO text and as milliseconds after ``origin_at``:
the ``occurred_at`` of the session's first event, so every page of one
session shares one axis. Each page costs two indexed queries over lifecycle
events (openers after the cursor, the closers of the page's subjects)
however many streaming events the session holds.
"""

from __future__ import annotations

from concurrent.futures import Executor
from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import EntityNotFound
from laneledger.contract.model import Attempt, Lane, StructurePage
from laneledger.contract.vocabulary import TERMINAL_EVENT_TYPES
from laneledger.runtime.httpjson import json_response
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.spine import spawned_by

from .. import rewinds
from ..answers import timeline as answer
from ..api import decode_parameters
from ..feed import Feed
from ..projections import events
from ..queries import TimelineQuery
from ..readmodel import ReadModel
from ..routes import ReadModelRoutes

OPENERS = {"turn.started": "turn", "attempt.requested": "attempt"}
CLOSERS = {t: kind for kind in ("turn", "attempt") for t in TERMINAL_EVENT_TYPES[kind]}


class _Body(msgspec.Struct):
    """What the timeline reads of an event beyond the read model's columns."""

    occurred_at: str = ""
    causation_id: str | None = None
    payload: dict[str, Any] = {}


_body = msgspec.json.Decoder(_Body)


def _instant(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


class _Clock:
    """Milliseconds after the session's origin (its first event's ``occurred_at``)."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self._origin = _instant(origin)

    def ms(self, text: str | None) -> int | None:
        if text is None or self._origin is None:
            return None
        at = _instant(text)
        if at is None:
            return None
        try:
            return round((at - self._origin).total_seconds() * 1000)
        except TypeError:  # one naive, one aware: no common axis
            return None


class Timeline(ReadModelRoutes):
    def __init__(self, model: ReadModel, readers: Executor, feed: Feed, ledger: LedgerClient) -> None:
        super().__init__(model, readers, feed)
        self._ledger = ledger

    def route(self) -> web.RouteDef:
        return web.get("/api/v1/sessions/{session_id}/timeline", self.get, name="timeline")

    async def get(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, TimelineQuery)
        cursor, limit, session_id = query.cursor or 0, query.limit, query.session_id
        applied = self._feed.applied
        scope = await self._owner(request, query.tenant, "session", session_id)
        selection = events.Selection(scope.tenant, session_id)
        lanes, clock = await self._read(self._lanes, selection, applied)
        if not lanes:  # none, or another tenant's: the same answer
            raise EntityNotFound("no such session", kind="session", id=session_id)
        view = await self._ledger.load_structure(session_id, tenant=scope.tenant)
        spans, more, last_read = await self._read(
            self._spans, selection, applied, cursor, limit, clock, view, session_id
        )
        known = {lane.id: lane for lane in view.lanes}
        for lane_id, entry in lanes.items():
            entry.update(_described(known.get(lane_id)))
        # The lanes and spans are built as dicts by the reads below; read as
        # the answer's Structs here, so a part that drifted from the document fails.
        return json_response(
            answer.Timeline(
                session_id=session_id,
                applied_position=applied,
                origin_at=clock.origin,
                end_ms=max((lane["last_ms"] or 0 for lane in lanes.values()), default=0),
                lanes=msgspec.convert(list(lanes.values()), list[answer.TimelineLane]),
                spans=msgspec.convert(spans, list[answer.TimelineSpan]),
                next_cursor=last_read,
                has_more=more,
            )
        )

    # -- reader threads ----------------------------------------------------------------------

    def _lanes(self, selection: events.Selection, applied: int) -> tuple[dict[str, dict[str, Any]], _Clock]:
        extents = events.lane_extents(self._model, selection, upto=applied)
        if not extents:
            return {}, _Clock("")
        ends = {
            p: (row.event_type, _body.decode(row.body))
            for p, row in events.rows_at(
                self._model, {p for e in extents for p in (e.first_position, e.last_position)}
            ).items()
        }
        clock = _Clock(ends[extents[0].first_position][1].occurred_at)
        # The lane's first event: what it points at, and the spawn call it names.
        heads = {
            e.first_position: (
                ends[e.first_position][1],
                spawned_by(ends[e.first_position][0], ends[e.first_position][1].payload),
            )
            for e in extents
        }
        # The sequencer keeps causes in the session: spawn links are among its events.
        linked = {
            event_id: (row.position, row.lane_id, _body.decode(row.body).occurred_at)
            for event_id, row in events.rows_with_ids(
                self._model,
                selection,
                {i for head, named in heads.values() for i in (head.causation_id, named) if i is not None},
            ).items()
        }
        lanes: dict[str, dict[str, Any]] = {}
        for extent in extents:
            lane_id, last = extent.lane_id, extent.last_position
            head, spawner_id = heads[extent.first_position]
            cause = linked.get(head.causation_id) if head.causation_id else None
            spawner = linked.get(spawner_id) if spawner_id else None
            lanes[lane_id] = {
                "lane_id": lane_id,
                "events": extent.events,
                "first_position": extent.first_position,
                "last_position": last,
                "first_at": head.occurred_at,
                "last_at": ends[last][1].occurred_at,
                "first_ms": clock.ms(head.occurred_at),
                "last_ms": clock.ms(ends[last][1].occurred_at),
                "spawned_from": _link(cause, clock) if cause and cause[1] != lane_id else None,
                "spawned_by": _link(spawner, clock) if spawner else None,
            }
        return lanes, clock

    def _spans(
        self,
        selection: events.Selection,
        applied: int,
        cursor: int,
        limit: int,
        clock: _Clock,
        view: StructurePage,
        session_id: str,
    ) -> tuple[list[dict[str, Any]], bool, int | None]:
        """A page of spans, whether more follow, and the last opening event
        read (the next cursor)."""
        rows = events.rows_of_types(
            self._model, selection, list(OPENERS), after=cursor, upto=applied, limit=limit + 1
        )
        more = len(rows) > limit
        rows = rows[:limit]
        if not rows:
            return [], False, None
        attempts = {a.id: a for a in view.attempts}
        numbered = {(a.action_id, a.attempt_no): a.id for a in view.attempts}
        actions = {a.id: a for a in view.actions}
        turns = {t.id: t for t in view.turns}
        subjects = {(OPENERS[r.event_type], r.subject_id) for r in rows}
        ends = self._closers(selection, applied, rows[0].position, subjects)
        gone = rewinds.invalidation(self._model, view.tenant, session_id, applied)
        spans: list[dict[str, Any]] = []
        opened = self._opened_before(selection, rows[0].position, subjects)
        for row in rows:
            kind, subject_id, position = OPENERS[row.event_type], row.subject_id, row.position
            if (kind, subject_id) in opened:  # a second opening event of the same subject: not a new span
                continue
            opened.add((kind, subject_id))
            start = _body.decode(row.body)
            end = ends.get((kind, subject_id))
            span: dict[str, Any] = {
                "kind": kind,
                "id": subject_id,
                "lane_id": row.lane_id,
                "started_position": position,
                "started_at": start.occurred_at,
                "start_ms": clock.ms(start.occurred_at),
                "outcome": end[2] if end else None,
                "ended_position": end[0] if end else None,
                "ended_at": end[1] if end else None,
                "end_ms": clock.ms(end[1]) if end else None,
                "invalidated": position in gone,
            }
            if kind == "turn":
                turn = turns.get(subject_id)
                span.update(
                    name=f"turn {turn.turn_no}" if turn else "turn", turn_no=turn.turn_no if turn else None
                )
            else:
                span.update(_attempt(subject_id, start.payload, attempts, actions, numbered))
            spans.append(span)
        return spans, more, rows[-1].position

    def _opened_before(
        self, selection: events.Selection, before: int, subjects: set[tuple[str, str]]
    ) -> set[tuple[str, str]]:
        """The page's subjects that an earlier page opened already."""
        earlier = events.rows_of_types(
            self._model,
            selection,
            list(OPENERS),
            upto=before - 1,
            subject_ids={subject for _, subject in subjects},
        )
        return {(OPENERS[r.event_type], r.subject_id) for r in earlier} & subjects

    def _closers(
        self, selection: events.Selection, applied: int, after: int, subjects: set[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str, str]]:
        """(kind, subject) -> (position, occurred_at, outcome) of its first
        terminal event, for the subjects opened on a page (which starts at
        ``after``: closers come later)."""
        found: dict[tuple[str, str], tuple[int, str, str]] = {}
        for row in events.rows_of_types(
            self._model,
            selection,
            list(CLOSERS),
            after=after,
            upto=applied,
            subject_ids={subject for _, subject in subjects},
        ):
            key = (CLOSERS[row.event_type], row.subject_id)
            if key in subjects and key not in found:
                outcome = row.event_type.rsplit(".", 1)[1]
                found[key] = (row.position, _body.decode(row.body).occurred_at, outcome)
        return found


def _link(found: tuple[int, str, str], clock: _Clock) -> dict[str, Any]:
    position, lane_id, occurred_at = found
    return {"position": position, "lane_id": lane_id, "at": occurred_at, "ms": clock.ms(occurred_at)}


def _described(lane: Lane | None) -> dict[str, Any]:
    return {
        "run_id": lane.run_id if lane else None,
        "name": lane.name if lane else None,
        "kind": lane.kind if lane else None,
        "parent_lane_id": lane.parent_lane_id if lane else None,
        "actor_id": lane.actor_id if lane else None,
        "forked": lane.forked_from is not None if lane else False,
    }


def _attempt(
    attempt_id: str,
    payload: dict[str, Any],
    attempts: dict[str, Attempt],
    actions: dict[str, Any],
    numbered: dict[tuple[str, int], str],
) -> dict[str, Any]:
    """An attempt span's action, number and the attempt it retries: from the
    structure, else from the payload's conventions (``attempt_no``,
    ``action_type``, ``name``; ``vocabulary.md``)."""
    attempt = attempts.get(attempt_id)
    action = actions.get(attempt.action_id) if attempt else None
    number = attempt.attempt_no if attempt else payload.get("attempt_no")
    number = number if isinstance(number, int) and not isinstance(number, bool) else None
    action_type = action.action_type if action else payload.get("action_type")
    name = action.name if action else payload.get("name")
    retry_of = None
    if attempt is not None and attempt.attempt_no > 1:
        retry_of = numbered.get((attempt.action_id, attempt.attempt_no - 1))
    return {
        "name": name if isinstance(name, str) else "attempt",
        "action_type": action_type if isinstance(action_type, str) else None,
        "action_id": attempt.action_id if attempt else None,
        "attempt_no": number,
        "retry_of": retry_of,
    }
