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
from laneledger.contract.vocabulary import REWOUND, TERMINAL_EVENT_TYPES
from laneledger.runtime.httpjson import json_response
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.spine import spawned_by

from .. import rewinds
from ..answers import timeline as answer
from ..api import decode_parameters
from ..feed import Feed
from ..queries import TimelineQuery
from ..readmodel import ReadModel
from ..routes import ReadModelRoutes

ID_CHUNK = 500  # ids per IN (...) lookup

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
        where, params = "session_id = ?", [session_id]
        if scope.tenant is not None:
            where, params = f"{where} AND tenant = ?", [*params, scope.tenant]
        lanes, clock = await self._read(self._lanes, where, params, applied)
        if not lanes:  # none, or another tenant's: the same answer
            raise EntityNotFound("no such session", kind="session", id=session_id)
        view = await self._ledger.load_structure(session_id, tenant=scope.tenant)
        spans, more, last_read = await self._read(
            self._spans, where, params, applied, cursor, limit, clock, view, session_id
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

    def _lanes(self, where: str, params: list[Any], applied: int) -> tuple[dict[str, dict[str, Any]], _Clock]:
        rows = self._model.query(
            f"SELECT lane_id, count(*), min(position), max(position) FROM events WHERE {where}"
            " AND event_type != ? AND event_type != '' AND position <= ?"
            " GROUP BY lane_id ORDER BY min(position)",
            [*params, REWOUND, applied],
        )
        if not rows:
            return {}, _Clock("")
        ends = self._bodies({p for _, _, first, last in rows for p in (first, last)})
        clock = _Clock(ends[rows[0][2]][1].occurred_at)
        # The lane's first event: what it points at, and the spawn call it names.
        heads = {
            first: (ends[first][1], spawned_by(ends[first][0], ends[first][1].payload))
            for _, _, first, _ in rows
        }
        linked = self._by_id(
            where,
            params,
            {i for head, named in heads.values() for i in (head.causation_id, named) if i is not None},
        )
        lanes: dict[str, dict[str, Any]] = {}
        for lane_id, count, first, last in rows:
            head, spawner_id = heads[first]
            cause = linked.get(head.causation_id) if head.causation_id else None
            spawner = linked.get(spawner_id) if spawner_id else None
            lanes[lane_id] = {
                "lane_id": lane_id,
                "events": count,
                "first_position": first,
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
        where: str,
        params: list[Any],
        applied: int,
        cursor: int,
        limit: int,
        clock: _Clock,
        view: StructurePage,
        session_id: str,
    ) -> tuple[list[dict[str, Any]], bool, int | None]:
        """A page of spans, whether more follow, and the last opening event
        read (the next cursor)."""
        openers = list(OPENERS)
        rows = self._model.query(
            f"SELECT position, lane_id, subject_id, event_type, body FROM events WHERE {where}"
            f" AND event_type IN ({','.join('?' * len(openers))}) AND position > ? AND position <= ?"
            " ORDER BY position LIMIT ?",
            [*params, *openers, cursor, applied, limit + 1],
        )
        more = len(rows) > limit
        rows = rows[:limit]
        if not rows:
            return [], False, None
        attempts = {a.id: a for a in view.attempts}
        numbered = {(a.action_id, a.attempt_no): a.id for a in view.attempts}
        actions = {a.id: a for a in view.actions}
        turns = {t.id: t for t in view.turns}
        ends = self._closers(where, params, applied, rows[0][0], {(OPENERS[r[3]], r[2]) for r in rows})
        gone = rewinds.invalidation(self._model, view.tenant, session_id, applied)
        spans: list[dict[str, Any]] = []
        opened = self._opened_before(where, params, rows[0][0], {(OPENERS[r[3]], r[2]) for r in rows})
        for position, lane_id, subject_id, event_type, raw in rows:
            kind = OPENERS[event_type]
            if (kind, subject_id) in opened:  # a second opening event of the same subject: not a new span
                continue
            opened.add((kind, subject_id))
            start = _body.decode(raw)
            end = ends.get((kind, subject_id))
            span: dict[str, Any] = {
                "kind": kind,
                "id": subject_id,
                "lane_id": lane_id,
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
        return spans, more, rows[-1][0]

    def _opened_before(
        self, where: str, params: list[Any], before: int, subjects: set[tuple[str, str]]
    ) -> set[tuple[str, str]]:
        """The page's subjects that an earlier page opened already."""
        openers = list(OPENERS)
        ids = sorted({subject for _, subject in subjects})
        found: set[tuple[str, str]] = set()
        for start in range(0, len(ids), ID_CHUNK):
            chunk = ids[start : start + ID_CHUNK]
            for subject_id, event_type in self._model.query(
                f"SELECT subject_id, event_type FROM events WHERE {where}"
                f" AND event_type IN ({','.join('?' * len(openers))})"
                f" AND subject_id IN ({','.join('?' * len(chunk))}) AND position < ?",
                [*params, *openers, *chunk, before],
            ):
                found.add((OPENERS[event_type], subject_id))
        return found & subjects

    def _closers(
        self, where: str, params: list[Any], applied: int, after: int, subjects: set[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str, str]]:
        """(kind, subject) -> (position, occurred_at, outcome) of its first
        terminal event, for the subjects opened on a page (which starts at
        ``after``: closers come later)."""
        closers = list(CLOSERS)
        ids = sorted({subject for _, subject in subjects})
        found: dict[tuple[str, str], tuple[int, str, str]] = {}
        for start in range(0, len(ids), ID_CHUNK):
            chunk = ids[start : start + ID_CHUNK]
            for position, subject_id, event_type, raw in self._model.query(
                f"SELECT position, subject_id, event_type, body FROM events WHERE {where}"
                f" AND event_type IN ({','.join('?' * len(closers))})"
                f" AND subject_id IN ({','.join('?' * len(chunk))}) AND position > ? AND position <= ?"
                " ORDER BY position",
                [*params, *closers, *chunk, after, applied],
            ):
                key = (CLOSERS[event_type], subject_id)
                if key in subjects and key not in found:
                    found[key] = (position, _body.decode(raw).occurred_at, event_type.rsplit(".", 1)[1])
        return found

    def _bodies(self, positions: set[int]) -> dict[int, tuple[str, _Body]]:
        """Position -> (event type, body)."""
        ordered = sorted(positions)
        found: dict[int, tuple[str, _Body]] = {}
        for start in range(0, len(ordered), ID_CHUNK):
            chunk = ordered[start : start + ID_CHUNK]
            for position, event_type, raw in self._model.query(
                "SELECT position, event_type, body FROM events"
                f" WHERE position IN ({','.join('?' * len(chunk))})",
                chunk,
            ):
                found[position] = (event_type, _body.decode(raw))
        return found

    def _by_id(self, where: str, params: list[Any], event_ids: set[str]) -> dict[str, tuple[int, str, str]]:
        """Event id -> (position, lane_id, occurred_at) of the session's events
        (``where``: the sequencer keeps causes in the session), for spawn links."""
        ids = sorted(event_ids)
        found: dict[str, tuple[int, str, str]] = {}
        for start in range(0, len(ids), ID_CHUNK):
            chunk = ids[start : start + ID_CHUNK]
            for event_id, position, lane_id, raw in self._model.query(
                "SELECT event_id, position, lane_id, body FROM events"
                f" WHERE {where} AND event_id IN ({','.join('?' * len(chunk))})",
                [*params, *chunk],
            ):
                found[event_id] = (position, lane_id, _body.decode(raw).occurred_at)
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
