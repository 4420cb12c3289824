"""The audit's check of the Merkle tree (spec/tlog.md, spec/verify.md): the
tree is recomputed from the events' entry hashes, in position order, and
every stored row of ``tlog_hashes`` must be exactly the recomputed one."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from laneledger.contract.errors import IntegrityError
from laneledger.tlog.leaves import entry_leaf
from laneledger.tlog.store import frontier_root, grow


def has_tree(db: sqlite3.Connection) -> bool:
    """Whether the file has a tree (schema 4 on; an older file read as it is has none)."""
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tlog_hashes'")
    return found.fetchone() is not None


def _mismatch(position: int, text: str, **details: object) -> IntegrityError:
    return IntegrityError(
        f"position {position}: tree_mismatch: {text}",
        kind="tree_mismatch",
        position=position,
        leaf=position - 1,
        **details,
    )


class TreeCheck:
    """Fed each event's entry hash in position order (``add``), with the
    stored rows (leaf, hashes) in leaf order. ``finish`` raises
    ``tree_mismatch`` at the first leaf whose stored hashes differ, are
    missing, or are extra. It is the audit's last check: an edited event
    is named by the more specific fault of the checks before it."""

    def __init__(self, stored_rows: Iterator[tuple[int, bytes]]) -> None:
        self._stored: Iterator[tuple[int, bytes]] | None = stored_rows
        self._frontier: list[bytes] = []
        self._fault: IntegrityError | None = None

    def add(self, position: int, entry_hash: str) -> None:
        expected = grow(self._frontier, position - 1, entry_leaf(entry_hash))
        if self._stored is None:  # a fault was found: only the root goes on
            return
        stored = next(self._stored, None)
        if stored is None or stored[0] != position - 1:
            self._fault = _mismatch(
                position, "the tree has no leaf for this event", found_leaf=stored and stored[0]
            )
        elif stored[1] != expected:
            self._fault = _mismatch(
                position,
                "the stored tree hashes differ from the ones recomputed from the events",
                expected=expected.hex(),
                found=stored[1].hex(),
            )
        if self._fault is not None:
            self._stored = None

    def finish(self) -> bytes:
        """The recomputed root, once every event was added; raises the first
        fault, or an extra stored leaf."""
        if self._fault is not None:
            raise self._fault
        extra = next(self._stored, None) if self._stored is not None else None
        if extra is not None:
            raise _mismatch(extra[0] + 1, "the tree has a leaf beyond the last event", found_leaf=extra[0])
        return frontier_root(self._frontier)
