"""The ``events`` table: one row per committed event, keyed by ledger
position, with the fields the tail filters and pages on copied out of the
body into indexed columns. The other projections fold from its rows.

Every read of the table is a query here, the views computed at read time
(the timeline's, the causal tree's, a verify walk's) among them: a handler
says which events it means with a ``Selection`` and never writes SQL.

A read model from before ``causation_id`` was a column gets it once, filled
from the bodies (``add_causation``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
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

ID_CHUNK = 500  # ids or positions per IN (...) lookup


@dataclass(frozen=True, slots=True)
class Selection:
    """Which events a read covers: those whose columns equal the values
    named (None: any), of a lane up to seq ``max_seq``, and outside the
    position spans ``excluded`` (what a session's rewinds invalidated,
    ``without``). The handlers say what they want; this module writes the SQL."""

    tenant: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    lane_id: str | None = None
    max_seq: int | None = None
    excluded: tuple[tuple[int, int], ...] = ()

    def without(self, spans: Iterable[Sequence[int]]) -> Selection:
        """These events but those in the inclusive position spans ``spans``."""
        return replace(self, excluded=(*self.excluded, *((first, last) for first, last in spans)))

    def where(self, prefix: str = "") -> tuple[str, list[Any]]:
        """The SQL condition and its parameters; ``prefix``: a table alias and dot."""
        clauses, params = ["1 = 1"], list[Any]()
        for column in ("tenant", "session_id", "run_id", "lane_id"):
            value = getattr(self, column)
            if value is not None:
                clauses.append(f"{prefix}{column} = ?")
                params.append(value)
        if self.max_seq is not None:
            clauses.append(f"{prefix}seq <= ?")
            params.append(self.max_seq)
        for first, last in self.excluded:
            clauses.append(f"{prefix}position NOT BETWEEN ? AND ?")
            params += [first, last]
        return " AND ".join(clauses), params


def event_at(reads: Reads, position: int) -> Row:
    rows = reads.query(f"SELECT {COLUMNS} FROM events WHERE position = ?", (position,))
    if not rows:
        raise EntityNotFound("no committed event at this position (yet)", kind="event", position=position)
    return Row(*rows[0])


def rows_at(reads: Reads, positions: Iterable[int]) -> dict[int, Row]:
    """The events at ``positions`` (those that are there), by position."""
    found: dict[int, Row] = {}
    for chunk in _chunks(sorted(set(positions))):
        for values in reads.query(f"SELECT {COLUMNS} FROM events WHERE position IN ({_marks(chunk)})", chunk):
            found[values[0]] = Row(*values)
    return found


def rows_with_ids(reads: Reads, selection: Selection, event_ids: Iterable[str]) -> dict[str, Row]:
    """The selected events with these event ids, by id (ids are each
    tenant's own: ``selection`` names the tenant, or a session)."""
    where, params = selection.where()
    found: dict[str, Row] = {}
    for chunk in _chunks(sorted(set(event_ids))):
        for values in reads.query(
            f"SELECT {COLUMNS} FROM events WHERE {where} AND event_id IN ({_marks(chunk)})", [*params, *chunk]
        ):
            found[values[1]] = Row(*values)
    return found


def positions_of(reads: Reads, selection: Selection, event_ids: Iterable[str]) -> dict[str, int]:
    """Event id -> position, of the selected events (as ``rows_with_ids``,
    without reading bodies)."""
    where, params = selection.where()
    found: dict[str, int] = {}
    for chunk in _chunks(sorted(set(event_ids))):
        found.update(
            reads.query(
                f"SELECT event_id, position FROM events WHERE {where} AND event_id IN ({_marks(chunk)})",
                [*params, *chunk],
            )
        )
    return found


def rows_of_types(
    reads: Reads,
    selection: Selection,
    event_types: Sequence[str],
    *,
    upto: int,
    after: int = 0,
    subject_ids: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[Row]:
    """The selected events of ``event_types`` in positions ``(after, upto]``,
    oldest first: of the subjects ``subject_ids`` when named (looked up in
    chunks), else at most ``limit`` (the event-type index serves both)."""
    where, params = selection.where()
    sql = (
        f"SELECT {COLUMNS} FROM events WHERE {where} AND event_type IN ({_marks(event_types)})"
        " AND position > ? AND position <= ?"
    )
    params = [*params, *event_types, after, upto]
    if subject_ids is None:
        if limit is None:
            return [Row(*v) for v in reads.query(f"{sql} ORDER BY position", params)]
        return [Row(*v) for v in reads.query(f"{sql} ORDER BY position LIMIT ?", [*params, limit])]
    assert limit is None, "a limit over chunks of subjects would not be the first rows"
    rows = [
        Row(*v)
        for chunk in _chunks(sorted(set(subject_ids)))
        for v in reads.query(f"{sql} AND subject_id IN ({_marks(chunk)})", [*params, *chunk])
    ]
    return sorted(rows, key=lambda r: r.position)


@dataclass(frozen=True, slots=True)
class LaneExtent:
    """A lane's events in a selection: how many, the first and the last."""

    lane_id: str
    events: int
    first_position: int
    last_position: int


def lane_extents(reads: Reads, selection: Selection, *, upto: int) -> list[LaneExtent]:
    """The lanes of the selected events up to ``upto`` (rewinds and what is
    not a committed event left out), in order of their first event."""
    where, params = selection.where()
    rows = reads.query(
        f"SELECT lane_id, count(*), min(position), max(position) FROM events WHERE {where}"
        " AND event_type != ? AND event_type != '' AND position <= ?"
        " GROUP BY lane_id ORDER BY min(position)",
        [*params, REWOUND, upto],
    )
    return [LaneExtent(*row) for row in rows]


def page(
    reads: Reads,
    selection: Selection,
    key: str,
    *,
    forward: bool,
    cursor: int,
    upto: int,
    max_rows: int,
    max_bytes: int,
) -> tuple[list[tuple[int, bytes]], bool]:
    """``(key, body)`` of the selected events up to position ``upto`` past
    ``cursor`` by ``key`` (``seq`` or ``position``), oldest first going
    forward, newest first going back: ``max_rows`` at most, and no more once
    their bodies reach ``max_bytes`` (``Reads.scan``); and whether more follow."""
    assert key in ("seq", "position"), key  # a column name, never a value, goes into the SQL
    where, params = selection.where()
    bound, order = (">", "ASC") if forward else ("<", "DESC")
    return reads.scan(
        f"SELECT {key}, body FROM events WHERE {where} AND event_type != ''"
        f" AND position <= ? AND {key} {bound} ? ORDER BY {key} {order}",
        [*params, upto, cursor],
        max_rows=max_rows,
        max_bytes=max_bytes,
        body_column=1,
    )


def bodies_after(
    reads: Reads, selection: Selection, *, after: int, upto: int, limit: int
) -> list[tuple[int, bytes]]:
    """``(position, body)`` of up to ``limit`` selected committed events in
    ``(after, upto]``, oldest first."""
    where, params = selection.where()
    return reads.query(
        f"SELECT position, body FROM events WHERE {where} AND event_type != ''"
        " AND position <= ? AND position > ? ORDER BY position LIMIT ?",
        [*params, upto, after, limit],
    )


def session_of(reads: Reads, selection: Selection) -> str | None:
    """The session of (the first found of) the selected events."""
    where, params = selection.where()
    rows = reads.query(f"SELECT session_id FROM events WHERE {where} LIMIT 1", params)
    return rows[0][0] if rows else None


def last_position(reads: Reads, selection: Selection) -> int | None:
    """The position of the newest selected event, None for none."""
    where, params = selection.where()
    ((last,),) = reads.query(f"SELECT max(position) FROM events WHERE {where}", params)
    return None if last is None else int(last)


def walk(
    conn: sqlite3.Connection, selection: Selection, order: str, *, upto: int, after: Any, limit: int
) -> Generator[Row, None, None]:
    """Up to ``limit`` selected events up to position ``upto`` after ``after``
    by ``order`` (``position``, or ``seq`` within a lane), straight off the
    cursor so each can be checked and dropped; close the iterator when done
    early, which closes the cursor (an unfinished statement would pin the
    connection's snapshot)."""
    assert order in ("seq", "position"), order
    where, params = selection.where()
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM events WHERE {where} AND position <= ?"
        f" AND {order} > ? ORDER BY {order} LIMIT ?",
        [*params, upto, after, limit],
    )
    try:
        for values in rows:
            yield Row(*values)
    finally:
        rows.close()


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def _chunks(values: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(values), ID_CHUNK):
        yield values[start : start + ID_CHUNK]


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
    rows = rows_of_types(reads, Selection(tenant, session_id), (REWOUND,), upto=upto, after=after)
    return [(r.tenant, r.session_id, msgspec.json.decode(r.body).get("payload", {})) for r in rows]


def bodies_of_types(
    reads: Reads, selection: Selection, event_types: Sequence[str], *, upto: int
) -> Iterator[tuple[int, bytes]]:
    """``(position, body)`` of the selected events of ``event_types`` up to
    position ``upto``, oldest first, read in pages however many there are."""
    where, params = selection.where()
    sql = (
        f"SELECT position, body FROM events WHERE {where} AND position <= ?"
        f" AND event_type IN ({_marks(event_types)}) AND position > ? ORDER BY position LIMIT ?"
    )
    for position, body in reads.iterate(sql, [*params, upto, *event_types]):
        yield int(position), bytes(body)


def any_event(reads: Reads, selection: Selection, *, upto: int | None = None) -> bool:
    """Whether a selected event is there (up to position ``upto``, if named)."""
    where, params = selection.where()
    if upto is not None:
        where, params = f"{where} AND position <= ?", [*params, upto]
    return bool(reads.query(f"SELECT 1 FROM events WHERE {where} LIMIT 1", params))
