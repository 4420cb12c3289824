"""The tail's read model: its own SQLite file, fed from LEDGER_EVENTS.

One row per committed event, keyed by ledger position, with the fields the
tail filters and pages on copied out of the body into indexed columns, and
``meta.applied_position``: the last position applied; the sessions index
(``sessions.py``), a summary per session; and the ledger's Merkle tree of
those positions (``tlogmodel.py``). All are written in the same
transaction, so after any stop or crash the tail resumes exactly
after what it has: no position is skipped or stored twice. The checkpoints
and cosignatures the tail serves are kept here too (``tlogmodel.py``).

Durability is ``Durability.NORMAL`` (WAL): a power loss may roll back the
last transactions, but never splits rows from the position stored with them,
and whatever was rolled back is read again from the stream.

``ReadModel`` owns one writer connection (used from one thread, the apply
thread) and a small pool of read-only connections, one per reader thread.
SQLite's failures leave as ``InternalError`` (laneledger.sqlite).
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from laneledger.contract.errors import EntityNotFound, InternalError
from laneledger.sqlite import (
    Durability,
    applied_position,
    failures_as,
    fetch_all,
    meta_value,
    open_database,
    open_readonly,
    put_meta,
    record_applied_position,
    transaction,
)
from laneledger.tlog.checkpoint import (
    TreeHead,
)
from laneledger.tlog.note import Signature

from . import korgindex, sessions, tlogmodel
from .sessions import DDL as SESSIONS_DDL
from .sessions import SessionIndex

DDL = (
    """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
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
    + SESSIONS_DDL
    + korgindex.DDL
    + tlogmodel.DDL
)

_APPLIED = "applied_position"  # the meta key of the last position stored
_WHAT = "the tail's read model"
CATCH_UP_PAGE = 5000  # rows per transaction when an index catches up on open

COLUMNS = (
    "position, event_id, tenant, session_id, run_id, lane_id, seq, actor_id, subject_id, event_type, body,"
    " causation_id"
)
# What caused what: the index behind ``causation.py`` (created once the column
# exists: a read model from before it gets the column first, ``_add_causation``).
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


