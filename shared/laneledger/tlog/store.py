"""The Merkle tree's hashes in the ledger's SQLite file.

One table, ``tlog_hashes``, one row per leaf: row ``r`` holds leaf ``r``'s
hash followed by the hashes of the subtrees that leaf completes, lowest
first — one per trailing 1 bit of ``r`` — concatenated (32 bytes each).
Those are exactly the hashes golang.org/x/mod/sumdb/tlog's
``StoredHashes(r)`` returns for record ``r``, in the same order; Go keeps
them one per row at ``StoredHashIndex``, we keep each leaf's together, which
halves the rows (about two hashes per leaf) and makes the tree's size the
last row's key plus one, so it can never disagree with the hashes.

Every hash in the table is final: a subtree ``(level, n)`` is stored, at
offset ``level``, in the row of its last leaf ``((n + 1) << level) - 1``, once
complete. Every perfect, aligned subtree of a tree of any past size is
complete, so the table answers the root and proofs of *every* size up to the
current one (``StoredTree`` is a ``merkle.HashSource``) without keeping old
trees.

``append_leaves`` runs inside the caller's open transaction (the ledger
writer's batch) and never begins or commits one: the leaves and the events
they stand for commit, or roll back, together. The table is created by
``create_tables``, for the ledger schema to call.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from laneledger.contract.errors import InternalError, InvalidRequest
from laneledger.sqlite import failures_as
from laneledger.tlog import merkle
from laneledger.tlog.merkle import HASH_SIZE, Node

DDL = """
CREATE TABLE IF NOT EXISTS tlog_hashes (
    leaf   INTEGER PRIMARY KEY,  -- the leaf index r (position r + 1)
    hashes BLOB NOT NULL         -- 32 bytes for leaf r, then 32 per subtree r completes
);
"""

# Host parameters per query: far below SQLite's limit (32766); a root or a
# proof reads at most ~2·log2(size) rows.
_READ_CHUNK = 500


def create_tables(conn: sqlite3.Connection) -> None:
    """Create the tree's table if missing; safe inside an open transaction
    (one ``execute``, not ``executescript``, which would commit it)."""
    with failures_as("tlog tables could not be created"):
        conn.execute(DDL)


def row_of(node: Node) -> tuple[int, int]:
    """``(leaf, offset in hashes)`` where subtree ``(level, n)`` is stored:
    the row of its last leaf, after that leaf's smaller subtrees."""
    level, n = node
    return ((n + 1) << level) - 1, level


def tree_size(conn: sqlite3.Connection) -> int:
    with failures_as("tlog read failed"):
        (last,) = conn.execute("SELECT max(leaf) FROM tlog_hashes").fetchone()
    return 0 if last is None else last + 1


def _frontier_nodes(size: int) -> list[Node]:
    """The perfect subtrees the tree of ``size`` leaves is made of, largest
    first: one per set bit of ``size``. Only they can be the left sibling of
    a node a later leaf completes."""
    return [(level, (size >> level) - 1) for level in reversed(range(size.bit_length())) if size >> level & 1]


def grow(frontier: list[bytes], r: int, leaf: bytes) -> bytes:
    """Add leaf ``r`` to a tree of ``r`` leaves and return its row: the leaf's
    hash, then each subtree it completes (one per trailing 1 bit of ``r``).
    ``frontier`` holds that tree's perfect subtrees, largest first
    (``_frontier_nodes``), and is moved to the tree of ``r + 1`` leaves."""
    if not r & 1:  # half the leaves complete no subtree
        frontier.append(leaf)
        return leaf
    h = leaf
    completed = [h]
    bits = r
    while bits & 1:
        h = merkle.node_hash(frontier.pop(), h)
        completed.append(h)
        bits >>= 1
    frontier.append(h)
    return b"".join(completed)


def frontier_root(frontier: Sequence[bytes]) -> bytes:
    """The root of the tree whose perfect subtrees are ``frontier``, largest
    first (RFC 9162: the smaller ones fold in from the right)."""
    if not frontier:
        return merkle.EMPTY_ROOT
    h = frontier[-1]
    for left in reversed(frontier[:-1]):
        h = merkle.node_hash(left, h)
    return h


def append_leaves(conn: sqlite3.Connection, leaves: Sequence[bytes]) -> int:
    """Append leaf hashes (``merkle.leaf_hash`` of each leaf's data) in the
    caller's open transaction; return the new tree size."""
    if not conn.in_transaction:
        raise RuntimeError("append_leaves runs inside the caller's transaction; none is open")
    for i, leaf in enumerate(leaves):
        if type(leaf) is not bytes or len(leaf) != HASH_SIZE:
            raise InvalidRequest(f"leaf {i} is not a {HASH_SIZE}-byte hash", path=f"leaves[{i}]")
    size = tree_size(conn)
    frontier = StoredTree(conn).subtree_hashes(_frontier_nodes(size))
    rows = [(r, grow(frontier, r, leaf)) for r, leaf in enumerate(leaves, start=size)]
    with failures_as("tlog append failed", size=size):
        conn.executemany("INSERT INTO tlog_hashes (leaf, hashes) VALUES (?, ?)", rows)
    return size + len(leaves)


class StoredTree:
    """The stored tree as a ``merkle.HashSource``: one query per read."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def subtree_hashes(self, nodes: Sequence[Node]) -> list[bytes]:
        places = [row_of(node) for node in nodes]
        wanted = list({leaf: None for leaf, _ in places})
        found: dict[int, bytes] = {}
        with failures_as("tlog read failed"):
            for i in range(0, len(wanted), _READ_CHUNK):
                chunk = wanted[i : i + _READ_CHUNK]
                marks = ",".join("?" * len(chunk))
                found.update(
                    self._conn.execute(f"SELECT leaf, hashes FROM tlog_hashes WHERE leaf IN ({marks})", chunk)
                )
        hashes = []
        for node, (leaf, offset) in zip(nodes, places, strict=True):
            value = found.get(leaf, b"")[offset * HASH_SIZE : (offset + 1) * HASH_SIZE]
            if len(value) != HASH_SIZE:  # asked beyond the tree, or rows were changed
                raise InternalError("tlog hash missing from the store", node=node, leaf=leaf)
            hashes.append(value)
        return hashes


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
