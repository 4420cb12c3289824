"""Whole-ledger verification over a SQLite ledger file (``laneledger verify --db``).

:func:`audit_ledger` opens a ledger database read-only, inside one read
transaction (so a running sequencer may keep writing: the audit sees one
consistent snapshot), streams every event in position order and checks, in
position order, stopping at the first fault:

1. positions are 1, 2, … N with no gap (``ChainFault`` ``broken_link``, field
   ``position``, reported at the missing position);
2. each stored body is a JSON object (``not_chained``, field ``body``);
3. per lane, the chain verifies exactly as :func:`laneledger.chain.verify_chain`
   checks it — ``seq``/``prev_hash``/``entry_hash`` well-formed
   (``not_chained``), seqs dense from 1 and ``prev_hash`` the previous
   ``entry_hash`` (``broken_link``), the recomputed entry hash (SHA-256, or
   HMAC-SHA256 under ``hmac_key``) equal to the stored one
   (``content_tampered``);
4. the row's indexed columns (``position``, ``id``, ``lane_id``, ``seq``,
   ``append_id``) agree with the hashed body (``IntegrityError``, kind
   ``row_mismatch``);
5. the events of one append are contiguous and match its stored receipt:
   positions, event ids, seqs, entry hashes, lane, ``committed_at`` and the
   append digest recomputed from the proposed part of the bodies
   (``IntegrityError``, kinds ``receipt_missing`` / ``receipt_mismatch``);
6. after the last event: every receipt has events (``receipt_without_events``),
   every lane row's ``last_seq``/``head_hash`` equals its last event
   (``lane_head_mismatch``, reported at that event's position) and every event
   belongs to a lane row (``unknown_lane``).

``ChainFault`` and ``IntegrityError`` details always hold ``kind`` and
``position`` (and ``lane_id``/``seq`` when the fault is in one lane); the
message starts with ``position N``.

Memory stays bounded: events are read in pages, and besides the per-lane tips
only the events of the current append (at most 1000) are held.

:func:`compare_with_stream` checks that LEDGER_EVENTS is an exact copy of a
(quiescent) ledger: stream sequence == position and message data
byte-identical to the stored body, for every event, and nothing more.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from .chain import GENESIS_HASH, LaneChains, append_digest
from .errors import ChainFault, IntegrityError, InvalidRequest, LedgerError
from .model import LEDGER_OWNED_FIELDS, AppendCommitted, decoder
from .store import open_ledger
from .strictjson import decode_json

__all__ = [
    "ExportAudit", "LedgerAudit", "audit_ledger", "compare_with_stream", "export_ledger",
    "read_export", "verify_export",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_PAGE = 2000


@dataclass(frozen=True)
class LedgerAudit:
    """What a clean audit saw."""

    events: int
    lanes: int
    last_position: int
    # Every lane of the lanes table -> the entry_hash of its last event
    # (GENESIS_HASH, 64 zeros, for an empty lane).
    lane_tips: dict[str, str] = field(default_factory=dict)


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
    proposed: dict


def _where(position: int | None, lane_id: str | None = None, seq: int | None = None) -> str:
    where = f"position {position}" if position is not None else "ledger"
    if lane_id is not None:
        where += f" (lane {lane_id}" + (f" seq {seq})" if seq is not None else ")")
    return where


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _chain_fault(kind: str, position: int, lane_id: str | None, seq: Any, fld: str,
                 expected: Any, found: Any) -> ChainFault:
    seq_detail = seq if type(seq) is int else None
    return ChainFault(
        f"{_where(position, lane_id, seq_detail)}: {kind} "
        f"({fld} expected {_show(expected)}, found {_show(found)})",
        kind=kind, position=position, lane_id=lane_id, seq=seq_detail, field=fld,
        expected=expected, found=found,
    )


def _integrity(kind: str, text: str, position: int | None, lane_id: str | None = None,
               seq: int | None = None, **details: Any) -> IntegrityError:
    return IntegrityError(
        f"{_where(position, lane_id, seq)}: {kind}: {text}",
        kind=kind, position=position, lane_id=lane_id, seq=seq, **details,
    )


def _pages(db: sqlite3.Connection, sql: str, first_key: Any, page: int) -> Iterator[tuple]:
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


def audit_ledger(
    db_path: str | Path, *, hmac_key: bytes | str | None = None, page: int = _PAGE
) -> LedgerAudit:
    """Verify a whole ledger file; raise ``ChainFault``/``IntegrityError`` at the
    first fault (see the module docstring), or return what was seen."""
    key = hmac_key.encode() if isinstance(hmac_key, str) else hmac_key
    db = open_ledger(db_path, readonly=True)
    try:
        db.execute("BEGIN")  # one snapshot for every read below
        try:
            return _audit(db, key, page)
        finally:
            db.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise IntegrityError(f"cannot read ledger database: {exc}", kind="unreadable",
                             position=None, path=str(db_path)) from exc
    finally:
        db.close()


def _audit(db: sqlite3.Connection, key: bytes | None, page: int) -> LedgerAudit:
    tips: dict[str, _Tip] = {}
    chains = LaneChains(key=key)
    group: list[_Event] = []  # the events of the current append
    group_append: str | None = None
    groups = 0
    position = 0
    receipt_of = db.cursor()

    def close_group() -> None:
        nonlocal groups
        if group_append is not None:
            _check_receipt(receipt_of, group_append, group)
            groups += 1

    rows = _pages(
        db,
        "SELECT position, id, lane_id, seq, append_id, body FROM events"
        " WHERE position > ? ORDER BY position LIMIT ?",
        -(2**63), page,
    )
    for row_position, row_id, row_lane, row_seq, row_append, body in rows:
        expected_position = position + 1
        if row_position != expected_position:
            raise _chain_fault("broken_link", expected_position, row_lane, row_seq, "position",
                               expected_position, row_position)
        position = row_position
        if row_append != group_append:  # the previous append is complete: check its receipt
            close_group()
            group.clear()
            group_append = row_append
        try:
            record = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise _chain_fault("not_chained", position, row_lane, row_seq, "body",
                               "a JSON object", f"undecodable: {exc}") from None
        if not isinstance(record, dict):
            raise _chain_fault("not_chained", position, row_lane, row_seq, "body",
                               "a JSON object", type(record).__name__)

        chains.check(record, position=position, lane=row_lane)
        seq = record["seq"]

        # The row's index columns must say what the hashed body says.
        for name, column in (("position", row_position), ("id", row_id), ("lane_id", row_lane),
                             ("seq", row_seq), ("append_id", row_append)):
            if record.get(name) != column:
                raise _integrity("row_mismatch",
                                 f"the row's {name} is {_show(column)}, its body says "
                                 f"{_show(record.get(name))}",
                                 position, row_lane, seq, field=name, expected=record.get(name),
                                 found=column)

        tip = tips.get(row_lane)
        if tip is None:
            tips[row_lane] = _Tip(seq, record["entry_hash"], position, position)
        else:
            tip.seq, tip.entry_hash, tip.last_position = seq, record["entry_hash"], position

        group.append(_Event(
            position, row_id, row_lane, seq, record["entry_hash"], record.get("committed_at"),
            {k: v for k, v in record.items() if k not in LEDGER_OWNED_FIELDS},
        ))
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
        raise _integrity("receipt_without_events",
                         f"{receipts} stored receipts but {groups} committed appends"
                         + (f"; append {orphan[0]} has a receipt and no events" if orphan else ""),
                         first, append_id=orphan[0] if orphan else None,
                         receipts=receipts, appends=groups)

    # The lanes table: each head equals its last event.
    lane_tips: dict[str, str] = {}
    lanes = 0
    for lane_id, last_seq, head_hash in _pages(
        db, "SELECT id, last_seq, head_hash FROM lanes WHERE id > ? ORDER BY id LIMIT ?", "", page
    ):
        lanes += 1
        tip = tips.pop(lane_id, None)
        seq, tip_hash = (tip.seq, tip.entry_hash) if tip else (0, GENESIS_HASH)
        where = tip.last_position if tip else None
        if last_seq != seq:
            raise _integrity("lane_head_mismatch",
                             f"the lanes table says last_seq {last_seq}, the lane's last event "
                             f"has seq {seq}", where, lane_id, seq,
                             field="last_seq", expected=seq, found=last_seq)
        if head_hash != tip_hash:
            raise _integrity("lane_head_mismatch",
                             f"the lanes table says head_hash {head_hash}, the lane's last event "
                             f"has entry_hash {tip_hash}", where, lane_id, seq,
                             field="head_hash", expected=tip_hash, found=head_hash)
        lane_tips[lane_id] = tip_hash
    if tips:
        lane_id, tip = min(tips.items(), key=lambda item: item[1].first_position)
        raise _integrity("unknown_lane", "the event's lane is not in the lanes table",
                         tip.first_position, lane_id, 1)

    return LedgerAudit(events=last_position, lanes=lanes, last_position=last_position,
                       lane_tips=lane_tips)


def _check_receipt(db: sqlite3.Cursor, append_id: str, events: list[_Event]) -> None:
    """The contiguous events of one append against its stored receipt."""
    first = events[0]
    row = db.execute(
        "SELECT lane_id, digest, body FROM receipts WHERE append_id = ?", (append_id,)
    ).fetchone()
    if row is None:
        raise _integrity("receipt_missing", f"append {append_id} committed events but has no "
                         "stored receipt", first.position, first.lane_id, first.seq,
                         append_id=append_id)
    lane_column, digest_column, body = row
    try:
        receipt = decoder(AppendCommitted).decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _integrity("receipt_mismatch", f"the receipt of append {append_id} is unreadable: "
                         f"{exc}", first.position, first.lane_id, first.seq,
                         append_id=append_id) from None

    def mismatch(what: str, at: _Event, expected: Any, found: Any) -> IntegrityError:
        return _integrity("receipt_mismatch",
                          f"the receipt of append {append_id} says {what} {_show(found)}, "
                          f"the events say {_show(expected)}",
                          at.position, at.lane_id, at.seq, append_id=append_id, field=what,
                          expected=expected, found=found)

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
        raise _integrity("receipt_mismatch",
                         f"the receipt of append {append_id} names position {missing}, which "
                         f"holds no event of that append ({len(events)} of "
                         f"{len(receipt.positions)} found)",
                         missing, first.lane_id, last.seq + 1, append_id=append_id,
                         field="positions", expected=[e.position for e in events],
                         found=receipt.positions)
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


async def compare_with_stream(
    js: Any,
    db_path: str | Path,
    stream: str = "LEDGER_EVENTS",
    *,
    batch: int = 500,
    timeout: float = 60.0,
) -> int:
    """Check that ``stream`` holds exactly the ledger's events: message ``k``
    has stream sequence ``k`` == position and data byte-identical to the
    stored body, and the stream has no more and no fewer messages. Returns
    the number of events; raises ``IntegrityError`` naming the first differing
    position.

    Meant for a quiescent ledger (the sequencer idle or stopped): a live
    ledger's stream legitimately lags its database for a moment.
    """
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    deadline = time.monotonic() + timeout
    db = open_ledger(db_path, readonly=True)
    sub = None
    consumer = None
    try:
        db.execute("BEGIN")
        (count,) = db.execute("SELECT count(*) FROM events").fetchone()
        (ledger_last,) = db.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()
        info = await js.stream_info(stream)
        stream_count, stream_last = info.state.messages, info.state.last_seq

        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
            mem_storage=True,
        )
        consumer = f"audit-{secrets.token_hex(8)}"  # ephemeral; named so it can be deleted
        config.name = consumer
        await js.add_consumer(stream, config=config)
        sub = await js.pull_subscribe_bind(consumer=consumer, stream=stream)

        rows = _pages(db, "SELECT position, body FROM events WHERE position > ?"
                          " ORDER BY position LIMIT ?", -(2**63), 1000)
        expected = 0  # the last position compared
        received = 0
        idle = 0
        while received < stream_count:
            if time.monotonic() > deadline:
                raise IntegrityError(
                    f"position {expected + 1}: the stream did not deliver in {timeout:g}s",
                    kind="stream_timeout", position=expected + 1, stream=stream)
            try:
                msgs = await sub.fetch(batch=min(batch, stream_count - received), timeout=2.0)
            except asyncio.TimeoutError:  # nats.errors.TimeoutError is one
                idle += 1
                if idle >= 5:
                    raise IntegrityError(
                        f"position {expected + 1}: the stream stopped delivering after "
                        f"{received} of {stream_count} messages",
                        kind="stream_stalled", position=expected + 1, stream=stream) from None
                continue
            idle = 0
            for msg in msgs:
                received += 1
                sequence = msg.metadata.sequence.stream
                row = next(rows, None)
                expected += 1
                if row is None:
                    raise IntegrityError(
                        f"position {expected}: on the stream (sequence {sequence}) but not in "
                        f"the ledger, which ends at position {ledger_last}",
                        kind="stream_ahead", position=expected, stream_sequence=sequence,
                        ledger_last_position=ledger_last)
                position, body = row
                if position != expected:
                    raise IntegrityError(
                        f"position {expected}: missing from the ledger (next stored is "
                        f"{position})", kind="ledger_gap", position=expected)
                if sequence != position:
                    raise IntegrityError(
                        f"position {position}: the stream's message there has sequence "
                        f"{sequence}", kind="sequence_mismatch", position=position,
                        stream_sequence=sequence)
                if bytes(msg.data) != bytes(body):
                    raise IntegrityError(
                        f"position {position}: stream data differs from the stored body",
                        kind="data_mismatch", position=position)
        row = next(rows, None)
        if row is not None:
            raise IntegrityError(
                f"position {row[0]}: in the ledger but not on the stream, which ends at "
                f"sequence {stream_last}", kind="stream_behind", position=row[0],
                stream_last_sequence=stream_last, ledger_last_position=ledger_last)
        if received != count or stream_last != ledger_last:
            raise IntegrityError(
                f"position {min(stream_last, ledger_last) + 1}: the stream has {stream_count} "
                f"messages up to sequence {stream_last}, the ledger {count} events up to "
                f"position {ledger_last}", kind="count_mismatch",
                position=min(stream_last, ledger_last) + 1)
        return count
    finally:
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
        if consumer is not None:
            try:
                await js.delete_consumer(stream, consumer)
            except Exception:  # noqa: BLE001 - it expires on its own
                pass
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
        for _, body in _pages(db, "SELECT position, body FROM events WHERE position > ?"
                              " ORDER BY position LIMIT ?", -(2**63), page):
            out.write(bytes(body))
            out.write(b"\n")
            count += 1
        db.execute("ROLLBACK")
    finally:
        db.close()
    return count


def read_export(path: str | Path) -> Iterator[dict]:
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
            for field, kind in (("position", int), ("lane_id", str)):
                if not isinstance(record.get(field), kind) or isinstance(record.get(field), bool):
                    raise InvalidRequest(f"field {field}: missing or not {kind.__name__}",
                                         file=name, line=number, field=field)
            yield record


def verify_export(records: Iterator[dict], *, hmac_key: bytes | None = None) -> ExportAudit:
    """Verify an export offline: positions 1..N with no gap, and every lane's
    chain (seqs dense, links, recomputed hashes). Raises ``ChainFault``."""
    chains = LaneChains(key=hmac_key)
    position = 0
    for record in records:
        if record["position"] != position + 1:
            raise _chain_fault("broken_link", position + 1, record["lane_id"], record.get("seq"),
                               "position", position + 1, record["position"])
        position = record["position"]
        chains.check(record, position=position, lane=record["lane_id"])
    return ExportAudit(events=position, lanes=len(chains.tips), last_position=position)
