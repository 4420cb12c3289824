"""C2SP signed notes (https://c2sp.org/signed-note) with Ed25519 keys.

A signed note is a text ending in a newline, a blank line, and one or more
lines ``— <key name> base64(key ID || signature)``. The key ID is the first
four bytes, big-endian, of ``SHA-256(name || 0x0A || type || public key)``;
type 0x01 is Ed25519 over the note text (this module), 0x04 a timestamped
witness cosignature (``laneledger.tlog.cosignature``).

Keys travel as text, as golang.org/x/mod/sumdb/note writes them: a verifier
key ``<name>+<8 hex digits of the key ID>+base64(type || public key)`` and a
signer key ``PRIVATE+KEY+<name>+<key ID>+base64(type || 32-byte seed)``.

Opening a note follows the spec: signatures by keys the caller does not
trust are kept aside, unchecked; a trusted key's signature that fails to
verify rejects the whole note (``NoteSignatureInvalid``); a note that no
trusted key signed is rejected (``NoteUnverified``). Text that is not a
signed note is ``MalformedMessage`` with a ``reason``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidSignature as _BadSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from laneledger.contract.errors import InvalidRequest, MalformedMessage, NoteSignatureInvalid, NoteUnverified

ED25519 = 0x01
SIGNATURE_PREFIX = "— "  # em dash, space
# The spec asks verifiers to accept at least 16 signatures; more than this
# many is refused rather than checked (Go's note package uses the same cap).
MAX_SIGNATURES = 100
_PRIVATE = "PRIVATE+KEY+"


def valid_name(name: str) -> bool:
    """Non-empty, with no Unicode space and no ``+``."""
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def check_name(name: str) -> None:
    if not valid_name(name):
        raise InvalidRequest("a key name is non-empty, without spaces or '+'", path="name", found=name)


def key_id(name: str, signature_type: int, public_key: bytes) -> int:
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([signature_type]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def raw_seed(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def bad_key_text(text: str, why: str) -> InvalidRequest:
    shown = text if not text.startswith(_PRIVATE) else _PRIVATE + "…"  # never echo a private key
    return InvalidRequest(f"not a note key: {why}", path="key", found=shown)


def parse_key_text(text: str, *, private: bool) -> tuple[str, int, int, bytes]:
    """``(name, key ID, signature type, key bytes)`` of a verifier key (or,
    with ``private``, a signer key) in text form; the key ID is checked
    against the key only by the caller, who knows what the key bytes are."""
    if private:
        if not text.startswith(_PRIVATE):
            raise bad_key_text(text, "a signer key starts with PRIVATE+KEY+")
        rest = text[len(_PRIVATE) :]
    else:
        rest = text
    parts = rest.split("+", 2)  # base64 may hold "+"; a name never does
    if len(parts) != 3:
        raise bad_key_text(text, "expected <name>+<key id>+<base64 key>")
    name, hex_id, b64 = parts
    if not valid_name(name):
        raise bad_key_text(text, "the name is empty or holds a space or '+'")
    if len(hex_id) != 8 or any(c not in "0123456789abcdefABCDEF" for c in hex_id):
        raise bad_key_text(text, "the key id is not 8 hex digits")
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise bad_key_text(text, "the key is not base64") from None
    if len(data) < 2:
        raise bad_key_text(text, "the key is empty")
    return name, int(hex_id, 16), data[0], data[1:]


def format_key_text(name: str, signature_type: int, key: bytes, key_id_: int, *, private: bool) -> str:
    body = f"{name}+{key_id_:08x}+{base64.b64encode(bytes([signature_type]) + key).decode()}"
    return _PRIVATE + body if private else body


def decode_key_text(text: str, *, signature_type: int, private: bool) -> tuple[str, int, bytes]:
    """``(name, claimed key ID, 32 key bytes)`` of an Ed25519 key text of
    ``signature_type``; the caller checks the ID (``check_key_id``) once it
    has the public key."""
    name, claimed, kind, key = parse_key_text(text, private=private)
    if kind != signature_type:
        raise bad_key_text(text, f"signature type {kind:#04x}, not {signature_type:#04x}")
    if len(key) != 32:
        raise bad_key_text(text, f"an Ed25519 key is 32 bytes, not {len(key)}")
    return name, claimed, key


def check_key_id(text: str, claimed: int, actual: int) -> None:
    if claimed != actual:
        raise bad_key_text(text, "the key id does not match the name and key")


class NoteVerifier(Protocol):
    """A key that checks signatures on notes: its name, key ID, and whether
    ``signature`` (the bytes after the key ID) signs ``text``."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> int: ...

    def verify(self, text: bytes, signature: bytes) -> bool: ...


