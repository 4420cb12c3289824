"""The ``events`` table: one row per committed event, keyed by ledger
position, with the fields the tail filters and pages on copied out of the
body into indexed columns. The other projections fold from its rows.

A read model from before ``causation_id`` was a column gets it once, filled
from the bodies (``add_causation``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.contract.errors import EntityNotFound
from laneledger.contract.model import JsonObject
from laneledger.contract.vocabulary import REWOUND
from laneledger.sqlite import failures_as, fetch_all, meta_value, put_meta, transaction

from ..answers.causal import EventCausation, EventRef
from . import Reads

DDL = """
CREATE TABLE IF NOT EXISTS events (
    position   INTEGER PRIMARY KEY,
    event_id   TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    lane_id    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    actor_id   TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    body       BLOB NOT NULL,
    causation_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, position);
CREATE INDEX IF NOT EXISTS events_by_run ON events (run_id, position);
CREATE INDEX IF NOT EXISTS events_by_lane ON events (lane_id, seq);
CREATE INDEX IF NOT EXISTS events_by_actor ON events (actor_id, position);
CREATE INDEX IF NOT EXISTS events_by_type ON events (event_type, position);
CREATE INDEX IF NOT EXISTS events_by_event_id ON events (event_id);
"""

COLUMNS = (
    "position, event_id, tenant, session_id, run_id, lane_id, seq, actor_id, subject_id, event_type, body,"
    " causation_id"
)
# What caused what: the index behind the causation route (created once the
# column exists: a read model from before it gets the column first, ``add_causation``).
CAUSATION_INDEX = "CREATE INDEX IF NOT EXISTS events_by_cause ON events (causation_id, position)"
_CAUSES = "causation_filled"  # meta key: set once older rows have their causation_id


class Routing(msgspec.Struct, frozen=True):
    """The fields of a committed event that become columns (the rest of the
    body is skipped by the decoder)."""

    id: str
    tenant: str
    session_id: str
    run_id: str
    lane_id: str
    seq: int
    actor_id: str
    subject_id: str
    event_type: str
    causation_id: str = ""


_routing = msgspec.json.Decoder(Routing)


@dataclass(frozen=True, slots=True)
class Row:
    position: int
    event_id: str
    tenant: str
    session_id: str
    run_id: str
    lane_id: str
    seq: int
    actor_id: str
    subject_id: str
    event_type: str
    body: bytes
    causation_id: str = ""  # the event id of its cause, "" for none


def row_of(position: int, body: bytes) -> Row:
    """The row for one stream message. A body that is not a committed event
    (which only a foreign publisher could put on the stream) is still stored,
    with empty columns, so positions stay dense and verification reports it."""
    try:
        r = _routing.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Row(position, "", "", "", "", "", 0, "", "", "", bytes(body))
    return Row(
        position,
        r.id,
        r.tenant,
        r.session_id,
        r.run_id,
        r.lane_id,
        r.seq,
        r.actor_id,
        r.subject_id,
        r.event_type,
        bytes(body),
        r.causation_id,
    )


# -- writing (the apply thread, in the caller's transaction) ------------------------------------


def fold(db: sqlite3.Connection, rows: Sequence[Row]) -> None:
    db.executemany(
        f"INSERT INTO events ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            (
                r.position,
                r.event_id,
                r.tenant,
                r.session_id,
                r.run_id,
                r.lane_id,
                r.seq,
                r.actor_id,
                r.subject_id,
                r.event_type,
                r.body,
                r.causation_id,
            )
            for r in rows
        ],
    )


def add_causation(db: sqlite3.Connection, what: str) -> None:
    """A read model from before ``causation_id`` was a column: add it and
    fill it from the bodies, once; then index it."""
    with failures_as(what):
        columns = {row[1] for row in db.execute("PRAGMA table_info(events)")}
        if "causation_id" not in columns:
            db.execute("ALTER TABLE events ADD COLUMN causation_id TEXT NOT NULL DEFAULT ''")
        if meta_value(db, _CAUSES) is None:
            after = 0
            while rows := db.execute(
                "SELECT position, body FROM events WHERE position > ? ORDER BY position LIMIT 5000",
                (after,),
            ).fetchall():
                with transaction(db, "read model write failed"):
                    db.executemany(
                        "UPDATE events SET causation_id = ? WHERE position = ?",
                        [(row_of(p, b).causation_id, p) for p, b in rows],
                    )
                after = rows[-1][0]
            with transaction(db, "read model write failed"):
                put_meta(db, _CAUSES, 1)
        db.execute(CAUSATION_INDEX)


def rows_after(db: sqlite3.Connection, position: int, limit: int) -> list[Row]:
    """The writer's read of what a projection folded late must catch up on."""
    rows = fetch_all(
        db,
        f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
        (position, limit),
        what="read model read failed",
    )
    return [Row(*row) for row in rows]


