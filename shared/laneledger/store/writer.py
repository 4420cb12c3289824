"""The only code that writes a ledger: the append algorithm of
spec/object-model.md, steps 1–6, and the structure commands.

``LedgerWriter`` runs the algorithm (its batches, their staging and commit)
and composes the rest, each in its own module of ``store``:

- ``eventchecks``, ``signatures``, ``rewinds``: what each event must be (step 5)
- ``entryhash``: a committed event's hash and stored bytes (step 6)
- ``batch``: a batch's heads, rows, receipts and rejections on the way
- ``lookups``: what it reads of the file by id, and its caches
- ``structure``: actors, lanes, turns, actions and attempts
- ``txlogsync``: commits, on the transaction log first; catch-up and seeding

``LedgerWriter`` is synchronous and not thread-safe on purpose: the sequencer
gives it one user at a time (services/sequencer/writerthread.py), so a whole
pulled batch is one unit of work in one SQLite transaction, and the in-memory
caches (lane heads, actor tenants) are authoritative because nothing else
writes the file.

A batch may be split at its ``COMMIT`` (``stage_batch``, then
``commit_staged``, maybe on another thread). While a staged batch's
transaction is open the writer and its reader refuse every other use of the
connection (``RuntimeError``): anything else would read, or commit, the
batch's uncommitted rows.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import msgspec
from msgspec import UNSET

from laneledger.contract.clock import Clock, system_clock
from laneledger.contract.contentref import blob_hexes
from laneledger.contract.erasure import ERASED_DIGEST
from laneledger.contract.errors import (
    BlobMissing,
    IdempotencyViolation,
    LaneConflict,
    LedgerError,
    StoreError,
)
from laneledger.contract.model import (
    Action,
    Actor,
    AppendCommitted,
    AppendRejected,
    Attempt,
    CreateAction,
    CreateAttempt,
    CreateLane,
    CreateTurn,
    EnsureActor,
    Erase,
    ErasurePage,
    Lane,
    Receipt,
    Turn,
    encode,
)
from laneledger.contract.vocabulary import (
    REWOUND,
)
from laneledger.sqlite import (
    WalCheckpointer,
    failures_as,
    roll_back,
    transaction,
)
from laneledger.store.append import PreparedAppend
from laneledger.store.batch import BatchResult, BatchState, CommittedRecord, StagedBatch, rejection
from laneledger.store.chainkey import chain_key_fingerprint
from laneledger.store.entryhash import hashed_body
from laneledger.store.erasure import ErasedBlobs, ErasureCommands
from laneledger.store.eventchecks import check_event
from laneledger.store.lookups import LedgerLookups
from laneledger.store.reader import LedgerReader
from laneledger.store.recordrewrite import erased_record
from laneledger.store.rewinds import check_rewind
from laneledger.store.salts import SaltSource
from laneledger.store.schema import file_id as schema_file_id
from laneledger.store.signatures import check_actor_signature
from laneledger.store.structure import StructureCommands
from laneledger.store.txlog import (
    BLOB_UNLISTED,
    INSERT_EVENT,
    INSERT_EVENT_REF,
    INSERT_EVENT_SUBJECT,
    INSERT_RECEIPT,
    MOVE_LANE_HEAD,
    NAMING_ERASED_BLOBS,
    STREAM_COPY_ERASED,
    TxLog,
    TxLogMoved,
    Writes,
    decode_record,
    encode_txrecord,
    record_holding,
)
from laneledger.store.txlogsync import TxLogSync
from laneledger.store.usage import InlineUsage
from laneledger.tlog import store as tree_store
from laneledger.tlog.leaves import entry_leaf

T = TypeVar("T")


class StreamCopies(NamedTuple):
    """Erased events whose copies on the streams are still to remove."""

    bodies: dict[int, bytes]  # position -> erased body
    # The log records to rewrite (by their last part's sequence, in log
    # order): those holding these events, and those naming erased blobs.
    records: list[int]
    unindexed: list[int]  # positions no indexed record holds (applied before the index)


class LogRewrite(NamedTuple):
    data: bytes | None  # the record rewritten; None: as it is
    names_blobs: bool  # whether, so, it still names an erased blob


class LedgerWriter:
    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        clock: Clock = system_clock,
        hmac_key: bytes | None = None,
        seal: bool = True,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self._db = conn
        self._clock = clock
        self._key = hmac_key
        # Seal each new event's content under its own random salt
        # (spec/canonical.md §3), so that it can be erased (spec/erasure.md).
        # ``random_bytes``: seeded only where output must repeat (a benchmark).
        self._seal = seal
        self._salts = SaltSource(random_bytes)
        # The batch whose transaction is open, between stage_batch and
        # commit_staged: while set, every other use of the connection raises.
        self._staged: StagedBatch | None = None
        # Reads answer from the file as it is, even one behind the log (a full
        # disk, say, refuses to take the log's records); what writes or
        # decides catches up first (``_before_use``, ``current``).
        self.reader = LedgerReader(conn, before_read=self._refuse_if_staged)
        self._lookups = LedgerLookups(conn, before_use=self._before_use)
        # The sequencer reads the actors' keys from its event loop
        # (PreparedAppend.signatures): the cache's own dict, never replaced.
        self.actor_keys = self._lookups.actor_keys
        # Each tenant's stored event bytes against its ``inline_bytes`` limit
        # (unlimited until the sequencer sets ``inline_usage.limit``).
        self.inline_usage = InlineUsage()
        # Commits, and the file kept in step with its transaction log.
        self._log = TxLogSync(
            conn,
            last_position=self.reader.last_position(),
            inline_usage=self.inline_usage,
            forget_lanes=self._lookups.forget_lanes,
        )
        self._structure = StructureCommands(
            clock=clock,
            reader=self.reader,
            lookups=self._lookups,
            log=self._log,
            before_use=self._before_use,
        )
        self._erasures = ErasureCommands(
            clock=clock,
            key=hmac_key,
            seal=seal,
            salts=self._salts,
            reader=self.reader,
            lookups=self._lookups,
            structure=self._structure,
            log=self._log,
            before_use=self._before_use,
        )

    def checkpoint_aside(self) -> WalCheckpointer:
        """Checkpoint this file's WAL from a thread of its own from now on,
        not inside this writer's commits (``WalCheckpointer``); the caller
        closes it, before this writer's connection."""
        self._refuse_if_staged()
        self._log.checkpointer = WalCheckpointer(self._db)
        return self._log.checkpointer

    # ------------------------------------------------------------------ appends

    def apply_batch(self, batch: list[PreparedAppend]) -> BatchResult:
        """Apply every request in order and commit them all in one transaction.

        Raises ``InternalError`` when SQLite fails; then nothing of the batch
        is written and the caller must not ack any of its messages.
        """
        result = self.commit_staged(self.stage_batch(batch))
        # Rejections decided without a write were decided on this file alone:
        # with a log, confirm nothing newer is there before they go out.
        if (
            self._log.txlog is not None
            and not result.committed
            and any(isinstance(r, AppendRejected) for r in result.receipts)
            and self.catch_up()
        ):
            result = self.commit_staged(self.stage_batch(batch))
        return result

    def current(self, decide: Callable[[], T], *, tries: int = 3) -> T:
        """``decide()`` (a command or a read), with a log made to answer as
        the log's current state would, never a stale file's: decided again
        when its write was refused because the log had moved on
        (``TxLogMoved``; the file reads the log first), or when it answered
        from absence or conflict (a ``StoreError``: no such actor, a lane that
        exists otherwise, …) while the log held transactions the file had not
        applied. At most ``tries`` times; then the last error stands."""
        for attempt in range(1, tries + 1):
            try:
                return decide()
            except TxLogMoved:
                if attempt == tries:
                    raise
            except StoreError:
                if self._log.txlog is None or attempt == tries or not self.catch_up():
                    raise
        raise AssertionError("unreachable: the last try returns or raises")

    def stage_batch(self, batch: list[PreparedAppend]) -> StagedBatch:
        """``apply_batch`` up to its ``COMMIT``: every request applied and the
        rows written in an open transaction. Until ``commit_staged`` ends it,
        any other use of this writer or its reader raises ``RuntimeError``
        (it would read, or commit, the batch's uncommitted rows). The split
        lets the sequencer run the CPU work on its event loop and only the
        durable commit (the fsync) on another thread."""
        self._before_use()
        committed_at = self._clock()
        stored = self._lookups.stored_receipts({a.request.append_id for a in batch})
        known = self._lookups.known_events(
            {e.id for a in batch for e in a.request.events}
            | {e.causation_id for a in batch for e in a.request.events if e.causation_id is not UNSET}
        )
        self._lookups.load_lanes({a.request.lane_id for a in batch})
        self._lookups.load_actors({e.actor_id for a in batch for e in a.request.events})
        # An event about its own lane (the SDK's default subject) needs no
        # lookup (check_event); the three queries cost a batch of two such
        # requests ~10 µs (bench/step_cpu.py --batch 2: 94 -> 89 µs/event).
        subjects = self._lookups.subject_lanes(
            {e.subject_id for a in batch for e in a.request.events if e.subject_id != e.lane_id}
        )

        state = BatchState()
        position = before = self._log.last_position
        receipts: list[Receipt] = []
        for append in batch:
            try:
                receipt, position = self._apply_one(
                    append, state, stored, known, subjects, position, committed_at
                )
            except LedgerError as err:
                receipt = rejection(err, append)
            receipts.append(receipt)
        writes = self._write(state, position) if state.event_rows else []
        self._staged = StagedBatch(receipts, state, position, before, writes)
        return self._staged

    def commit_staged(self, staged: StagedBatch) -> BatchResult:
        """Commit what ``stage_batch`` wrote, then advance the heads it moved.
        Raises ``InternalError`` when SQLite fails; then nothing of the batch
        is written. Either way the connection is free again."""
        self._check_staged(staged)
        try:
            if staged.writes:
                self._log.commit_writes(staged.writes, staged.position_before, staged.position)
        finally:
            self._staged = None
        return self._staged_result(staged)

    @property
    def commits_on_loop(self) -> bool:
        """Whether the next staged batch may end in ``commit_staged_on_loop``:
        the log's append can be awaited on the event loop, and nothing need
        be read from the log before the batch is staged."""
        return self._log.logs_on_loop

    async def commit_staged_on_loop(self, staged: StagedBatch) -> BatchResult:
        """``commit_staged`` with the log's append awaited on the event loop
        that runs the log (``commits_on_loop``): no thread waits for that
        loop. Until it returns the batch holds the connection, as staged."""
        self._check_staged(staged)
        try:
            if staged.writes:
                await self._log.commit_writes_async(staged.writes, staged.position_before, staged.position)
        finally:
            self._staged = None
        return self._staged_result(staged)

    def _staged_result(self, staged: StagedBatch) -> BatchResult:
        self._lookups.move_heads(staged.state.heads)
        self.inline_usage.add(staged.state.inline_bytes)
        return BatchResult(staged.receipts, staged.state.committed)

    def roll_back_staged(self, staged: StagedBatch) -> None:
        """Undo what ``stage_batch`` wrote, when it cannot go on to its
        commit: nothing of the batch stays, no head moves."""
        self._check_staged(staged)
        self._staged = None
        with failures_as("ledger rollback failed", position=staged.position):
            roll_back(self._db)

    def _check_staged(self, staged: StagedBatch) -> None:
        if staged is not self._staged:
            raise RuntimeError(
                "this batch is not the one staged on this writer (ended already, or staged elsewhere)"
            )

    def _refuse_if_staged(self) -> None:
        if self._staged is not None:
            raise RuntimeError(
                "a staged batch holds the ledger connection in an open transaction;"
                " nothing may use it before commit_staged ends that"
            )

    def _apply_one(
        self,
        append: PreparedAppend,
        state: BatchState,
        stored: dict[tuple[str, str], AppendCommitted],
        known: dict[tuple[str, str], tuple[str, int]],
        subjects: dict[tuple[str, str], str],
        position: int,
        committed_at: str,
    ) -> tuple[Receipt, int]:
        request = append.request
        # 1. the lane: the subject's tenant's lane of this id (every id is
        # its tenant's own; another tenant's is not even looked at)
        lane = self._lookups.append_lane(request.lane_id, append.tenant_token)
        # 2. replay, 3. idempotency violation: append ids are the tenant's own
        previous = state.receipts.get((lane.tenant, request.append_id)) or stored.get(
            (lane.tenant, request.append_id)
        )
        if previous is not None:
            # An erased append's digest is gone with its content (spec/erasure.md):
            # its id can no longer be checked against what is resent, only answered.
            if previous.digest in (append.digest, ERASED_DIGEST):
                return msgspec.structs.replace(previous, replayed=True), position
            raise IdempotencyViolation(
                "append id already committed with other events",
                append_id=request.append_id,
                stored_digest=previous.digest,
                digest=append.digest,
            )
        # 4. head conflict
        last_seq, head_hash = state.heads.get((lane.tenant, lane.id), (lane.last_seq, lane.head_hash))
        if request.expected_last_seq != last_seq:
            raise LaneConflict(
                "lane head moved",
                lane_id=lane.id,
                expected_last_seq=request.expected_last_seq,
                actual_last_seq=last_seq,
            )
        # 5. per-event checks
        in_request: dict[str, int] = {}
        for index, event in enumerate(request.events):
            check_event(
                event,
                index,
                lane,
                state,
                known,
                subjects,
                in_request,
                request.events,
                self._lookups.actor_tenants,
            )
            check_actor_signature(append, index, self.actor_keys)
            in_request[event.id] = index
        # 6. commit (staged into the batch transaction)
        event_ids: list[str] = []
        positions: list[int] = []
        hashes: list[str] = []
        rows, records = [], []
        subject_rows: list[tuple[str, str, int]] = []
        ref_rows: list[tuple[str, str, int]] = []
        for raw, event in zip(append.sent, request.events, strict=True):
            if event.event_type == REWOUND:  # nothing is staged yet: refusing here is clean
                check_rewind(event, lane, state, position + 1, self._lookups.stored_event)
            position += 1
            last_seq += 1
            record = {
                **raw,
                "tenant": lane.tenant,
                "session_id": lane.session_id,
                "run_id": lane.run_id,
                "seq": last_seq,
                "position": position,
                "append_id": request.append_id,
                "committed_at": committed_at,
                "prev_hash": head_hash,
            }
            # The event was walked for the digest; the fields added here are
            # str and ints far below 2^53, which the fast path writes exactly.
            if self._seal:
                record["content_salt"] = self._salts.next()
            head_hash, body = hashed_body(record, self._key, admitted=append.admitted)
            rows.append(
                (
                    position,
                    event.id,
                    lane.id,
                    last_seq,
                    lane.tenant,
                    lane.session_id,
                    lane.run_id,
                    event.event_type,
                    request.append_id,
                    body,
                )
            )
            records.append(
                CommittedRecord(
                    position,
                    event.id,
                    event.event_type,
                    lane.tenant,
                    lane.session_id,
                    lane.run_id,
                    lane.id,
                    body,
                )
            )
            if event.data_subject is not UNSET:
                subject_rows.append((lane.tenant, event.data_subject, position))
            if append.may_reference:  # False for nearly every request: nothing to look for
                for sha in blob_hexes(raw.get("payload")):
                    if self._lookups.rows(  # nothing is staged yet: refusing is clean
                        "SELECT 1 FROM blobs_to_erase WHERE tenant = ? AND sha256 = ?", (lane.tenant, sha)
                    ):
                        raise BlobMissing(
                            "the event references a blob an erasure is deleting: store it again, then resend",
                            event_id=event.id,
                            ref=f"sha256:{sha}",
                            reason="blob_erased",
                        )
                    ref_rows.append((lane.tenant, sha, position))
            event_ids.append(event.id)
            positions.append(position)
            hashes.append(head_hash)
        receipt = AppendCommitted(
            append_id=request.append_id,
            lane_id=lane.id,
            digest=append.digest,
            first_seq=last_seq - len(rows) + 1,
            last_seq=last_seq,
            event_ids=event_ids,
            positions=positions,
            entry_hashes=hashes,
            committed_at=committed_at,
        )
        # the tenant's inline_bytes quota (nothing is staged yet: refusing here is clean)
        adding = sum(len(row[-1]) for row in rows)
        self.inline_usage.check(self._db, lane.tenant, state.inline_bytes.get(lane.tenant, 0), adding)
        state.inline_bytes[lane.tenant] = state.inline_bytes.get(lane.tenant, 0) + adding
        state.event_rows.extend(rows)
        state.subject_rows.extend(subject_rows)
        state.ref_rows.extend(ref_rows)
        state.leaves.extend(map(entry_leaf, hashes))
        state.committed.extend(records)
        state.receipt_rows.append((lane.tenant, request.append_id, lane.id, append.digest, encode(receipt)))
        state.receipts[(lane.tenant, request.append_id)] = receipt
        state.heads[(lane.tenant, lane.id)] = (last_seq, head_hash)
        for event_id, pos in zip(event_ids, positions, strict=True):
            state.events[(lane.tenant, event_id)] = (lane.session_id, pos)
        return receipt, position

    def _write(self, state: BatchState, position: int) -> Writes:
        writes: Writes = [
            (INSERT_EVENT, state.event_rows),
            *([(INSERT_EVENT_SUBJECT, state.subject_rows)] if state.subject_rows else []),
            *([(INSERT_EVENT_REF, state.ref_rows)] if state.ref_rows else []),
            (INSERT_RECEIPT, list(state.receipt_rows)),
            (
                MOVE_LANE_HEAD,
                [(seq, head, lane_id, tenant) for (tenant, lane_id), (seq, head) in state.heads.items()],
            ),
        ]
        self._log.open_writes(writes, "ledger commit failed", leaves=state.leaves, position=position)
        return writes

    def inline_bytes_used(self) -> dict[str, int]:
        """Each tenant's stored event bytes (``store/usage.py``), summed from
        the file when not known: the sequencer warms it as it becomes active."""
        self._before_use()
        return dict(self.inline_usage.used(self._db))

    def tree_head(self) -> tuple[int, bytes]:
        """The Merkle tree's size and root as committed (spec/tlog.md): what a
        signed checkpoint states. With a log, the file takes what it missed first."""
        self._before_use()
        size = tree_store.tree_size(self._db)
        return size, tree_store.root(self._db, size)

    # ------------------------------------------------------------ the log

    @property
    def last_position(self) -> int:
        """The position of the file's last committed event."""
        return self._log.last_position

    @property
    def txlog_seq(self) -> int:
        """The log position of the last record this file holds."""
        return self._log.txlog_seq

    @property
    def applied_from_log(self) -> int:
        """Records applied by ``catch_up``, in all."""
        return self._log.applied_from_log

    @property
    def log_restarted_after(self) -> int | None:
        """The file's last position when an empty log started after it."""
        return self._log.log_restarted_after

    @property
    def seeded_rows(self) -> int:
        """Rows this writer appended to the log as a seed."""
        return self._log.seeded_rows

    @property
    def seed_max_rows(self) -> int:
        return self._log.seed_max_rows

    @seed_max_rows.setter
    def seed_max_rows(self, rows: int) -> None:
        self._log.seed_max_rows = rows

    @property
    def seed_max_bytes(self) -> int:
        return self._log.seed_max_bytes

    @seed_max_bytes.setter
    def seed_max_bytes(self, size: int) -> None:
        self._log.seed_max_bytes = size

    @property
    def chain_key(self) -> str:
        """The fingerprint of how this writer hashes chains (its HMAC key, or
        none): every sequencer on one log must have the same (``store/chainkey.py``)."""
        return chain_key_fingerprint(self._key)

    def file_id(self) -> str:
        """This file's own id (``schema.file_id``): the sequencer's lease holder."""
        self._refuse_if_staged()
        return schema_file_id(self._db)

    def use_txlog(self, txlog: TxLog, *, seed: bool = True) -> None:
        """From now on store every transaction on ``txlog`` before it
        commits; what the log holds beyond this file is applied first.
        ``seed``: a log holding nothing of this non-empty file is first
        given the file's rows (store/txlogseed.py); False: never appended to
        but by a write (``laneledger restore``)."""
        self._refuse_if_staged()
        self._log.use(txlog, seed=seed)

    def _before_use(self) -> None:
        """Every read and write comes here first: refused while a staged
        batch is open; with a log, the file first takes what it missed."""
        self._refuse_if_staged()
        if self._log.behind:
            self.catch_up()

    def catch_up(self) -> int:
        """Apply the log's records after ``txlog_seq``, each in its own
        transaction with its position, and return how many; then seed the
        log, or complete its seed, when that is due (``TxLogSync.catch_up``)."""
        self._refuse_if_staged()
        return self._log.catch_up()

    # ------------------------------------------------------------- structure
    # (store/structure.py; any of them may be decided in ``current``)

    def ensure_actor(self, cmd: EnsureActor) -> Actor:
        return self._structure.ensure_actor(cmd)

    def create_lane(self, cmd: CreateLane) -> Lane:
        return self._structure.create_lane(cmd)

    def create_turn(self, cmd: CreateTurn) -> Turn:
        return self._structure.create_turn(cmd)

    def create_action(self, cmd: CreateAction) -> Action:
        return self._structure.create_action(cmd)

    def create_attempt(self, cmd: CreateAttempt) -> Attempt:
        return self._structure.create_attempt(cmd)

    # ------------------------------------------------------------- erasure

    def erase(self, cmd: Erase) -> tuple[ErasurePage, list[CommittedRecord], ErasedBlobs]:
        """One page of an erasure (store/erasure.py, spec/erasure.md), the
        erasure event when this request committed it, and the blobs its
        events referenced (those left unreferenced, for the sequencer to delete)."""
        return self._erasures.erase(cmd)

    def blobs_to_erase(self) -> list[tuple[str, str]]:
        """(tenant, sha256 hex) of the blobs erasures left unreferenced that
        are not deleted yet (spec/erasure.md, "Blobs"): while one is listed,
        an append naming it is refused ``blob_missing`` (``reason:
        "blob_erased"``), or it would reference a blob about to be gone."""
        return [(t, sha) for t, sha in self._lookups.rows("SELECT tenant, sha256 FROM blobs_to_erase", ())]

    def blobs_deleted(self, tenant: str, hexes: list[str]) -> None:
        """These blobs of the tenant are gone from its buckets: off the list
        (by their ids: store/txlog.py, BLOB_UNLISTED)."""
        ids = [
            (listed,)
            for sha in hexes
            for (listed,) in self._lookups.rows(
                "SELECT id FROM blobs_to_erase WHERE tenant = ? AND sha256 = ?", (tenant, sha)
            )
        ]
        if ids:
            self._structure.write_rows([(BLOB_UNLISTED, ids)])

    def stream_copies_to_erase(self, limit: int) -> StreamCopies:
        """The first ``limit`` erased events whose copies on the streams are
        still to remove (store/erasedcopies.py, spec/erasure.md "The
        streams"): their erased bodies, and the log records holding them."""
        rows = self._lookups.rows(
            "SELECT e.position, e.body FROM stream_copies_to_erase c JOIN events e ON e.position = c.position"
            " ORDER BY c.position LIMIT ?",
            (limit,),
        )
        bodies = {int(position): bytes(body) for position, body in rows}
        records = {int(seq) for (seq,) in self._lookups.rows("SELECT txlog_seq FROM txlog_blob_records", ())}
        unindexed: list[int] = []
        for position in bodies:
            held = record_holding(self._db, position)
            if held is None:
                if self._log.txlog is not None:  # without a log there is no log copy
                    unindexed.append(position)
            else:
                records.add(held[1])
        return StreamCopies(bodies, sorted(records), unindexed)

    def stream_copies_pending(self) -> int:
        """How many erased events' stream copies are still to remove."""
        return int(self._lookups.rows("SELECT count(*) FROM stream_copies_to_erase", ())[0][0])

    def erased_log_record(self, data: bytes, seq: int) -> LogRewrite:
        """The log record ``data`` (its last part at ``seq``) as this file now
        holds its rows (store/recordrewrite.py)."""
        record = decode_record(data, seq=seq)
        rewritten = erased_record(self._db, record)
        now = record if rewritten is None else rewritten
        names_blobs = any(name in NAMING_ERASED_BLOBS for name, _ in now.writes)
        return LogRewrite(None if rewritten is None else encode_txrecord(rewritten), names_blobs)

    def blob_record_rewritten(self, seq: int) -> None:
        """The log record at ``seq`` names no erased blob any more: off the
        index (derived, so not a logged write)."""
        with transaction(self._db, "ledger write failed", txlog_seq=seq) as db:
            db.execute("DELETE FROM txlog_blob_records WHERE txlog_seq = ?", (seq,))

    def stream_copies_erased(self, positions: list[int]) -> None:
        """The stream copies of these erased events are removed: off the list."""
        if positions:
            self._structure.write_rows([(STREAM_COPY_ERASED, [(p,) for p in positions])])
