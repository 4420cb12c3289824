"""Whole-ledger verification over a SQLite ledger file (``laneledger verify --db``).

:func:`audit_ledger` opens a ledger database read-only, inside one read
transaction (so a running sequencer may keep writing: the audit sees one
consistent snapshot), streams every event in position order and checks, in
position order, stopping at the first fault:

1. positions are 1, 2, … N with no gap (``ChainFault`` ``broken_link``, field
   ``position``, reported at the missing position);
2. each stored body is a JSON object (``not_chained``, field ``body``);
3. per lane, the chain verifies exactly as :func:`laneledger.contract.chain.verify_chain`
   checks it — ``seq``/``prev_hash``/``entry_hash`` well-formed
   (``not_chained``), seqs dense from 1 and ``prev_hash`` the previous
   ``entry_hash`` (``broken_link``), the recomputed entry hash (SHA-256, or
   HMAC-SHA256 under ``hmac_key``) equal to the stored one
   (``content_tampered``);
4. the row's indexed columns (``position``, ``id``, ``lane_id``, ``seq``,
   ``append_id``) agree with the hashed body (``IntegrityError``, kind
   ``row_mismatch``);
5. what the event says about the rest of the ledger (``IntegrityError``):
   its actor exists (``unknown_actor``) in its tenant
   (``actor_tenant_mismatch``); a keyed actor's event carries a signature
   (``signature_missing``) that verifies (``signature_invalid``), an unkeyed
   actor's carries none (``signature_unexpected``); its ``causation_id``
   names an event (``causation_unknown``) at an earlier position
   (``causation_not_earlier``) of the same session
   (``causation_other_session``); with a ``blob_check``, every content
   reference of its payload is stored for its tenant (``blob_missing``) with
   those bytes (``blob_mismatch``). Actor keys against the identity
   conventions (``laneledger.audit.identity``): warnings, or errors under
   ``strict_actors``;
6. once an append's last event is read, its events are contiguous and match
   its stored receipt: positions, event ids, seqs, entry hashes, lane,
   ``committed_at`` and the append digest recomputed from the proposed part
   of the bodies (``IntegrityError``, kinds ``receipt_missing`` /
   ``receipt_mismatch``);
7. after the last event: every receipt has events (``receipt_without_events``),
   every lane row's ``last_seq``/``head_hash`` equals its last event
   (``lane_head_mismatch``, reported at that event's position) and every event
   belongs to a lane row (``unknown_lane``).

``spec/verify.md`` is the normative list of these fault kinds.

``ChainFault`` and ``IntegrityError`` details always hold ``kind`` and
``position`` (and ``lane_id``/``seq`` when the fault is in one lane); the
message starts with ``position N``.

Memory stays bounded: events are read in pages, and besides the per-lane tips
and one entry per actor seen, only the events of the current append (at most
1000) and a bounded set of already-checked blob references are held. It grows
with the number of lanes and actors, never with the number of events; a
causation link is looked up through the events table's unique id index.

:func:`check_stream` checks that LEDGER_EVENTS is an exact copy of the
ledger: stream sequence == position and message data byte-identical to the
stored body, for every event, and nothing more; on a live ledger it tells
the stream's normal lag (it catches up within a wait) from a fault.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from laneledger.audit.identity import identity_findings
from laneledger.audit.tree import TreeCheck, has_tree
from laneledger.contract.chain import GENESIS_HASH, LaneChains, append_digest
from laneledger.contract.contentref import refs_in
from laneledger.contract.errors import (
    ChainFault,
    IntegrityError,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
)
from laneledger.contract.model import LEDGER_OWNED_FIELDS, Actor, AppendCommitted, decoder
from laneledger.contract.signing import Ed25519PublicKey, check_signature, load_public_key
from laneledger.contract.strictjson import decode_json
from laneledger.store import open_ledger

__all__ = [
    "BlobCheck",
    "ExportAudit",
    "Finding",
    "LedgerAudit",
    "StreamCheck",
    "audit_ledger",
    "check_stream",
    "compare_with_stream",
    "decode_body",
    "export_ledger",
    "position_gap",
    "read_export",
    "stream_difference",
    "stream_message",
    "verify_export",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_PAGE = 2000
MAX_WARNINGS = 1000  # findings kept in full; the rest are only counted
STALL_S = 10.0  # a stream consumer answering but delivering nothing this long: stream_stalled
_T = TypeVar("_T")

# (tenant, "sha256:<hex>", size_bytes) -> None when that blob is stored with
# those bytes, else (fault kind, message); called from the audit's thread.
BlobCheck = Callable[[str, str, int], "tuple[str, str] | None"]


@dataclass(frozen=True)
class Finding:
    """A warning: a convention broken, not an integrity fault."""

    kind: str
    position: int
    message: str
    actor_id: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "position": self.position,
            "message": self.message,
            "actor_id": self.actor_id,
        }


@dataclass(frozen=True)
class LedgerAudit:
    """What a clean audit saw."""

    events: int
    lanes: int
    last_position: int
    # Every lane of the lanes table, by (tenant, lane id) -> the entry_hash of
    # its last event (GENESIS_HASH, 64 zeros, for an empty lane).
    lane_tips: dict[tuple[str, str], str] = field(default_factory=dict)
    actors: int = 0  # distinct actors of the events
    signed_events: int = 0  # signatures checked and valid
    causal_links: int = 0  # causation_ids checked
    blob_refs: int = 0  # content references checked (0 without a blob check)
    warnings: tuple[Finding, ...] = ()  # the first MAX_WARNINGS
    warning_count: int = 0
    # The Merkle tree recomputed from the events, equal to the stored one
    # (spec/tlog.md): its root, hex; None for a file older than the tree.
    tree_root: str | None = None


@dataclass(slots=True)
class _Tip:
    seq: int
    entry_hash: str
    first_position: int
    last_position: int


@dataclass(slots=True)
class _Event:
    position: int
    event_id: str
    lane_id: str
    seq: int
    entry_hash: str
    committed_at: Any
    proposed: dict[str, Any]


def _where(position: int | None, lane_id: str | None = None, seq: int | None = None) -> str:
    where = f"position {position}" if position is not None else "ledger"
    if lane_id is not None:
        where += f" (lane {lane_id}" + (f" seq {seq})" if seq is not None else ")")
    return where


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _chain_fault(
    kind: str, position: int, lane_id: str | None, seq: Any, fld: str, expected: Any, found: Any
) -> ChainFault:
    seq_detail = seq if type(seq) is int else None
    return ChainFault(
        f"{_where(position, lane_id, seq_detail)}: {kind} "
        f"({fld} expected {_show(expected)}, found {_show(found)})",
        kind=kind,
        position=position,
        lane_id=lane_id,
        seq=seq_detail,
        field=fld,
        expected=expected,
        found=found,
    )


def _integrity(
    kind: str,
    text: str,
    position: int | None,
    lane_id: str | None = None,
    seq: int | None = None,
    **details: Any,
) -> IntegrityError:
    return IntegrityError(
        f"{_where(position, lane_id, seq)}: {kind}: {text}",
        kind=kind,
        position=position,
        lane_id=lane_id,
        seq=seq,
        **details,
    )


def decode_body(body: bytes, position: int, lane_id: str | None = None, seq: Any = None) -> dict[str, Any]:
    """A stored committed event as a dict, or ``not_chained`` (field ``body``)
    at ``position``. Shared with the tail's verify endpoint."""
    try:
        record = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise _chain_fault(
            "not_chained", position, lane_id, seq, "body", "a JSON object", f"undecodable: {exc}"
        ) from None
    if not isinstance(record, dict):
        raise _chain_fault(
            "not_chained", position, lane_id, seq, "body", "a JSON object", type(record).__name__
        )
    return record


