"""The tail's copy of the transparency log (spec/tlog.md, "Served by the tail").

The read model keeps, next to its events:

* the ledger's Merkle tree of what it applied (``tlog_hashes``,
  ``laneledger.tlog.store``), extended in each batch's transaction, so its
  size is always ``applied_position``;
* the checkpoints read from LEDGER_TLOG whose root is this tree's at their
  size (``tlog_checkpoints``), with the last stream sequence read in
  ``meta``;
* the witnesses' cosignatures posted to the tail (``tlog_cosignatures``):
  the tail's own record, which no stream holds.

Writes run on the read model's writer connection (the apply thread); the
reads take any connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from laneledger.contract.errors import InternalError, InvalidRequest
from laneledger.sqlite import transaction
from laneledger.store.tree import extend_tree, leaf_of
from laneledger.tlog import merkle
from laneledger.tlog import store as tree_store
from laneledger.tlog.checkpoint import (
    TreeHead,
)
from laneledger.tlog.cosignature import signed_at
from laneledger.tlog.note import Signature, parse_signature_line, sign_note, split_note

DDL = (
    tree_store.DDL
    + """
CREATE TABLE IF NOT EXISTS tlog_checkpoints (
    size INTEGER PRIMARY KEY,
    note TEXT NOT NULL          -- the signed note as LEDGER_TLOG holds it
);
CREATE TABLE IF NOT EXISTS tlog_cosignatures (
    size    INTEGER NOT NULL,
    witness TEXT NOT NULL,      -- '<name>+<key ID>'
    line    TEXT NOT NULL,      -- its signature line, without the newline
    PRIMARY KEY (size, witness)
);
"""
)

STREAM_SEQUENCE = "tlog_stream_sequence"  # meta: the last LEDGER_TLOG sequence read


def message_leaf(body: bytes) -> bytes:
    """The leaf of one stream message. A committed event's is its entry
    hash's, as in the ledger's own tree. A message that is not a committed
    event (only a foreign publisher could put one on the stream;
    ``events.row_of`` stores it so positions stay dense) gets the hash of
    its raw bytes: from there on the tail's tree is not the ledger's, so no
    checkpoint covering it matches the tail's root and none is served,
    which is right: the stream no longer holds the ledger the log signed."""
    try:
        return leaf_of(body)
    except (msgspec.DecodeError, msgspec.ValidationError, InvalidRequest):
        return merkle.leaf_hash(body)


def extend(conn: sqlite3.Connection, batch: Sequence[tuple[int, bytes]]) -> None:
    """The leaves of ``(position, body)`` in the caller's transaction."""
    extend_tree(conn, batch, leaf=message_leaf)


def build(conn: sqlite3.Connection, applied: int, *, page: int = 5000) -> None:
    """A read model written before it kept the tree: the leaves of the
    events it holds, one transaction per page (a stop resumes)."""
    while (size := tree_store.tree_size(conn)) < applied:
        rows = conn.execute(
            "SELECT position, body FROM events WHERE position > ? ORDER BY position LIMIT ?", (size, page)
        ).fetchall()
        if not rows:
            raise InternalError("the read model lacks events below its applied position", tree_size=size)
        with transaction(conn, "read model write failed"):
            extend(conn, [(p, bytes(b)) for p, b in rows])


# -- checkpoints -------------------------------------------------------------------------


def store_checkpoint(conn: sqlite3.Connection, checkpoint: TreeHead, note: str) -> bool:
    """Keep ``note`` (whose text is ``checkpoint``) when its root is this
    tree's at its size; False, and nothing kept, when it is not. The tree
    must already hold ``checkpoint.size`` leaves. A size already kept keeps
    its first note."""
    if tree_store.root(conn, checkpoint.size) != checkpoint.root:
        return False
    conn.execute("INSERT OR IGNORE INTO tlog_checkpoints (size, note) VALUES (?, ?)", (checkpoint.size, note))
    return True


def latest_size(conn: sqlite3.Connection) -> int | None:
    (size,) = conn.execute("SELECT max(size) FROM tlog_checkpoints").fetchone()
    return None if size is None else int(size)


def stored_note(conn: sqlite3.Connection, size: int) -> str | None:
    """The checkpoint of ``size`` as LEDGER_TLOG held it, or None."""
    row = conn.execute("SELECT note FROM tlog_checkpoints WHERE size = ?", (size,)).fetchone()
    return None if row is None else str(row[0])


def served_note(conn: sqlite3.Connection, size: int) -> str | None:
    """The checkpoint of ``size`` with the cosignatures kept for it: the
    log's signatures first, then each witness's line (by witness), as one
    signed note; None when the tail has no checkpoint of that size."""
    note = stored_note(conn, size)
    if note is None:
        return None
    text, signatures = split_note(note)
    signed = {(s.name, s.key_id) for s in signatures}
    lines = conn.execute(
        "SELECT line FROM tlog_cosignatures WHERE size = ? ORDER BY witness", (size,)
    ).fetchall()
    cosignatures = [parse_signature_line(line) for (line,) in lines]
    cosignatures = [s for s in cosignatures if (s.name, s.key_id) not in signed]
    return sign_note(text, [], keep=[*signatures, *cosignatures])


def store_cosignatures(conn: sqlite3.Connection, size: int, cosignatures: Sequence[Signature]) -> list[str]:
    """Keep each witness's (verified) cosignature of the checkpoint of
    ``size`` unless the one held for that witness and size is at least as
    new (C2SP cosignatures carry their time): an older one, re-posted or
    late, never replaces a newer one. Returns the witnesses whose held,
    newer cosignature was kept instead. In the caller's transaction (the
    read model's one writer), so the read and the write cannot interleave."""
    kept_newer = []
    for signature in cosignatures:
        witness = witness_key(signature)
        held = conn.execute(
            "SELECT line FROM tlog_cosignatures WHERE size = ? AND witness = ?", (size, witness)
        ).fetchone()
        if held is not None:
            held_at = signed_at(parse_signature_line(held[0]).signature)
            posted_at = signed_at(signature.signature)
            if posted_at < held_at:
                kept_newer.append(witness)
            if posted_at <= held_at:  # the same time is the same cosignature (Ed25519 is deterministic)
                continue
        conn.execute(
            "INSERT INTO tlog_cosignatures (size, witness, line) VALUES (?, ?, ?)"
            " ON CONFLICT (size, witness) DO UPDATE SET line = excluded.line",
            (size, witness, signature.line().rstrip("\n")),
        )
    return kept_newer


def witness_key(signature: Signature) -> str:
    return f"{signature.name}+{signature.key_id:08x}"
