"""The SQLite schema of the ledger and how a database file is opened.

No foreign keys (as in Agent Ledger): the writer checks ownership in code,
inside the same transaction, and the schema stays easy to move.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec

from laneledger.contract.contentref import blob_hexes
from laneledger.contract.errors import InternalError
from laneledger.contract.ids import new_id
from laneledger.sqlite import (
    Durability,
    check_schema_version,
    failures_as,
    meta_value,
    open_database,
    open_readonly,
    put_meta,
    transaction,
)
from laneledger.store.tree import build_tree
from laneledger.tlog import store as tree_store

_decode = msgspec.json.Decoder().decode

# 2: append ids are scoped per tenant (receipts keyed by tenant and append
# id); a version-1 file is migrated in place.
# 3: every id is scoped per tenant (spec/object-model.md, "Identity"):
# sessions, lanes, turns, actions, attempts and events are keyed by (id,
# tenant), so two tenants may use one id; a version-2 file is migrated in place.
# 4: the Merkle tree of the transparency log (spec/tlog.md): table
# tlog_hashes, built from a version-3 file's events in place.
# 5: tables event_subjects, the events naming a data subject, retention, how
# far each tenant's retention has erased, and event_refs, the blobs each
# event's payload references (spec/erasure.md); an older file has none of
# them: the DDL makes them, and event_refs is filled from its events.
# 6: tables txlog_records, which log record holds each event, and
# txlog_blob_records, which records name erased blobs (both derived from
# the log as it is written or applied); blobs_to_erase's column id; and
# stream_copies_to_erase, the
# erased events whose stream copies are yet to be removed (spec/erasure.md,
# "The streams"). An older file's records are not indexed: their copies
# stay on the streams (made before erasure, those deny deletes anyway).
SCHEMA_VERSION = 6

# Keys put the id first: a lookup by id alone (a trusted caller naming no
# tenant) and one by id and tenant are served by the same index. Only table
# constraints, no separate index on a new column: the DDL runs on an older
# file before its migration.
_TABLES = {
    "sessions": """(
    id         TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (id, tenant)
)""",
    "lanes": """(
    id             TEXT NOT NULL,
    tenant         TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    run_id         TEXT NOT NULL,
    name           TEXT NOT NULL,
    body           TEXT NOT NULL,
    last_seq       INTEGER NOT NULL DEFAULT 0,
    head_hash      TEXT NOT NULL,
    PRIMARY KEY (id, tenant),
    UNIQUE (session_id, tenant, run_id, name)
)""",
    "turns": """(
    id      TEXT NOT NULL,
    tenant  TEXT NOT NULL,
    lane_id TEXT NOT NULL,
    turn_no INTEGER NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (id, tenant),
    UNIQUE (lane_id, tenant, turn_no)
)""",
    "actions": """(
    id      TEXT NOT NULL,
    tenant  TEXT NOT NULL,
    lane_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (id, tenant)
)""",
    "attempts": """(
    id         TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    lane_id    TEXT NOT NULL,
    action_id  TEXT NOT NULL,
    attempt_no INTEGER NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (id, tenant),
    UNIQUE (action_id, tenant, attempt_no)
)""",
    "events": """(
    position     INTEGER PRIMARY KEY,
    id           TEXT NOT NULL,
    lane_id      TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    tenant       TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    event_type   TEXT NOT NULL,
    append_id    TEXT NOT NULL,
    body         BLOB NOT NULL,
    UNIQUE (id, tenant),
    UNIQUE (lane_id, tenant, seq)
)""",
}

DDL = (
    """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS actors (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    key          TEXT NOT NULL,
    body         TEXT NOT NULL,
    UNIQUE (tenant, key)
);
"""
    + "".join(f"CREATE TABLE IF NOT EXISTS {name} {columns};\n" for name, columns in _TABLES.items())
    + """
CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, position);
-- Keyed append id first: the writer looks a batch's append ids up with
-- "append_id IN (...)" (then picks each one's tenant), which this index serves.
-- The events that name a data subject (spec/erasure.md), to find them when
-- the subject's content is erased.
CREATE TABLE IF NOT EXISTS event_subjects (
    tenant       TEXT NOT NULL,
    data_subject TEXT NOT NULL,
    position     INTEGER NOT NULL,
    PRIMARY KEY (tenant, data_subject, position)
);
-- The content blobs each event's payload references (contract/contentref.py
-- refs_in; sha256 in hex), to tell when an erasure leaves a blob referenced
-- by no event that is not erased (spec/erasure.md, "Blobs"). An erased
-- event's rows are deleted by its erasure: the hash names its content.
CREATE TABLE IF NOT EXISTS event_refs (
    tenant   TEXT NOT NULL,
    sha256   TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (tenant, sha256, position)
);
-- Blobs an erasure left referenced by no event that is not erased, until the
-- sequencer has deleted them from the buckets (spec/erasure.md, "Blobs"):
-- committed with the erasure, so a crash or a failed deletion is retried.
CREATE TABLE IF NOT EXISTS blobs_to_erase (
    tenant TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    id     TEXT,  -- what takes it off the list (schema 6; store/txlog.py BLOB_UNLISTED)
    PRIMARY KEY (tenant, sha256)
);
-- An erasure deletes an erased event's refs by its position (ERASE_EVENT_REFS).
CREATE INDEX IF NOT EXISTS event_refs_by_position ON event_refs (position);
-- How far each tenant's retention erasures have looked: every event of the
-- tenant up to this position is erased, exempt or not yet old enough.
CREATE TABLE IF NOT EXISTS retention (
    tenant   TEXT PRIMARY KEY,
    position INTEGER NOT NULL
);
-- The log record holding each event as committed: the log sequence of the
-- last part of the record whose events end at this position (store/txlog.py
-- index_record). Derived from the log, never logged: not seeded either.
CREATE TABLE IF NOT EXISTS txlog_records (
    position  INTEGER PRIMARY KEY,
    txlog_seq INTEGER NOT NULL
);
-- The log records whose rows name erased blobs by their SHA-256 (an
-- erasure's refs and blob list, a blob deletion's): rewritten without them
-- once the blobs are deleted (store/recordrewrite.py). Derived, not seeded.
CREATE TABLE IF NOT EXISTS txlog_blob_records (
    txlog_seq INTEGER PRIMARY KEY
);
-- Erased events whose copies on LEDGER_EVENTS and LEDGER_TXLOG the sequencer
-- has yet to remove (store/erasedcopies.py): committed with the erasure.
CREATE TABLE IF NOT EXISTS stream_copies_to_erase (
    position INTEGER PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS receipts (
    tenant    TEXT NOT NULL,
    append_id TEXT NOT NULL,
    lane_id   TEXT NOT NULL,
    digest    TEXT NOT NULL,
    body      BLOB NOT NULL,
    PRIMARY KEY (append_id, tenant)
);
"""
)


def _scope_append_ids(conn: sqlite3.Connection) -> None:
    """Version 1 -> 2: receipts keyed by (tenant, append id), the tenant
    being the lane's (a version-1 append id was unique across tenants)."""
    conn.execute(
        "CREATE TABLE receipts_v2 (tenant TEXT NOT NULL, append_id TEXT NOT NULL, lane_id TEXT NOT NULL,"
        " digest TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY (append_id, tenant))"
    )
    conn.execute(
        "INSERT INTO receipts_v2 SELECT l.tenant, r.append_id, r.lane_id, r.digest, r.body"
        " FROM receipts r JOIN lanes l ON l.id = r.lane_id"
    )
    conn.execute("DROP TABLE receipts")
    conn.execute("ALTER TABLE receipts_v2 RENAME TO receipts")


# Version 2 -> 3, per table: its rows with their tenant (turns, actions and
# attempts had none: their lane's, as a version-2 lane id named one lane).
_V2_ROWS = {
    "sessions": "SELECT id, tenant, created_at FROM sessions ORDER BY rowid",
    "lanes": "SELECT id, tenant, session_id, run_id, name, body, last_seq, head_hash FROM lanes"
    " ORDER BY rowid",
    "turns": "SELECT t.id, l.tenant, t.lane_id, t.turn_no, t.body FROM turns t"
    " JOIN lanes l ON l.id = t.lane_id ORDER BY t.rowid",
    "actions": "SELECT a.id, l.tenant, a.lane_id, a.turn_id, a.body FROM actions a"
    " JOIN lanes l ON l.id = a.lane_id ORDER BY a.rowid",
    "attempts": "SELECT a.id, l.tenant, a.lane_id, a.action_id, a.attempt_no, a.body FROM attempts a"
    " JOIN lanes l ON l.id = a.lane_id ORDER BY a.rowid",
    "events": "SELECT position, id, lane_id, seq, tenant, session_id, run_id, event_type, append_id, body"
    " FROM events ORDER BY position",
}


def _scope_all_ids(conn: sqlite3.Connection) -> None:
    """Version 2 -> 3: every table keyed by (id, tenant). Each table is
    rebuilt in its rowid order, which structure pages follow."""
    for name, columns in _TABLES.items():
        conn.execute(f"CREATE TABLE {name}_v3 {columns}")
        conn.execute(f"INSERT INTO {name}_v3 {_V2_ROWS[name]}")
    for name in _TABLES:
        conn.execute(f"DROP TABLE {name}")
        conn.execute(f"ALTER TABLE {name}_v3 RENAME TO {name}")
    conn.execute("CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, position)")


def _build_tree(conn: sqlite3.Connection) -> None:
    """Version 3 -> 4: the Merkle tree of the events already committed."""
    tree_store.create_tables(conn)
    build_tree(conn, conn.execute("SELECT position, body FROM events ORDER BY position"))


def _index_refs(conn: sqlite3.Connection) -> None:
    """Version 4 -> 5: event_refs filled from the events already committed
    (an erasure must see every blob an older event references, or it would
    delete one still referenced); event_subjects empty (an older event
    could not name a data subject), and retention empty. The DDL made them."""
    rows = conn.execute(
        "SELECT position, tenant, body FROM events"
        " WHERE instr(body, '\"_ref\":') OR instr(body, '\"payload_refs\":') ORDER BY position"
    )
    conn.executemany(
        "INSERT INTO event_refs (tenant, sha256, position) VALUES (?,?,?)",
        (
            (tenant, sha, position)
            for position, tenant, body in rows.fetchall()
            for sha in blob_hexes(_decode(body).get("payload"))
        ),
    )


def _id_listed_blobs(conn: sqlite3.Connection) -> None:
    """Version 5 -> 6: the DDL made the new tables; the blobs listed for
    deletion get the id they are taken off the list by."""
    if "id" not in {column for _, column, *_ in conn.execute("PRAGMA table_info(blobs_to_erase)")}:
        conn.execute("ALTER TABLE blobs_to_erase ADD COLUMN id TEXT")
    conn.execute("UPDATE blobs_to_erase SET id = lower(hex(randomblob(16))) WHERE id IS NULL")


MIGRATIONS = {
    1: _scope_append_ids,
    2: _scope_all_ids,
    3: _build_tree,
    4: _index_refs,
    5: _id_listed_blobs,
}


def open_ledger(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (and for the writer, create) a ledger database.

    The writer's connection is ``Durability.FULL``: a commit is on disk before
    any receipt or ack leaves, so kill -9 or power loss never un-commits an
    event. Readers open read-only and never block the writer.
    """
    if readonly:
        return open_readonly(path, what="ledger database")
    conn = open_database(path, durability=Durability.FULL, ddl=DDL, what="ledger database")
    try:
        # Erasure (spec/erasure.md) rewrites event bodies: the old cells and
        # freed pages are zeroed, not left in the file. Appends only insert,
        # so this costs them nothing.
        conn.execute("PRAGMA secure_delete = ON")
        check_schema_version(
            conn,
            SCHEMA_VERSION,
            what="ledger database",
            path=path,
            migrations=MIGRATIONS,
            on_create=tree_store.create_tables,  # the tree's tables are tlog.store's to define
        )
    except BaseException:
        conn.close()
        raise
    return conn


def open_current_ledger(path: str | Path) -> sqlite3.Connection:
    """Open a ledger read-only for a reader of today's tables (``LedgerReader``).

    A reader cannot migrate (it never writes), and an older file's tables
    lack columns it queries, so a file at another schema version is refused
    here, saying so, instead of failing later on a missing column. The
    auditor (``laneledger verify``) reads every version and opens with
    ``open_ledger(readonly=True)``.
    """
    conn = open_readonly(path, what="ledger database")
    try:
        with failures_as("cannot open ledger database", path=str(path)):
            found = meta_value(conn, "schema_version")
        if found != str(SCHEMA_VERSION):
            older = found is not None and found.isdigit() and int(found) in MIGRATIONS
            raise InternalError(
                "ledger database has an older schema version: start the sequencer on it once,"
                " which migrates the file in place"
                if older
                else "ledger database has another schema version",
                path=str(path),
                found=found,
                expected=SCHEMA_VERSION,
            )
    except BaseException:
        conn.close()
        raise
    return conn


def file_id(conn: sqlite3.Connection) -> str:
    """This file's own id (``meta.file_id``, made on first use): who holds
    the sequencer's lease. It is the file's, not the ledger's: a file
    rebuilt from the transaction log gets a new one (the log never carries
    it), so two files of one ledger are two holders."""
    with transaction(conn, "ledger write failed"):
        found = meta_value(conn, "file_id")
        if found is None:
            found = new_id()
            put_meta(conn, "file_id", found)
    return found
