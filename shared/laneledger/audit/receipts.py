"""Step 6 of the audit (``laneledger.audit.ledger``): the contiguous events
of one append against its stored receipt."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.audit.faults import integrity_fault, show
from laneledger.contract.chain import append_digest
from laneledger.contract.erasure import ERASED_DIGEST
from laneledger.contract.errors import IntegrityError, LedgerError
from laneledger.contract.model import AppendCommitted, decoder


@dataclass(slots=True)
class AppendEvent:
    position: int
    event_id: str
    lane_id: str
    seq: int
    entry_hash: str
    committed_at: Any
    proposed: dict[str, Any]
    erased: bool = False  # its content erased (spec/erasure.md): the digest cannot be recomputed


def receipt_query(db: sqlite3.Connection) -> str:
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


def check_receipt(
    db: sqlite3.Cursor, receipt_sql: str, tenant: str, append_id: str, events: list[AppendEvent]
) -> None:
    """The contiguous events of one append against its stored receipt: the
    receipt of that append id of that tenant (append ids are each tenant's own)."""
    first = events[0]
    row = db.execute(receipt_sql, (append_id, tenant)).fetchone()
    if row is None:
        raise integrity_fault(
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
        raise integrity_fault(
            "receipt_mismatch",
            f"the receipt of append {append_id} is unreadable: {exc}",
            first.position,
            first.lane_id,
            first.seq,
            append_id=append_id,
        ) from None

    def mismatch(what: str, at: AppendEvent, expected: Any, found: Any) -> IntegrityError:
        return integrity_fault(
            "receipt_mismatch",
            f"the receipt of append {append_id} says {what} {show(found)}, the events say {show(expected)}",
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
        raise integrity_fault(
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
    if any(event.erased for event in events):
        # The digest went with the content it was computed over.
        if receipt.digest != ERASED_DIGEST:
            raise mismatch("digest", first, ERASED_DIGEST, receipt.digest)
        return
    try:
        digest = append_digest([event.proposed for event in events])
    except LedgerError as exc:
        raise mismatch("digest", first, f"uncomputable: {exc}", receipt.digest) from None
    if digest != receipt.digest:
        raise mismatch("digest", first, digest, receipt.digest)
