"""The transaction log: every write of the ledger, replicated before it counts.

The ledger writer changes its SQLite file only through the named statements
below. Each of its transactions is one ``TxRecord`` — the statements it ran,
with their parameter rows — stored on a replicated log (``TxLog``; the
sequencer's is the JetStream stream LEDGER_TXLOG) *before* the SQLite
``COMMIT``. The file is then an index of the log: applying the log's records
in order to an empty file (``apply_record``) rebuilds it row for row, and a
file that lost its last transactions (a crash between the log's ack and the
``COMMIT``) is completed from the log before it is written again.

Rows, not commands, are logged: a command's outcome depends on the clock and
on fresh ids, which a replay must not draw again. Only statements named here
can be replayed, so a record is data, never SQL.

``TxLog.append`` stores a record only right after the log position the
writer last applied (``after``). When the log has moved past it — another
sequencer wrote, or an earlier append's outcome was unknown — it raises
``TxLogMoved``: the writer rolls back, reads what it missed, and the work is
tried again on the new state. Two writers can therefore never both commit
against the same state; the log orders them (spec/replication.md).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import msgspec

from laneledger.contract.errors import IntegrityError, InternalError
from laneledger.store.tree import extend_tree

# meta.txlog_seq: the log position of the last record this file holds.
TXLOG_KEY = "txlog_seq"
RECORD_VERSION = 1
# A record of a seed (store/txlogseed.py): the rows of a file that predates
# its log, with a ``SeedMark``. Its own version, so that a reader that does
# not know seeds refuses one instead of applying it to a file that already
# holds its rows.
SEED_RECORD_VERSION = 2


@dataclass(frozen=True, slots=True)
class Statement:
    name: str  # what a record calls it
    sql: str


INSERT_ACTOR = Statement("insert_actor", "INSERT INTO actors (id, tenant, key, body) VALUES (?,?,?,?)")
# A session is its tenant's: (id, tenant) is its key, and the first lane makes it.
INSERT_SESSION = Statement(
    "insert_session", "INSERT OR IGNORE INTO sessions (id, tenant, created_at) VALUES (?,?,?)"
)
INSERT_LANE = Statement(
    "insert_lane",
    "INSERT INTO lanes (id, tenant, session_id, run_id, name, body, last_seq, head_hash)"
    " VALUES (?,?,?,?,?,?,0,?)",
)
INSERT_TURN = Statement(
    "insert_turn", "INSERT INTO turns (id, tenant, lane_id, turn_no, body) VALUES (?,?,?,?,?)"
)
INSERT_ACTION = Statement(
    "insert_action", "INSERT INTO actions (id, tenant, lane_id, turn_id, body) VALUES (?,?,?,?,?)"
)
INSERT_ATTEMPT = Statement(
    "insert_attempt",
    "INSERT INTO attempts (id, tenant, lane_id, action_id, attempt_no, body) VALUES (?,?,?,?,?,?)",
)
INSERT_EVENT = Statement(
    "insert_event",
    "INSERT INTO events (position, id, lane_id, seq, tenant, session_id, run_id,"
    " event_type, append_id, body) VALUES (?,?,?,?,?,?,?,?,?,?)",
)
INSERT_EVENT_SUBJECT = Statement(
    "insert_event_subject", "INSERT INTO event_subjects (tenant, data_subject, position) VALUES (?,?,?)"
)
# The blobs an event's payload references (sha256 in hex): what an erasure
# may delete once no event that is not erased references one.
INSERT_EVENT_REF = Statement(
    "insert_event_ref", "INSERT INTO event_refs (tenant, sha256, position) VALUES (?,?,?)"
)
INSERT_RECEIPT = Statement(
    "insert_receipt",
    "INSERT INTO receipts (tenant, append_id, lane_id, digest, body) VALUES (?,?,?,?,?)",
)
MOVE_LANE_HEAD = Statement(
    "move_lane_head", "UPDATE lanes SET last_seq = ?, head_hash = ? WHERE id = ? AND tenant = ?"
)

# Erasure (spec/erasure.md): an event's body replaced by its erased form, and
# the receipt of its append without the digest of the content.
ERASE_EVENT = Statement("erase_event", "UPDATE events SET body = ? WHERE position = ?")
ERASE_RECEIPT = Statement(
    "erase_receipt", "UPDATE receipts SET digest = ?, body = ? WHERE append_id = ? AND tenant = ?"
)
# An erased event's blob refs, deleted by its position: a deletion is never
# rewritten out of the log (a reader may have applied what it deletes), so
# it names no blob by its hash (store/recordrewrite.py).
ERASE_EVENT_REFS = Statement("erase_event_refs", "DELETE FROM event_refs WHERE tenant = ? AND position = ?")
# The blobs an erasure left unreferenced, listed under an id of their own
# until deleted from the buckets; taken off the list by that id, for the
# same reason. Once a blob is deleted, the rows that listed it (which name
# it by its hash) are rewritten out of the log.
BLOB_LISTED = Statement(
    "blob_listed", "INSERT OR IGNORE INTO blobs_to_erase (id, tenant, sha256) VALUES (?,?,?)"
)
BLOB_UNLISTED = Statement("blob_unlisted", "DELETE FROM blobs_to_erase WHERE id = ?")
# The same, as records written before erasure cleaned the streams name
# them: replayed, never written now (their hashes stay in those records).
ERASE_EVENT_REF = Statement(
    "erase_event_ref", "DELETE FROM event_refs WHERE tenant = ? AND sha256 = ? AND position = ?"
)
BLOB_TO_ERASE = Statement(
    "blob_to_erase", "INSERT OR IGNORE INTO blobs_to_erase (tenant, sha256) VALUES (?,?)"
)
BLOB_ERASED = Statement("blob_erased", "DELETE FROM blobs_to_erase WHERE tenant = ? AND sha256 = ?")
REPLAYED_ONLY = frozenset({ERASE_EVENT_REF.name, BLOB_TO_ERASE.name, BLOB_ERASED.name})
RETENTION_REACHED = Statement(
    "retention_reached", "INSERT OR REPLACE INTO retention (tenant, position) VALUES (?,?)"
)
# The positions whose copies on LEDGER_EVENTS and LEDGER_TXLOG an erasure
# has yet to remove (store/erasedcopies.py): listed with the erasure, taken
# off once the sequencer removed them, so a crash in between is retried.
STREAM_COPY_TO_ERASE = Statement(
    "stream_copy_to_erase", "INSERT OR IGNORE INTO stream_copies_to_erase (position) VALUES (?)"
)
STREAM_COPY_ERASED = Statement("stream_copy_erased", "DELETE FROM stream_copies_to_erase WHERE position = ?")
# After a transaction that ran one of these, the file's WAL is emptied
# (``laneledger.sqlite.shred_wal``): the erased bytes must leave it too.
ERASING = frozenset(
    {
        ERASE_EVENT.name,
        ERASE_RECEIPT.name,
        ERASE_EVENT_REFS.name,
        BLOB_UNLISTED.name,
        ERASE_EVENT_REF.name,
        BLOB_ERASED.name,
    }
)

STATEMENTS = {
    s.name: s
    for s in (
        INSERT_ACTOR,
        INSERT_SESSION,
        INSERT_LANE,
        INSERT_TURN,
        INSERT_ACTION,
        INSERT_ATTEMPT,
        INSERT_EVENT,
        INSERT_EVENT_SUBJECT,
        INSERT_EVENT_REF,
        INSERT_RECEIPT,
        MOVE_LANE_HEAD,
        ERASE_EVENT,
        ERASE_RECEIPT,
        ERASE_EVENT_REFS,
        BLOB_LISTED,
        BLOB_UNLISTED,
        ERASE_EVENT_REF,
        BLOB_TO_ERASE,
        BLOB_ERASED,
        RETENTION_REACHED,
        STREAM_COPY_TO_ERASE,
        STREAM_COPY_ERASED,
    )
}

# What a transaction ran: (statement, its parameter rows), in order.
Writes = list[tuple[Statement, list[tuple[Any, ...]]]]


class SeedMark(msgspec.Struct, array_like=True, frozen=True):
    """What makes a record part of a seed (store/txlogseed.py), and the
    state of the file the seed was taken from: every seed record of one
    seed carries the same state and its own slice of the seed's rows."""

    position: int  # the file's last position
    root: bytes  # its Merkle tree root at that position
    counts: dict[str, int]  # rows per table
    digest: bytes  # SHA-256 of all the seed's rows, in order
    rows: int  # how many rows the whole seed has
    first: int  # this record's rows are rows[first:end] of the seed
    end: int