def position_gap(expected: int, found: Any, lane_id: str | None = None, seq: Any = None) -> ChainFault:
    """Positions must run 1, 2, …: ``broken_link`` (field ``position``) at the
    first missing one. Shared with the tail's verify endpoint."""
    return _chain_fault("broken_link", expected, lane_id, seq, "position", expected, found)


def _pages(db: sqlite3.Connection, sql: str, first_key: Any, page: int) -> Iterator[tuple[Any, ...]]:
    """Keyset pagination: ``sql`` takes (last key, limit) and returns rows whose
    first column is the key, ascending."""
    key = first_key
    while True:
        rows = db.execute(sql, (key, page)).fetchall()
        if not rows:
            return
        yield from rows
        if len(rows) < page:
            return
        key = rows[-1][0]


def _lane_rows(db: sqlite3.Connection, page: int) -> Iterator[tuple[str, str, int, str]]:
    """Every lane row's (id, tenant, last_seq, head_hash), in rowid order."""
    for _, lane_id, tenant, last_seq, head_hash in _pages(
        db,
        "SELECT rowid, id, tenant, last_seq, head_hash FROM lanes WHERE rowid > ? ORDER BY rowid LIMIT ?",
        -(2**63),
        page,
    ):
        yield lane_id, tenant, last_seq, head_hash


