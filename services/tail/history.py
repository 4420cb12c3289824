"""Historical reads: a lane's events, a session, a run, run inspection, one
event by position.

Events come from the read model, so every answer is as of one applied
position (``applied_position`` in the body) and pages through a stable,
append-only sequence. Structure (lanes with their heads, turns, actions,
attempts with their effect and idempotency class) is not on the committed
stream; it is read from the sequencer with ``load_session`` / ``load_run``
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
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiohttp import web

from laneledger.client import LedgerClient
from laneledger.errors import IntegrityError, RequestTooLarge
from laneledger.vocabulary import TERMINAL_EVENT_TYPES

from .api import Query, json_response, parse_int
from .feed import Feed
from .readmodel import ReadModel

PAGE_DEFAULT = 100
PAGE_MAX = 1000
PAGE_BYTES = 8 << 20
_END = 2**62  # "no cursor" going backward: newer than any key
PAGE_PARAMETERS = ("cursor", "direction", "limit")
ATTEMPT_TYPES = ("attempt.requested",) + TERMINAL_EVENT_TYPES["attempt"]
CHECKPOINT_LINKED = "lane.framework.checkpoint.linked"
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

    lanes: list
    turns: list
    actions: list
    attempts: list
    tenant: str | None = None
    run_ids: list[str] = field(default_factory=list)
    # False when the sequencer's view was too large for one NATS reply and
    # only the lanes (with their heads) could be read.
    complete: bool = True

    def body(self) -> dict[str, Any]:
        return {"lanes": [full(o) for o in self.lanes], "turns": [full(o) for o in self.turns],
                "actions": [full(o) for o in self.actions],
                "attempts": [full(o) for o in self.attempts],
                "structure_complete": self.complete}


@dataclass(frozen=True)
class PageRequest:
    cursor: int | None
    direction: str
    limit: int

    @classmethod
    def read(cls, query: Query) -> PageRequest:
        limit = query.integer("limit", PAGE_DEFAULT, low=1, high=PAGE_MAX)
        assert limit is not None
        return cls(query.integer("cursor"), query.choice("direction", ("forward", "backward")),
                   limit)


class History:
    def __init__(self, model: ReadModel, readers, feed: Feed, ledger: LedgerClient) -> None:
        self._model = model
        self._readers = readers
        self._feed = feed
        self._ledger = ledger

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/v1/events/{position}", self.event, name="event"),
            web.get("/api/v1/lanes/{lane_id}/events", self.lane_events, name="lane_events"),
            web.get("/api/v1/sessions/{session_id}", self.session, name="session"),
            web.get("/api/v1/sessions/{session_id}/runs/{run_id}", self.run, name="run"),
            web.get("/api/v1/sessions/{session_id}/runs/{run_id}/inspection", self.inspection,
                    name="inspection"),
        ]

    async def _read(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._readers, fn, *args)

    # -- one event -------------------------------------------------------------------------

    async def event(self, request: web.Request) -> web.Response:
        Query(request, ())
        position = parse_int(request.match_info["position"], "position", low=1)
        row = await self._read(self._model.event_at, position)
        if not row.event_type:
            raise IntegrityError("the stream message at this position is not a committed event",
                                 kind="not_an_event", position=position)
        return web.Response(body=row.body, content_type="application/json")

    # -- a lane ----------------------------------------------------------------------------

    async def lane_events(self, request: web.Request) -> web.Response:
        page = PageRequest.read(Query(request, PAGE_PARAMETERS))
        lane_id = request.match_info["lane_id"]
        applied = self._feed.applied
        events, next_cursor, more = await self._read(
            self._page, "lane_id = ?", [lane_id], "seq", page, applied)
        if not events and not await self._read(self._any, "lane_id = ?", [lane_id]):
            await self._ledger.get_lane(lane_id)  # EntityNotFound (404) unless it is just empty
        return json_response({
            "lane_id": lane_id, "direction": page.direction, "events": events,
            "next_cursor": next_cursor, "has_more": more, "applied_position": applied,
        })

    # -- a session and a run ----------------------------------------------------------------

    async def session(self, request: web.Request) -> web.Response:
        page = PageRequest.read(Query(request, PAGE_PARAMETERS))
        session_id = request.match_info["session_id"]
        applied = self._feed.applied
        scope = ("session_id = ?", [session_id])
        known, (events, next_cursor, more) = await asyncio.gather(
            self._structure(self._ledger.load_session(session_id), *scope),
            self._read(self._page, *scope, "position", page, applied),
        )
        return json_response({
            "session_id": session_id, "tenant": known.tenant, "run_ids": known.run_ids,
            **known.body(), "direction": page.direction, "events": events,
            "next_cursor": next_cursor, "has_more": more, "applied_position": applied,
        })

    async def run(self, request: web.Request) -> web.Response:
        page = PageRequest.read(Query(request, PAGE_PARAMETERS))
        session_id, run_id = request.match_info["session_id"], request.match_info["run_id"]
        applied = self._feed.applied
        scope = ("run_id = ? AND session_id = ?", [run_id, session_id])
        known, (events, next_cursor, more) = await asyncio.gather(
            self._structure(self._ledger.load_run(session_id, run_id), *scope),
            self._read(self._page, *scope, "position", page, applied),
        )
        return json_response({
            "session_id": session_id, "run_id": run_id, **known.body(),
            "direction": page.direction, "events": events, "next_cursor": next_cursor, "has_more": more,
            "applied_position": applied,
        })

    async def inspection(self, request: web.Request) -> web.Response:
        """What the run's events say about how it ended and what is left open,
        without choosing a status or a recovery policy for the orchestrator."""
        Query(request, ())
        session_id, run_id = request.match_info["session_id"], request.match_info["run_id"]
        applied = self._feed.applied
        view, rows = await asyncio.gather(
            self._structure(self._ledger.load_run(session_id, run_id),
                            "run_id = ? AND session_id = ?", [run_id, session_id]),
            self._read(self._run_facts, session_id, run_id, applied),
        )
        terminal = [msgspec.Raw(body) for _, t, _, body in rows if t in TERMINAL_EVENT_TYPES["run"]]
        linked = [msgspec.Raw(body) for _, t, _, body in rows if t == CHECKPOINT_LINKED]
        requested: dict[str, tuple[int, bytes]] = {}
        resolved: set[str] = set()
        for position, event_type, subject_id, body in rows:
            if event_type == "attempt.requested":
                requested.setdefault(subject_id, (position, body))
            elif event_type in TERMINAL_EVENT_TYPES["attempt"]:
                resolved.add(subject_id)
        attempts = {a.id: a for a in view.attempts}
        actions = {a.id: a for a in view.actions}
        unresolved = []
        for attempt_id, (position, body) in requested.items():
            if attempt_id in resolved:
                continue
            attempt = attempts.get(attempt_id)
            action = actions.get(attempt.action_id) if attempt else None
            unresolved.append({
                "attempt_id": attempt_id,
                "attempt": full(attempt),
                "action": full(action),
                "requested_position": position,
                "requested_event": msgspec.Raw(body),
                # spec/object-model.md: a side-effecting call is never retried
                # silently; unknown structure counts as side-effecting.
                "reconcile_before_retry": action is None or (
                    action.effect in ("write", "unknown")
                    and action.idempotency not in SAFE_TO_RETRY),
            })
        return json_response({
            "session_id": session_id, "run_id": run_id, "applied_position": applied,
            "structure_complete": view.complete, "terminal_events": terminal,
            "linked_checkpoints": linked, "unresolved_attempts": unresolved,
        })

    async def _structure(self, load: Awaitable[Any], where: str, params: list) -> Structure:
        try:
            view = await load
        except RequestTooLarge:
            # The sequencer's view carries every event of the session (run)
            # and no longer fits in one NATS reply: show the lanes, read one
            # by one, and say that turns, actions and attempts are left out.
            tenant, lane_ids, run_ids = await self._read(self._scope_summary, where, params)
            lanes = await asyncio.gather(*(self._ledger.get_lane(lane_id) for lane_id in lane_ids))
            return Structure(list(lanes), [], [], [], tenant, run_ids, complete=False)
        return Structure(view.lanes, view.turns, view.actions, view.attempts,
                         getattr(view, "tenant", None), getattr(view, "run_ids", []))

    # -- queries (reader threads) ----------------------------------------------------------

    def _page(self, where: str, params: list, key: str, page: PageRequest,
              applied: int) -> tuple[list[msgspec.Raw], int | None, bool]:
        if page.direction == "forward":
            bound, order, cursor = ">", "ASC", page.cursor or 0
        else:
            bound, order, cursor = "<", "DESC", _END if page.cursor is None else page.cursor
        rows, more = self._model.scan(
            f"SELECT {key}, body FROM events WHERE {where} AND event_type != ''"
            f" AND position <= ? AND {key} {bound} ? ORDER BY {key} {order}",
            [*params, applied, cursor], max_rows=page.limit, max_bytes=PAGE_BYTES, body_column=1,
        )
        events = [msgspec.Raw(body) for _, body in rows]
        return events, (rows[-1][0] if rows else None), more

    def _scope_summary(self, where: str, params: list) -> tuple[str | None, list[str], list[str]]:
        """(tenant, lane ids in order of first event, run ids) from the read model."""
        rows = self._model.query(
            f"SELECT lane_id, min(position), tenant, run_id FROM events WHERE {where}"
            " AND event_type != '' GROUP BY lane_id ORDER BY min(position)", params)
        return (rows[0][2] if rows else None, [r[0] for r in rows], sorted({r[3] for r in rows}))

    def _any(self, where: str, params: list) -> bool:
        return bool(self._model.query(f"SELECT 1 FROM events WHERE {where} LIMIT 1", params))

    def _run_facts(self, session_id: str, run_id: str, applied: int) -> list[tuple[Any, ...]]:
        types = TERMINAL_EVENT_TYPES["run"] + ATTEMPT_TYPES + (CHECKPOINT_LINKED,)
        return self._model.query(
            "SELECT position, event_type, subject_id, body FROM events"
            " WHERE run_id = ? AND session_id = ? AND position <= ?"
            f" AND event_type IN ({','.join('?' * len(types))}) ORDER BY position",
            [run_id, session_id, applied, *types],
        )

