"""The tail's read model: its own SQLite file, fed from LEDGER_EVENTS, made
of the projections (``projections/``, one module per table):

* ``events``: one row per committed event, keyed by ledger position;
* ``session_index``: a summary per session;
* ``korg_index``: every event as Korg §8 sees it;
* ``tlog``: the ledger's Merkle tree of those positions, and the checkpoints
  and cosignatures the tail serves;
* ``erasure``: the erasures folded and not yet carried out (``erase_page``);

and ``meta.applied_position``: the last position applied. All are written
in the same transaction, so after any stop or crash the tail resumes exactly
after what it has: no position is skipped or stored twice. A projection
added to a read model that has events already folds them when it is opened
(``_catch_up``).

Durability is ``Durability.NORMAL`` (WAL): a power loss may roll back the
last transactions, but never splits rows from the position stored with them,
and whatever was rolled back is read again from the stream.

``ReadModel`` owns one writer connection (used from one thread, the apply
thread) and a small pool of read-only connections, one per reader thread.
SQLite's failures leave as ``InternalError`` (laneledger.sqlite). It imports
nothing of the tail but its projections: the routes read through it.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from laneledger.contract.errors import InternalError
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
    shred_wal,
    transaction,
)
from laneledger.tlog.checkpoint import TreeHead
from laneledger.tlog.note import Signature

from .projections import erasure, events, korg_index, session_index, tlog
from .projections.events import Row, row_of

META_DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""
DDL = META_DDL + events.DDL + session_index.DDL + korg_index.DDL + tlog.DDL + erasure.DDL

_APPLIED = "applied_position"  # the meta key of the last position stored
_WHAT = "the tail's read model"
CATCH_UP_PAGE = 5000  # rows per transaction when an index catches up on open


class ReadModel:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._db = open_database(self.path, durability=Durability.NORMAL, ddl=DDL, what=_WHAT)
        # An erasure rewrites bodies: the old cells and freed pages are zeroed,
        # not left in the file (spec/erasure.md, Readers).
        self._db.execute("PRAGMA secure_delete = ON")
        # Authoritative: only the apply thread changes it, inside the transaction.
        self.applied = applied_position(self._db, _APPLIED, what=f"cannot open {_WHAT}")
        events.add_causation(self._db, f"cannot open {_WHAT}")
        self._catch_up(session_index.FOLDED, session_index.fold, "sessions index write failed")
        self._catch_up(korg_index.FOLDED, korg_index.fold, "korg index write failed")
        self._catch_up(erasure.SUBJECTS_FOLDED, erasure.fold_subjects, "data subjects index write failed")
        tlog.build(self._db, self.applied)
        # The last LEDGER_TLOG sequence read, and the largest checkpoint kept.
        self.checkpoint_sequence = applied_position(
            self._db, tlog.STREAM_SEQUENCE, what=f"cannot open {_WHAT}"
        )
        with failures_as(f"cannot open {_WHAT}"):
            self.checkpoint_size = tlog.latest_size(self._db)
            # Erasures folded and not yet carried out (a stop resumes them).
            self.erasures_pending = erasure.pending(self._db)
        self.wal_shredded = True  # whether the last finished erasure's WAL truncate got through

    def _catch_up(
        self, folded_key: str, fold: Callable[[sqlite3.Connection, list[Row]], None], what: str
    ) -> None:
        """Fold into one derived index (its last position at ``folded_key``)
        what the read model holds beyond it: a file written before it existed."""
        folded = int(meta_value(self._db, folded_key) or 0)
        while folded < self.applied:
            rows = events.rows_after(self._db, folded, CATCH_UP_PAGE)
            if not rows:
                return
            with transaction(self._db, what):
                fold(self._db, rows)
            folded = rows[-1].position

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
            events.fold(db, rows)
            session_index.fold(db, rows)
            korg_index.fold(db, rows)  # after the sessions index: it reads a session's first event
            erasure.fold_subjects(db, rows)
            tlog.extend(db, [(r.position, r.body) for r in rows])
            noted = erasure.note(db, rows)
            record_applied_position(db, _APPLIED, rows[-1].position)
        self.applied = rows[-1].position
        if noted:
            self.erasures_pending = erasure.pending(self._db)
        return rows

    def erase_page(self) -> erasure.Page:
        """Carry out one bounded page of the oldest pending erasure, in its
        own transaction; once an erasure is done (or a truncate was held up),
        checkpoint and truncate the WAL so the erased bytes leave it too."""
        with transaction(self._db, "read model erasure failed") as db:
            done = erasure.erase_page(db)
            self.erasures_pending = erasure.pending(db)
        if done.finished or not self.wal_shredded:
            with failures_as("read model WAL checkpoint failed"):
                self.wal_shredded = shred_wal(self._db)
        return done

    def take_checkpoint(self, sequence: int, checkpoint: TreeHead | None, note: str) -> bool:
        """Record that LEDGER_TLOG's message ``sequence`` was read, and keep
        its checkpoint if its root is the tree's at its size (which the tree
        must have reached); ``checkpoint`` None: the message is not one.
        Whether it was kept."""
        with transaction(self._db, "read model write failed") as db:
            kept = checkpoint is not None and tlog.store_checkpoint(db, checkpoint, note)
            put_meta(db, tlog.STREAM_SEQUENCE, sequence)
        self.checkpoint_sequence = sequence
        if checkpoint is not None and kept:
            self.checkpoint_size = max(self.checkpoint_size or 0, checkpoint.size)
        return kept

    def store_cosignatures(self, size: int, cosignatures: list[Signature]) -> list[str]:
        with transaction(self._db, "read model write failed") as db:
            return tlog.store_cosignatures(db, size, cosignatures)

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
