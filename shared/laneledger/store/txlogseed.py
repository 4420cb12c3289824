"""The seed: a ledger file's rows as the first records of an empty log.

A file that predates its transaction log (a deployment from before
LEDGER_TXLOG), or whose log was lost (the stream deleted, the NATS store
wiped), holds rows the log does not. Before its writer appends anything
else to such a log, it appends a *seed*: every row of the file, as ordinary
statements (store/txlog.py), in an order that replays on an empty file —
actors, sessions, lanes (their head as stored, ``last_seq`` 0), turns,
actions, attempts, events in position order, receipts, then every lane's
head (``MOVE_LANE_HEAD``). A file rebuilt from the log then equals the
original row for row, the Merkle tree included (``run_writes`` extends it).

The seed is cut into records of at most ``max_rows`` rows or about
``max_bytes`` bytes; each is a version-2 record carrying a ``SeedMark``: the
seeded file's state (last position, tree root, rows per table, the SHA-256
of all the seed's rows) and which rows of the seed it holds
(``first``..``end`` of ``rows``). So a reader knows a seed record when it
sees one, a file can tell whether a seed is its own (the same state: it
skips the records, its rows are there), and a seed cut short by a crash is
resumed from the row where it stopped — by any file with that state,
whatever its own record size (spec/replication.md, "Start-up and restore").
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.contract.errors import IntegrityError
from laneledger.sqlite import failures_as, put_meta
from laneledger.store.txlog import (
    BLOB_LISTED,
    ERASING,
    INSERT_ACTION,
    INSERT_ACTOR,
    INSERT_ATTEMPT,
    INSERT_EVENT,
    INSERT_EVENT_REF,
    INSERT_EVENT_SUBJECT,
    INSERT_LANE,
    INSERT_RECEIPT,
    INSERT_SESSION,
    INSERT_TURN,
    MOVE_LANE_HEAD,
    REPLAYED_ONLY,
    RETENTION_REACHED,
    STATEMENTS,
    STREAM_COPY_ERASED,
    STREAM_COPY_TO_ERASE,
    SeedMark,
    Statement,
    Writes,
    encode_seed_record,
)
from laneledger.tlog import store as tree_store

# (table, the statement that writes its rows, its rows in that statement's
# parameter order and a stable order), in replay order. "lane_heads" is the
# lanes table again: each lane's head, once its events are in.
SEED_PLAN: tuple[tuple[str, Statement, str], ...] = (
    ("actors", INSERT_ACTOR, "SELECT id, tenant, key, body FROM actors ORDER BY rowid"),
    ("sessions", INSERT_SESSION, "SELECT id, tenant, created_at FROM sessions ORDER BY rowid"),
    (
        "lanes",
        INSERT_LANE,
        "SELECT id, tenant, session_id, run_id, name, body, head_hash FROM lanes ORDER BY rowid",
    ),
    ("turns", INSERT_TURN, "SELECT id, tenant, lane_id, turn_no, body FROM turns ORDER BY rowid"),
    ("actions", INSERT_ACTION, "SELECT id, tenant, lane_id, turn_id, body FROM actions ORDER BY rowid"),
    (
        "attempts",
        INSERT_ATTEMPT,
        "SELECT id, tenant, lane_id, action_id, attempt_no, body FROM attempts ORDER BY rowid",
    ),
    (
        "events",
        INSERT_EVENT,
        "SELECT position, id, lane_id, seq, tenant, session_id, run_id, event_type, append_id, body"
        " FROM events ORDER BY position",
    ),
    (
        "event_subjects",
        INSERT_EVENT_SUBJECT,
        "SELECT tenant, data_subject, position FROM event_subjects ORDER BY rowid",
    ),
    (
        "event_refs",
        INSERT_EVENT_REF,
        "SELECT tenant, sha256, position FROM event_refs ORDER BY rowid",
    ),
    (
        "blobs_to_erase",
        BLOB_LISTED,
        "SELECT id, tenant, sha256 FROM blobs_to_erase ORDER BY rowid",
    ),
    (
        "stream_copies_to_erase",
        STREAM_COPY_TO_ERASE,
        "SELECT position FROM stream_copies_to_erase ORDER BY position",
    ),
    (
        "retention",
        RETENTION_REACHED,
        "SELECT tenant, position FROM retention ORDER BY rowid",
    ),
    (
        "receipts",
        INSERT_RECEIPT,
        "SELECT tenant, append_id, lane_id, digest, body FROM receipts ORDER BY rowid",
    ),
    (
        "lane_heads",
        MOVE_LANE_HEAD,
        "SELECT last_seq, head_hash, id, tenant FROM lanes WHERE last_seq != 0 ORDER BY rowid",
    ),
)
# The tables a seed copies, and those it need not: ``meta`` is the file's
# own (its id, its log position), ``tlog_hashes`` is derived from the events,
# ``txlog_records`` and ``txlog_blob_records`` from the log (the seed's own
# records index it anew).
SEEDED_TABLES = frozenset(table for table, _, _ in SEED_PLAN if table != "lane_heads")
NOT_SEEDED = frozenset({"meta", "tlog_hashes", "txlog_records", "txlog_blob_records"})

# Every statement a record may name must be in the plan: a statement added
# without its table's rows here would leave those rows out of every seed.
# The erasure's statements only rewrite rows of seeded tables, which a seed
# copies as they are (erased); a stream copy's removal only deletes a row.
if {statement.name for _, statement, _ in SEED_PLAN} != (
    set(STATEMENTS) - ERASING - REPLAYED_ONLY - {STREAM_COPY_ERASED.name}
):
    raise RuntimeError("store/txlogseed.py: SEED_PLAN does not cover every statement of store/txlog.py")

# meta.txlog_seed, while this file is inside a seed of the log
# (store/txlogseed.py): "<digest hex> <rows taken> <rows in all> <apply|skip>".
SEED_KEY = "txlog_seed"


@dataclass(frozen=True, slots=True)
class SeedProgress:
    """How far this file is through the log's seed: ``end`` of its ``rows``
    taken, each record applied (the file was empty) or skipped (the file
    holds the seeded rows: it is the file seeded, or an equal copy)."""

    digest: bytes
    end: int
    rows: int
    applying: bool

    def encode(self) -> str:
        return f"{self.digest.hex()} {self.end} {self.rows} {'apply' if self.applying else 'skip'}"

    @classmethod
    def decode(cls, value: str | None) -> SeedProgress | None:
        if value is None:
            return None
        digest, end, rows, mode = value.split()
        return cls(bytes.fromhex(digest), int(end), int(rows), mode == "apply")


def record_progress(db: sqlite3.Connection, progress: SeedProgress | None) -> None:
    """Store how far this file is through a seed (None: it is in none), in
    the transaction that takes the seed's record."""
    if progress is None:
        db.execute("DELETE FROM meta WHERE key = ?", (SEED_KEY,))
    else:
        put_meta(db, SEED_KEY, progress.encode())


