"""Producer signatures: ed25519 over an event's canonical bytes
(normative text: ``spec/object-model.md``, "Signed producers").

An actor registered with a public key (``EnsureActor.public_key``) signs every
event it is the ``actor_id`` of. The signed bytes are the RFC 8785 bytes of
the *proposed* event without its ``signature`` field — exactly what the
producer sends, before the ledger adds anything — so a producer can sign
before it knows its seq or position, and anyone holding the committed event
can drop the ledger-owned fields and check the signature again.

Keys and signatures travel as lowercase hex: a public key is 64 hex digits
(32 bytes), a signature 128 (64 bytes). ed25519 signatures are deterministic,
so re-signing the same event gives the same bytes and a resent append keeps
its digest.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature as _BadSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from laneledger.contract.canonical import canonicalize
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import LEDGER_OWNED_FIELDS

__all__ = [
    "Ed25519PrivateKey",
    "Ed25519PublicKey",
    "check_signature",
    "generate_private_key",
    "load_private_key",
    "load_public_key",
    "public_key_hex",
    "sign_event",
    "signed_bytes",
]

SIGNATURE_FIELD = "signature"


def signed_bytes(event: Mapping[str, Any]) -> bytes:
    """The bytes a producer signs: the canonical form of the proposed event
    without ``signature``. A committed event also drops its ledger-owned
    fields, which the producer never saw."""
    return canonicalize(
        {k: v for k, v in event.items() if k != SIGNATURE_FIELD and k not in LEDGER_OWNED_FIELDS}
    )


def sign_event(event: Mapping[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """A copy of the proposed ``event`` with its ``signature`` set. A dict is
    copied as its own kind (``copy.copy``), attributes included: the SDK's
    ``PreparedEvent`` keeps the blob bytes it carries. The signed bytes are
    the items' alone."""
    signed: dict[str, Any] = copy.copy(event) if isinstance(event, dict) else dict(event)
    signed.pop(SIGNATURE_FIELD, None)
    signed[SIGNATURE_FIELD] = private_key.sign(signed_bytes(signed)).hex()
    return signed


def check_signature(event: Mapping[str, Any], public_key: Ed25519PublicKey) -> bool:
    """Whether ``event["signature"]`` is ``public_key``'s signature over
    :func:`signed_bytes` of the event. False when absent or not hex."""
    signature = event.get(SIGNATURE_FIELD)
    if not isinstance(signature, str):
        return False
    try:
        public_key.verify(bytes.fromhex(signature), signed_bytes(event))
    except (_BadSignature, ValueError):
        return False
    return True


def generate_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def public_key_hex(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The 64-hex-digit form ``EnsureActor.public_key`` takes."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def load_public_key(text: str) -> Ed25519PublicKey:
    """A public key from its 64 hex digits; ``InvalidRequest`` otherwise."""
    try:
        raw = bytes.fromhex(text)
        if len(raw) != 32:
            raise ValueError(f"{len(raw)} bytes, not 32")
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError as exc:
        raise InvalidRequest(
            f"not an ed25519 public key in hex: {exc}", path="$.public_key", found=text
        ) from None


def load_private_key(source: str | bytes | Path) -> Ed25519PrivateKey:
    """A private key from a PEM (PKCS#8) file's path or bytes, or from the 64
    hex digits of its raw 32-byte seed."""
    if isinstance(source, Path):
        source = source.read_bytes()
    data = source.encode() if isinstance(source, str) else source
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_private_key(data, password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise ValueError(f"a {type(key).__name__}, not an ed25519 key")
            return key
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(data.decode().strip()))
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            f"not an ed25519 private key (PEM or 64 hex digits): {exc}", path="private_key"
        ) from None
