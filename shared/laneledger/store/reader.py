"""Reads over a ledger database: structure, events, receipts.

Events are returned as their stored bytes wrapped in ``msgspec.Raw``: the
stored bytes are the canonical committed event, so a reply embeds them
verbatim instead of decoding and re-encoding every event. Decoding the reply
as the view type (``LanePage``, ``RunView``…) yields ``CommittedEvent``s.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from laneledger.contract.errors import EntityNotFound, InvalidRequest
from laneledger.contract.model import (
    Action,
    AppendCommitted,
    Attempt,
    EventsPage,
    Lane,
    LanePage,
    RunView,
    SessionView,
    StructureCursor,
    StructurePage,
    Turn,
    decoder,
)
from laneledger.sqlite import fetch_all

_FIRST_PAGE = StructureCursor()  # a cursor before every row
# The structure tables stored as one encoded object a row, in page order.
_STRUCTURE_KINDS: dict[str, type[Turn | Action | Attempt]] = {
    "turns": Turn,
    "actions": Action,
    "attempts": Attempt,
}


def _one_tenant(rows: list[tuple[Any, ...]], kind: str, entity_id: str) -> tuple[Any, ...]:
    """The one row of a lookup by id whose first column is the tenant:
    ``entity_not_found`` for none; for rows of several tenants (ids are each
    tenant's own, and the caller named none) ``invalid_request`` naming
    ``$.tenant``."""
    if not rows:
        raise EntityNotFound(f"no such {kind}", kind=kind, id=entity_id)
    if len(rows) > 1:
        raise InvalidRequest(
            f"several tenants have a {kind} with this id: name the tenant",
            path="$.tenant",
            kind=kind,
            id=entity_id,
            tenants=sorted(row[0] for row in rows),
        )
    return rows[0]


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

    def _by_id(self, select: str, entity_id: str, tenant: str | None) -> list[tuple[Any, ...]]:
        """``select`` (``SELECT tenant, … FROM t WHERE <id column> = ?``) of
        ``tenant``'s row of this id, or (no tenant) every tenant's: for ``_one_tenant``."""
        return self._rows(f"{select} AND (? IS NULL OR tenant = ?)", (entity_id, tenant, tenant))

    # -- single objects ----------------------------------------------------------

    def last_position(self) -> int:
        position: int = self._rows("SELECT coalesce(max(position), 0) FROM events")[0][0]
        return position

    def get_lane(self, lane_id: str, tenant: str | None = None) -> Lane:
        rows = self._by_id(
            "SELECT tenant, body, last_seq, head_hash FROM lanes WHERE id = ?", lane_id, tenant
        )
        row = _one_tenant(rows, "lane", lane_id)
        return lane_from_row(*row[1:])

    def actor_tenant(self, actor_id: str) -> str | None:
        """The tenant of an actor (None: no such actor). Actor ids are the
        ledger's own, minted unique, so this needs no tenant."""
        rows = self._rows("SELECT tenant FROM actors WHERE id = ?", (actor_id,))
        return rows[0][0] if rows else None

    def session_tenant(self, session_id: str, tenant: str | None = None) -> str:
        """Whose session ``session_id`` is: ``tenant`` when that tenant has
        one, else the only tenant that does (``entity_not_found``;
        ``invalid_request`` naming ``$.tenant`` when several do)."""
        rows = self._by_id("SELECT tenant FROM sessions WHERE id = ?", session_id, tenant)
        found: str = _one_tenant(rows, "session", session_id)[0]
        return found

    def data_subject_tenant(self, data_subject: str) -> str:
        """The only tenant whose events name ``data_subject``
        (``entity_not_found``; ``invalid_request`` naming ``$.tenant`` when
        several tenants' do)."""
        rows = self._rows(
            "SELECT DISTINCT tenant FROM event_subjects WHERE data_subject = ?", (data_subject,)
        )
        found: str = _one_tenant(rows, "data_subject", data_subject)[0]
        return found

    def get_receipt(self, append_id: str, tenant: str | None = None) -> AppendCommitted:
        """The receipt of ``tenant``'s append ``append_id``; without a tenant,
        the one of whichever tenant used the id (``invalid_request`` naming
        ``$.tenant`` when several did: append ids are each tenant's own)."""
        rows = self._by_id("SELECT tenant, body FROM receipts WHERE append_id = ?", append_id, tenant)
        if not rows:
            raise EntityNotFound("no committed append with this id", kind="receipt", id=append_id)
        receipt: AppendCommitted = decoder(AppendCommitted).decode(_one_tenant(rows, "receipt", append_id)[1])
        return receipt

    # -- event streams -------------------------------------------------------------

    def load_lane(
        self, lane_id: str, after_seq: int = 0, limit: int = 1000, tenant: str | None = None
    ) -> LanePage:
        lane = self.get_lane(lane_id, tenant)
        rows = self._rows(
            "SELECT body FROM events WHERE lane_id = ? AND tenant = ? AND seq > ? ORDER BY seq LIMIT ?",
            (lane_id, lane.tenant, after_seq, limit + 1),
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

    def load_run(self, session_id: str, run_id: str, tenant: str | None = None) -> RunView:
        try:
            owner = self.session_tenant(session_id, tenant)
        except EntityNotFound:
            raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id) from None
        scope = ("session_id = ? AND run_id = ? AND tenant = ?", (session_id, run_id, owner))
        lanes = self._lanes(*scope)
        if not lanes:
            raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id)
        return RunView(
            session_id=session_id,
            run_id=run_id,
            lanes=lanes,
            **self._structure(owner, [lane.id for lane in lanes]),
            events=self._events(*scope),
        )

    def load_session(self, session_id: str, tenant: str | None = None) -> SessionView:
        tenant = self.session_tenant(session_id, tenant)
        scope = ("session_id = ? AND tenant = ?", (session_id, tenant))
        lanes = self._lanes(*scope)
        return SessionView(
            session_id=session_id,
            tenant=tenant,
            run_ids=sorted({lane.run_id for lane in lanes}),
            lanes=lanes,
            **self._structure(tenant, [lane.id for lane in lanes]),
            events=self._events(*scope),
        )

    def events_page(
        self,
        session_id: str,
        run_id: str | None = None,
        after_position: int = 0,
        limit: int = 1000,
        max_bytes: int = 512 * 1024,
        tenant: str | None = None,
    ) -> EventsPage:
        """One page of a session's (or run's) events after ``after_position``:
        up to ``limit``, and no more stored bytes than ``max_bytes`` (at least
        one event, so paging always advances). One indexed range read:
        bounded work whatever the session's size."""
        try:
            owner = self.session_tenant(session_id, tenant)
        except EntityNotFound:
            if run_id is None:
                raise
            raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id) from None
        scope, params = "session_id = ? AND tenant = ?", [session_id, owner]
        if run_id is not None:
            scope, params = f"{scope} AND run_id = ?", [*params, run_id]
            if not self._rows(f"SELECT 1 FROM lanes WHERE {scope} LIMIT 1", params):
                raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id)
        rows = self._rows(
            f"SELECT position, body FROM events WHERE {scope} AND position > ? ORDER BY position LIMIT ?",
            (*params, after_position, limit + 1),
        )
        kept: list[tuple[Any, ...]] = []
        budget = max_bytes
        for row in rows[:limit]:
            if len(row[1]) > budget and kept:
                break
            budget -= len(row[1])
            kept.append(row)
        return EventsPage(
            session_id=session_id,
            tenant=owner,
            run_id=run_id,
            events=[msgspec.Raw(body) for _, body in kept],  # type: ignore[misc]
            next_position=kept[-1][0] if kept else after_position,
            has_more=len(kept) < len(rows),
        )

    def load_structure(
        self,
        session_id: str,
        run_id: str | None = None,
        after: StructureCursor = _FIRST_PAGE,
        limit: int = 1000,
        max_bytes: int = 512 * 1024,
        tenant: str | None = None,
    ) -> StructurePage:
        """One page of a session's (or run's) lanes, turns, actions and
        attempts, each kind in creation order after its cursor: up to
        ``limit`` rows of each, and no more stored bytes than ``max_bytes``
        in all (at least one row, so paging always advances)."""
        tenant = self.session_tenant(session_id, tenant)
        scope: str = "session_id = ? AND tenant = ?"
        params: tuple[str, ...] = (session_id, tenant)
        if run_id is not None:
            scope, params = "session_id = ? AND tenant = ? AND run_id = ?", (session_id, tenant, run_id)
            if not self._rows(f"SELECT 1 FROM lanes WHERE {scope} LIMIT 1", params):
                raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id)
        budget, more = max_bytes, False
        page: dict[str, list[Any]] = {}
        cursor: dict[str, int] = {}
        lane_ids = f"SELECT id FROM lanes WHERE {scope}"
        for table, columns, where, where_params in (
            ("lanes", "body, last_seq, head_hash", scope, params),
            ("turns", "body", f"lane_id IN ({lane_ids}) AND tenant = ?", (*params, tenant)),
            ("actions", "body", f"lane_id IN ({lane_ids}) AND tenant = ?", (*params, tenant)),
            ("attempts", "body", f"lane_id IN ({lane_ids}) AND tenant = ?", (*params, tenant)),
        ):
            last = getattr(after, table)
            rows = self._rows(
                f"SELECT rowid, {columns} FROM {table} WHERE {where} AND rowid > ? ORDER BY rowid LIMIT ?",
                (*where_params, last, limit + 1),
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
            tenant=tenant,
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

    def _structure(self, tenant: str, lane_ids: list[str]) -> dict[str, list[Any]]:
        marks = ",".join("?" * len(lane_ids))
        return {
            table: [
                decoder(kind).decode(body)
                for (body,) in self._rows(
                    f"SELECT body FROM {table} WHERE tenant = ? AND lane_id IN ({marks}) ORDER BY rowid",
                    [tenant, *lane_ids],
                )
            ]
            for table, kind in _STRUCTURE_KINDS.items()
        }