MAX_ROWS = 1000
MAX_BYTES = 4 << 20

_row_encoder = msgspec.msgpack.Encoder()


@dataclass(frozen=True, slots=True)
class FileState:
    """What a seed says about the file it was taken from."""

    position: int
    root: bytes
    counts: dict[str, int]
    digest: bytes
    rows: int

    def matches(self, mark: SeedMark) -> bool:
        return (
            self.position == mark.position
            and self.root == mark.root
            and self.counts == mark.counts
            and self.rows == mark.rows
            and self.digest == mark.digest
        )


def check_tables(conn: sqlite3.Connection) -> None:
    """Refuse a file with a table the seed does not know: its rows would be
    left out of the log, and a file rebuilt from it would lack them."""
    with failures_as("ledger read failed"):
        names = {
            name
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not name.startswith("sqlite_")
        }
    unknown = sorted(names - SEEDED_TABLES - NOT_SEEDED)
    if unknown:
        raise IntegrityError(
            "the ledger file has tables the transaction log's seed does not know: it cannot be "
            "put on the log whole",
            kind="txlog_seed_unknown_table",
            tables=unknown,
        )


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Rows per seeded table."""
    with failures_as("ledger read failed"):
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table, _, _ in SEED_PLAN
            if table != "lane_heads"
        }


def is_empty(conn: sqlite3.Connection) -> bool:
    """No seeded table holds a row (one look per table, no counting)."""
    with failures_as("ledger read failed"):
        return not any(
            conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]
            for table, _, _ in SEED_PLAN
            if table != "lane_heads"
        )


def _rows(conn: sqlite3.Connection) -> Iterator[tuple[Statement, tuple[Any, ...]]]:
    """Every row of the seed, in replay order."""
    for _, statement, sql in SEED_PLAN:
        with failures_as("ledger read failed"):
            cursor = conn.execute(sql)
        while True:
            with failures_as("ledger read failed"):
                chunk = cursor.fetchmany(500)
            if not chunk:
                break
            for row in chunk:
                yield statement, tuple(row)


def _row_bytes(statement: Statement, row: tuple[Any, ...]) -> bytes:
    return _row_encoder.encode((statement.name, row))


def file_state(conn: sqlite3.Connection, last_position: int) -> FileState:
    """This file's state as a seed of it would announce it (reads every row)."""
    digest = hashlib.sha256()
    rows = 0
    for statement, row in _rows(conn):
        digest.update(_row_bytes(statement, row))
        rows += 1
    with failures_as("ledger read failed"):
        root = tree_store.root(conn, last_position)
    return FileState(last_position, root, counts(conn), digest.digest(), rows)


