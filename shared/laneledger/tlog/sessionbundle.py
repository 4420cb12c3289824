"""Session bundles: every event of one session with its inclusion proof
under one signed checkpoint, checked offline with the log's public key (and
its witnesses') alone (spec/tlog.md, "Session bundles").

A bundle is a JSON object::

    {"format": "laneledger-session-bundle/v1", "tenant": T, "session_id": S,
     "checkpoint": "<the signed note, verbatim>",
     "events": [{"index": i, "event": "<base64 of the committed bytes>",
                 "proof": ["<base64 hash>", ...]}, ...]}

Each entry is exactly a C2SP tlog-proof (``bundle.Bundle``: index, the
event as ``extra``, the audit path) whose checkpoint is the bundle's, so
``verify_session_bundle`` checks each with ``verify_bundle``. Beyond that,
the events must be the named session's and tenant's, in ascending
positions, and each lane's chain must run from seq 1 without a gap: an
event left out of the middle of a lane is caught. (What comes after the
checkpoint's tree is not covered: a later checkpoint proves more.)
"""

from __future__ import annotations

import base64
import binascii
import sqlite3
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.contract.chain import LaneChains
from laneledger.contract.errors import InvalidRequest, LedgerError, MalformedMessage, ProofInvalid
from laneledger.tlog import store
from laneledger.tlog.bundle import Bundle, Verified, check_tree, verify_bundle
from laneledger.tlog.checkpoint import TreeHead
from laneledger.tlog.leaves import leaf_index
from laneledger.tlog.note import NoteVerifier

FORMAT = "laneledger-session-bundle/v1"
PAGE_EVENTS = 1000  # events read and encoded at a time
PAGE_BYTES = 1 << 20  # …and about this many bytes of entries


class _Entry(msgspec.Struct, forbid_unknown_fields=True):
    index: int
    event: str
    proof: list[str]


class _Head(msgspec.Struct):
    format: str
    tenant: str
    session_id: str
    checkpoint: str


class _Document(_Head, forbid_unknown_fields=True):
    events: list[_Entry]


@dataclass(frozen=True)
class SessionBundle:
    tenant: str
    session_id: str
    checkpoint: str  # the signed note, verbatim
    events: tuple[Bundle, ...]

    def format(self) -> bytes:
        return msgspec.json.encode(
            _Document(
                FORMAT,
                self.tenant,
                self.session_id,
                self.checkpoint,
                [
                    _Entry(
                        b.index,
                        base64.b64encode(b.extra or b"").decode(),
                        [base64.b64encode(h).decode() for h in b.proof],
                    )
                    for b in self.events
                ],
            )
        )

    @classmethod
    def parse(cls, data: bytes | str) -> SessionBundle:
        try:
            doc = msgspec.json.decode(data, type=_Document)
        except msgspec.ValidationError as exc:
            raise MalformedMessage(f"not a session bundle: {exc}", reason="session_bundle") from None
        except msgspec.DecodeError as exc:
            raise MalformedMessage(f"not a session bundle: {exc}", reason="session_bundle") from None
        if doc.format != FORMAT:
            raise MalformedMessage(
                f"not a session bundle: format is {doc.format!r}, not {FORMAT}", reason="session_bundle"
            )
        events = []
        for i, entry in enumerate(doc.events):
            try:
                extra = base64.b64decode(entry.event, validate=True)
                proof = tuple(base64.b64decode(h, validate=True) for h in entry.proof)
            except (binascii.Error, ValueError):
                raise MalformedMessage(
                    f"not a session bundle: events[{i}] holds text that is not base64",
                    reason="session_bundle",
                    path=f"events[{i}]",
                ) from None
            events.append(Bundle(entry.index, proof, doc.checkpoint, extra))
        return cls(doc.tenant, doc.session_id, doc.checkpoint, tuple(events))


def make_session_bundle(
    conn: sqlite3.Connection, tenant: str, session_id: str, signed_checkpoint: str
) -> SessionBundle:
    """The bundle of every event of the tenant's session under a checkpoint
    of this ledger's tree, from a ledger file (in memory: for a big session
    write ``session_bundle_chunks`` out instead)."""
    return SessionBundle.parse(
        b"".join(session_bundle_chunks(lambda: conn, tenant, session_id, signed_checkpoint))
    )


