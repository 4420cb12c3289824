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

The checks live beside this module, one job each: ``faults`` (the errors),
``eventchecks`` (step 5), ``receipts`` (step 6) and ``pages`` (keyset
reads); ``stream`` compares the committed stream with the ledger and
``export`` writes and verifies JSONL exports.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from laneledger.audit.erasures import ErasureChecks
from laneledger.audit.eventchecks import BlobCheck, EventChecks, Finding
from laneledger.audit.faults import decode_body, integrity_fault, position_gap, show
from laneledger.audit.pages import PAGE, keyset_pages
from laneledger.audit.receipts import AppendEvent, check_receipt, receipt_query
from laneledger.audit.tree import TreeCheck, has_tree
from laneledger.contract.chain import ERASED, GENESIS_HASH, LaneChains
from laneledger.contract.errors import IntegrityError
from laneledger.contract.model import LEDGER_OWNED_FIELDS, AppendCommitted, decoder
from laneledger.store import open_ledger

__all__ = ["BlobCheck", "Finding", "LedgerAudit", "audit_ledger"]


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
    # Events whose content is erased, each matched to its erasure event
    # (spec/erasure.md), and the erasure events.
    erased_events: int = 0
    erasures: int = 0


@dataclass(slots=True)
class _Tip:
    seq: int
    entry_hash: str
    first_position: int
    last_position: int


def _lane_rows(db: sqlite3.Connection, page: int) -> Iterator[tuple[str, str, int, str]]:
    """Every lane row's (id, tenant, last_seq, head_hash), in rowid order."""
    for _, lane_id, tenant, last_seq, head_hash in keyset_pages(
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
    page: int = PAGE,
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
            return _audit(db, key, page, EventChecks(db, blob_check, strict_actors))
        finally:
            db.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise IntegrityError(
            f"cannot read ledger database: {exc}", kind="unreadable", position=None, path=str(db_path)
        ) from exc
    finally:
        db.close()


def _audit(db: sqlite3.Connection, key: bytes | None, page: int, checks: EventChecks) -> LedgerAudit:
    tips: dict[tuple[str, str], _Tip] = {}  # by (tenant, lane id): ids are each tenant's own
    chains = LaneChains(key=key)
    erasures = ErasureChecks()
    group: list[AppendEvent] = []  # the events of the current append
    # (tenant, append id) of the current append: append ids are each tenant's own.
    group_append: tuple[str, str] | None = None
    groups = 0
    position = 0
    receipt_of = db.cursor()
    receipt_sql = receipt_query(db)
    tree = (
        TreeCheck(
            keyset_pages(
                db, "SELECT leaf, hashes FROM tlog_hashes WHERE leaf > ? ORDER BY leaf LIMIT ?", -1, page
            )
        )
        if has_tree(db)
        else None
    )

    def close_group() -> None:
        nonlocal groups
        if group_append is not None:
            check_receipt(receipt_of, receipt_sql, *group_append, group)
            groups += 1

    rows = keyset_pages(
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
                raise integrity_fault(
                    "row_mismatch",
                    f"the row's {name} is {show(column)}, its body says {show(record.get(name))}",
                    position,
                    row_lane,
                    seq,
                    field=name,
                    expected=record.get(name),
                    found=column,
                )
        checks.check(record, position, row_lane, seq)
        erasures.check(record, position, row_lane, seq)
        if tree is not None:
            tree.add(position, record["entry_hash"])

        tip = tips.get((row_tenant, row_lane))
        if tip is None:
            tips[(row_tenant, row_lane)] = _Tip(seq, record["entry_hash"], position, position)
        else:
            tip.seq, tip.entry_hash, tip.last_position = seq, record["entry_hash"], position

        group.append(
            AppendEvent(
                position,
                row_id,
                row_lane,
                seq,
                record["entry_hash"],
                record.get("committed_at"),
                {k: v for k, v in record.items() if k not in LEDGER_OWNED_FIELDS},
                ERASED in record,
            )
        )
    close_group()
    erasures.finish()
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
        raise integrity_fault(
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
            raise integrity_fault(
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
            raise integrity_fault(
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
        raise integrity_fault(
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
        erased_events=erasures.erased_events,
        erasures=erasures.erasures,
    )
