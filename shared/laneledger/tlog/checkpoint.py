"""C2SP tlog-checkpoint (https://c2sp.org/tlog-checkpoint): the note text of
a signed tree head.

    <origin>\\n
    <tree size, decimal, no leading zeros>\\n
    <base64 of the 32-byte RFC 6962 root>\\n
    [<extension line>\\n ...]

Parsing is strict: exactly that, or ``MalformedMessage`` naming the line and
what is wrong with it (``reason``). A checkpoint we sign names the log by its
signer's key name, as the spec recommends (origin == key name).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from laneledger.contract.errors import InvalidRequest, MalformedMessage, NoteUnverified
from laneledger.tlog import merkle
from laneledger.tlog.merkle import HASH_SIZE
from laneledger.tlog.note import Note, NoteSigner, NoteVerifier, open_note, sign_note, split_note

MAX_SIZE = 2**63 - 1  # what a signed 64-bit integer holds (Go's tlog uses int64)


def _malformed(reason: str, line: int, message: str) -> MalformedMessage:
    return MalformedMessage(f"not a checkpoint: line {line}: {message}", reason=reason, line=line)


def _printable(text: str) -> bool:
    return bool(text) and not any(c < " " for c in text)


@dataclass(frozen=True)
class TreeHead:
    """A tree head: what a C2SP checkpoint note says (its origin, size, root
    and extension lines). Not named ``Checkpoint``: that is a saved agent
    state (``laneledger.Checkpoint``)."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not _printable(self.origin):
            raise InvalidRequest("the origin is a non-empty line", path="origin", found=self.origin)
        if type(self.size) is not int or not 0 <= self.size <= MAX_SIZE:
            raise InvalidRequest(f"the size is an integer in 0..{MAX_SIZE}", path="size", found=self.size)
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise InvalidRequest(f"the root is a {HASH_SIZE}-byte hash", path="root")
        for i, line in enumerate(self.extensions):
            if not isinstance(line, str) or not _printable(line):
                raise InvalidRequest("an extension is a non-empty line", path=f"extensions[{i}]")

    def body(self) -> str:
        """The note text."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return "".join(line + "\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> TreeHead:
        if not text.endswith("\n"):
            raise _malformed("checkpoint_lines", 0, "the text does not end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise _malformed("checkpoint_lines", len(lines), "fewer than three lines")
        origin, size, root, *extensions = lines
        if not _printable(origin):
            raise _malformed("checkpoint_origin", 1, "the origin is empty or holds a control character")
        if not size.isascii() or not size.isdigit() or (size != "0" and size.startswith("0")):
            raise _malformed("checkpoint_size", 2, "the size is not a decimal without leading zeros")
        if int(size) > MAX_SIZE:
            raise _malformed("checkpoint_size", 2, f"the size is above {MAX_SIZE}")
        try:
            raw = base64.b64decode(root, validate=True)
        except (binascii.Error, ValueError):
            raise _malformed("checkpoint_root", 3, "the root is not base64") from None
        if len(raw) != HASH_SIZE or base64.b64encode(raw).decode() != root:
            raise _malformed("checkpoint_root", 3, f"the root is not the base64 of {HASH_SIZE} bytes")
        for i, line in enumerate(extensions, start=4):
            if not _printable(line):
                raise _malformed("checkpoint_extension", i, "an extension line is empty")
        return cls(origin, int(size), raw, tuple(extensions))

    @classmethod
    def of_note(cls, signed: str | bytes) -> TreeHead:
        """The checkpoint a signed note carries, its signatures NOT checked
        (``open_checkpoint`` checks them): for what a reader only routes or
        compares, such as a tree size to ask a proof for."""
        return cls.parse(split_note(signed)[0])


def sign_checkpoint(checkpoint: TreeHead, signer: NoteSigner) -> str:
    """The checkpoint as a signed note, signed by the log's key, whose name
    must be the checkpoint's origin."""
    if signer.name != checkpoint.origin:
        raise InvalidRequest(
            "the log's key name is the checkpoint's origin",
            path="origin",
            found=checkpoint.origin,
            expected=signer.name,
        )
    return sign_note(checkpoint.body(), [signer])


def _of_origin(text: str, origin: str) -> TreeHead:
    """The checkpoint a note's text is, refused when it is another log's."""
    checkpoint = TreeHead.parse(text)
    if checkpoint.origin != origin:
        raise InvalidRequest(
            "the checkpoint is another log's", path="origin", found=checkpoint.origin, expected=origin
        )
    return checkpoint


def open_checkpoint(
    signed: str | bytes, verifiers: Iterable[NoteVerifier], *, origin: str
) -> tuple[TreeHead, Note]:
    """Open a signed checkpoint of the log named ``origin``: the note's rules
    (``open_note``), then the body's; a checkpoint of another log is
    ``invalid_request`` (``path: "origin"``)."""
    note = open_note(signed, verifiers)
    checkpoint = _of_origin(note.text, origin)
    return checkpoint, note


def open_cosigned(
    signed: str | bytes,
    log: NoteVerifier,
    *,
    origin: str,
    witnesses: Sequence[NoteVerifier] = (),
    quorum: int = 0,
) -> tuple[TreeHead, tuple[str, ...]]:
    """Open a checkpoint the log itself must have signed (however many
    witnesses did), cosigned by at least ``quorum`` of ``witnesses``; returns
    it and the names of the witnesses whose cosignatures verified."""
    note = open_note(signed, [log, *witnesses])
    signed_by = {(s.name, s.key_id) for s in note.verified}
    if (log.name, log.key_id) not in signed_by:
        raise NoteUnverified(
            "the log did not sign the checkpoint",
            reason=NoteUnverified.reason,
            signers=sorted(n for n, _ in signed_by),
        )
    cosigned = tuple(w.name for w in witnesses if (w.name, w.key_id) in signed_by)
    if len(cosigned) < quorum:
        raise NoteUnverified(
            f"{len(cosigned)} of the {quorum} witness cosignatures required",
            reason=NoteUnverified.reason,
            signers=list(cosigned),
            quorum=quorum,
        )
    checkpoint = _of_origin(note.text, origin)
    return checkpoint, cosigned


def verify_extension(
    old_signed: str | bytes,
    new_signed: str | bytes,
    proof: Sequence[bytes],
    log: NoteVerifier,
    *,
    origin: str,
    witnesses: Sequence[NoteVerifier] = (),
    quorum: int = 0,
) -> tuple[TreeHead, TreeHead, tuple[str, ...]]:
    """Check that the log signed both checkpoints (the newer one cosigned by
    ``quorum`` of ``witnesses``) and that the newer tree extends the older
    one (RFC 9162 consistency ``proof``): a tree that shrank, or one that
    differs in any leaf the older one holds, is ``ProofInvalid``. Returns
    both checkpoints, older first, and the witnesses that cosigned the newer."""
    old, _ = open_cosigned(old_signed, log, origin=origin)
    new, cosigned = open_cosigned(new_signed, log, origin=origin, witnesses=witnesses, quorum=quorum)
    merkle.verify_consistency(old.size, new.size, old.root, new.root, proof)
    return old, new, cosigned
