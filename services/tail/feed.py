"""The one subscription primitive behind every live tail.

A subscriber is nothing but a cursor: the last position it has scanned. It
reads what the read model holds after its cursor (one bounded page at a
time), writes it out, and moves the cursor; when there is nothing more, it
waits for the feed's notification, which is bumped after each applied batch.
Nothing is queued per subscriber, so a slow subscriber only slows its own
cursor, never loses an event, and costs at most one page of memory.

Reads come from SQLite, except that the most recent ``capacity`` applied
events are also kept in one shared ring (with their SSE frame prebuilt):
subscribers that are caught up read those without a thread hop or a query.
The ring holds only events that are already committed to the read model, so
both paths return exactly the same events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from laneledger.contract.model import MAX_REQUEST_BYTES
from laneledger.contract.vocabulary import TERMINAL_EVENT_TYPES

from .projections.events import Row
from .readmodel import ReadModel

PAGE_ROWS = 500
PAGE_BYTES = 1 << 20
# The most one page can be: PAGE_BYTES, overrun by at most one event (which
# fits in one request), held against the tail's read memory (budget.py).
PAGE_RESERVE = PAGE_BYTES + MAX_REQUEST_BYTES
RING_SCAN = 2000  # positions one ring read looks at, so a read is bounded work
RING_MAX_BODY = 16 << 10  # larger events are read from SQLite only


@dataclass(frozen=True, slots=True)
class Entry:
    """An applied event as a subscriber sees it: routing fields and the frame."""

    position: int
    tenant: str
    session_id: str
    run_id: str
    lane_id: str
    actor_id: str
    event_type: str
    frame: bytes | None  # None: not a committed event, never sent (see frame_of)


def frame_of(position: int, body: bytes) -> bytes | None:
    """The SSE frame of one event: its position as ``id`` and its canonical
    JSON, which never holds a raw line break, as ``data``. A body that does
    (not a committed event) gets no frame rather than a corrupt one."""
    if b"\n" in body or b"\r" in body:
        return None
    return b"id: %d\nevent: ledger-event\ndata: %s\n\n" % (position, body)


def entry_of(row: Row) -> Entry:
    frame = frame_of(row.position, row.body) if row.event_type else None
    return Entry(
        row.position, row.tenant, row.session_id, row.run_id, row.lane_id, row.actor_id, row.event_type, frame
    )


@dataclass(frozen=True)
class EventFilter:
    """What one subscriber wants. ``tenant``, ``session_id`` and ``run_id`` are
    its scope; ``lane_id``, ``actor_id`` and ``event_type`` (a prefix) narrow
    it further. A tail that names a run (or else a session) follows it: the
    run's (session's) terminal event ends the stream, whether or not the
    narrower filters let it through."""

    tenant: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    lane_id: str | None = None
    actor_id: str | None = None
    event_type: str | None = None

    @property
    def follows(self) -> str | None:
        if self.run_id is not None:
            return "run"
        if self.session_id is not None:
            return "session"
        return None

    @property
    def terminal_types(self) -> tuple[str, ...]:
        follows = self.follows
        return TERMINAL_EVENT_TYPES[follows] if follows else ()

    def in_scope(self, e: Entry) -> bool:
        return (
            (self.tenant is None or e.tenant == self.tenant)
            and (self.session_id is None or e.session_id == self.session_id)
            and (self.run_id is None or e.run_id == self.run_id)
        )

    def matches(self, e: Entry) -> bool:
        return (
            self.in_scope(e)
            and (self.lane_id is None or e.lane_id == self.lane_id)
            and (self.actor_id is None or e.actor_id == self.actor_id)
            and (self.event_type is None or e.event_type.startswith(self.event_type))
            and e.frame is not None
        )

    def ends_with(self, e: Entry) -> bool:
        """Whether ``e`` is the terminal event of what this tail follows."""
        return e.event_type in self.terminal_types and self.in_scope(e)

    def sql(self) -> tuple[str, list[Any]]:
        """The WHERE clause (after ``position > ?``) selecting what ``matches``
        or ``ends_with`` accepts; the caller applies both again per row."""
        scope: list[str] = []
        params: list[Any] = []
        for column in ("tenant", "session_id", "run_id"):
            value = getattr(self, column)
            if value is not None:
                scope.append(f"{column} = ?")
                params.append(value)
        narrow, narrow_params = [], []
        for column in ("lane_id", "actor_id"):
            value = getattr(self, column)
            if value is not None:
                narrow.append(f"{column} = ?")
                narrow_params.append(value)
        if self.event_type is not None:
            # A prefix as a range, so the type index can serve it.
            narrow.append("event_type >= ? AND event_type < ?")
            narrow_params += [self.event_type, self.event_type + "\U0010ffff"]
        where = scope
        if narrow:
            clause = " AND ".join(narrow)
            if self.terminal_types:
                marks = ",".join("?" * len(self.terminal_types))
                clause = f"({clause}) OR event_type IN ({marks})"
                narrow_params += list(self.terminal_types)
            where = [*scope, f"({clause})"]
            params += narrow_params
        return (" AND " + " AND ".join(where)) if where else "", params


class Feed:
    def __init__(self, model: ReadModel, readers: Executor, *, capacity: int = 4096) -> None:
        self._model = model
        self._readers = readers  # the executor whose threads read SQLite
        self._capacity = max(capacity, 0)
        self._ring: list[Entry | None] = [None] * self._capacity
        self._ring_low = model.applied + 1  # lowest position the ring may hold
        self.applied = model.applied
        self._changed = asyncio.Event()
        self.closed = False

    # -- the apply side --------------------------------------------------------------

    def publish(self, rows: Sequence[Row]) -> None:
        """Called in the event loop after ``rows`` were committed."""
        if not rows:
            return
        if self._capacity:
            for row in rows[-self._capacity :]:
                # A large event is left to SQLite (None): the ring's memory
                # stays under capacity x RING_MAX_BODY.
                self._ring[row.position % self._capacity] = (
                    entry_of(row) if len(row.body) <= RING_MAX_BODY else None
                )
        self.applied = rows[-1].position
        self._ring_low = max(self._ring_low, self.applied - self._capacity + 1)
        self._bump()

    def forget(self, positions: Sequence[int]) -> None:
        """These events were rewritten in the read model (erased): the ring
        drops its copies, so every subscriber reads them from SQLite."""
        if self._capacity:
            for position in positions:
                slot = position % self._capacity
                entry = self._ring[slot]
                if entry is not None and entry.position == position:
                    self._ring[slot] = None

    def close(self) -> None:
        """Wake every subscriber so it can end (service shutdown)."""
        self.closed = True
        self._bump()

    def _bump(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- the subscriber side -----------------------------------------------------------

    def changed(self) -> asyncio.Event:
        """The notification to wait on. Take it *before* reading, so a batch
        applied between the read and the wait is not missed."""
        return self._changed

    async def wait_for(self, position: int, timeout: float) -> bool:
        """Wait (bounded) until ``position`` is applied; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.applied < position and not self.closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            changed = self.changed()
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return self.applied >= position
        return self.applied >= position

    async def read(self, cursor: int, filt: EventFilter) -> tuple[list[Entry], int]:
        """Events after ``cursor`` that the filter accepts or that end the tail,
        at most one page, and the position scanned up to (the next cursor)."""
        applied = self.applied
        if cursor >= applied:
            return [], cursor
        ring, cap = self._ring, self._capacity
        if cap and cursor + 1 >= self._ring_low and ring[(cursor + 1) % cap] is not None:
            last = min(applied, cursor + RING_SCAN)
            out: list[Entry] = []
            size = 0
            for position in range(cursor + 1, last + 1):
                entry = ring[position % cap]
                if entry is None:
                    return out, position - 1  # a large event: the next read goes to SQLite
                if filt.matches(entry) or filt.ends_with(entry):
                    out.append(entry)
                    size += len(entry.frame or b"")
                    # The same page bound as SQLite reads: what one subscriber
                    # holds at a time, however far behind it is.
                    if len(out) >= PAGE_ROWS or size >= PAGE_BYTES:
                        return out, position
            return out, last
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._read_db, cursor, filt, applied)

    def _read_db(self, cursor: int, filt: EventFilter, applied: int) -> tuple[list[Entry], int]:
        where, params = filt.sql()
        rows, more = self._model.scan(
            "SELECT position, tenant, session_id, run_id, lane_id, actor_id, event_type, body"
            f" FROM events WHERE position > ?{where} ORDER BY position",
            [cursor, *params],
            max_rows=PAGE_ROWS,
            max_bytes=PAGE_BYTES,
            body_column=7,
        )
        out = []
        for position, tenant, session_id, run_id, lane_id, actor_id, event_type, body in rows:
            frame = frame_of(position, body) if event_type else None
            out.append(Entry(position, tenant, session_id, run_id, lane_id, actor_id, event_type, frame))
        if more:
            return out, rows[-1][0]
        # The query saw everything committed when it ran, which includes
        # everything applied before it started.
        return out, max(applied, rows[-1][0] if rows else cursor)