def audit_ledger(
    db_path: str | Path,
    *,
    hmac_key: bytes | str | None = None,
    page: int = _PAGE,
    blob_check: BlobCheck | None = None,
    strict_actors: bool = False,
) -> LedgerAudit:
    """Verify a whole ledger file; raise ``ChainFault``/``IntegrityError`` at the
    first fault (see the module docstring), or return what was seen. Blobs
    are checked only with a ``blob_check`` (``laneledger.audit.blobs``)."""
    key = hmac_key.encode() if isinstance(hmac_key, str) else hmac_key
    db = open_ledger(db_path, readonly=True)
    try:
        db.execute("BEGIN")  # one snapshot for every read below
        try:
            return _audit(db, key, page, _EventChecks(db, blob_check, strict_actors))
        finally:
            db.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise IntegrityError(
            f"cannot read ledger database: {exc}", kind="unreadable", position=None, path=str(db_path)
        ) from exc
    finally:
        db.close()


def _audit(db: sqlite3.Connection, key: bytes | None, page: int, checks: _EventChecks) -> LedgerAudit:
    tips: dict[tuple[str, str], _Tip] = {}  # by (tenant, lane id): ids are each tenant's own
    chains = LaneChains(key=key)
    group: list[_Event] = []  # the events of the current append
    # (tenant, append id) of the current append: append ids are each tenant's own.
    group_append: tuple[str, str] | None = None
    groups = 0
    position = 0
    receipt_of = db.cursor()
    receipt_sql = _receipt_query(db)
    tree = (
        TreeCheck(
            _pages(db, "SELECT leaf, hashes FROM tlog_hashes WHERE leaf > ? ORDER BY leaf LIMIT ?", -1, page)
        )
        if has_tree(db)
        else None
    )

    def close_group() -> None:
        nonlocal groups
        if group_append is not None:
            _check_receipt(receipt_of, receipt_sql, *group_append, group)
            groups += 1

    rows = _pages(
        db,
        "SELECT position, id, lane_id, seq, append_id, tenant, body FROM events"
        " WHERE position > ? ORDER BY position LIMIT ?",
        -(2**63),
        page,
    )
    for row_position, row_id, row_lane, row_seq, row_append, row_tenant, body in rows:
        if row_position != position + 1:
            raise position_gap(position + 1, row_position, row_lane, row_seq)
        position = row_position
        if (row_tenant, row_append) != group_append:  # the previous append is complete: check its receipt
            close_group()
            group.clear()
            group_append = (row_tenant, row_append)
        record = decode_body(body, position, row_lane, row_seq)
        # Chained by the lane the hashed body names: a row whose lane column
        # alone was edited is then a row_mismatch, not a broken link.
        body_lane = record.get("lane_id")
        chains.check(
            record,
            position=position,
            lane=body_lane if isinstance(body_lane, str) else row_lane,
            tenant=row_tenant,
        )
        seq = record["seq"]

        # The row's index columns must say what the hashed body says.
        for name, column in (
            ("position", row_position),
            ("id", row_id),
            ("lane_id", row_lane),
            ("seq", row_seq),
            ("append_id", row_append),
        ):
            if record.get(name) != column:
                raise _integrity(
                    "row_mismatch",
                    f"the row's {name} is {_show(column)}, its body says {_show(record.get(name))}",
                    position,
                    row_lane,
                    seq,
                    field=name,
                    expected=record.get(name),
                    found=column,
                )
        checks.check(record, position, row_lane, seq)
        if tree is not None:
            tree.add(position, record["entry_hash"])

        tip = tips.get((row_tenant, row_lane))
        if tip is None:
            tips[(row_tenant, row_lane)] = _Tip(seq, record["entry_hash"], position, position)
        else:
            tip.seq, tip.entry_hash, tip.last_position = seq, record["entry_hash"], position

        group.append(
            _Event(
                position,
                row_id,
                row_lane,
                seq,
                record["entry_hash"],
                record.get("committed_at"),
                {k: v for k, v in record.items() if k not in LEDGER_OWNED_FIELDS},
            )
        )
    close_group()
    last_position = position

    # Every receipt was matched by exactly one append's events.
    (receipts,) = db.execute("SELECT count(*) FROM receipts").fetchone()
    if receipts != groups:
        orphan = db.execute(
            "SELECT append_id, body FROM receipts WHERE append_id NOT IN"
            " (SELECT append_id FROM events) ORDER BY append_id LIMIT 1"
        ).fetchone()
        first = None
        if orphan is not None:
            try:
                named = decoder(AppendCommitted).decode(orphan[1]).positions
                first = named[0] if named else None
            except msgspec.DecodeError:
                pass
        raise _integrity(
            "receipt_without_events",
            f"{receipts} stored receipts but {groups} committed appends"
            + (f"; append {orphan[0]} has a receipt and no events" if orphan else ""),
            first,
            append_id=orphan[0] if orphan else None,
            receipts=receipts,
            appends=groups,
        )

    # The lanes table: each head equals its last event.
    lane_tips: dict[tuple[str, str], str] = {}
    lanes = 0
    for lane_id, lane_tenant, last_seq, head_hash in _lane_rows(db, page):
        lanes += 1
        tip = tips.pop((lane_tenant, lane_id), None)
        seq, tip_hash = (tip.seq, tip.entry_hash) if tip else (0, GENESIS_HASH)
        where = tip.last_position if tip else None
        if last_seq != seq:
            raise _integrity(
                "lane_head_mismatch",
                f"the lanes table says last_seq {last_seq}, the lane's last event has seq {seq}",
                where,
                lane_id,
                seq,
                field="last_seq",
                expected=seq,
                found=last_seq,
            )
        if head_hash != tip_hash:
            raise _integrity(
                "lane_head_mismatch",
                f"the lanes table says head_hash {head_hash}, the lane's last event "
                f"has entry_hash {tip_hash}",
                where,
                lane_id,
                seq,
                field="head_hash",
                expected=tip_hash,
                found=head_hash,
            )
        lane_tips[(lane_tenant, lane_id)] = tip_hash
    if tips:
        (_, lane_id), tip = min(tips.items(), key=lambda item: item[1].first_position)
        raise _integrity(
            "unknown_lane", "the event's lane is not in the lanes table", tip.first_position, lane_id, 1
        )

    tree_root = tree.finish().hex() if tree is not None else None
    return LedgerAudit(
        events=last_position,
        lanes=lanes,
        last_position=last_position,
        lane_tips=lane_tips,
        actors=len(checks.actors),
        signed_events=checks.signed,
        causal_links=checks.causal_links,
        blob_refs=checks.blob_refs,
        warnings=tuple(checks.warnings),
        warning_count=checks.warning_count,
        tree_root=tree_root,
    )


