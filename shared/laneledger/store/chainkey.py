"""Which key a sequencer hashes chains with, told by a fingerprint on each
transaction log message (spec/replication.md, "The lease", "Same keys").

The chain HMAC key (``--hmac-key-file``) changes every entry hash, and it is
on no stream: a standby with another key (or none) would, once active,
append chains that ``laneledger verify`` rejects. So every part a sequencer
appends to LEDGER_TXLOG carries the header ``Ledger-Chain-Key``: the
fingerprint of its chain-hashing configuration, never the key itself. A
sequencer reading the log (at start, and a standby following it) refuses a
message whose fingerprint differs from its own with ``ChainKeyDiffers``; it
does not start, or a standby ends instead of becoming active. Messages
without the header (written before it existed) are not checked.
"""

from __future__ import annotations

import hashlib

from laneledger.contract.errors import IntegrityError

CHAIN_KEY_HEADER = "Ledger-Chain-Key"
NO_KEY = "none"  # plain SHA-256 chains
_LABEL = b"laneledger chain HMAC key fingerprint v1\x00"


def chain_key_fingerprint(key: bytes | None) -> str:
    """``none`` without a key; else ``sha256:<hex>`` of a fixed label and
    the key (an empty key is still a key: the chain is then HMAC'd)."""
    if key is None:
        return NO_KEY
    return "sha256:" + hashlib.sha256(_LABEL + key).hexdigest()


def _described(fingerprint: str) -> str:
    if fingerprint == NO_KEY:
        return "no HMAC key (plain SHA-256 chains)"
    return f"an HMAC key with fingerprint {fingerprint[:23]}…"


class ChainKeyDiffers(IntegrityError):
    """The transaction log was written by a sequencer that hashes chains with
    another HMAC key (or with none, or this one has none). ``details``:
    ``kind`` (``chain_key_differs``), ``setting`` (the option that must
    match), ``this_sequencer`` and ``log_writer`` (the two fingerprints,
    never a key), ``txlog_seq`` (the message where it was found)."""


def chain_key_stamp(fingerprint: str | None) -> dict[str, str]:
    """The header a sequencer stamps on what it writes to the log (none without a key)."""
    return {CHAIN_KEY_HEADER: fingerprint} if fingerprint is not None else {}


def check_chain_key(mine: str, found: str | None, *, txlog_seq: int) -> None:
    """Refuse a log message stamped by another chain-hashing configuration."""
    if found is None or found == mine:
        return
    raise ChainKeyDiffers(
        f"this sequencer hashes chains with {_described(mine)}, the sequencer that wrote the "
        f"transaction log with {_described(found)}: every sequencer on one log needs the same "
        "--hmac-key-file (LANELEDGER_HMAC_KEY_FILE); not starting or taking over",
        kind="chain_key_differs",
        setting="--hmac-key-file",
        this_sequencer=mine,
        log_writer=found,
        txlog_seq=txlog_seq,
    )
