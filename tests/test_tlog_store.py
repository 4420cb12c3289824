"""laneledger.tlog.store: the tree's hashes in a real SQLite file, appended
inside the caller's transaction; every root and proof of every past size
equals the in-memory reference (hypothesis), and Go's stored-hash layout."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneledger.contract.errors import InvalidRequest
from laneledger.sqlite import Durability, open_database, transaction
from laneledger.tlog import merkle, store
from laneledger.tlog.leaves import entry_leaf, leaf_index

LEAVES = [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(300)]
REFERENCE = merkle.LeafList(LEAVES)

# A stand-in for the ledger's own rows, written in the same transaction.
EVENTS_DDL = "CREATE TABLE IF NOT EXISTS events (position INTEGER PRIMARY KEY, entry_hash TEXT NOT NULL);"


def open_ledger(path) -> sqlite3.Connection:
    conn = open_database(path, durability=Durability.NORMAL, ddl=EVENTS_DDL, what="test ledger")
    with transaction(conn, "create"):
        store.create_tables(conn)  # inside a transaction, as schema.py will call it
    return conn


def append_in_batches(conn: sqlite3.Connection, leaves: list[bytes], batches: list[int]) -> None:
    done = 0
    for count in [*batches, len(leaves)]:
        batch = leaves[done : done + count]
        if not batch:
            continue
        with transaction(conn, "append"):
            assert store.append_leaves(conn, batch) == done + len(batch)
        done += len(batch)


@pytest.fixture
def conn(tmp_path):
    db = open_ledger(tmp_path / "ledger.db")
    yield db
    db.close()


def test_an_empty_tree(conn):
    assert store.tree_size(conn) == 0
    assert store.root(conn) == merkle.EMPTY_ROOT
    assert store.consistency_proof(conn, 0, 0) == []


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, len(LEAVES)),
    batches=st.lists(st.integers(1, 40), max_size=12),
    data=st.data(),
)
def test_stored_roots_and_proofs_equal_the_reference(tmp_path_factory, size, batches, data):
    conn = open_ledger(tmp_path_factory.mktemp("tlog") / "ledger.db")
    try:
        append_in_batches(conn, LEAVES[:size], batches)
        assert store.tree_size(conn) == size
        for _ in range(5):
            past = data.draw(st.integers(0, size), label="past size")
            assert store.root(conn, past) == merkle.root(past, REFERENCE)
            if past:
                index = data.draw(st.integers(0, past - 1), label="index")
                proof = store.inclusion_proof(conn, index, past)
                assert proof == merkle.inclusion_proof(index, past, REFERENCE)
                merkle.verify_inclusion(index, past, LEAVES[index], proof, store.root(conn, past))
            old = data.draw(st.integers(0, past), label="old size")
            proof = store.consistency_proof(conn, old, past)
            assert proof == merkle.consistency_proof(old, past, REFERENCE)
            merkle.verify_consistency(old, past, store.root(conn, old), store.root(conn, past), proof)
    finally:
        conn.close()


def stored_hashes(r: int) -> list[bytes]:
    """What golang.org/x/mod/sumdb/tlog's StoredHashes(r) returns, by its
    definition: leaf r's hash, then the subtree hashes r completes."""
    out, level = [REFERENCE.subtree_hashes([(0, r)])[0]], 0
    while r >> level & 1:
        level += 1
        out += REFERENCE.subtree_hashes([(level, r >> level)])
    return out


def test_each_row_holds_what_go_stores_for_its_leaf(conn):
    with transaction(conn, "append"):
        store.append_leaves(conn, LEAVES[:40])
    rows = dict(conn.execute("SELECT leaf, hashes FROM tlog_hashes"))
    assert sorted(rows) == list(range(40))
    for r in range(40):
        assert rows[r] == b"".join(stored_hashes(r)), r
    assert rows[7][3 * 32 :] == merkle.root(8, REFERENCE)  # leaf 7 completes the 8-leaf tree
    assert sum(len(v) for v in rows.values()) // 32 == 2 * 40 - (40).bit_count()  # Go's StoredHashCount(40)
    assert store.row_of((3, 0)) == (7, 3) and store.row_of((0, 5)) == (5, 0)


def test_leaves_commit_and_roll_back_with_the_callers_rows(conn):
    with transaction(conn, "append"):
        conn.execute("INSERT INTO events VALUES (1, ?)", ("a" * 64,))
        store.append_leaves(conn, [entry_leaf("a" * 64)])

    def failing_batch() -> None:
        with transaction(conn, "append"):
            conn.execute("INSERT INTO events VALUES (2, ?)", ("b" * 64,))
            store.append_leaves(conn, [entry_leaf("b" * 64)])
            raise ZeroDivisionError  # the batch fails after its leaves were written

    with pytest.raises(ZeroDivisionError):
        failing_batch()
    assert store.tree_size(conn) == 1
    assert conn.execute("SELECT count(*) FROM events").fetchone() == (1,)
    assert store.root(conn) == merkle.leaf_hash(bytes.fromhex("a" * 64))


def test_append_outside_a_transaction_is_refused(conn):
    with pytest.raises(RuntimeError, match="transaction"):
        store.append_leaves(conn, LEAVES[:1])
    assert store.tree_size(conn) == 0


def test_bad_arguments_are_typed_errors(conn):
    with transaction(conn, "append"):
        store.append_leaves(conn, LEAVES[:5])
    with pytest.raises(InvalidRequest) as caught, transaction(conn, "append"):
        store.append_leaves(conn, [LEAVES[5], b"short"])
    assert caught.value.details["path"] == "leaves[1]"
    assert store.tree_size(conn) == 5
    for call, path in [
        (lambda: store.root(conn, 6), "size"),
        (lambda: store.inclusion_proof(conn, 0, 6), "size"),
        (lambda: store.inclusion_proof(conn, 5, 5), "index"),
        (lambda: store.consistency_proof(conn, 2, 6), "new_size"),
        (lambda: store.consistency_proof(conn, 4, 3), "old_size"),
        (lambda: entry_leaf("g" * 64), "entry_hash"),
        (lambda: entry_leaf("ab " * 21 + "a"), "entry_hash"),
        (lambda: entry_leaf("ab" * 33), "entry_hash"),
        (lambda: leaf_index(0), "position"),
    ]:
        with pytest.raises(InvalidRequest) as caught:
            call()
        assert caught.value.details["path"] == path


def test_the_tree_survives_reopening_the_file(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    append_in_batches(conn, LEAVES[:77], [10, 30])
    expected = store.root(conn)
    conn.close()
    again = open_ledger(tmp_path / "ledger.db")
    assert (store.tree_size(again), store.root(again)) == (77, expected)
    again.close()