@dataclass(slots=True)
class _ActorFacts:
    tenant: str
    public_key: Ed25519PublicKey | None


class _EventChecks:
    """Step 5 of the audit: one committed event against the rest of the ledger
    (actors, causes, blobs). Holds one entry per actor; looks causes up by id."""

    def __init__(self, db: sqlite3.Connection, blob_check: BlobCheck | None, strict_actors: bool) -> None:
        self._db = db
        self._blob_check = blob_check
        self._strict = strict_actors
        self.actors: dict[str, _ActorFacts | None] = {}
        self.signed = self.causal_links = self.blob_refs = self.warning_count = 0
        self.warnings: list[Finding] = []

    def check(self, record: dict[str, Any], position: int, lane_id: str, seq: int) -> None:
        def fault(kind: str, text: str, **details: Any) -> IntegrityError:
            return _integrity(kind, text, position, lane_id, seq, **details)

        actor_id = record.get("actor_id")
        actor = self._actor(actor_id, position) if isinstance(actor_id, str) else None
        if actor is None:
            raise fault(
                "unknown_actor",
                f"the event's actor {_show(actor_id)} is not in the actors table",
                actor_id=actor_id,
            )
        if actor.tenant != record.get("tenant"):
            raise fault(
                "actor_tenant_mismatch",
                f"actor {actor_id} belongs to tenant "
                f"{_show(actor.tenant)}, the event to {_show(record.get('tenant'))}",
                actor_id=actor_id,
                expected=record.get("tenant"),
                found=actor.tenant,
            )

        signature = record.get("signature")
        if actor.public_key is None:
            if signature is not None:
                raise fault(
                    "signature_unexpected",
                    f"signed, but actor {actor_id} has no public key",
                    actor_id=actor_id,
                )
        elif signature is None:
            raise fault(
                "signature_missing",
                f"actor {actor_id} signs its events; this one has no signature",
                actor_id=actor_id,
            )
        elif not check_signature(record, actor.public_key):
            raise fault(
                "signature_invalid",
                f"the signature does not verify under actor {actor_id}'s public key",
                actor_id=actor_id,
            )
        else:
            self.signed += 1

        cause = record.get("causation_id")
        if cause is not None:
            self.causal_links += 1
            found = (  # event ids are each tenant's own: the cause is one of the event's tenant
                self._db.execute(
                    "SELECT position, session_id FROM events WHERE id = ? AND tenant = ?",
                    (cause, record.get("tenant")),
                ).fetchone()
                if isinstance(cause, str)
                else None
            )
            if found is None:
                raise fault(
                    "causation_unknown", f"causation_id {_show(cause)} names no event", causation_id=cause
                )
            if found[0] >= position:
                raise fault(
                    "causation_not_earlier",
                    f"causation_id {cause} is the event at position {found[0]}, not an earlier one",
                    causation_id=cause,
                    cause_position=found[0],
                )
            if found[1] != record.get("session_id"):
                raise fault(
                    "causation_other_session",
                    f"causation_id {cause} is in session "
                    f"{_show(found[1])}, this event in {_show(record.get('session_id'))}",
                    causation_id=cause,
                    cause_session_id=found[1],
                )

        if self._blob_check is not None:
            for ref, size in refs_in(record.get("payload")):
                self.blob_refs += 1
                problem = self._blob_check(record["tenant"], ref, size)
                if problem is not None:
                    raise fault(problem[0], problem[1], ref=ref, size_bytes=size)

    def _actor(self, actor_id: str, position: int) -> _ActorFacts | None:
        if actor_id in self.actors:
            return self.actors[actor_id]
        row = self._db.execute("SELECT body FROM actors WHERE id = ?", (actor_id,)).fetchone()
        facts = None
        if row is not None:
            try:
                actor = decoder(Actor).decode(row[0])
                key = load_public_key(actor.public_key) if actor.public_key else None
            except (msgspec.DecodeError, msgspec.ValidationError, LedgerError) as exc:
                raise _integrity(
                    "unknown_actor",
                    f"actor {actor_id}'s stored row is unreadable: {exc}",
                    position,
                    actor_id=actor_id,
                ) from None
            facts = _ActorFacts(actor.tenant, key)
            for kind, text in identity_findings(actor.key, actor.kind):
                if self._strict:
                    raise _integrity(kind, text, position, actor_id=actor_id, key=actor.key)
                self.warning_count += 1
                if len(self.warnings) < MAX_WARNINGS:
                    self.warnings.append(Finding(kind, position, text, actor_id))
        self.actors[actor_id] = facts
        return facts