def quick_mismatch(conn: sqlite3.Connection, last_position: int, mark: SeedMark) -> bool:
    """True if this file cannot be the seed's, known without reading every row."""
    if last_position != mark.position or counts(conn) != mark.counts:
        return True
    with failures_as("ledger read failed"):
        return tree_store.root(conn, last_position) != mark.root


def seed_records(
    conn: sqlite3.Connection,
    state: FileState,
    *,
    start: int = 0,
    max_rows: int = MAX_ROWS,
    max_bytes: int = MAX_BYTES,
) -> Iterator[tuple[bytes, SeedMark]]:
    """The seed's records from row ``start`` on, encoded, with their marks.
    The file must be in ``state`` (nothing writes it meanwhile)."""
    index = 0
    position = 0  # the ledger's last position after the rows so far
    chunk: list[tuple[Statement, tuple[Any, ...]]] = []
    size = 0
    first = start
    before = 0

    def record() -> tuple[bytes, SeedMark]:
        writes: Writes = []
        for statement, row in chunk:
            if writes and writes[-1][0] is statement:
                writes[-1][1].append(row)
            else:
                writes.append((statement, [row]))
        mark = SeedMark(
            position=state.position,
            root=state.root,
            counts=state.counts,
            digest=state.digest,
            rows=state.rows,
            first=first,
            end=index,
        )
        return encode_seed_record(writes, position_before=before, position=position, seed=mark), mark

    for statement, row in _rows(conn):
        if index >= start:
            if not chunk:
                first, before = index, position
            chunk.append((statement, row))
            size += len(_row_bytes(statement, row))
        if statement is INSERT_EVENT:
            position = row[0]
        index += 1
        if chunk and (len(chunk) >= max_rows or size >= max_bytes):
            yield record()
            chunk, size = [], 0
    if index != state.rows:
        raise IntegrityError(
            "the ledger file changed while its seed was written",
            kind="txlog_seed_differs",
            seed_rows=state.rows,
            file_rows=index,
        )
    if chunk:
        yield record()