class ReadModel:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._db = open_database(self.path, durability=Durability.NORMAL, ddl=DDL, what=_WHAT)
        # Authoritative: only the apply thread changes it, inside the transaction.
        self.applied = applied_position(self._db, _APPLIED, what=f"cannot open {_WHAT}")
        self._add_causation()
        self._catch_up(sessions.FOLDED, SessionIndex.fold, "sessions index write failed")
        self._catch_up(korgindex.FOLDED, korgindex.fold, "korg index write failed")
        tlogmodel.build(self._db, self.applied)
        # The last LEDGER_TLOG sequence read, and the largest checkpoint kept.
        self.checkpoint_sequence = applied_position(
            self._db, tlogmodel.STREAM_SEQUENCE, what=f"cannot open {_WHAT}"
        )
        with failures_as(f"cannot open {_WHAT}"):
            self.checkpoint_size = tlogmodel.latest_size(self._db)

    def _catch_up(
        self, folded_key: str, fold: Callable[[sqlite3.Connection, list[Row]], None], what: str
    ) -> None:
        """Fold into one derived index (its last position at ``folded_key``)
        what the read model holds beyond it: a file written before it existed."""
        folded = int(meta_value(self._db, folded_key) or 0)
        while folded < self.applied:
            rows = self._rows_after(folded, CATCH_UP_PAGE)
            if not rows:
                return
            with transaction(self._db, what):
                fold(self._db, rows)
            folded = rows[-1].position

    def _add_causation(self) -> None:
        """A read model from before ``causation_id`` was a column: add it and
        fill it from the bodies, once; then index it."""
        db = self._db
        with failures_as(f"cannot open {_WHAT}"):
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

    def _rows_after(self, position: int, limit: int) -> list[Row]:
        rows = fetch_all(
            self._db,
            f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (position, limit),
            what="read model read failed",
        )
        return [Row(*row) for row in rows]

    def close(self) -> None:
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._db.close()

    # -- writing (the apply thread only) ------------------------------------------------

    def apply(self, batch: list[tuple[int, bytes]]) -> list[Row]:
        """Store a batch of ``(position, body)`` and the new applied position in
        one transaction; returns the rows stored. Positions at or below the
        applied one are skipped (a redelivery); a batch that does not continue
        right after it is refused, since storing it would leave a gap."""
        rows = [row_of(p, b) for p, b in batch if p > self.applied]
        if not rows:
            return []
        if rows[0].position != self.applied + 1 or any(
            b.position != a.position + 1 for a, b in itertools.pairwise(rows)
        ):
            raise InternalError(
                "a batch would leave a gap in the read model",
                applied_position=self.applied,
                first=rows[0].position,
            )
        with transaction(self._db, "read model write failed") as db:
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
            SessionIndex.fold(db, rows)
            korgindex.fold(db, rows)  # after the sessions index: it reads a session's first event
            tlogmodel.extend(db, [(r.position, r.body) for r in rows])
            record_applied_position(db, _APPLIED, rows[-1].position)
        self.applied = rows[-1].position
        return rows

    def take_checkpoint(self, sequence: int, checkpoint: TreeHead | None, note: str) -> bool:
        """Record that LEDGER_TLOG's message ``sequence`` was read, and keep
        its checkpoint if its root is the tree's at its size (which the tree
        must have reached); ``checkpoint`` None: the message is not one.
        Whether it was kept."""
        with transaction(self._db, "read model write failed") as db:
            kept = checkpoint is not None and tlogmodel.store_checkpoint(db, checkpoint, note)
            put_meta(db, tlogmodel.STREAM_SEQUENCE, sequence)
        self.checkpoint_sequence = sequence
        if checkpoint is not None and kept:
            self.checkpoint_size = max(self.checkpoint_size or 0, checkpoint.size)
        return kept

    def store_cosignatures(self, size: int, cosignatures: list[Signature]) -> list[str]:
        with transaction(self._db, "read model write failed") as db:
            return tlogmodel.store_cosignatures(db, size, cosignatures)

    # -- reading (any reader thread) --------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This reader thread's read-only connection, for a library that
        reads a connection itself (``laneledger.tlog``)."""
        return self._conn()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = open_readonly(self.path, what=_WHAT)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[tuple[Any, ...]]:
        return fetch_all(self._conn(), sql, params, what="read model read failed")

    def scan(
        self,
        sql: str,
        params: tuple[Any, ...] | list[Any],
        *,
        max_rows: int,
        max_bytes: int,
        body_column: int,
    ) -> tuple[list[tuple[Any, ...]], bool]:
        """Rows of ``sql`` up to ``max_rows``, or until their bodies reach
        ``max_bytes`` (at least one row), so a page's memory is bounded even
        when events are large; and whether more rows follow. The cursor is not
        read past the page (and one row to tell whether there are more)."""
        out: list[tuple[Any, ...]] = []
        size = 0
        more = False
        with failures_as("read model read failed"):
            cursor = self._conn().execute(sql, tuple(params))
            try:
                for row in cursor:
                    if len(out) >= max_rows or (out and size >= max_bytes):
                        more = True
                        break
                    out.append(row)
                    size += len(row[body_column])
            finally:
                cursor.close()
        return out, more

    def iterate(
        self, sql: str, params: tuple[Any, ...] | list[Any], key_index: int = 0, page: int = 2000
    ) -> Iterator[tuple[Any, ...]]:
        """All rows of ``sql`` in pages (keyset pagination): ``sql`` ends with
        ``AND <key> > ? ORDER BY <key> LIMIT ?`` and takes ``params`` + (key, page)."""
        key: Any = -(2**63)
        while True:
            rows = self.query(sql, (*params, key, page))
            yield from rows
            if len(rows) < page:
                return
            key = rows[-1][key_index]

    def event_at(self, position: int) -> Row:
        rows = self.query(f"SELECT {COLUMNS} FROM events WHERE position = ?", (position,))
        if not rows:
            raise EntityNotFound("no committed event at this position (yet)", kind="event", position=position)
        return Row(*rows[0])

    def stats(self) -> tuple[int, int]:
        """(number of rows, highest position)."""
        return self.query("SELECT count(*), coalesce(max(position), 0) FROM events")[0]