def _receipt_query(db: sqlite3.Connection) -> str:
    """How a receipt is found by (append id, tenant): by its own tenant
    column, or in a version-1 file (which has none, and whose lane ids are
    unique across tenants) through its lane."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(receipts)")}
    if "tenant" in columns:
        return "SELECT lane_id, digest, body FROM receipts WHERE append_id = ? AND tenant = ?"
    return (
        "SELECT r.lane_id, r.digest, r.body FROM receipts r JOIN lanes l ON l.id = r.lane_id"
        " WHERE r.append_id = ? AND l.tenant = ?"
    )


def _check_receipt(
    db: sqlite3.Cursor, receipt_sql: str, tenant: str, append_id: str, events: list[_Event]
) -> None:
    """The contiguous events of one append against its stored receipt: the
    receipt of that append id of that tenant (append ids are each tenant's own)."""
    first = events[0]
    row = db.execute(receipt_sql, (append_id, tenant)).fetchone()
    if row is None:
        raise _integrity(
            "receipt_missing",
            f"append {append_id} committed events but has no stored receipt",
            first.position,
            first.lane_id,
            first.seq,
            append_id=append_id,
        )
    lane_column, digest_column, body = row
    try:
        receipt = decoder(AppendCommitted).decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _integrity(
            "receipt_mismatch",
            f"the receipt of append {append_id} is unreadable: {exc}",
            first.position,
            first.lane_id,
            first.seq,
            append_id=append_id,
        ) from None

    def mismatch(what: str, at: _Event, expected: Any, found: Any) -> IntegrityError:
        return _integrity(
            "receipt_mismatch",
            f"the receipt of append {append_id} says {what} {_show(found)}, the events say {_show(expected)}",
            at.position,
            at.lane_id,
            at.seq,
            append_id=append_id,
            field=what,
            expected=expected,
            found=found,
        )

    checks = (
        ("append_id", receipt.append_id, append_id),
        ("lane_id", receipt.lane_id, first.lane_id),
        ("lane_id column", lane_column, first.lane_id),
        ("digest column", digest_column, receipt.digest),
        ("replayed", receipt.replayed, False),
        ("first_seq", receipt.first_seq, first.seq),
    )
    for what, found, expected in checks:
        if found != expected:
            raise mismatch(what, first, expected, found)
    lists = (receipt.positions, receipt.event_ids, receipt.entry_hashes)
    for index, event in enumerate(events):
        for what, values, expected in (
            ("position", receipt.positions, event.position),
            ("event id", receipt.event_ids, event.event_id),
            ("entry hash", receipt.entry_hashes, event.entry_hash),
        ):
            found = values[index] if index < len(values) else None
            if found != expected:
                raise mismatch(what, event, expected, found)
        if event.lane_id != first.lane_id:
            raise mismatch("lane_id", event, event.lane_id, first.lane_id)
        if event.seq != first.seq + index:
            raise mismatch("seq", event, first.seq + index, event.seq)
        if event.committed_at != receipt.committed_at:
            raise mismatch("committed_at", event, event.committed_at, receipt.committed_at)
    last = events[-1]
    if len(receipt.positions) > len(events):
        missing = receipt.positions[len(events)]
        raise _integrity(
            "receipt_mismatch",
            f"the receipt of append {append_id} names position {missing}, which "
            f"holds no event of that append ({len(events)} of "
            f"{len(receipt.positions)} found)",
            missing,
            first.lane_id,
            last.seq + 1,
            append_id=append_id,
            field="positions",
            expected=[e.position for e in events],
            found=receipt.positions,
        )
    if any(len(values) != len(events) for values in lists):
        raise mismatch("event counts", last, len(events), [len(values) for values in lists])
    if receipt.last_seq != last.seq:
        raise mismatch("last_seq", last, last.seq, receipt.last_seq)
    try:
        digest = append_digest([event.proposed for event in events])
    except LedgerError as exc:
        raise mismatch("digest", first, f"uncomputable: {exc}", receipt.digest) from None
    if digest != receipt.digest:
        raise mismatch("digest", first, digest, receipt.digest)


# -- the committed stream ---------------------------------------------------------


@dataclass(frozen=True)
class StreamCheck:
    """What a clean stream comparison saw."""

    messages: int  # positions 1..messages compared, byte for byte
    lag: int = 0  # events the stream was behind the database when first read
    caught_up_s: float = 0.0  # how long the stream took to catch up with them


async def compare_with_stream(
    js: Any, db_path: str | Path, stream: str = "LEDGER_EVENTS", **options: Any
) -> int:
    """:func:`check_stream` of a quiescent ledger (no wait for lag); returns
    the number of events compared."""
    return (await check_stream(js, db_path, stream, **options)).messages


async def _direct_get(js: Any, stream: str, sequence: int, *, or_next: bool = False) -> Any:
    """``stream``'s message ``sequence`` (``or_next``: the first at or after
    it) by JetStream's message get, or None when there is none; NATS's own
    failures leave as ``LedgerUnavailable``."""
    import nats.errors
    from nats.js.errors import NotFoundError

    try:
        if or_next:
            return await js.get_msg(stream, sequence, subject=">", next=True)
        return await js.get_msg(stream, sequence)
    except NotFoundError:
        return None
    except (nats.errors.Error, TimeoutError) as exc:
        raise LedgerUnavailable(
            f"cannot read message {sequence} of {stream} directly: {exc!r}", stream=stream, sequence=sequence
        ) from exc


async def stream_message(js: Any, stream: str, sequence: int) -> bytes | None:
    """The data of ``stream``'s message ``sequence``, read directly (one
    message by its sequence: JetStream's message get, no consumer, nothing
    in flight to lose), or None when the stream holds none there."""
    msg = await _direct_get(js, stream, sequence)
    return None if msg is None else bytes(msg.data or b"")


async def stream_difference(js: Any, db_path: str | Path, stream: str, position: int) -> str | None:
    """How ``stream`` differs from the ledger at ``position``, by direct reads
    only (no consumer: nothing in flight that a slow client could lose), or
    None when it does not: message ``position`` equals the stored body or,
    past the ledger's end, the stream holds nothing from there on. The
    second opinion ``laneledger repair-stream`` asks before it deletes."""
    db = open_ledger(db_path, readonly=True)
    try:
        row = db.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()
    finally:
        db.close()
    if row is None:  # past the ledger's end: anything the stream holds from here is more
        beyond = await _direct_get(js, stream, position, or_next=True)
        return (
            None
            if beyond is None
            else f"the stream holds message {beyond.seq}, past the ledger's last position"
        )
    data = await stream_message(js, stream, position)
    if data is None:
        return f"message {position} is missing from the stream"
    if data != bytes(row[0]):
        return f"message {position} differs from the stored body"
    return None


async def check_stream(
    js: Any,
    db_path: str | Path,
    stream: str = "LEDGER_EVENTS",
    *,
    wait_s: float = 0.0,
    batch: int = 500,
    read_bytes: int | None = None,
    timeout: float = 60.0,
    stall_s: float = STALL_S,
) -> StreamCheck:
    """Check that ``stream`` holds exactly the ledger's events: message ``k``
    has stream sequence ``k`` == position and data byte-identical to the
    stored body, and no message lies beyond the ledger. Raises
    ``IntegrityError`` naming the first differing position.

    Works on a live ledger. The stream's last sequence is read *before* the
    database snapshot: the sequencer publishes an event only after SQLite
    committed it, so a stream ending past the snapshot is a fault
    (``stream_ahead``), while one ending short of it may be the normal lag.
    Positions 1..min(both) are compared strictly; then, if the stream is
    behind, its last sequence is re-read until it reaches the snapshot's last
    position — within ``wait_s`` it is lag (``StreamCheck.lag``) and the rest
    is compared too; otherwise ``stream_behind``.

    The stream is read in order by a ``StreamFollower`` on ``js``'s
    connection, in pulls bounded by ``read_bytes`` (default the follower's
    ``READ_BUDGET_BYTES``; the database rows are read one at a time, so
    memory stays bounded), with gaps as findings (``on_gap="fail"``). A gap
    is then read directly (``stream_message``): a sequence missing from the
    stream is ``sequence_mismatch`` at its position, never re-read; one the
    stream does hold was lost on the way to this reader (a slow consumer, a
    reconnect) and is ``LedgerUnavailable`` (kind ``stream_read_lost``):
    retry, nothing is known to be wrong.
    A consumer nobody serves (503: a cluster consumer without a leader) is
    retried until ``timeout`` (``stream_timeout``); one that answers but
    delivers nothing for ``stall_s`` is ``stream_stalled``.
    """
    from nats.js.errors import NotFoundError

    from laneledger.runtime.follow import StreamFollower, StreamGap  # NATS only with --nats

    async def stream_state() -> Any:
        try:
            return (await js.stream_info(stream)).state
        except NotFoundError:
            raise LedgerUnavailable(f"no stream {stream} on this NATS server", stream=stream) from None

    deadline = asyncio.get_running_loop().time() + timeout
    state = await stream_state()
    stream_last, available = state.last_seq, state.messages
    db = open_ledger(db_path, readonly=True)
    # nats-py offers a context's connection only as ``_nc``; the follower
    # pulls over the connection itself. Ephemeral, named so it can be deleted.
    follower = StreamFollower(
        js._nc,
        stream=stream,
        name=f"audit-{secrets.token_hex(8)}",
        batch_size=batch,
        max_bytes=read_bytes,
        on_gap="fail",
    )
    try:
        db.execute("BEGIN")
        (count,) = db.execute("SELECT count(*) FROM events").fetchone()
        (ledger_last,) = db.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()
        if stream_last > ledger_last:
            raise IntegrityError(
                f"position {ledger_last + 1}: stream_ahead: on the stream (up to sequence "
                f"{stream_last}) but not in the ledger, which ends at position {ledger_last}",
                kind="stream_ahead",
                position=ledger_last + 1,
                stream_sequence=stream_last,
                ledger_last_position=ledger_last,
            )

        # One row at a time (a body may be near 1 MiB), in this transaction's snapshot.
        rows: Iterator[tuple[int, bytes]] = iter(
            db.execute("SELECT position, body FROM events ORDER BY position")
        )
        compared = 0  # the last position compared

        async def before_deadline(step: Awaitable[_T]) -> _T:
            try:
                async with asyncio.timeout_at(deadline):
                    return await step
            except TimeoutError:
                raise IntegrityError(
                    f"position {compared + 1}: stream_timeout: the stream did not deliver in {timeout:g}s",
                    kind="stream_timeout",
                    position=compared + 1,
                    stream=stream,
                ) from None

        def row_at(expected: int) -> tuple[int, bytes]:
            """The ledger's next row, which must be at position ``expected``."""
            row = next(rows, None)
            if row is None or row[0] != expected:
                raise IntegrityError(
                    f"position {expected}: ledger_gap: missing from the ledger (next "
                    f"stored is {row[0] if row else 'none'})",
                    kind="ledger_gap",
                    position=expected,
                )
            return row

        async def compare_through(last: int) -> None:
            """Compare the stream's next messages up to position ``last``."""
            nonlocal compared
            quiet_since = time.monotonic()
            while compared < last:
                try:
                    msgs = await before_deadline(follower.read(last - compared))
                except StreamGap as gap:
                    row_at(gap.position)  # a gap on both sides is the ledger's
                    if await before_deadline(stream_message(js, stream, gap.position)) is not None:
                        raise LedgerUnavailable(
                            f"position {gap.position}: stream_read_lost: the stream holds the "
                            f"message, but it did not reach this reader (sequence {gap.sequence} "
                            "came instead: dropped on the way, by a slow consumer or a reconnect); "
                            "nothing is known to be wrong with the stream: run the check again",
                            kind="stream_read_lost",
                            position=gap.position,
                            stream_sequence=gap.sequence,
                            stream=stream,
                        ) from None
                    raise IntegrityError(
                        f"position {gap.position}: sequence_mismatch: the stream's message there "
                        f"has sequence {gap.sequence}",
                        kind="sequence_mismatch",
                        position=gap.position,
                        stream_sequence=gap.sequence,
                    ) from None
                now = time.monotonic()
                if msgs or follower.unavailable:
                    # Delivering, or refused with 503 (a cluster electing a
                    # leader after a node restart): transient, retried until
                    # the deadline above.
                    quiet_since = now
                elif now - quiet_since >= stall_s:
                    raise IntegrityError(
                        f"position {compared + 1}: stream_stalled: the stream stopped "
                        f"delivering after {compared} messages",
                        kind="stream_stalled",
                        position=compared + 1,
                        stream=stream,
                    )
                for position, data in msgs:  # the follower hands out position compared + 1 on
                    row = row_at(position)
                    if bytes(data) != bytes(row[1]):
                        raise IntegrityError(
                            f"position {position}: data_mismatch: stream data differs from the stored body",
                            kind="data_mismatch",
                            position=position,
                        )
                    compared = position

        def check_counts(stream_last: int, available: int) -> None:
            # Messages deleted from the stream's end: fewer than its sequences.
            # (A gap in either within what was compared is named above.)
            if available < min(stream_last, ledger_last):
                at = available + 1
                raise IntegrityError(
                    f"position {at}: count_mismatch: the stream has {available} messages up "
                    f"to sequence {stream_last}, the ledger {count} events up to position "
                    f"{ledger_last}",
                    kind="count_mismatch",
                    position=at,
                )

        await before_deadline(follower.open(after=0))
        await compare_through(min(stream_last, available))
        check_counts(stream_last, available)
        lag, caught_up_s = ledger_last - stream_last, 0.0
        if lag:
            started = time.monotonic()
            while stream_last < ledger_last:
                waited = time.monotonic() - started
                if waited >= wait_s:
                    raise IntegrityError(
                        f"position {stream_last + 1}: stream_behind: in the ledger but not on "
                        f"the stream, which ends at sequence {stream_last} "
                        f"({ledger_last - stream_last} behind after waiting {waited:.1f}s)",
                        kind="stream_behind",
                        position=stream_last + 1,
                        stream_last_sequence=stream_last,
                        ledger_last_position=ledger_last,
                        waited_s=round(waited, 3),
                    )
                await asyncio.sleep(min(0.02, wait_s - waited))
                state = await stream_state()
                stream_last, available = state.last_seq, state.messages
            caught_up_s = time.monotonic() - started
            await compare_through(min(ledger_last, available))
            check_counts(ledger_last, available)
        return StreamCheck(messages=compared, lag=lag, caught_up_s=caught_up_s)
    finally:
        await follower.close()
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        db.close()


# -- exports --------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportAudit:
    events: int
    lanes: int
    last_position: int


def export_ledger(db_path: str | Path, out: Any, *, page: int = _PAGE) -> int:
    """Write every committed event of a ledger file, in position order, one
    canonical JSON object per line (the stored bytes, chain fields included)
    to the binary stream ``out``; returns the count. Read-only, one snapshot."""
    db = open_ledger(db_path, readonly=True)
    count = 0
    try:
        db.execute("BEGIN")
        for _, body in _pages(
            db,
            "SELECT position, body FROM events WHERE position > ? ORDER BY position LIMIT ?",
            -(2**63),
            page,
        ):
            out.write(bytes(body))
            out.write(b"\n")
            count += 1
        db.execute("ROLLBACK")
    finally:
        db.close()
    return count


def read_export(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a laneledger JSONL export; a bad line raises a
    ``RequestError`` naming ``file`` and ``line``."""
    name = str(path)
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            record = decode_json(raw, file=name, line=number)
            if not isinstance(record, dict):
                raise InvalidRequest("expected a JSON object", file=name, line=number)
            for key, kind in (("position", int), ("lane_id", str)):
                if not isinstance(record.get(key), kind) or isinstance(record.get(key), bool):
                    raise InvalidRequest(
                        f"field {key}: missing or not {kind.__name__}", file=name, line=number, field=key
                    )
            yield record


def verify_export(records: Iterator[dict[str, Any]], *, hmac_key: bytes | None = None) -> ExportAudit:
    """Verify an export offline: positions 1..N with no gap, and every lane's
    chain (seqs dense, links, recomputed hashes). Raises ``ChainFault``."""
    chains = LaneChains(key=hmac_key)
    position = 0
    for record in records:
        if record["position"] != position + 1:
            raise position_gap(position + 1, record["position"], record["lane_id"], record.get("seq"))
        position = record["position"]
        tenant = record.get("tenant")  # lane ids are each tenant's own
        chains.check(
            record,
            position=position,
            lane=record["lane_id"],
            tenant=tenant if isinstance(tenant, str) else None,
        )
    return ExportAudit(events=position, lanes=len(chains.tips), last_position=position)