def session_bundle_chunks(
    connect: Callable[[], sqlite3.Connection],
    tenant: str,
    session_id: str,
    signed_checkpoint: str,
    *,
    page_events: int = PAGE_EVENTS,
    page_bytes: int = PAGE_BYTES,
) -> Generator[bytes, None, None]:
    """The bundle's JSON, a page of entries at a time (at most ``page_events``
    events, and about ``page_bytes``), so no reader holds a big session whole.
    The events are those of the session within the checkpoint's tree. The
    first chunk (the head and the first page) is read before anything is
    yielded: a checkpoint not of this tree, or a session with no event in it,
    raises before the first byte. Each page calls ``connect()`` anew, so the
    iterator may be advanced from any thread that has a connection."""
    checkpoint = TreeHead.of_note(signed_checkpoint)
    check_tree(connect(), checkpoint)
    entries, after = _entries(connect(), tenant, session_id, checkpoint.size, 0, page_events, page_bytes)
    if not entries:
        raise InvalidRequest(
            "the ledger has no events of this session", path="session_id", found=session_id, tenant=tenant
        )
    head = msgspec.json.encode(_Head(FORMAT, tenant, session_id, signed_checkpoint))
    yield head[:-1] + b',"events":[' + b",".join(entries)
    while True:
        entries, after = _entries(
            connect(), tenant, session_id, checkpoint.size, after, page_events, page_bytes
        )
        if not entries:
            break
        yield b"," + b",".join(entries)
    yield b"]}"


def _entries(
    conn: sqlite3.Connection, tenant: str, session_id: str, size: int, after: int, limit: int, max_bytes: int
) -> tuple[list[bytes], int]:
    """Encoded entries of the session's events after position ``after`` in
    the tree of ``size``, and the last position read."""
    entries: list[bytes] = []
    used = 0
    rows = conn.execute(
        "SELECT position, body FROM events WHERE session_id = ? AND tenant = ?"
        " AND position > ? AND position <= ? ORDER BY position LIMIT ?",
        (session_id, tenant, after, size, limit),
    )
    with closing(rows):  # an unfinished statement would pin the connection's snapshot
        for position, body in rows:
            index = leaf_index(position)
            proof = store.inclusion_proof(conn, index, size)
            entry = msgspec.json.encode(
                _Entry(index, base64.b64encode(body).decode(), [base64.b64encode(h).decode() for h in proof])
            )
            entries.append(entry)
            used += len(entry)
            after = position
            if used >= max_bytes:
                break
    return entries, after


@dataclass(frozen=True)
class SessionVerified:
    events: int
    checkpoint_size: int
    witnesses: tuple[str, ...]


def verify_session_bundle(
    data: bytes | str | SessionBundle,
    log: NoteVerifier,
    *,
    origin: str,
    hmac_key: bytes | None = None,
    witnesses: Sequence[NoteVerifier] = (),
    quorum: int = 0,
) -> SessionVerified:
    """Check a session bundle offline; the first failure is raised with
    ``details.position`` naming the event (absent for the checkpoint)."""
    bundle = data if isinstance(data, SessionBundle) else SessionBundle.parse(data)
    if not bundle.events:
        raise InvalidRequest("the session bundle has no events", path="events")
    chains = LaneChains(key=hmac_key)
    last_index = -1
    checked: Verified | None = None
    for entry in bundle.events:
        position = entry.index + 1
        try:
            if entry.index <= last_index:
                raise ProofInvalid(
                    "the bundle's events are not in ascending positions",
                    reason=ProofInvalid.reason,
                    kind="bundle",
                    field="index",
                )
            checked = verify_bundle(
                entry, log, origin=origin, hmac_key=hmac_key, witnesses=witnesses, quorum=quorum
            )
            event: dict[str, Any] = checked.event or {}
            for name, want in (("tenant", bundle.tenant), ("session_id", bundle.session_id)):
                if event.get(name) != want:
                    raise ProofInvalid(
                        f"an event of another {name} is in the bundle",
                        reason=ProofInvalid.reason,
                        kind="event",
                        field=name,
                        expected=want,
                        found=event.get(name),
                    )
            chains.check(event, position=position, lane=event.get("lane_id"), tenant=bundle.tenant)
        except LedgerError as err:
            err.details.setdefault("position", position)
            raise
        last_index = entry.index
    assert checked is not None
    return SessionVerified(len(bundle.events), checked.checkpoint.size, checked.witnesses)
