"""Erasure (spec/erasure.md): the content of the sealed events of a scope — a
session (or one run of it), a data subject, or (retention) what a tenant
committed before a time — replaced by its erased form, and the erasure
itself a committed event.

An erasure is paged: the first ``erase`` request of an ``erasure_id`` commits
its event — in the tenant's ledger lane (session ``laneledger``, run
``erasures``, lane ``main``), with the erasure's id as its event id — and
each request then erases the next ``limit`` events the erasure covers (the
scope's events committed before it) after ``after_position``. Each request is
one transaction, so one transaction-log record: a standby and a restored file
erase exactly what the writer did. Sending a request again erases nothing
twice; the same ``erasure_id`` with another scope or reason is refused.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import msgspec

from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import CONTENT_SALT, ERASED, append_digest, erased_form
from laneledger.contract.clock import Clock, ledger_time
from laneledger.contract.contentref import blob_hexes
from laneledger.contract.erasure import (
    ERASED_DIGEST,
    ERASURE_EVENT,
    ERASURE_LANE,
    ERASURE_RUN,
    LEDGER_SESSION,
)
from laneledger.contract.errors import EntityNotFound, IdempotencyViolation, InvalidRequest, LedgerError
from laneledger.contract.model import (
    AppendCommitted,
    CreateLane,
    Erase,
    ErasureMark,
    ErasurePage,
    encode,
    timestamp_problem,
)
from laneledger.contract.subjects import token
from laneledger.store.batch import CommittedRecord
from laneledger.store.entryhash import hashed_body
from laneledger.store.lookups import LedgerLookups
from laneledger.store.reader import LedgerReader
from laneledger.store.salts import SaltSource
from laneledger.store.structure import StructureCommands
from laneledger.store.txlog import (
    BLOB_LISTED,
    ERASE_EVENT,
    ERASE_EVENT_REFS,
    ERASE_RECEIPT,
    INSERT_EVENT,
    INSERT_RECEIPT,
    MOVE_LANE_HEAD,
    RETENTION_REACHED,
    STREAM_COPY_TO_ERASE,
    Writes,
)
from laneledger.store.txlogsync import TxLogSync
from laneledger.tlog.leaves import entry_leaf

_decode = msgspec.json.Decoder().decode
# Positions a retention page looks at (its tenant's events among everyone's).
SCAN_WINDOW = 20_000
# One request's bounds: the bodies it reads, and the erased bodies its
# transaction-log record holds (with the receipts, well under a NATS message).
READ_BUDGET = 16 * 1024 * 1024
RECORD_BUDGET = 384 * 1024


class ErasureCommands:
    def __init__(
        self,
        *,
        clock: Clock,
        key: bytes | None,
        seal: bool,
        salts: SaltSource,
        reader: LedgerReader,
        lookups: LedgerLookups,
        structure: StructureCommands,
        log: TxLogSync,
        before_use: Callable[[], None],
    ) -> None:
        self._clock = clock
        self._reader = reader
        self._key = key
        self._seal = seal
        self._salts = salts  # the writer's: one source of content salts
        self._lookups = lookups
        self._structure = structure
        self._log = log
        self._before_use = before_use

    def erase(self, cmd: Erase) -> tuple[ErasurePage, list[CommittedRecord], ErasedBlobs]:
        """One page of an erasure, the erasure event when this request
        committed it (for the committed stream), and the blobs its events
        referenced (for the sequencer to delete those left unreferenced)."""
        self._before_use()
        _check_scope(cmd)
        tenant = self._tenant_of(cmd)
        self._lookups.load_actors({cmd.actor_id})
        if self._lookups.actor_tenants.get(cmd.actor_id) != tenant:
            raise EntityNotFound("no such actor", kind="actor", id=cmd.actor_id)
        mark = self._committed_erasure(cmd, tenant)
        writes: Writes = []
        committed: list[CommittedRecord] = []
        leaves: list[bytes] = []
        before = after = self._log.last_position
        if mark is None and not cmd.dry_run:
            record, receipt_row, head = self._erasure_event(cmd, tenant, after + 1)
            after += 1
            mark = ErasureMark(position=after, event_id=cmd.erasure_id)
            writes += [
                (INSERT_EVENT, [record.row]),
                (INSERT_RECEIPT, [receipt_row]),
                (MOVE_LANE_HEAD, [head]),
            ]
            committed.append(record.committed)
            leaves.append(entry_leaf(record.entry_hash))
        covered_before = mark.position if mark is not None else after + 1
        reached = 0
        if cmd.committed_before is not None:
            reached = self._retention_reached(tenant)
            cmd = msgspec.structs.replace(cmd, after_position=max(cmd.after_position, reached))
        page, scanned_to = self._page(cmd, tenant, covered_before)
        bodies, receipts, refs, report = self._erase_page(cmd, tenant, page, mark, scanned_to, covered_before)
        if bodies:
            writes += [(ERASE_EVENT, bodies), (ERASE_RECEIPT, receipts)]
            # Their copies on the streams go after the commit (the sequencer's).
            writes.append((STREAM_COPY_TO_ERASE, [(position,) for _, position in bodies]))
        erased = sorted({sha for _, sha, _ in refs})
        unreferenced = [sha for sha in erased if not self._referenced(tenant, sha, refs)]
        if refs:
            writes.append((ERASE_EVENT_REFS, sorted({(t, position) for t, _, position in refs})))
        if unreferenced:  # committed with the erasure: deleted from the buckets after it
            writes.append((BLOB_LISTED, [(secrets.token_hex(16), tenant, sha) for sha in unreferenced]))
        retention = cmd.committed_before is not None and mark is not None and not cmd.dry_run
        if retention and report.next_after_position > reached:
            writes.append((RETENTION_REACHED, [(tenant, report.next_after_position)]))
        if writes:
            self._log.open_writes(writes, "ledger erasure failed", leaves=leaves, position=after)
            self._log.commit_writes(writes, before, after)
            if committed:
                self._lookups.forget_lanes()  # the ledger lane's head moved
        blobs = ErasedBlobs(tenant, erased, unreferenced)
        return msgspec.structs.replace(report, erasure=mark), committed, blobs

    def _referenced(self, tenant: str, sha256: str, erasing: list[tuple[Any, ...]]) -> bool:
        """Whether an event of the tenant that is not erased references the
        blob, once this page's rows of ``event_refs`` (``erasing``) are gone:
        an erased event's rows go with its content."""
        gone = [position for t, sha, position in erasing if t == tenant and sha == sha256]
        rows = self._lookups.rows(
            "SELECT position FROM event_refs WHERE tenant = ? AND sha256 = ? LIMIT ?",
            (tenant, sha256, len(gone) + 1),
        )
        return any(position not in gone for (position,) in rows)

    # ------------------------------------------------------------------ parts

    def _tenant_of(self, cmd: Erase) -> str:
        """The scope's tenant: the one named (on a tenant's subject, always),
        or else the only one that has the session or the data subject."""
        if cmd.committed_before is not None:
            if cmd.tenant is None:
                raise InvalidRequest("a retention erasure names its tenant", path="$.tenant")
            return cmd.tenant
        if cmd.session_id is not None:
            return self._reader.session_tenant(cmd.session_id, cmd.tenant)
        if cmd.tenant is not None:  # a subject with no events yet is still erasable
            return cmd.tenant
        assert cmd.data_subject is not None  # _check_scope: one scope
        return self._reader.data_subject_tenant(cmd.data_subject)

    def _committed_erasure(self, cmd: Erase, tenant: str) -> ErasureMark | None:
        """The erasure event of ``cmd.erasure_id``, when committed: it must
        say what ``cmd`` says (``IdempotencyViolation`` otherwise)."""
        rows = self._lookups.rows(
            "SELECT position, body FROM events WHERE id = ? AND tenant = ?", (cmd.erasure_id, tenant)
        )
        if not rows:
            if (tenant, cmd.erasure_id) in self._lookups.stored_receipts({cmd.erasure_id}):
                raise IdempotencyViolation(
                    "erasure id already used as an append id", erasure_id=cmd.erasure_id
                )
            return None
        position, body = rows[0]
        event = _decode(body)
        if event.get("event_type") != ERASURE_EVENT or event.get("payload") != _erasure_payload(cmd):
            raise IdempotencyViolation(
                "erasure id already used for another erasure (or event)",
                erasure_id=cmd.erasure_id,
                position=position,
            )
        return ErasureMark(position=position, event_id=cmd.erasure_id)

    def _erasure_event(
        self, cmd: Erase, tenant: str, position: int
    ) -> tuple[_Staged, tuple[Any, ...], tuple[Any, ...]]:
        lane = self._structure.create_lane(
            CreateLane(tenant=tenant, session_id=LEDGER_SESSION, run_id=ERASURE_RUN, name=ERASURE_LANE)
        )
        self._lookups.load_lanes({lane.id})
        head = self._lookups.append_lane(lane.id, token(tenant))
        now = self._clock()
        proposed: dict[str, Any] = {
            "schema_version": "1.0",
            "id": cmd.erasure_id,
            "lane_id": lane.id,
            "subject_id": lane.id,
            "event_type": ERASURE_EVENT,
            "actor_id": cmd.actor_id,
            "occurred_at": now,
            "payload": _erasure_payload(cmd),
            "extensions": {},
        }
        seq = head.last_seq + 1
        record = {
            **proposed,
            "tenant": tenant,
            "session_id": LEDGER_SESSION,
            "run_id": ERASURE_RUN,
            "seq": seq,
            "position": position,
            "append_id": cmd.erasure_id,
            "committed_at": now,
            "prev_hash": head.head_hash,
        }
        if self._seal:
            record[CONTENT_SALT] = self._salts.next()
        entry_hash, body = hashed_body(record, self._key)
        receipt = AppendCommitted(
            append_id=cmd.erasure_id,
            lane_id=lane.id,
            digest=append_digest([proposed]),
            first_seq=seq,
            last_seq=seq,
            event_ids=[cmd.erasure_id],
            positions=[position],
            entry_hashes=[entry_hash],
            committed_at=now,
        )
        staged = _Staged(
            row=(
                position,
                cmd.erasure_id,
                lane.id,
                seq,
                tenant,
                LEDGER_SESSION,
                ERASURE_RUN,
                ERASURE_EVENT,
                cmd.erasure_id,
                body,
            ),
            committed=CommittedRecord(
                position, cmd.erasure_id, ERASURE_EVENT, tenant, LEDGER_SESSION, ERASURE_RUN, lane.id, body
            ),
            entry_hash=entry_hash,
        )
        receipt_row = (tenant, cmd.erasure_id, lane.id, receipt.digest, encode(receipt))
        return staged, receipt_row, (seq, entry_hash, lane.id, tenant)

    def _page(self, cmd: Erase, tenant: str, before: int) -> tuple[list[tuple[int, str, int]], int]:
        """The next ``limit`` events of the scope below ``before`` (and one
        more, to tell whether more remain): (position, append id, body size),
        without their bodies (an event may be near 1 MiB); and the last
        position the query looked at. A retention scope looks at a window of
        ``SCAN_WINDOW`` positions a page: its tenant's events are found among
        every tenant's by position."""
        sql: str
        params: tuple[Any, ...]
        end = before - 1
        if cmd.committed_before is not None:
            end = min(end, cmd.after_position + SCAN_WINDOW)
            sql = (
                "SELECT position, append_id, length(body) FROM events WHERE position > ? AND position <= ?"
                " AND tenant = ? AND session_id != ?"
            )
            params = (cmd.after_position, end, tenant, LEDGER_SESSION)
        elif cmd.data_subject is not None:
            sql = (
                "SELECT s.position, e.append_id, length(e.body) FROM event_subjects s"
                " JOIN events e ON e.position = s.position WHERE s.tenant = ? AND s.data_subject = ?"
                " AND s.position > ? AND s.position < ?"
            )
            params = (tenant, cmd.data_subject, cmd.after_position, before)
            rows = self._lookups.rows(sql + " ORDER BY s.position LIMIT ?", (*params, cmd.limit + 1))
            return [(p, a, n) for p, a, n in rows], end
        else:
            sql = (
                "SELECT position, append_id, length(body) FROM events WHERE session_id = ? AND position > ?"
                " AND position < ? AND tenant = ?"
            )
            params = (cmd.session_id, cmd.after_position, before, tenant)
            if cmd.run_id is not None:
                sql += " AND run_id = ?"
                params += (cmd.run_id,)
        rows = self._lookups.rows(sql + " ORDER BY position LIMIT ?", (*params, cmd.limit + 1))
        return [(p, a, n) for p, a, n in rows], end

    def _retention_reached(self, tenant: str) -> int:
        rows = self._lookups.rows("SELECT position FROM retention WHERE tenant = ?", (tenant,))
        return int(rows[0][0]) if rows else 0

    def _erase_page(
        self,
        cmd: Erase,
        tenant: str,
        page: list[tuple[int, str, int]],
        mark: ErasureMark | None,
        scanned_to: int,
        before: int,
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]], ErasurePage]:
        """The page's erased bodies, receipts and ``event_refs`` rows (the
        blobs its erased events referenced); the page ends early once
        it has read ``READ_BUDGET`` bytes of bodies or staged ``RECORD_BUDGET``
        bytes of its transaction-log record (a request's work is bounded). A
        retention erasure ends at its tenant's first event committed at or
        after its time: the sequencer's clock moves forward, so the events
        after it are no older."""
        cutoff = ledger_time(cmd.committed_before) if cmd.committed_before is not None else None
        reached_cutoff = False
        has_more = len(page) > cmd.limit
        bodies: list[tuple[Any, ...]] = []
        refs: list[tuple[Any, ...]] = []
        appends: set[str] = set()
        erased = already = unsealed = read = staged = 0
        last = cmd.after_position
        for position, append_id, size in page[: cmd.limit]:
            if bodies and (read + size > READ_BUDGET or staged > RECORD_BUDGET):
                has_more = True
                break
            rows = self._lookups.rows("SELECT body FROM events WHERE position = ?", (position,))
            event = _decode(rows[0][0])
            if cutoff is not None and not event.get("committed_at", "") < cutoff:
                reached_cutoff = True
                break
            read += size
            last = position
            if ERASED in event:
                already += 1
            elif CONTENT_SALT not in event:
                unsealed += 1
            else:
                erased += 1
                if mark is not None and not cmd.dry_run:
                    gone = canonicalize(erased_form(event, msgspec.to_builtins(mark)))
                    bodies.append((gone, position))
                    named = [(tenant, sha, position) for sha in blob_hexes(event.get("payload"))]
                    refs += named
                    # its rows of event_refs are in the record too (and bound the blobs to delete)
                    staged += len(gone) + len(named) * (len(tenant) + 80)
                    appends.add(append_id)
        if cutoff is not None and not reached_cutoff and not has_more:
            last = scanned_to  # the whole window looked at
            has_more = scanned_to < before - 1
        elif reached_cutoff:
            has_more = False
        receipts = []
        for (owner, append_id), receipt in self._lookups.stored_receipts(appends).items():
            if owner == tenant and receipt.digest != ERASED_DIGEST:
                without = msgspec.structs.replace(receipt, digest=ERASED_DIGEST)
                receipts.append((ERASED_DIGEST, encode(without), append_id, tenant))
        report = ErasurePage(
            erasure_id=cmd.erasure_id,
            erasure=mark,
            erased=erased,
            already_erased=already,
            unsealed=unsealed,
            has_more=has_more,
            next_after_position=last,
            dry_run=cmd.dry_run,
        )
        return bodies, receipts, refs, report


