"""The SQLite schema of the ledger and how a database file is opened.

No foreign keys (as in Agent Ledger): the writer checks ownership in code,
inside the same transaction, and the schema stays easy to move.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from laneledger.store.sqlite import Durability, check_schema_version, open_database, open_readonly

# 2: append ids are scoped per tenant (receipts keyed by tenant and append
# id; spec/object-model.md, "Append"); a version-1 file is migrated in place.
SCHEMA_VERSION = 2

DDL = """
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
CREATE TABLE IF NOT EXISTS sessions (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lanes (
    id             TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    run_id         TEXT NOT NULL,
    name           TEXT NOT NULL,
    body           TEXT NOT NULL,
    last_seq       INTEGER NOT NULL DEFAULT 0,
    head_hash      TEXT NOT NULL,
    UNIQUE (session_id, run_id, name)
);
CREATE TABLE IF NOT EXISTS turns (
    id      TEXT PRIMARY KEY,
    lane_id TEXT NOT NULL,
    turn_no INTEGER NOT NULL,
    body    TEXT NOT NULL,
    UNIQUE (lane_id, turn_no)
);
CREATE TABLE IF NOT EXISTS actions (
    id      TEXT PRIMARY KEY,
    lane_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    body    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    id         TEXT PRIMARY KEY,
    lane_id    TEXT NOT NULL,
    action_id  TEXT NOT NULL,
    attempt_no INTEGER NOT NULL,
    body       TEXT NOT NULL,
    UNIQUE (action_id, attempt_no)
);
CREATE TABLE IF NOT EXISTS events (
    position     INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    lane_id      TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    tenant       TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    event_type   TEXT NOT NULL,
    append_id    TEXT NOT NULL,
    body         BLOB NOT NULL,
    UNIQUE (lane_id, seq)
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, position);
-- Keyed append id first: the writer looks a batch's append ids up with
-- "append_id IN (...)" (then picks each one's tenant), which this index serves.
CREATE TABLE IF NOT EXISTS receipts (
    tenant    TEXT NOT NULL,
    append_id TEXT NOT NULL,
    lane_id   TEXT NOT NULL,
    digest    TEXT NOT NULL,
    body      BLOB NOT NULL,
    PRIMARY KEY (append_id, tenant)
);
"""


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


MIGRATIONS = {1: _scope_append_ids}


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
        check_schema_version(conn, SCHEMA_VERSION, what="ledger database", path=path, migrations=MIGRATIONS)
    except BaseException:
        conn.close()
        raise
    return conn