class TxRecord(msgspec.Struct, array_like=True, frozen=True):
    """One writer transaction. ``position_before``/``position``: the ledger's
    last position before and after it (equal for a structure command), so a
    replay can check that the record continues the file it is applied to.
    ``seed``: set on a seed's records only (version 2)."""

    version: int
    position_before: int
    position: int
    # (statement name, parameter rows): values are str, int, bytes or None
    writes: list[tuple[str, list[list[Any]]]]
    seed: SeedMark | None = None


class _PlainRecord(msgspec.Struct, array_like=True, frozen=True):
    """A version-1 record as encoded: no trailing seed field. Its rows are
    the writer's tuples as they are: MessagePack writes a tuple as the same
    array as a list, so nothing is copied to encode them."""

    version: int
    position_before: int
    position: int
    writes: Sequence[tuple[str, Sequence[Sequence[Any]]]]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(TxRecord)


def _named(writes: Writes) -> list[tuple[str, list[list[Any]]]]:
    return [(statement.name, [list(row) for row in rows]) for statement, rows in writes]


def encode_record(writes: Writes, *, position_before: int, position: int) -> bytes:
    named = [(statement.name, rows) for statement, rows in writes]
    return _encoder.encode(_PlainRecord(RECORD_VERSION, position_before, position, named))


