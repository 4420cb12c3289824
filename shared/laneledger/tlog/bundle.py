"""Offline bundles: one event's proof of inclusion that a reader checks with
nothing but the log's public key (and its witnesses'), in the C2SP
tlog-proof format (https://c2sp.org/tlog-proof)::

    c2sp.org/tlog-proof@v1
    [extra <base64 of the event's committed JSON bytes>]
    index <leaf index = position - 1>
    <base64 hash, one per line: the audit path from the leaf's sibling up>

    <the signed checkpoint, verbatim, cosignatures included>

The ``extra`` line, when present, carries the committed event (its bytes as
the ledger stores and streams them). It is not signed, so it is never
trusted: ``verify_bundle`` recomputes its ``entry_hash`` (``canonical.md``;
with the ledger's HMAC key when it is keyed), checks its ``position``
against the index, and only then proves that entry hash is the leaf.
"""

from __future__ import annotations

import base64
import binascii
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.contract.chain import entry_hash
from laneledger.contract.errors import InvalidRequest, MalformedMessage, ProofInvalid
from laneledger.tlog import merkle, store
from laneledger.tlog.checkpoint import TreeHead, open_cosigned
from laneledger.tlog.leaves import entry_leaf, leaf_index
from laneledger.tlog.merkle import HASH_SIZE
from laneledger.tlog.note import NoteVerifier, split_note

HEADER = "c2sp.org/tlog-proof@v1"


def _malformed(line: int, message: str) -> MalformedMessage:
    return MalformedMessage(f"not a tlog-proof: line {line}: {message}", reason="tlog_proof", line=line)


def _decimal(text: str) -> int | None:
    if text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0")):
        return int(text)
    return None


def _b64(text: str) -> bytes | None:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode() == text else None


@dataclass(frozen=True)
class Bundle:
    index: int
    proof: tuple[bytes, ...]
    checkpoint: str  # the signed note, verbatim
    extra: bytes | None = None  # the event's committed JSON bytes, unauthenticated

    def format(self) -> str:
        lines = [HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode())
        lines.append(f"index {self.index}")
        lines += [base64.b64encode(h).decode() for h in self.proof]
        return "".join(line + "\n" for line in lines) + "\n" + self.checkpoint

    @classmethod
    def parse(cls, text: str) -> Bundle:
        head, blank, checkpoint = text.partition("\n\n")
        if not blank:
            raise _malformed(0, "no empty line before the checkpoint")
        lines = head.split("\n")
        if lines[0] != HEADER:
            raise _malformed(1, f"the first line is not {HEADER}")
        at = 1
        extra = None
        if at < len(lines) and lines[at].startswith("extra "):
            extra = _b64(lines[at][len("extra ") :])
            if extra is None:
                raise _malformed(at + 1, "the extra data is not base64")
            at += 1
        if at >= len(lines) or not lines[at].startswith("index "):
            raise _malformed(at + 1, "expected 'index <n>'")
        index = _decimal(lines[at][len("index ") :])
        if index is None:
            raise _malformed(at + 1, "the index is not a decimal without leading zeros")
        proof = []
        for number, line in enumerate(lines[at + 1 :], start=at + 2):
            raw = _b64(line)
            if raw is None or len(raw) != HASH_SIZE:
                raise _malformed(number, f"a proof line is the base64 of a {HASH_SIZE}-byte hash")
            proof.append(raw)
        split_note(checkpoint)  # the rest is a signed note (checked again, signatures too, on verify)
        return cls(index, tuple(proof), checkpoint, extra)


def make_bundle(
    conn: sqlite3.Connection, position: int, signed_checkpoint: str, *, event: bytes | None = None
) -> Bundle:
    """The bundle for the event at ``position`` under a checkpoint the log
    signed (its tree must cover the position), from the stored tree;
    ``event``: its committed bytes, to carry in ``extra``."""
    index = leaf_index(position)
    checkpoint = TreeHead.of_note(signed_checkpoint)
    if index >= checkpoint.size:
        raise InvalidRequest(
            "the checkpoint's tree does not cover the position",
            path="position",
            found=position,
            size=checkpoint.size,
        )
    check_tree(conn, checkpoint)
    proof = store.inclusion_proof(conn, index, checkpoint.size)
    return Bundle(index, tuple(proof), signed_checkpoint, event)


def check_tree(conn: sqlite3.Connection, checkpoint: TreeHead) -> None:
    """The checkpoint must be of the stored tree: its root at its size."""
    if store.root(conn, checkpoint.size) != checkpoint.root:
        raise ProofInvalid(
            "the checkpoint is not of this tree", reason=ProofInvalid.reason, kind="checkpoint"
        )


@dataclass(frozen=True)
class Verified:
    checkpoint: TreeHead
    entry_hash: str
    event: dict[str, Any] | None  # the event of ``extra``, checked
    witnesses: tuple[str, ...]  # names of the witnesses whose cosignatures verified


def _event_of(extra: bytes, index: int, hmac_key: bytes | None) -> dict[str, Any]:
    try:
        record = msgspec.json.decode(extra)
    except msgspec.DecodeError as exc:
        raise MalformedMessage(f"the bundle's event is not JSON: {exc}", reason="tlog_proof_event") from None
    if not isinstance(record, dict):
        raise MalformedMessage("the bundle's event is not a JSON object", reason="tlog_proof_event")
    if record.get("position") != index + 1:
        raise ProofInvalid(
            "the event is at another position than the bundle's index",
            reason=ProofInvalid.reason,
            kind="event",
            field="position",
            expected=index + 1,
            found=record.get("position"),
        )
    recomputed = entry_hash(record, key=hmac_key)
    if recomputed != record.get("entry_hash"):
        raise ProofInvalid(
            "the event's content does not hash to its entry_hash",
            reason=ProofInvalid.reason,
            kind="event",
            field="entry_hash",
            expected=recomputed,
            found=record.get("entry_hash"),
        )
    return record


def verify_bundle(
    bundle: Bundle | str,
    log: NoteVerifier,
    *,
    origin: str,
    entry_hash_hex: str | None = None,
    hmac_key: bytes | None = None,
    witnesses: Sequence[NoteVerifier] = (),
    quorum: int = 0,
) -> Verified:
    """Check a bundle offline: the log's signature on its checkpoint (of
    ``origin``), at least ``quorum`` of ``witnesses``' cosignatures, the
    event in ``extra`` if any (and that it is ``entry_hash_hex`` when that is
    given too), and the inclusion proof of its entry hash."""
    if isinstance(bundle, str):
        bundle = Bundle.parse(bundle)
    checkpoint, cosigned = open_cosigned(
        bundle.checkpoint, log, origin=origin, witnesses=witnesses, quorum=quorum
    )
    event = _event_of(bundle.extra, bundle.index, hmac_key) if bundle.extra is not None else None
    if event is not None:
        if entry_hash_hex is not None and entry_hash_hex != event["entry_hash"]:
            raise ProofInvalid(
                "the bundle is of another event",
                reason=ProofInvalid.reason,
                kind="event",
                field="entry_hash",
                expected=entry_hash_hex,
                found=event["entry_hash"],
            )
        entry_hash_hex = event["entry_hash"]
    if entry_hash_hex is None:
        raise InvalidRequest("a bundle without its event needs the entry_hash it proves", path="entry_hash")
    merkle.verify_inclusion(
        bundle.index, checkpoint.size, entry_leaf(entry_hash_hex), bundle.proof, checkpoint.root
    )
    return Verified(checkpoint, entry_hash_hex, event, cosigned)
