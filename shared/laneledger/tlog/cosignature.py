"""C2SP tlog-cosignature/v1 (https://c2sp.org/tlog-cosignature), Ed25519:
a witness's signature line on a checkpoint.

The line is an ordinary note signature whose key ID uses signature type
0x04, ``SHA-256(name || 0x0A || 0x04 || public key)[:4]``, and whose bytes
after the key ID are a ``timestamped_signature``: the time of signing as a
big-endian u64 (POSIX seconds, at most 2^63 - 1) and the 64-byte Ed25519
signature of::

    cosignature/v1\\n
    time <timestamp>\\n
    <the whole checkpoint text, extension lines included>

Keys travel as note key texts with type 0x04 (``laneledger.tlog.note``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature as _BadSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from laneledger.tlog.note import (
    Note,
    check_key_id,
    check_name,
    decode_key_text,
    format_key_text,
    key_id,
    raw_public,
    raw_seed,
)

COSIGNATURE = 0x04
MAX_TIMESTAMP = 2**63 - 1
_TIMESTAMPED_SIZE = 8 + 64


def signed_message(timestamp: int, checkpoint_text: str) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n".encode() + checkpoint_text.encode()


def unix_seconds() -> int:
    return int(time.time())


def signed_at(signature: bytes) -> int:
    """When a cosignature says it was made: the big-endian u64 before the
    Ed25519 signature (POSIX seconds). Meaningful once the signature verified."""
    return int.from_bytes(signature[:8], "big")


@dataclass(frozen=True)
class CosignatureVerifier:
    """Checks one witness's cosignatures (a ``NoteVerifier``)."""

    name: str
    public_key: Ed25519PublicKey

    def __post_init__(self) -> None:
        check_name(self.name)

    @property
    def key_id(self) -> int:
        return key_id(self.name, COSIGNATURE, raw_public(self.public_key))

    def verify(self, text: bytes, signature: bytes) -> bool:
        if len(signature) != _TIMESTAMPED_SIZE:
            return False
        timestamp = signed_at(signature)
        if timestamp > MAX_TIMESTAMP:
            return False
        try:
            self.public_key.verify(signature[8:], signed_message(timestamp, text.decode()))
        except _BadSignature:
            return False
        return True

    def timestamp(self, note: Note) -> int | None:
        """When this witness cosigned ``note`` (among its verified
        signatures), or None."""
        for sig in note.verified:
            if (sig.name, sig.key_id) == (self.name, self.key_id):
                return signed_at(sig.signature)
        return None

    @classmethod
    def from_text(cls, text: str) -> CosignatureVerifier:
        name, claimed, key = decode_key_text(text, signature_type=COSIGNATURE, private=False)
        verifier = cls(name, Ed25519PublicKey.from_public_bytes(key))
        check_key_id(text, claimed, verifier.key_id)
        return verifier

    def to_text(self) -> str:
        return format_key_text(
            self.name, COSIGNATURE, raw_public(self.public_key), self.key_id, private=False
        )


@dataclass(frozen=True)
class Cosigner:
    """A witness's signing key (a ``NoteSigner``); ``clock`` gives POSIX
    seconds, passed in so tests can fix time."""

    name: str
    private_key: Ed25519PrivateKey = field(repr=False)
    clock: Callable[[], int] = field(default=unix_seconds, compare=False)

    def __post_init__(self) -> None:
        check_name(self.name)

    @classmethod
    def generate(cls, name: str, clock: Callable[[], int] = unix_seconds) -> Cosigner:
        return cls(name, Ed25519PrivateKey.generate(), clock)

    @property
    def key_id(self) -> int:
        return self.verifier().key_id

    def verifier(self) -> CosignatureVerifier:
        return CosignatureVerifier(self.name, self.private_key.public_key())

    def sign(self, text: bytes) -> bytes:
        timestamp = self.clock()
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_TIMESTAMP:
            raise ValueError(f"the clock gave {timestamp!r}, not POSIX seconds in 0..2^63-1")
        signature = self.private_key.sign(signed_message(timestamp, text.decode()))
        return timestamp.to_bytes(8, "big") + signature

    @classmethod
    def from_text(cls, text: str, clock: Callable[[], int] = unix_seconds) -> Cosigner:
        name, claimed, seed = decode_key_text(text, signature_type=COSIGNATURE, private=True)
        cosigner = cls(name, Ed25519PrivateKey.from_private_bytes(seed), clock)
        check_key_id(text, claimed, cosigner.key_id)
        return cosigner

    def to_text(self) -> str:
        return format_key_text(self.name, COSIGNATURE, raw_seed(self.private_key), self.key_id, private=True)