def encode_seed_record(writes: Writes, *, position_before: int, position: int, seed: SeedMark) -> bytes:
    return _encoder.encode(TxRecord(SEED_RECORD_VERSION, position_before, position, _named(writes), seed))


def encode_txrecord(record: TxRecord) -> bytes:
    """A decoded record encoded again, as its writer encoded it."""
    if record.seed is not None:
        return _encoder.encode(record)
    return _encoder.encode(
        _PlainRecord(record.version, record.position_before, record.position, record.writes)
    )


def decode_record(data: bytes, *, seq: int) -> TxRecord:
    try:
        record = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise IntegrityError(
            "transaction log record is undecodable", kind="txlog_record", txlog_seq=seq
        ) from exc
    if record.version not in (RECORD_VERSION, SEED_RECORD_VERSION):
        raise IntegrityError(
            "transaction log record has an unknown version",
            kind="txlog_record",
            txlog_seq=seq,
            found=record.version,
            expected=[RECORD_VERSION, SEED_RECORD_VERSION],
        )
    if (record.version == SEED_RECORD_VERSION) != (record.seed is not None):
        raise IntegrityError(
            "transaction log record: a seed record (version 2) and only it carries a seed mark",
            kind="txlog_record",
            txlog_seq=seq,
            found=record.version,
        )
    return record


def last_event_position(writes: Iterable[tuple[str, Sequence[Any]]]) -> int | None:
    """The last position among a record's inserted events (None: it inserts
    none). A record's events are consecutive positions, no other record's."""
    positions = [row[0] for name, rows in writes if name == INSERT_EVENT.name for row in rows]
    return max(positions) if positions else None


# Statements whose rows name an erased blob by its SHA-256.
NAMING_ERASED_BLOBS = frozenset({BLOB_LISTED.name})


def index_record(conn: sqlite3.Connection, writes: Sequence[tuple[str, Sequence[Any]]], seq: int) -> None:
    """Note (inside the caller's transaction) where the log record whose
    last part is at ``seq`` is needed by an erasure (both tables derived from
    the log, never logged themselves): ``txlog_records``, the last event
    position it holds, where an erasure finds the log's copy of an event;
    ``txlog_blob_records``, if its rows name erased blobs by their hash."""
    names = [name for name, _ in writes]
    position = last_event_position(writes) if INSERT_EVENT.name in names else None
    if position is not None:
        conn.execute(
            "INSERT OR REPLACE INTO txlog_records (position, txlog_seq) VALUES (?,?)", (position, seq)
        )
    if NAMING_ERASED_BLOBS.intersection(names):
        conn.execute("INSERT OR IGNORE INTO txlog_blob_records (txlog_seq) VALUES (?)", (seq,))


