"""The ledger keeps its Merkle tree (spec/tlog.md) in the writer's own
transactions: every committed position is a leaf, and only those; an older
file gets the tree of the events it already holds. (A file rebuilt from the
transaction log, or kept by a standby, has the same tree: test_txlog.py and
tests/fault/test_failover.py compare ``tlog_hashes`` row for row.)"""

from __future__ import annotations

import sqlite3

import pytest
from tlog_support import committed_ledger

from laneledger.audit.ledger import audit_ledger
from laneledger.contract.errors import IntegrityError
from laneledger.contract.model import AppendCommitted, AppendRejected, encode
from laneledger.sdk.client import make_event
from laneledger.sqlite import transaction
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append
from laneledger.store.schema import SCHEMA_VERSION
from laneledger.store.tree import extend_tree, leaf_of
from laneledger.tlog import merkle, store


def tree_rows(conn: sqlite3.Connection) -> list[tuple[int, bytes]]:
    return conn.execute("SELECT leaf, hashes FROM tlog_hashes ORDER BY leaf").fetchall()


def independent_root(conn: sqlite3.Connection) -> bytes:
    """RFC 9162's MTH over the events' leaves, from the list (no stored hash)."""
    bodies = conn.execute("SELECT body FROM events ORDER BY position").fetchall()
    return merkle.root_of([leaf_of(body) for (body,) in bodies])


def test_every_commit_extends_the_tree_by_its_positions_and_nothing_else(tmp_path):
    conn = committed_ledger(tmp_path / "ledger.db", 23)
    writer = LedgerWriter(conn)
    assert store.tree_size(conn) == writer.last_position == 23
    assert store.root(conn) == independent_root(conn)
    lane_id, last_seq = conn.execute("SELECT id, last_seq FROM lanes ORDER BY rowid LIMIT 1").fetchone()
    (actor,) = conn.execute("SELECT id FROM actors").fetchone()

    def request(append_id: str, expected: int) -> bytes:
        event = make_event(lane_id, "action.started", actor_id=actor, payload={"a": append_id})
        return encode(
            {"lane_id": lane_id, "expected_last_seq": expected, "append_id": append_id, "events": [event]}
        )

    # One batch: a commit, a stale expected_last_seq (rejected), the commit resent (replayed).
    fresh = request("fresh", last_seq)
    batch = [fresh, request("stale", 0), fresh]
    receipts = writer.apply_batch([prepare_append(body) for body in batch]).receipts
    assert [type(r) for r in receipts] == [AppendCommitted, AppendRejected, AppendCommitted]
    assert receipts[2].replayed
    assert store.tree_size(conn) == 24  # one leaf: the one new position
    assert store.root(conn) == independent_root(conn)
    assert audit_ledger(tmp_path / "ledger.db").tree_root == store.root(conn).hex()


def test_a_version_3_file_gets_the_tree_of_its_events(tmp_path):
    db = tmp_path / "ledger.db"
    conn = committed_ledger(db, 41)
    built = tree_rows(conn)
    conn.execute("DROP TABLE tlog_hashes")  # what a version-3 file is
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()
    conn = open_ledger(db)  # the writer's open migrates it
    try:
        assert tree_rows(conn) == built
        (version,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version == str(SCHEMA_VERSION)
    finally:
        conn.close()
    assert audit_ledger(db).tree_root == merkle.root_of([leaf_of(b) for b in bodies(db)]).hex()


def bodies(db) -> list[bytes]:
    conn = sqlite3.connect(db)
    try:
        return [body for (body,) in conn.execute("SELECT body FROM events ORDER BY position")]
    finally:
        conn.close()


def test_the_tree_is_never_extended_out_of_place(tmp_path):
    conn = committed_ledger(tmp_path / "ledger.db", 5)
    (body,) = conn.execute("SELECT body FROM events WHERE position = 5").fetchone()
    before = tree_rows(conn)
    for position in (5, 7):  # a leaf the tree has, and one beyond its end
        with pytest.raises(IntegrityError) as caught, transaction(conn, "test"):
            extend_tree(conn, [(position, body)])
        assert caught.value.details == {"kind": "tlog_size", "tree_size": 5, "first_position": position}
    assert tree_rows(conn) == before
