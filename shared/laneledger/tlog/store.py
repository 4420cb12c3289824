"""The Merkle tree's hashes in the ledger's SQLite file.

One table, ``tlog_hashes``: every hash of the tree that is final — each
leaf hash and each inner node whose subtree is complete — stored once, at
the index golang.org/x/mod/sumdb/tlog's ``StoredHashIndex`` gives it (the
layout of Crosby and Wallach, "Efficient Data Structures for Tamper-Evident
Logging", §3.3): leaf ``r``'s hash, then the hashes of the subtrees that
leaf completes, lowest first, so appending only ever adds rows at the end
(about two per leaf). The tree's size is not stored apart: it follows from
the last index (``tree_size``), so it can never disagree with the hashes.

Since every perfect, aligned subtree of a tree of any past size is final,
the table answers the root and proofs of *every* size up to the current one
(``StoredTree`` is a ``merkle.HashSource``), without keeping old trees.

``append_leaves`` runs inside the caller's open transaction (the ledger
writer's batch) and never begins or commits one: the leaves and the events
they stand for commit, or roll back, together. The tables are created by
``create_tables``, for the ledger schema to call.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from laneledger.contract.errors import InternalError, InvalidRequest
from laneledger.store.sqlite import failures_as
from laneledger.tlog import merkle
from laneledger.tlog.merkle import HASH_SIZE, Node

DDL = """
CREATE TABLE IF NOT EXISTS tlog_hashes (
    idx  INTEGER PRIMARY KEY,  -- stored_hash_index(level, n)
    hash BLOB NOT NULL         -- 32 bytes
);
"""

# SQLite's default limit on host parameters in one statement is 32766;
# a read asks for at most ~2·log2(size) hashes, far below it.
_READ_CHUNK = 500


def create_tables(conn: sqlite3.Connection) -> None:
    """Create the tree's table if missing; safe inside an open transaction
    (one ``execute``, not ``executescript``, which would commit it)."""
    with failures_as("tlog tables could not be created"):
        conn.execute(DDL)


def stored_hash_index(level: int, n: int) -> int:
    """Where the hash of subtree ``(level, n)`` is stored: right after the
    hash of its last leaf and of the smaller subtrees that leaf completes."""
    for _ in range(level):  # the index of its last leaf...
        n = 2 * n + 1
    index = 0
    while n > 0:  # ...which follows n + n/2 + n/4 + ... earlier hashes
        index += n
        n >>= 1
    return index + level


def split_stored_hash_index(index: int) -> Node:
    """The ``(level, n)`` stored at ``index``: the inverse of
    ``stored_hash_index``."""
    # The leaf r whose hashes include index: stored_hash_index(0, r) < 2r,
    # so r is at least index // 2; step up while the next leaf starts at or
    # before index (leaf r adds 1 + trailing ones of r hashes).
    r = index // 2
    start = stored_hash_index(0, r)
    while True:
        following = start + 1 + _trailing_ones(r)
        if following > index:
            break
        r, start = r + 1, following
    level = index - start
    return level, r >> level


def _trailing_ones(n: int) -> int:
    return ((n ^ (n + 1)).bit_length()) - 1


def tree_size(conn: sqlite3.Connection) -> int:
    """Leaves in the tree: the last stored hash is the top subtree its last
    leaf completed, ``(level, n)``, so that leaf is ``((n + 1) << level) - 1``."""
    with failures_as("tlog read failed"):
        (last,) = conn.execute("SELECT max(idx) FROM tlog_hashes").fetchone()
    if last is None:
        return 0
    level, n = split_stored_hash_index(last)
    return (n + 1) << level


def _frontier_nodes(size: int) -> list[Node]:
    """The perfect subtrees the tree of ``size`` leaves is made of, largest
    first: one per set bit of ``size``. Only they can be the left sibling of
    a node a later leaf completes."""
    return [(level, (size >> level) - 1) for level in reversed(range(size.bit_length())) if size >> level & 1]


def append_leaves(conn: sqlite3.Connection, leaves: Sequence[bytes]) -> int:
    """Append leaf hashes (``merkle.leaf_hash`` of each leaf's data) in the
    caller's open transaction; return the new tree size."""
    if not conn.in_transaction:
        raise RuntimeError("append_leaves runs inside the caller's transaction; none is open")
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, bytes) or len(leaf) != HASH_SIZE:
            raise InvalidRequest(f"leaf {i} is not a {HASH_SIZE}-byte hash", path=f"leaves[{i}]")
    size = tree_size(conn)
    stack = StoredTree(conn).subtree_hashes(_frontier_nodes(size))
    rows: list[tuple[int, bytes]] = []
    for r, h in enumerate(leaves, start=size):
        rows.append((stored_hash_index(0, r), h))
        level = 0
        while r >> level & 1:  # each trailing 1 bit of r completes one more subtree
            h = merkle.node_hash(stack.pop(), h)
            level += 1
            rows.append((stored_hash_index(level, r >> level), h))
        stack.append(h)
    with failures_as("tlog append failed", size=size):
        conn.executemany("INSERT INTO tlog_hashes (idx, hash) VALUES (?, ?)", rows)
    return size + len(leaves)


class StoredTree:
    """The stored tree as a ``merkle.HashSource``: one query per read."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def subtree_hashes(self, nodes: Sequence[Node]) -> list[bytes]:
        wanted = [stored_hash_index(level, n) for level, n in nodes]
        found: dict[int, bytes] = {}
        with failures_as("tlog read failed"):
            for i in range(0, len(wanted), _READ_CHUNK):
                chunk = wanted[i : i + _READ_CHUNK]
                marks = ",".join("?" * len(chunk))
                found.update(
                    self._conn.execute(f"SELECT idx, hash FROM tlog_hashes WHERE idx IN ({marks})", chunk)
                )
        missing = [node for node, idx in zip(nodes, wanted, strict=True) if idx not in found]
        if missing:  # a caller asked beyond the tree, or rows were deleted
            raise InternalError("tlog hashes missing from the store", nodes=missing[:5])
        return [found[idx] for idx in wanted]


def _within(conn: sqlite3.Connection, size: int, name: str) -> None:
    current = tree_size(conn)
    if type(size) is not int or not 0 <= size <= current:
        raise InvalidRequest(f"{name} must be a tree size in 0..{current}", path=name, found=size)


def root(conn: sqlite3.Connection, size: int | None = None) -> bytes:
    """The root of the tree at ``size`` leaves (default: the current size)."""
    if size is None:
        size = tree_size(conn)
    _within(conn, size, "size")
    return merkle.root(size, StoredTree(conn))


def inclusion_proof(conn: sqlite3.Connection, index: int, size: int) -> list[bytes]:
    _within(conn, size, "size")
    return merkle.inclusion_proof(index, size, StoredTree(conn))


def consistency_proof(conn: sqlite3.Connection, old_size: int, new_size: int) -> list[bytes]:
    _within(conn, new_size, "new_size")
    return merkle.consistency_proof(old_size, new_size, StoredTree(conn))
