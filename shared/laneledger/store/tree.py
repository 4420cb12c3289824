"""The ledger's Merkle tree (spec/tlog.md), kept with its events.

Every inserted event is a leaf, appended in the same transaction as its row:
the tree's size always equals the ledger's last position. The tree is
derived from the events the way an index is from its table, so the
transaction log never carries it: a record's events extend the tree when
the record is applied (``txlog.run_writes``), which makes a standby's and a
restored file's tree the writer's, hash for hash.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence

import msgspec

from laneledger.contract.errors import IntegrityError
from laneledger.tlog import leaves as tree_leaves
from laneledger.tlog import store as tree_store


class _EntryHash(msgspec.Struct):
    entry_hash: str


_entry_hash = msgspec.json.Decoder(_EntryHash)


def leaf_of(body: bytes) -> bytes:
    """An event's leaf hash, from its stored bytes (``events.body``)."""
    return tree_leaves.entry_leaf(_entry_hash.decode(body).entry_hash)


def extend_tree(
    conn: sqlite3.Connection,
    events: Sequence[tuple[int, bytes]],
    *,
    leaf: Callable[[bytes], bytes] = leaf_of,
    leaves: Sequence[bytes] | None = None,
) -> None:
    """Append the leaves of ``events`` ((position, body), in position order)
    inside the caller's open transaction. The first must be the position
    right after the tree's last leaf: a tree that disagrees with the events
    is refused, never extended out of place. ``leaf``: a body's leaf hash
    (the tail's read model also has messages that are not events).
    ``leaves``: the events' leaf hashes, when the caller has them (the
    writer, from the entry hashes it just computed): no body is decoded."""
    if not events:
        return
    size = tree_store.tree_size(conn)
    if events[0][0] != size + 1:
        raise IntegrityError(
            "the Merkle tree does not end where the ledger's events do",
            kind="tlog_size",
            tree_size=size,
            first_position=events[0][0],
        )
    tree_store.append_leaves(conn, [leaf(body) for _, body in events] if leaves is None else leaves)


def build_tree(conn: sqlite3.Connection, events: Iterable[tuple[int, bytes]], *, page: int = 10_000) -> None:
    """``extend_tree`` over many events, a page at a time: for a file whose
    events predate the tree (schema 3 -> 4)."""
    batch: list[tuple[int, bytes]] = []
    for event in events:
        batch.append(event)
        if len(batch) == page:
            extend_tree(conn, batch)
            batch = []
    extend_tree(conn, batch)


__all__ = ["build_tree", "extend_tree", "leaf_of"]