# -- reading (any reader thread) ------------------------------------------------------------


def event_at(reads: Reads, position: int) -> Row:
    rows = reads.query(f"SELECT {COLUMNS} FROM events WHERE position = ?", (position,))
    if not rows:
        raise EntityNotFound("no committed event at this position (yet)", kind="event", position=position)
    return Row(*rows[0])


_REF = "position, event_id, event_type, lane_id, seq, session_id"


def causation(reads: Reads, row: Row, limit: int) -> EventCausation:
    """An event's cause (the event its ``causation_id`` names, in its tenant)
    and the events it caused, oldest first, at most ``limit``: two lookups of
    the ``causation_id`` and ``event_id`` indexes."""
    cause = None
    if row.causation_id:
        rows = reads.query(
            f"SELECT {_REF} FROM events WHERE event_id = ? AND tenant = ? ORDER BY position LIMIT 1",
            (row.causation_id, row.tenant),
        )
        cause = _ref(rows[0]) if rows else None
    caused = reads.query(
        f"SELECT {_REF} FROM events WHERE causation_id = ? AND tenant = ? ORDER BY position LIMIT ?",
        (row.event_id, row.tenant, limit + 1),
    )
    return EventCausation(
        position=row.position,
        event_id=row.event_id,
        causation_id=row.causation_id or None,
        cause=cause,
        caused=[_ref(r) for r in caused[:limit]],
        more_caused=len(caused) > limit,
    )


def _ref(row: tuple[Any, ...]) -> EventRef:
    position, event_id, event_type, lane_id, seq, session_id = row
    return EventRef(
        position=position,
        event_id=event_id,
        event_type=event_type,
        lane_id=lane_id,
        seq=seq,
        session_id=session_id,
    )


def rewinds_between(
    reads: Reads, tenant: str | None, session_id: str | None, after: int, upto: int
) -> list[tuple[str, str, JsonObject]]:
    """``(tenant, session_id, payload)`` of the ``session.rewound`` events
    committed in ``(after, upto]``, of one tenant and session when named, in
    order (the event-type index serves it)."""
    where, params = "event_type = ? AND position > ? AND position <= ?", [REWOUND, after, upto]
    for column, value in (("tenant", tenant), ("session_id", session_id)):
        if value is not None:
            where += f" AND {column} = ?"
            params.append(value)
    rows = reads.query(f"SELECT tenant, session_id, body FROM events WHERE {where} ORDER BY position", params)
    return [(tenant, sid, msgspec.json.decode(body).get("payload", {})) for tenant, sid, body in rows]


def bodies_of_types(
    reads: Reads, event_types: Sequence[str], *, upto: int, **scope: str | None
) -> Iterator[tuple[int, bytes]]:
    """``(position, body)`` of the events of ``event_types`` up to position
    ``upto``, oldest first, in pages; ``scope``: columns (tenant, session_id,
    run_id) that must equal a value, where it is not None."""
    where, params = _scoped(upto, scope)
    marks = ",".join("?" * len(event_types))
    sql = (
        f"SELECT position, body FROM events WHERE {where} AND event_type IN ({marks})"
        " AND position > ? ORDER BY position LIMIT ?"
    )
    for position, body in reads.iterate(sql, [*params, *event_types]):
        yield int(position), bytes(body)


def any_event(reads: Reads, *, upto: int, **scope: str | None) -> bool:
    """Whether an event up to position ``upto`` is in ``scope`` (as above)."""
    where, params = _scoped(upto, scope)
    return bool(reads.query(f"SELECT 1 FROM events WHERE {where} LIMIT 1", params))


_SCOPE_COLUMNS = frozenset({"tenant", "session_id", "run_id"})


def _scoped(upto: int, scope: dict[str, str | None]) -> tuple[str, list[Any]]:
    where, params = "position <= ?", list[Any]([upto])
    for column, value in sorted(scope.items()):
        assert column in _SCOPE_COLUMNS, column  # a column name, never a value, goes into the SQL
        if value is not None:
            where += f" AND {column} = ?"
            params.append(value)
    return where, params
