"""Historical reads: a lane's events, a session, a run, run inspection, one
event by position.

Events come from the read model, so every answer is as of one applied
position (``applied_position`` in the body) and pages through a stable,
append-only sequence. Structure (lanes with their heads, turns, actions,
attempts with their effect and idempotency class) is not on the committed
stream; it is read from the sequencer page by page with ``load_structure``
over NATS, and when the sequencer does not answer the endpoint answers 503
(``unavailable``) or 504 (``timeout``) rather than half a view.

Pagination (also in ``spec/tail.md``): ``cursor`` is a lane seq (lane
events) or a ledger position (session and run events); ``direction=forward``
(default) returns keys greater than the cursor, oldest first;
``direction=backward`` returns keys smaller than the cursor, newest first (no
cursor: from the newest). ``next_cursor`` is the key of the page's last
event, to be passed back as ``cursor`` for the next page in the same
direction; ``has_more`` tells whether one exists now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import EntityNotFound, IntegrityError
from laneledger.contract.model import Action, Attempt, Lane, Turn
from laneledger.contract.vocabulary import TERMINAL_EVENT_TYPES
from laneledger.runtime.access import Scope, scope_of
from laneledger.runtime.httpjson import json_response
from laneledger.sdk.client import LedgerClient

from .. import rewinds
from ..api import decode_parameters
from ..budget import Hold, ReadBudget
from ..feed import Feed
from ..limits import Limiter
from ..pagestream import PIECE_BYTES, Piece, PieceStreamer
from ..projections import events
from ..projections.events import event_at
from ..queries import EventPageQuery, EventQuery, InspectionQuery, LaneEventsQuery, RunQuery, SessionQuery
from ..readmodel import ReadModel
from ..routes import ReadModelRoutes

PAGE_BYTES = 8 << 20
_END = 2**62  # "no cursor" going backward: newer than any key
ATTEMPT_TYPES = ("attempt.requested",) + TERMINAL_EVENT_TYPES["attempt"]
CHECKPOINT_LINKED = "lane.framework.checkpoint.linked"
RUN_FACTS = TERMINAL_EVENT_TYPES["run"] + ATTEMPT_TYPES + (CHECKPOINT_LINKED,)  # what an inspection reads
SAFE_TO_RETRY = ("inherent", "keyed")


def full(obj: msgspec.Struct | None) -> dict[str, Any] | None:
    """Every field of a structure object; the wire structs leave defaults out
    (``omit_defaults``), the HTTP API always shows them."""
    if obj is None:
        return None
    return {name: getattr(obj, name) for name in obj.__struct_fields__}


@dataclass
class Structure:
    """What the sequencer knows about a session or run besides its events."""

    lanes: list[Lane]
    turns: list[Turn]
    actions: list[Action]
    attempts: list[Attempt]
    tenant: str | None = None
    run_ids: list[str] = field(default_factory=list)
    # Always true since the structure is read page by page (load_structure);
    # kept in the answers for the clients that check it.
    complete: bool = True

    def body(self) -> dict[str, Any]:
        return {
            "lanes": [full(o) for o in self.lanes],
            "turns": [full(o) for o in self.turns],
            "actions": [full(o) for o in self.actions],
            "attempts": [full(o) for o in self.attempts],
            "structure_complete": self.complete,
        }


@dataclass(frozen=True)
class PageRequest:
    cursor: int | None
    direction: str
    limit: int

    @classmethod
    def read(cls, query: EventPageQuery) -> PageRequest:
        return cls(query.cursor, query.direction, query.limit)


class History(ReadModelRoutes):
    def __init__(
        self,
        model: ReadModel,
        readers: Executor,
        feed: Feed,
        ledger: LedgerClient,
        limits: Limiter,
        budget: ReadBudget,
    ) -> None:
        super().__init__(model, readers, feed)
        self._ledger = ledger
        self._limits = limits  # pages of up to PAGE_BYTES: expensive reads
        self._pages = PieceStreamer(budget)  # pages streamed a piece at a time

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/v1/events/{position}", self.event, name="event"),
            web.get(
                "/api/v1/lanes/{lane_id}/events", self._limits.guard(self.lane_events), name="lane_events"
            ),
            web.get("/api/v1/sessions/{session_id}", self._limits.guard(self.session), name="session"),
            web.get("/api/v1/sessions/{session_id}/runs/{run_id}", self._limits.guard(self.run), name="run"),
            web.get(
                "/api/v1/sessions/{session_id}/runs/{run_id}/inspection", self.inspection, name="inspection"
            ),
        ]

    # -- one event -------------------------------------------------------------------------

    async def event(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, EventQuery)
        position = query.position
        row = await self._read(event_at, self._model, position)
        if not scope_of(request).allows(row.tenant):  # as if it were not there
            raise EntityNotFound("no committed event at this position (yet)", kind="event", position=position)
        if not row.event_type:
            raise IntegrityError(
                "the stream message at this position is not a committed event",
                kind="not_an_event",
                position=position,
            )
        if query.exclude_invalidated == "true":
            gone = await self._read(
                rewinds.invalidation, self._model, row.tenant, row.session_id, self._feed.applied
            )
            if position in gone:  # left out, like every read that excludes it
                raise EntityNotFound(
                    "the event at this position is invalidated by a rewind",
                    kind="event",
                    position=position,
                    invalidated=True,
                )
        return web.Response(body=row.body, content_type="application/json")

    # -- a lane ----------------------------------------------------------------------------

    async def lane_events(self, request: web.Request) -> web.StreamResponse:
        query = decode_parameters(request, LaneEventsQuery)
        page = PageRequest.read(query)
        lane_id = query.lane_id
        scope = await self._owner(request, query.tenant, "lane", lane_id)
        applied = self._feed.applied
        selection = events.Selection(scope.tenant, lane_id=lane_id)
        if query.with_origin == "true":  # with the events it was forked from
            return await self._fork_history(request, query, page, lane_id, applied, scope)
        if query.exclude_invalidated == "true":
            # A lane is in one session: its rewinds are the ones that apply.
            session_id = await self._read(events.session_of, self._model, selection)
            if session_id is not None:
                selection = await self._excluding(True, session_id, applied, selection)
        async with self._pages.hold(request) as held:
            read = partial(self._page, selection, "seq", applied=applied)
            first = await self._read(read, page)
            if not first[0] and not await self._read(events.any_event, self._model, selection):
                # 404 unless it is just empty
                lane = await self._ledger.get_lane(lane_id, tenant=scope.tenant)
                scope.not_found_unless(lane.tenant, "lane", id=lane_id)
            head = {"lane_id": lane_id, "direction": page.direction}
            return await self._send(request, held, head, first, read, page, applied)

    async def _fork_history(
        self,
        request: web.Request,
        query: LaneEventsQuery,
        page: PageRequest,
        lane_id: str,
        applied: int,
        access: Scope,
    ) -> web.StreamResponse:
        """A lane with the history it was forked from: its origin's events up
        to the fork point (and so on up the origins), then its own, keyed by
        position. The segments follow each other in position order, and a
        page holds events of one segment only (it may be short at a fork
        point; ``has_more`` says whether more follow)."""
        lane = await self._ledger.get_lane(lane_id, tenant=access.tenant)
        access.not_found_unless(lane.tenant, "lane", id=lane_id)
        origins = []
        # Forks stay in their tenant (and session): every segment is the lane's tenant's.
        segments = [events.Selection(lane.tenant, lane_id=lane_id)]
        fork = lane.forked_from
        while fork is not None:  # a fork of a fork: each origin is older than its fork
            origins.append(full(fork))
            segments.append(events.Selection(lane.tenant, lane_id=fork.lane_id, max_seq=fork.seq))
            fork = (await self._ledger.get_lane(fork.lane_id, tenant=lane.tenant)).forked_from
        if page.direction == "forward":
            segments.reverse()
        if query.exclude_invalidated == "true":  # forks stay in their origin's session
            gone = await self._read(rewinds.invalidation, self._model, lane.tenant, lane.session_id, applied)
            segments = [segment.without(gone.spans()) for segment in segments]
        async with self._pages.hold(request) as held:
            at, first = await self._read(self._segments_page, segments, page, applied)
            read = partial(self._segment_piece, segments, at, applied=applied)
            head = {"lane_id": lane_id, "with_origin": True, "origins": origins, "direction": page.direction}
            # The page's later pieces come from the segment of its first (one segment a page).
            return await self._send(request, held, head, first, read, page, applied)

    # -- a session and a run ----------------------------------------------------------------

    async def session(self, request: web.Request) -> web.StreamResponse:
        query = decode_parameters(request, SessionQuery)
        page = PageRequest.read(query)
        session_id = query.session_id
        applied = self._feed.applied
        access = await self._owner(request, query.tenant, "session", session_id)
        selection = await self._excluding(
            query.exclude_invalidated == "true",
            session_id,
            applied,
            events.Selection(access.tenant, session_id),
        )
        read = partial(self._page, selection, "position", applied=applied)
        async with self._pages.hold(request) as held:
            known, first = await asyncio.gather(
                self._structure(session_id, tenant=access.tenant), self._read(read, page)
            )
            access.not_found_unless(known.tenant, "session", id=session_id)
            head = {
                "session_id": session_id,
                "tenant": known.tenant,
                "run_ids": known.run_ids,
                **known.body(),
                "direction": page.direction,
            }
            return await self._send(request, held, head, first, read, page, applied)

    async def run(self, request: web.Request) -> web.StreamResponse:
        query = decode_parameters(request, RunQuery)
        page = PageRequest.read(query)
        session_id, run_id = query.session_id, query.run_id
        applied = self._feed.applied
        access = await self._owner(request, query.tenant, "session", session_id)
        selection = await self._excluding(
            query.exclude_invalidated == "true",
            session_id,
            applied,
            events.Selection(access.tenant, session_id, run_id),
        )
        read = partial(self._page, selection, "position", applied=applied)
        async with self._pages.hold(request) as held:
            known, first = await asyncio.gather(
                self._structure(session_id, run_id, tenant=access.tenant), self._read(read, page)
            )
            access.not_found_unless(known.tenant, "run", id=run_id, session_id=session_id)
            head = {"session_id": session_id, "run_id": run_id, **known.body(), "direction": page.direction}
            return await self._send(request, held, head, first, read, page, applied)

    async def inspection(self, request: web.Request) -> web.Response:
        """What the run's events say about how it ended and what is left open,
        without choosing a status or a recovery policy for the orchestrator."""
        query = decode_parameters(request, InspectionQuery)
        session_id, run_id = query.session_id, query.run_id
        applied = self._feed.applied
        access = await self._owner(request, query.tenant, "session", session_id)
        view, rows = await asyncio.gather(
            self._structure(session_id, run_id, tenant=access.tenant),
            self._read(
                partial(events.rows_of_types, upto=applied),
                self._model,
                events.Selection(access.tenant, session_id, run_id),
                RUN_FACTS,
            ),
        )
        access.not_found_unless(view.tenant, "run", id=run_id, session_id=session_id)
        terminal = [msgspec.Raw(r.body) for r in rows if r.event_type in TERMINAL_EVENT_TYPES["run"]]
        linked = [msgspec.Raw(r.body) for r in rows if r.event_type == CHECKPOINT_LINKED]
        requested: dict[str, tuple[int, bytes]] = {}
        resolved: set[str] = set()
        for row in rows:
            if row.event_type == "attempt.requested":
                requested.setdefault(row.subject_id, (row.position, row.body))
            elif row.event_type in TERMINAL_EVENT_TYPES["attempt"]:
                resolved.add(row.subject_id)
        attempts = {a.id: a for a in view.attempts}
        actions = {a.id: a for a in view.actions}
        unresolved = []
        for attempt_id, (position, body) in requested.items():
            if attempt_id in resolved:
                continue
            attempt = attempts.get(attempt_id)
            action = actions.get(attempt.action_id) if attempt else None
            unresolved.append(
                {
                    "attempt_id": attempt_id,
                    "attempt": full(attempt),
                    "action": full(action),
                    "requested_position": position,
                    "requested_event": msgspec.Raw(body),
                    # spec/object-model.md: a side-effecting call is never retried
                    # silently; unknown structure counts as side-effecting.
                    "reconcile_before_retry": action is None
                    or (action.effect in ("write", "unknown") and action.idempotency not in SAFE_TO_RETRY),
                }
            )
        return json_response(
            {
                "session_id": session_id,
                "run_id": run_id,
                "applied_position": applied,
                "structure_complete": view.complete,
                "terminal_events": terminal,
                "linked_checkpoints": linked,
                "unresolved_attempts": unresolved,
            }
        )

    async def _excluding(
        self, exclude: bool, session_id: str, applied: int, selection: events.Selection
    ) -> events.Selection:
        """``selection`` without the events the session's rewinds invalidated, when asked."""
        if not exclude:
            return selection
        gone = await self._read(rewinds.invalidation, self._model, selection.tenant, session_id, applied)
        return selection.without(gone.spans())

    async def _structure(
        self, session_id: str, run_id: str | None = None, *, tenant: str | None = None
    ) -> Structure:
        # Paged (load_structure), without the events the tail reads itself:
        # complete however large the session is.
        view = await self._ledger.load_structure(session_id, run_id, tenant=tenant)
        return Structure(
            view.lanes,
            view.turns,
            view.actions,
            view.attempts,
            view.tenant,
            sorted({lane.run_id for lane in view.lanes}),
        )

    # -- queries (reader threads) ----------------------------------------------------------

    async def _send(
        self,
        request: web.Request,
        held: Hold,
        head: dict[str, Any],
        first: Piece,
        read: Callable[[PageRequest], Piece],
        page: PageRequest,
        applied: int,
    ) -> web.StreamResponse:
        """The page whose first piece is ``first``, its others ``read`` (in a
        reader thread) from the last key sent."""

        async def piece(cursor: int | None, limit: int) -> Piece:
            return await self._read(read, PageRequest(cursor, page.direction, limit))

        return await self._pages.send_page(request, held, head, first, page.limit, PAGE_BYTES, piece, applied)

    def _page(self, selection: events.Selection, key: str, page: PageRequest, applied: int) -> Piece:
        """Up to ``page.limit`` events past the cursor, one piece of bytes at most."""
        forward = page.direction == "forward"
        cursor = (0 if forward else _END) if page.cursor is None else page.cursor
        rows, more = events.page(
            self._model,
            selection,
            key,
            forward=forward,
            cursor=cursor,
            upto=applied,
            max_rows=page.limit,
            max_bytes=PIECE_BYTES,
        )
        return [msgspec.Raw(body) for _, body in rows], (rows[-1][0] if rows else None), more

    def _segments_page(
        self, segments: list[events.Selection], page: PageRequest, applied: int
    ) -> tuple[int, Piece]:
        """The first piece of the first segment with events past the cursor
        (by position), and that segment's index."""
        probe = PageRequest(page.cursor, page.direction, 1)
        for at, segment in enumerate(segments):
            if self._page(segment, "position", probe, applied)[0]:
                return at, self._segment_piece(segments, at, page, applied)
        return len(segments), ([], None, False)

    def _segment_piece(
        self, segments: list[events.Selection], at: int, page: PageRequest, applied: int
    ) -> Piece:
        """A piece of segment ``at`` past the cursor, and whether it or a
        later segment has more (a page holds one segment's events only)."""
        if at >= len(segments):
            return [], None, False
        found, next_cursor, more = self._page(segments[at], "position", page, applied)
        if not more:
            probe = PageRequest(next_cursor if found else page.cursor, page.direction, 1)
            more = any(self._page(segment, "position", probe, applied)[0] for segment in segments[at + 1 :])
        return found, next_cursor, more
