"""Reads over a ledger database: structure, events, receipts.

Events are returned as their stored bytes wrapped in ``msgspec.Raw``: the
stored bytes are the canonical committed event, so a reply embeds them
verbatim instead of decoding and re-encoding every event. Decoding the reply
as the view type (``LanePage``, ``RunView``…) yields ``CommittedEvent``s.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import msgspec

from laneledger.contract.errors import EntityNotFound, InvalidRequest
from laneledger.contract.model import (
    Action,
    AppendCommitted,
    Attempt,
    Lane,
    LanePage,
    RunView,
    SessionView,
    StructureCursor,
    StructurePage,
    Turn,
    decoder,
)
from laneledger.store.sqlite import fetch_all

_FIRST_PAGE = StructureCursor()  # a cursor before every row
# The structure tables stored as one encoded object a row, in page order.
_STRUCTURE_KINDS: dict[str, type[Turn | Action | Attempt]] = {
    "turns": Turn,
    "actions": Action,
    "attempts": Attempt,
}


def lane_from_row(body: str, last_seq: int, head_hash: str) -> Lane:
    lane: Lane = decoder(Lane).decode(body)
    return msgspec.structs.replace(lane, last_seq=last_seq, head_hash=head_hash)


class LedgerReader:
    def __init__(self, conn: sqlite3.Connection, *, before_read: Callable[[], None] | None = None) -> None:
        """``before_read``: called before every query; the writer's own reader
        passes one that refuses while a staged batch holds the connection."""
        self._db = conn
        self._before_read = before_read

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        if self._before_read is not None:
            self._before_read()
        return fetch_all(self._db, sql, params, what="ledger read failed")

    # -- single objects ----------------------------------------------------------

    def last_position(self) -> int:
        position: int = self._rows("SELECT coalesce(max(position), 0) FROM events")[0][0]
        return position

    def get_lane(self, lane_id: str) -> Lane:
        rows = self._rows("SELECT body, last_seq, head_hash FROM lanes WHERE id = ?", (lane_id,))
        if not rows:
            raise EntityNotFound("no such lane", kind="lane", id=lane_id)
        return lane_from_row(*rows[0])

    _OWNER: ClassVar[dict[str, str]] = {  # the tenant of what a command names (``tenant_of``)
        "actor": "SELECT tenant FROM actors WHERE id = ?",
        "session": "SELECT tenant FROM sessions WHERE id = ?",
        "lane": "SELECT tenant FROM lanes WHERE id = ?",
        "turn": "SELECT l.tenant FROM turns t JOIN lanes l ON l.id = t.lane_id WHERE t.id = ?",
        "action": "SELECT l.tenant FROM actions a JOIN lanes l ON l.id = a.lane_id WHERE a.id = ?",
    }

    def tenant_of(self, kind: str, entity_id: str) -> str | None:
        """The tenant of an actor, session, lane, committed append, turn or
        action (None: no such thing): what a tenant-scoped command is checked against."""
        rows = self._rows(self._OWNER[kind], (entity_id,))
        return rows[0][0] if rows else None

    def get_receipt(self, append_id: str, tenant: str | None = None) -> AppendCommitted:
        """The receipt of ``tenant``'s append ``append_id``; without a tenant,
        the one of whichever tenant used the id (``invalid_request`` naming
        ``$.tenant`` when several did: append ids are each tenant's own)."""
        if tenant is None:
            rows = self._rows("SELECT body FROM receipts WHERE append_id = ? LIMIT 2", (append_id,))
        else:
            rows = self._rows(
                "SELECT body FROM receipts WHERE tenant = ? AND append_id = ?", (tenant, append_id)
            )
        if not rows:
            raise EntityNotFound("no committed append with this id", kind="receipt", id=append_id)
        if len(rows) > 1:
            raise InvalidRequest(
                "several tenants committed an append with this id: name the tenant",
                path="$.tenant",
                append_id=append_id,
            )
        receipt: AppendCommitted = decoder(AppendCommitted).decode(rows[0][0])
        return receipt

    # -- event streams -------------------------------------------------------------

    def load_lane(self, lane_id: str, after_seq: int = 0, limit: int = 1000) -> LanePage:
        lane = self.get_lane(lane_id)
        rows = self._rows(
            "SELECT body FROM events WHERE lane_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (lane_id, after_seq, limit + 1),
        )
        events = [msgspec.Raw(body) for (body,) in rows[:limit]]
        return LanePage(lane=lane, events=events, has_more=len(rows) > limit)  # type: ignore[arg-type]

    def events_after(self, position: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        """``(position, body)`` of committed events after ``position``, in order."""
        return self._rows(
            "SELECT position, body FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (position, limit),
        )

    def iter_events(self, batch: int = 5000) -> Iterator[tuple[int, bytes]]:
        position = 0
        while rows := self.events_after(position, batch):
            yield from rows
            position = rows[-1][0]

    # -- sessions and runs -----------------------------------------------------------

    def load_run(self, session_id: str, run_id: str) -> RunView:
        lanes = self._lanes("session_id = ? AND run_id = ?", (session_id, run_id))
        if not lanes:
            raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id)
        return RunView(
            session_id=session_id,
            run_id=run_id,
            lanes=lanes,
            **self._structure([lane.id for lane in lanes]),
            events=self._events("session_id = ? AND run_id = ?", (session_id, run_id)),
        )

    def load_session(self, session_id: str) -> SessionView:
        found = self._rows("SELECT tenant FROM sessions WHERE id = ?", (session_id,))
        if not found:
            raise EntityNotFound("no such session", kind="session", id=session_id)
        lanes = self._lanes("session_id = ?", (session_id,))
        return SessionView(
            session_id=session_id,
            tenant=found[0][0],
            run_ids=sorted({lane.run_id for lane in lanes}),
            lanes=lanes,
            **self._structure([lane.id for lane in lanes]),
            events=self._events("session_id = ?", (session_id,)),
        )

    def load_structure(
        self,
        session_id: str,
        run_id: str | None = None,
        after: StructureCursor = _FIRST_PAGE,
        limit: int = 1000,
        max_bytes: int = 512 * 1024,
    ) -> StructurePage:
        """One page of a session's (or run's) lanes, turns, actions and
        attempts, each kind in creation order after its cursor: up to
        ``limit`` rows of each, and no more stored bytes than ``max_bytes``
        in all (at least one row, so paging always advances)."""
        found = self._rows("SELECT tenant FROM sessions WHERE id = ?", (session_id,))
        if not found:
            raise EntityNotFound("no such session", kind="session", id=session_id)
        scope: str = "session_id = ?"
        params: tuple[str, ...] = (session_id,)
        if run_id is not None:
            scope, params = "session_id = ? AND run_id = ?", (session_id, run_id)
            if not self._rows(f"SELECT 1 FROM lanes WHERE {scope} LIMIT 1", params):
                raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id)
        budget, more = max_bytes, False
        page: dict[str, list[Any]] = {}
        cursor: dict[str, int] = {}
        lane_ids = f"SELECT id FROM lanes WHERE {scope}"
        for table, columns, where in (
            ("lanes", "body, last_seq, head_hash", scope),
            ("turns", "body", f"lane_id IN ({lane_ids})"),
            ("actions", "body", f"lane_id IN ({lane_ids})"),
            ("attempts", "body", f"lane_id IN ({lane_ids})"),
        ):
            last = getattr(after, table)
            rows = self._rows(
                f"SELECT rowid, {columns} FROM {table} WHERE {where} AND rowid > ? ORDER BY rowid LIMIT ?",
                (*params, last, limit + 1),
            )
            kept: list[tuple[Any, ...]] = []
            for row in rows[:limit]:
                size = len(row[1]) + 100  # the head columns and the list's separators
                if size > budget and (kept or any(page.values())):
                    break
                budget -= size
                kept.append(row)
            more = more or len(kept) < len(rows)
            cursor[table] = kept[-1][0] if kept else last
            if table == "lanes":
                page[table] = [lane_from_row(*row[1:]) for row in kept]
            else:
                page[table] = [decoder(_STRUCTURE_KINDS[table]).decode(row[1]) for row in kept]
        return StructurePage(
            session_id=session_id,
            tenant=found[0][0],
            run_id=run_id,
            **page,
            next=StructureCursor(**cursor),
            has_more=more,
        )

    def _lanes(self, where: str, params: tuple[str, ...]) -> list[Lane]:
        rows = self._rows(f"SELECT body, last_seq, head_hash FROM lanes WHERE {where} ORDER BY rowid", params)
        return [lane_from_row(*row) for row in rows]

    def _events(self, where: str, params: tuple[str, ...]) -> list[Any]:
        """Stored bodies as ``msgspec.Raw``, standing in for ``CommittedEvent``s
        (see the module docstring)."""
        rows = self._rows(f"SELECT body FROM events WHERE {where} ORDER BY position", params)
        return [msgspec.Raw(body) for (body,) in rows]

    def _structure(self, lane_ids: list[str]) -> dict[str, list[Any]]:
        marks = ",".join("?" * len(lane_ids))
        return {
            table: [
                decoder(kind).decode(body)
                for (body,) in self._rows(
                    f"SELECT body FROM {table} WHERE lane_id IN ({marks}) ORDER BY rowid",
                    lane_ids,
                )
            ]
            for table, kind in _STRUCTURE_KINDS.items()
        }