class ErasedBlobs(msgspec.Struct, frozen=True):
    """The blobs (sha256 hex) an erasure page's events referenced, of one
    tenant, and those of them no event of it that is not erased references
    any more: the sequencer deletes these from the tenant's buckets."""

    tenant: str
    erased: list[str]
    unreferenced: list[str]


class _Staged(msgspec.Struct, frozen=True):
    row: tuple[Any, ...]
    committed: CommittedRecord
    entry_hash: str


def _check_scope(cmd: Erase) -> None:
    """One scope: a session (maybe one run of it), a data subject, or a time
    (retention); never the ledger's own session."""
    named = [n for n in ("session_id", "data_subject", "committed_before") if getattr(cmd, n) is not None]
    if len(named) != 1:
        raise InvalidRequest(
            "an erasure names one scope: a session_id (and maybe a run_id), a data_subject or a"
            " committed_before",
            path="$.session_id",
            named=named,
        )
    if cmd.run_id is not None and cmd.session_id is None:
        raise InvalidRequest("a run_id is erased within its session_id", path="$.run_id")
    problem = None if cmd.committed_before is None else timestamp_problem(cmd.committed_before)
    if problem is not None:
        raise InvalidRequest(
            f"committed_before is not a real instant: {problem}",
            path="$.committed_before",
            found=cmd.committed_before,
        )
    if cmd.session_id == LEDGER_SESSION:
        raise InvalidRequest(
            "the ledger's own session (its erasure events) cannot be erased",
            path="$.session_id",
            found=cmd.session_id,
        )


def _erasure_payload(cmd: Erase) -> dict[str, Any]:
    """What the erasure event says: its scope and why (no content)."""
    scope: dict[str, Any] = {}
    for name in ("session_id", "run_id", "data_subject"):
        value = getattr(cmd, name)
        if value is not None:
            scope[name] = value
    if cmd.committed_before is not None:
        scope["committed_before"] = ledger_time(cmd.committed_before)
    return {"scope": scope, "reason": cmd.reason}


def same_event(stream_data: bytes, stored: bytes) -> bool:
    """Whether a committed-stream message holds the stored event: the same
    bytes, or — the stream keeps what was published — the stored event is
    the erased form of the message's (spec/erasure.md)."""
    if stream_data == stored or b'"erased":' not in stored:
        return stream_data == stored
    try:
        event, published = _decode(stored), _decode(stream_data)
        mark = event.get(ERASED)
        return isinstance(mark, dict) and canonicalize(erased_form(published, mark)) == stored
    except (msgspec.DecodeError, ValueError, LedgerError):
        return False