def record_holding(conn: sqlite3.Connection, position: int) -> tuple[int, int] | None:
    """(the last event position, the log sequence of the last part) of the
    record holding the event at ``position``; None if no record indexed here
    holds it (one applied before the index existed)."""
    row = conn.execute(
        "SELECT position, txlog_seq FROM txlog_records WHERE position >= ? ORDER BY position LIMIT 1",
        (position,),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def run_writes(conn: sqlite3.Connection, writes: Writes, *, leaves: Sequence[bytes] | None = None) -> None:
    """Execute a transaction's statements (inside the caller's transaction).
    Inserted events extend the Merkle tree in the same transaction: the tree
    is derived from them, so a record never carries it (store/tree.py).
    ``leaves``: the inserted events' leaf hashes, when the caller has them."""
    for statement, rows in writes:
        conn.executemany(statement.sql, rows)
        if statement is INSERT_EVENT:
            extend_tree(conn, [(row[0], row[9]) for row in rows], leaves=leaves)


def apply_record(conn: sqlite3.Connection, record: TxRecord, *, seq: int, last_position: int) -> None:
    """Replay one record onto a file whose last position is ``last_position``
    (inside the caller's transaction)."""
    if record.position_before != last_position:
        raise IntegrityError(
            "transaction log record does not continue this ledger file",
            kind="txlog_gap",
            txlog_seq=seq,
            record_position_before=record.position_before,
            ledger_last_position=last_position,
        )
    writes: Writes = []
    for name, rows in record.writes:
        statement = STATEMENTS.get(name)
        if statement is None:
            raise IntegrityError(
                "transaction log record names an unknown statement",
                kind="txlog_record",
                txlog_seq=seq,
                statement=name,
            )
        writes.append((statement, [tuple(row) for row in rows]))
    run_writes(conn, writes)


class MemoryTxLog:
    """A ``TxLog`` in a list, with the stream's fencing: for tests, benches
    and tools that run a writer without NATS."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def append(self, record: bytes, *, after: int) -> int:
        if after != len(self.records):
            raise TxLogMoved("the log moved on", expected_last_sequence=after)
        self.records.append(record)
        return len(self.records)

    def read_after(self, after: int) -> tuple[list[tuple[int, bytes]], int]:
        return list(enumerate(self.records, start=1))[max(after, 0) :], len(self.records)


class TxLogMoved(InternalError):
    """The log holds records after the one the writer last applied: another
    writer's, or one of its own whose append looked failed. Nothing of the
    transaction was written; it is tried again once the writer caught up."""


class TxLogUnavailable(InternalError):
    """The record could not be stored, or it is unknown whether it was
    (a timeout): nothing was committed; the writer reads the log before its
    next write."""


class TxLog(Protocol):
    """The replicated log, as the (synchronous) writer sees it."""

    def append(self, record: bytes, *, after: int) -> int:
        """Store ``record`` right after log position ``after`` and return its
        position, once the log holds it durably (with its replicas). Raises
        ``TxLogMoved`` if the log's last position is not ``after``, and
        ``TxLogUnavailable`` if the outcome is not known to be a success."""
        ...

    def read_after(self, after: int) -> tuple[Iterable[tuple[int, bytes]], int]:
        """The complete records after position ``after``, as (position,
        bytes) in order, and the log's last position (an unfinished record at
        its end is left out; the writer's next append goes after it). The
        last position may be below ``after`` (a log lost or reset): none then.
        Raises ``TxLogUnavailable`` if the log cannot be read."""
        ...


@runtime_checkable
class AsyncTxLog(TxLog, Protocol):
    """A log whose append can also be awaited on the event loop it runs on
    (``JetStreamTxLog``): the sequencer commits a small batch there, without
    a thread waiting for that loop (services/sequencer/writerthread.py)."""

    async def append_async(self, record: bytes, *, after: int) -> int:
        """``append``, awaited on the log's own event loop."""
        ...
