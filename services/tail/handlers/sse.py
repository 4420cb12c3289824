"""``GET /api/v1/events``: the live tail over server-sent events.

Frames: ``id: <position>`` / ``event: ledger-event`` / ``data: <committed
event>``; ``: keepalive`` comments while idle; ``event: end`` (with the
terminal event's position as ``id``) once the followed session or run has
reached its terminal event, after which the response ends.

The subscriber starts after ``Last-Event-ID`` or ``from_position`` (the last
position it has; the header wins, since a reconnecting EventSource repeats
the original query), backfills from the read model, then goes live: the
same loop over the feed does both (see ``feed.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import Executor
from typing import Any

from aiohttp import web

from laneledger.contract.errors import InvalidRequest, LedgerError, QuotaExceeded
from laneledger.runtime.access import Scope, scope_of

from .. import rewinds
from ..api import decode_parameters, parse_int
from ..budget import Hold, ReadBudget
from ..feed import PAGE_RESERVE, EventFilter, Feed
from ..limits import TAILS, Limiter
from ..metrics import TailMetrics
from ..projections import events
from ..queries import TailQuery
from ..readmodel import ReadModel
from ..streaming import ClientStream, client_stream

log = logging.getLogger("laneledger.tail")

# An idle tail looks this often whether its client left (aiohttp does not
# cancel a handler when it does), so it ends and frees its token's slot
# (limits.py) within this time, not at its next keepalive.
CLIENT_CHECK_S = 1.0


def parse_subscription(request: web.Request) -> tuple[EventFilter, int, bool]:
    """The filter, the start position, and whether to leave out what the
    rewinds of the sessions in scope invalidate (``rewinds.py``)."""
    query = decode_parameters(request, TailQuery)
    filt = EventFilter(
        # The token's tenant is always part of the filter (access.py): another
        # tenant named in ``tenant=`` is 403, never a view of it.
        tenant=scope_of(request).narrow(query.tenant),
        session_id=query.session_id,
        run_id=query.run_id,
        lane_id=query.lane_id,
        actor_id=query.actor_id,
        event_type=query.event_type,
    )
    start = query.from_position or 0
    header = request.headers.get("Last-Event-ID")
    if header is not None and header.strip():
        start = parse_int(header.strip(), "Last-Event-ID")
    return filt, start, query.exclude_invalidated == "true"


class Tail:
    """The SSE handler and what it shares: the feed, heartbeat, metrics."""

    def __init__(
        self,
        feed: Feed,
        metrics: TailMetrics,
        *,
        heartbeat_s: float,
        terminal_before: TerminalLookup,
        invalidated: rewinds.InvalidationLookup | None = None,
        limit: Limiter | None = None,
        budget: ReadBudget | None = None,
    ) -> None:
        self._feed = feed
        self._budget = budget or ReadBudget(2**62)
        self._limit = limit or Limiter(TAILS, 2**31)
        self._invalidated = invalidated
        self._metrics = metrics
        self._heartbeat_s = heartbeat_s
        self._terminal_before = terminal_before
        self.tasks: set[asyncio.Task[Any]] = set()  # open subscriptions, cancelled at shutdown

    async def handle(self, request: web.Request) -> web.StreamResponse:
        with self._limit.slot(scope_of(request)):  # over the token's limit: 429 before any work
            return await self._subscribe(request)

    async def _subscribe(self, request: web.Request) -> web.StreamResponse:
        filt, cursor, exclude = parse_subscription(request)
        gone = None
        if exclude:
            if self._invalidated is None:
                raise InvalidRequest(f"{rewinds.PARAMETER} is not served here", parameter=rewinds.PARAMETER)
            # Before the headers, so too many rewinds in scope is a plain 400.
            gone = rewinds.ScopeInvalidation()
            await self._invalidated.refresh(gone, filt.tenant, filt.session_id, self._feed.applied)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self._metrics.subscribers.inc()
        try:
            async with client_stream(request, response, "live tail") as out:
                await self._stream(scope_of(request), out, filt, cursor, gone)
        except LedgerError as err:
            # The headers are out: end the stream; the client resumes with
            # Last-Event-ID and loses nothing.
            log.error("tail subscription ended: %s", err)
        finally:
            self._metrics.subscribers.dec()
            self.tasks.discard(task)
        return response

    async def _stream(
        self,
        scope: Scope,
        out: ClientStream,
        filt: EventFilter,
        cursor: int,
        gone: rewinds.ScopeInvalidation | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        await out.write(b"retry: 1000\n\n")
        if filt.follows:
            # A reconnect after the end: the terminal event is behind the cursor.
            ended = await self._terminal_before(filt, cursor)
            if ended is not None:
                await out.write(end_frame(filt, ended))
                return
        last_write = loop.time()
        feed = self._feed
        while not feed.closed:
            if out.gone():
                return  # the client left while we waited
            changed = feed.changed()
            if cursor < feed.applied:
                try:
                    # The page is held against the tail's read memory (budget.py)
                    # from its read until it is written. Waiting for it, the tail
                    # still looks every CLIENT_CHECK_S whether its client left.
                    async with self._budget.hold(scope, PAGE_RESERVE, wait_s=CLIENT_CHECK_S) as held:
                        cursor, sent, end = await self._send_page(out, held, filt, cursor, gone)
                except QuotaExceeded:
                    continue
                if end:
                    return
                if sent:
                    last_write = loop.time()
            if cursor < feed.applied:
                continue  # more to read right away
            idle = self._heartbeat_s - (loop.time() - last_write)
            if idle <= 0:
                await out.write(b": keepalive\n\n")
                last_write = loop.time()
                continue
            try:
                # not wait_for: it can swallow a cancel
                async with asyncio.timeout(min(idle, CLIENT_CHECK_S)):
                    await changed.wait()
            except TimeoutError:
                pass

    async def _send_page(
        self,
        out: ClientStream,
        held: Hold,
        filt: EventFilter,
        cursor: int,
        gone: rewinds.ScopeInvalidation | None,
    ) -> tuple[int, bool, bool]:
        """Reads the page after ``cursor`` and writes what the client gets of
        it: the next cursor, whether anything was written, whether the tail ended."""
        feed = self._feed
        entries, cursor = await feed.read(cursor, filt)
        if not entries:
            return cursor, False, False
        if gone is not None:
            # Rewinds committed since the last look (whether or not the
            # filter lets them through) apply to what is sent from now on.
            assert self._invalidated is not None
            await self._invalidated.refresh(gone, filt.tenant, filt.session_id, feed.applied)
        frames: list[bytes] = []
        end = None
        for entry in entries:
            # matches() requires a frame; the first test restates it for the checker.
            if (
                entry.frame is not None
                and filt.matches(entry)
                and not (gone is not None and gone.covers(entry.tenant, entry.session_id, entry.position))
            ):
                frames.append(entry.frame)
            if filt.ends_with(entry):
                end = entry.position
                break
        if end is not None:
            frames.append(end_frame(filt, end))
        if not frames:
            return cursor, False, False
        data = b"".join(frames)
        sent = len(frames) - (end is not None)
        del entries, frames  # only the joined page is held while it is written
        held.keep(len(data))
        await out.write(data)  # waits while the client is slow
        self._metrics.frames.inc(sent)
        return cursor, True, end is not None


def end_frame(filt: EventFilter, position: int) -> bytes:
    what = filt.follows
    data = {"reason": f"{what}_ended", "position": position, "session_id": filt.session_id}
    if what == "run":
        data["run_id"] = filt.run_id
    return b"id: %d\nevent: end\ndata: %s\n\n" % (position, json.dumps(data).encode())


class TerminalLookup:
    """Finds the followed session's or run's terminal event at or before a
    position (``None`` if there is none yet)."""

    def __init__(self, model: ReadModel, readers: Executor) -> None:
        self._model = model
        self._readers = readers

    async def __call__(self, filt: EventFilter, cursor: int) -> int | None:
        if cursor <= 0:
            return None
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._find, filt, cursor)

    def _find(self, filt: EventFilter, cursor: int) -> int | None:
        selection = events.Selection(filt.tenant, filt.session_id, filt.run_id)
        rows = events.rows_of_types(self._model, selection, filt.terminal_types, upto=cursor, limit=1)
        return rows[0].position if rows else None
