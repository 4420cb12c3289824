"""A transaction-log record as the ledger file now holds its rows: what an
erasure publishes in place of the record it removes from LEDGER_TXLOG
(store/erasedcopies.py, spec/erasure.md "The streams").

Only an erasure changes a row a record inserted: an event's body (its
erased form), a receipt's digest and body (the digest zeroed), and an
event's blob refs (deleted). So the rewrite takes those rows from the file
where they differ, and drops the refs the file no longer has of events it
erased. Replaying the rewritten record, then the erasure's own record, gives
the file the original and the erasure give: the erasure's updates find the
values already there.

A blob an erasure listed for deletion is named by its SHA-256 (an unkeyed
hash of its content) in the row that listed it: once the blob is deleted,
that row goes too. Only insertions are ever taken out, never a deletion: a
reader that applied the original insertion (a standby following the log)
must still apply the deletion, and a reader that reads the rewrite inserts
nothing for the deletion to find. So deletions name no hash (store/txlog.py,
ERASE_EVENT_REFS and BLOB_UNLISTED), and any prefix of the log, original or
rewritten record by record, replays to the same file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from laneledger.store.txlog import (
    BLOB_LISTED,
    INSERT_EVENT,
    INSERT_EVENT_REF,
    INSERT_RECEIPT,
    TxRecord,
)

_CHUNK = 500  # parameters per lookup, far below SQLite's limit


def erased_record(conn: sqlite3.Connection, record: TxRecord) -> TxRecord | None:
    """``record`` with the rows the file has erased since, as the file holds
    them now; None if it holds none of them erased."""
    events = _rows(record, INSERT_EVENT.name)
    bodies = _lookup(conn, "SELECT position, body FROM events WHERE position IN ({})", [r[0] for r in events])
    erased = {row[0] for row in events if bodies.get(row[0], row[9]) != row[9]}
    receipts = _rows(record, INSERT_RECEIPT.name)
    stored = _receipts(conn, [(row[0], row[1]) for row in receipts]) if erased else {}
    listed = _listed_blobs(conn, record)
    writes: list[tuple[str, list[list[Any]]]] = []
    for name, rows in record.writes:
        if name == INSERT_EVENT.name:
            rows = [[*row[:9], bodies[row[0]]] if row[0] in erased else row for row in rows]
        elif name == INSERT_RECEIPT.name:
            rows = [_receipt_now(row, stored.get((row[0], row[1]))) for row in rows]
        elif name == INSERT_EVENT_REF.name:
            rows = [row for row in rows if row[2] not in erased]
        elif name == BLOB_LISTED.name:
            rows = [row for row in rows if row[0] in listed]  # those not deleted yet
        writes.append((name, [list(row) for row in rows]))
    if writes == [(name, [list(row) for row in rows]) for name, rows in record.writes]:
        return None
    return msgspec.structs.replace(record, writes=[(name, rows) for name, rows in writes if rows])


def _listed_blobs(conn: sqlite3.Connection, record: TxRecord) -> set[str]:
    """The ids of the record's listed blobs the file still lists (not
    deleted yet)."""
    ids = [row[0] for row in _rows(record, BLOB_LISTED.name)]
    return set(_lookup(conn, "SELECT id, 1 FROM blobs_to_erase WHERE id IN ({})", ids))


def _rows(record: TxRecord, name: str) -> list[list[Any]]:
    return [row for statement, rows in record.writes if statement == name for row in rows]


def _receipt_now(row: Sequence[Any], now: tuple[str, bytes] | None) -> list[Any]:
    """An inserted receipt row (tenant, append id, lane id, digest, body),
    with the file's digest and body if an erasure changed them."""
    if now is None or (now[0], now[1]) == (row[3], row[4]):
        return list(row)
    return [*row[:3], now[0], now[1]]


def _lookup(conn: sqlite3.Connection, sql: str, keys: list[Any]) -> dict[Any, Any]:
    found: dict[Any, Any] = {}
    for chunk in _chunks(keys):
        found.update(conn.execute(sql.format(",".join("?" * len(chunk))), chunk).fetchall())
    return found


Receipts = dict[tuple[str, str], tuple[str, bytes]]  # (tenant, append id) -> (digest, body)


def _receipts(conn: sqlite3.Connection, keys: list[tuple[str, str]]) -> Receipts:
    found: Receipts = {}
    for chunk in _chunks(keys):
        where = " OR ".join("(tenant = ? AND append_id = ?)" for _ in chunk)
        params = [value for key in chunk for value in key]
        for tenant, append_id, digest, body in conn.execute(
            f"SELECT tenant, append_id, digest, body FROM receipts WHERE {where}", params
        ):
            found[(tenant, append_id)] = (digest, body)
    return found


def _chunks(keys: list[Any]) -> Iterator[list[Any]]:
    for i in range(0, len(keys), _CHUNK):
        yield keys[i : i + _CHUNK]