class NoteSigner(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> int: ...

    def sign(self, text: bytes) -> bytes: ...


@dataclass(frozen=True)
class Ed25519Verifier:
    """An Ed25519 (type 0x01) note verifier."""

    name: str
    public_key: Ed25519PublicKey

    def __post_init__(self) -> None:
        check_name(self.name)

    @property
    def key_id(self) -> int:
        return key_id(self.name, ED25519, raw_public(self.public_key))

    def verify(self, text: bytes, signature: bytes) -> bool:
        try:
            self.public_key.verify(signature, text)
        except _BadSignature:
            return False
        return True

    @classmethod
    def from_text(cls, text: str) -> Ed25519Verifier:
        name, claimed, key = decode_key_text(text, signature_type=ED25519, private=False)
        verifier = cls(name, Ed25519PublicKey.from_public_bytes(key))
        check_key_id(text, claimed, verifier.key_id)
        return verifier

    def to_text(self) -> str:
        return format_key_text(self.name, ED25519, raw_public(self.public_key), self.key_id, private=False)


@dataclass(frozen=True)
class Signer:
    """An Ed25519 (type 0x01) note signer."""

    name: str
    private_key: Ed25519PrivateKey = field(repr=False)

    def __post_init__(self) -> None:
        check_name(self.name)

    @classmethod
    def generate(cls, name: str) -> Signer:
        return cls(name, Ed25519PrivateKey.generate())

    @property
    def key_id(self) -> int:
        return self.verifier().key_id

    def verifier(self) -> Ed25519Verifier:
        return Ed25519Verifier(self.name, self.private_key.public_key())

    def sign(self, text: bytes) -> bytes:
        return self.private_key.sign(text)

    @classmethod
    def from_text(cls, text: str) -> Signer:
        name, claimed, seed = decode_key_text(text, signature_type=ED25519, private=True)
        signer = cls(name, Ed25519PrivateKey.from_private_bytes(seed))
        check_key_id(text, claimed, signer.key_id)
        return signer

    def to_text(self) -> str:
        return format_key_text(self.name, ED25519, raw_seed(self.private_key), self.key_id, private=True)

    @classmethod
    def from_file(cls, path: str | Path) -> Signer:
        return cls.from_text(read_key_file(path))


def read_key_file(path: str | Path) -> str:
    """The key text a file holds (surrounding whitespace ignored), as
    ``laneledger tlog keygen`` writes it."""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot read the key file: {exc}", path="key_file", file=str(path)) from None


@dataclass(frozen=True)
class Signature:
    """One signature line: the key's name and ID, and the signature bytes
    after the ID."""

    name: str
    key_id: int
    signature: bytes

    def line(self) -> str:
        encoded = base64.b64encode(self.key_id.to_bytes(4, "big") + self.signature).decode()
        return f"{SIGNATURE_PREFIX}{self.name} {encoded}\n"


@dataclass(frozen=True)
class Note:
    """An opened note: its text (with its final newline), the signatures
    trusted keys verified, and those by keys the caller did not name."""

    text: str
    verified: tuple[Signature, ...]
    unverified: tuple[Signature, ...]

    def signed(self) -> str:
        """The note again, every signature kept."""
        return self.text + "\n" + "".join(s.line() for s in (*self.verified, *self.unverified))


def _malformed(reason: str, message: str, **details: object) -> MalformedMessage:
    return MalformedMessage(f"not a signed note: {message}", reason=reason, **details)


def _check_text(text: str) -> None:
    for i, c in enumerate(text):
        if c < " " and c != "\n":
            raise _malformed("control_character", f"control character {ord(c):#04x}", offset=i)


def _decode(message: str | bytes) -> str:
    if isinstance(message, str):
        return message
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed("not_utf8", "not UTF-8", offset=exc.start) from None


def parse_signature_line(line: str) -> Signature:
    if not line.startswith(SIGNATURE_PREFIX):
        raise _malformed("signature_line", "a signature line starts with an em dash and a space", line=line)
    name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
    if not space or not valid_name(name) or not encoded:
        raise _malformed("signature_line", "expected '— <name> <base64>'", line=line)
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _malformed("signature_line", "the signature is not base64", line=line) from None
    if len(raw) < 5:
        raise _malformed("signature_line", "a signature is a key id and at least one byte", line=line)
    return Signature(name, int.from_bytes(raw[:4], "big"), raw[4:])


def split_note(message: str | bytes) -> tuple[str, list[Signature]]:
    """The text and the signature lines of a signed note, nothing checked
    but the format."""
    signed = _decode(message)
    _check_text(signed)
    split = signed.rfind("\n\n")
    if split < 0:
        raise _malformed("no_signatures", "no blank line before the signatures")
    text, block = signed[: split + 1], signed[split + 2 :]
    if not block or not block.endswith("\n"):
        raise _malformed("no_signatures", "the signature block is empty or lacks its final newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise _malformed("too_many_signatures", f"more than {MAX_SIGNATURES} signatures", count=len(lines))
    return text, [parse_signature_line(line) for line in lines]


def _by_key(verifiers: Iterable[NoteVerifier]) -> dict[tuple[str, int], NoteVerifier]:
    known: dict[tuple[str, int], NoteVerifier] = {}
    for v in verifiers:
        if (v.name, v.key_id) in known:
            raise InvalidRequest(
                "two verifiers share a name and key id", path="verifiers", key=f"{v.name}+{v.key_id:08x}"
            )
        known[(v.name, v.key_id)] = v
    return known


def open_note(message: str | bytes, verifiers: Iterable[NoteVerifier]) -> Note:
    """Parse ``message`` and check each signature by a key in ``verifiers``
    (matched by name and key ID); see the module's docstring for the rules."""
    known = _by_key(verifiers)
    text, signatures = split_note(message)
    verified: dict[tuple[str, int], Signature] = {}
    unverified: dict[Signature, None] = {}
    for sig in signatures:
        verifier = known.get((sig.name, sig.key_id))
        if verifier is None:
            unverified[sig] = None  # an identical repeat is dropped
            continue
        if (sig.name, sig.key_id) in verified:
            continue  # a second signature by one key: the first one counts
        if not verifier.verify(text.encode(), sig.signature):
            key = f"{sig.name}+{sig.key_id:08x}"
            raise NoteSignatureInvalid(
                f"the signature of {key} does not verify", reason=NoteSignatureInvalid.reason, key=key
            )
        verified[(sig.name, sig.key_id)] = sig
    if not verified:
        signers = [f"{s.name}+{s.key_id:08x}" for s in unverified]
        raise NoteUnverified("no trusted key signed the note", reason=NoteUnverified.reason, signers=signers)
    return Note(text, tuple(verified.values()), tuple(unverified))


def sign_note(text: str, signers: Sequence[NoteSigner], *, keep: Sequence[Signature] = ()) -> str:
    """``text`` signed by each of ``signers``, after the signatures in
    ``keep`` (one of ``keep`` by a key that signs again is replaced)."""
    if not text.endswith("\n"):
        raise InvalidRequest("a note's text ends with a newline", path="text")
    _check_text(text)
    fresh = [Signature(s.name, s.key_id, s.sign(text.encode())) for s in signers]
    again = {(s.name, s.key_id) for s in fresh}
    kept = [s for s in keep if (s.name, s.key_id) not in again]
    return text + "\n" + "".join(s.line() for s in (*kept, *fresh))
