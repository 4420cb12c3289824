"""What a leaf of the ledger's tree is (spec/tlog.md, "Leaves"): the event at
position ``p`` is leaf ``p - 1``, and its data is the event's ``entry_hash``
as 32 raw bytes, so a proof carries no other event's content."""

from __future__ import annotations

from laneledger.contract.errors import InvalidRequest
from laneledger.tlog.merkle import leaf_hash


def entry_leaf(entry_hash: str) -> bytes:
    """The leaf hash of an event: ``SHA-256(0x00 || bytes of entry_hash)``.
    (Called for every committed event: written for speed.)"""
    # 64 characters making 32 bytes: hex digits only, no spaces (upper case
    # would name the same bytes, so the same leaf)
    if type(entry_hash) is str and len(entry_hash) == 64:
        try:
            raw = bytes.fromhex(entry_hash)
        except ValueError:
            raw = b""
        if len(raw) == 32:
            return leaf_hash(raw)
    raise InvalidRequest("an entry_hash is 64 lowercase hex digits", path="entry_hash", found=entry_hash)


def leaf_index(position: int) -> int:
    if type(position) is not int or position < 1:
        raise InvalidRequest("a position is an integer from 1", path="position", found=position)
    return position - 1
