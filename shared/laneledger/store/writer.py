"""The only code that writes a ledger: structure commands and the append
algorithm of spec/object-model.md, steps 1–6.

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

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET

from laneledger.contract.chain import GENESIS_HASH
from laneledger.contract.clock import Clock, system_clock
from laneledger.contract.errors import (
    EntityConflict,
    EntityNotFound,
    IdempotencyViolation,
    InvalidRequest,
    LaneConflict,
    LedgerError,
    StoreError,
    SubjectMismatch,
    TenantMismatch,
)
from laneledger.contract.ids import new_id
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
    ForkOrigin,
    ForkPoint,
    Lane,
    Receipt,
    Turn,
    decoder,
    encode,
)
from laneledger.contract.signing import load_public_key
from laneledger.contract.vocabulary import (
    EFFECT_KINDS,
    IDEMPOTENCY_CLASSES,
    REWOUND,
)
from laneledger.sqlite import (
    failures_as,
    roll_back,
)
from laneledger.store.append import PreparedAppend
from laneledger.store.batch import BatchResult, BatchState, CommittedRecord, LaneHead, StagedBatch, rejection
from laneledger.store.chainkey import chain_key_fingerprint
from laneledger.store.entryhash import hashed_body
from laneledger.store.eventchecks import check_event
from laneledger.store.lookups import LedgerLookups
from laneledger.store.reader import LedgerReader, lane_from_row
from laneledger.store.rewinds import check_rewind
from laneledger.store.schema import file_id as schema_file_id
from laneledger.store.signatures import check_actor_signature
from laneledger.store.txlog import (
    INSERT_ACTION,
    INSERT_ACTOR,
    INSERT_ATTEMPT,
    INSERT_EVENT,
    INSERT_LANE,
    INSERT_RECEIPT,
    INSERT_SESSION,
    INSERT_TURN,
    MOVE_LANE_HEAD,
    Statement,
    TxLog,
    TxLogMoved,
    Writes,
)
from laneledger.store.txlogsync import TxLogSync
from laneledger.store.usage import InlineUsage
from laneledger.tlog import store as tree_store
from laneledger.tlog.leaves import entry_leaf

T = TypeVar("T")


class LedgerWriter:
    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        clock: Clock = system_clock,
        hmac_key: bytes | None = None,
    ) -> None:
        self._db = conn
        self._clock = clock
        self._key = hmac_key
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
        subjects = self._lookups.subject_lanes({e.subject_id for a in batch for e in a.request.events})

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
        state = staged.state
        try:
            if staged.writes:
                self._log.commit_writes(staged.writes, staged.position_before, staged.position)
        finally:
            self._staged = None
        self._lookups.move_heads(state.heads)
        self.inline_usage.add(state.inline_bytes)
        return BatchResult(staged.receipts, state.committed)

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
            if previous.digest == append.digest:
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
        transaction with its position, and return how many; seed the log
        first when it is due (``TxLogSync.catch_up``)."""
        self._refuse_if_staged()
        return self._log.catch_up()

    # ------------------------------------------------------------- structure

    def ensure_actor(self, cmd: EnsureActor) -> Actor:
        rows = self._lookups.rows(
            "SELECT body FROM actors WHERE tenant = ? AND key = ?", (cmd.tenant, cmd.key)
        )
        if rows:
            actor: Actor = decoder(Actor).decode(rows[0][0])
            self._same_or_conflict(
                "actor", cmd.key, actor, cmd, ("kind", "display_name", "attributes", "public_key")
            )
            return actor
        if cmd.public_key is not None:
            load_public_key(cmd.public_key)  # a valid curve point, or InvalidRequest now
        actor = Actor(
            id=new_id(),
            tenant=cmd.tenant,
            key=cmd.key,
            kind=cmd.kind,
            display_name=cmd.display_name,
            attributes=cmd.attributes,
            public_key=cmd.public_key,
            created_at=self._clock(),
        )
        self._insert(
            INSERT_ACTOR,
            (actor.id, actor.tenant, actor.key, encode(actor)),
        )
        self._lookups.remember_actor(actor)
        return actor

    def create_lane(self, cmd: CreateLane) -> Lane:
        if cmd.fork_of is not None:  # a fork's parent is its origin lane
            if cmd.parent_lane_id not in (None, cmd.fork_of.lane_id):
                raise InvalidRequest(
                    "a fork's parent lane is the lane it forks",
                    path="$.parent_lane_id",
                    found=cmd.parent_lane_id,
                    expected=cmd.fork_of.lane_id,
                )
            cmd = msgspec.structs.replace(cmd, parent_lane_id=cmd.fork_of.lane_id)
        rows = self._lookups.rows(
            "SELECT body, last_seq, head_hash FROM lanes"
            " WHERE session_id = ? AND tenant = ? AND run_id = ? AND name = ?",
            (cmd.session_id, cmd.tenant, cmd.run_id, cmd.name),
        )
        if rows:
            lane = lane_from_row(*rows[0])
            fields = ("tenant", "kind", "parent_lane_id", "actor_id")
            self._same_or_conflict("lane", cmd.name, lane, cmd, fields + (("id",) if cmd.id else ()))
            stored_fork = lane.forked_from and ForkPoint(
                lane_id=lane.forked_from.lane_id, seq=lane.forked_from.seq
            )
            if stored_fork != cmd.fork_of:
                raise EntityConflict(
                    "lane exists with other attributes",
                    kind="lane",
                    key=cmd.name,
                    differing={
                        "fork_of": {
                            "stored": msgspec.to_builtins(stored_fork),
                            "requested": msgspec.to_builtins(cmd.fork_of),
                        }
                    },
                )
            return lane
        self._unused_id("lanes", "lane", cmd.id, cmd.tenant)
        if cmd.parent_lane_id is not None:
            parent = self.reader.get_lane(cmd.parent_lane_id, cmd.tenant)
            if parent.session_id != cmd.session_id:
                raise EntityConflict(
                    "parent lane is in another session",
                    kind="lane",
                    parent_lane_id=cmd.parent_lane_id,
                    parent_session_id=parent.session_id,
                )
        if cmd.actor_id is not None:
            self._lookups.load_actors({cmd.actor_id})
            tenant = self._lookups.actor_tenants.get(cmd.actor_id)
            if tenant is None:
                raise EntityNotFound("no such actor", kind="actor", id=cmd.actor_id)
            if tenant != cmd.tenant:
                raise TenantMismatch(
                    "actor belongs to another tenant",
                    what="actor",
                    actor_id=cmd.actor_id,
                    expected_tenant=cmd.tenant,
                    tenant=tenant,
                )
        origin = self._fork_origin(cmd.fork_of, cmd.tenant) if cmd.fork_of is not None else None
        now = self._clock()
        lane = Lane(
            id=cmd.id or new_id(),
            tenant=cmd.tenant,
            session_id=cmd.session_id,
            run_id=cmd.run_id,
            name=cmd.name,
            kind=cmd.kind,
            parent_lane_id=cmd.parent_lane_id,
            actor_id=cmd.actor_id,
            created_at=now,
            forked_from=origin,
        )
        self._insert_many(
            [
                (INSERT_SESSION, [(lane.session_id, lane.tenant, now)]),
                (
                    INSERT_LANE,
                    [
                        (
                            lane.id,
                            lane.tenant,
                            lane.session_id,
                            lane.run_id,
                            lane.name,
                            encode(lane),
                            GENESIS_HASH,
                        )
                    ],
                ),
            ]
        )
        self._lookups.add_lane(LaneHead(lane.id, lane.tenant, lane.session_id, lane.run_id, 0, GENESIS_HASH))
        return lane

    def _fork_origin(self, point: ForkPoint, tenant: str) -> ForkOrigin:
        """Resolve a fork point (its lane was checked as the parent: it exists,
        in this session) to the committed event the fork references."""
        rows = self._lookups.rows(
            "SELECT position, id, body FROM events WHERE lane_id = ? AND tenant = ? AND seq = ?",
            (point.lane_id, tenant, point.seq),
        )
        if not rows:
            raise EntityNotFound(
                "the origin lane has no event at this seq",
                kind="event",
                lane_id=point.lane_id,
                seq=point.seq,
                last_seq=self.reader.get_lane(point.lane_id, tenant).last_seq,
            )
        position, event_id, body = rows[0]
        return ForkOrigin(
            lane_id=point.lane_id,
            seq=point.seq,
            position=position,
            event_id=event_id,
            entry_hash=msgspec.json.decode(body)["entry_hash"],
        )

    def create_turn(self, cmd: CreateTurn) -> Turn:
        tenant = self.reader.get_lane(cmd.lane_id, cmd.tenant).tenant
        rows = self._lookups.rows(
            "SELECT body FROM turns WHERE lane_id = ? AND tenant = ? AND turn_no = ?",
            (cmd.lane_id, tenant, cmd.turn_no),
        )
        if rows:
            turn: Turn = decoder(Turn).decode(rows[0][0])
            self._same_or_conflict("turn", turn.id, turn, cmd, ("id",) if cmd.id else ())
            return turn
        self._unused_id("turns", "turn", cmd.id, tenant)
        turn = Turn(id=cmd.id or new_id(), lane_id=cmd.lane_id, turn_no=cmd.turn_no, created_at=self._clock())
        self._insert(
            INSERT_TURN,
            (turn.id, tenant, turn.lane_id, turn.turn_no, encode(turn)),
        )
        return turn

    def create_action(self, cmd: CreateAction) -> Action:
        if cmd.effect not in EFFECT_KINDS:
            raise InvalidRequest(f"effect must be one of {EFFECT_KINDS}", path="$.effect", found=cmd.effect)
        if cmd.idempotency not in IDEMPOTENCY_CLASSES:
            raise InvalidRequest(
                f"idempotency must be one of {IDEMPOTENCY_CLASSES}",
                path="$.idempotency",
                found=cmd.idempotency,
            )
        tenant = self._owned_by_lane("turns", "turn", cmd.turn_id, cmd.lane_id, cmd.tenant)
        if cmd.id is not None:
            rows = self._lookups.rows(
                "SELECT body FROM actions WHERE id = ? AND tenant = ?", (cmd.id, tenant)
            )
            if rows:
                action: Action = decoder(Action).decode(rows[0][0])
                fields = (
                    "lane_id",
                    "turn_id",
                    "action_type",
                    "name",
                    "effect",
                    "idempotency",
                    "idempotency_key",
                )
                self._same_or_conflict("action", cmd.id, action, cmd, fields)
                return action
        action = Action(
            id=cmd.id or new_id(),
            lane_id=cmd.lane_id,
            turn_id=cmd.turn_id,
            action_type=cmd.action_type,
            name=cmd.name,
            effect=cmd.effect,
            idempotency=cmd.idempotency,
            idempotency_key=cmd.idempotency_key,
            created_at=self._clock(),
        )
        self._insert(
            INSERT_ACTION,
            (action.id, tenant, action.lane_id, action.turn_id, encode(action)),
        )
        return action

    def create_attempt(self, cmd: CreateAttempt) -> Attempt:
        tenant = self._owned_by_lane("actions", "action", cmd.action_id, cmd.lane_id, cmd.tenant)
        rows = self._lookups.rows(
            "SELECT body FROM attempts WHERE action_id = ? AND tenant = ? AND attempt_no = ?",
            (cmd.action_id, tenant, cmd.attempt_no),
        )
        if rows:
            attempt: Attempt = decoder(Attempt).decode(rows[0][0])
            self._same_or_conflict("attempt", attempt.id, attempt, cmd, ("id",) if cmd.id else ())
            return attempt
        self._unused_id("attempts", "attempt", cmd.id, tenant)
        attempt = Attempt(
            id=cmd.id or new_id(),
            lane_id=cmd.lane_id,
            action_id=cmd.action_id,
            attempt_no=cmd.attempt_no,
            created_at=self._clock(),
        )
        self._insert(
            INSERT_ATTEMPT,
            (attempt.id, tenant, attempt.lane_id, attempt.action_id, attempt.attempt_no, encode(attempt)),
        )
        return attempt

    # -------------------------------------------------------- structure helpers

    @staticmethod
    def _same_or_conflict(kind: str, key: str, stored: Any, cmd: Any, fields: tuple[str, ...]) -> None:
        differing = {
            name: {"stored": getattr(stored, name), "requested": getattr(cmd, name)}
            for name in fields
            if getattr(stored, name) != getattr(cmd, name)
        }
        if differing:
            raise EntityConflict(
                f"{kind} exists with other attributes", kind=kind, key=key, differing=differing
            )

    def _owned_by_lane(self, table: str, kind: str, entity_id: str, lane_id: str, tenant: str | None) -> str:
        """Check that ``entity_id`` is of the lane; return the lane's tenant."""
        tenant = self.reader.get_lane(lane_id, tenant).tenant
        rows = self._lookups.rows(
            f"SELECT lane_id FROM {table} WHERE id = ? AND tenant = ?", (entity_id, tenant)
        )
        if not rows:
            raise EntityNotFound(f"no such {kind}", kind=kind, id=entity_id)
        if rows[0][0] != lane_id:
            raise SubjectMismatch(
                f"{kind} belongs to another lane",
                kind=kind,
                id=entity_id,
                lane_id=lane_id,
                owner_lane_id=rows[0][0],
            )
        return tenant

    def _unused_id(self, table: str, kind: str, entity_id: str | None, tenant: str) -> None:
        """A new id must be free among the tenant's own (other tenants' are not looked at)."""
        if entity_id is not None and self._lookups.rows(
            f"SELECT 1 FROM {table} WHERE id = ? AND tenant = ?", (entity_id, tenant)
        ):
            raise EntityConflict(f"{kind} id already names another {kind}", kind=kind, id=entity_id)

    def _insert(self, statement: Statement, params: tuple[Any, ...]) -> None:
        self._insert_many([(statement, [params])])

    def _insert_many(self, writes: Writes) -> None:
        """A structure command's rows, in one transaction of their own."""
        self._before_use()
        self._log.open_writes(writes, "ledger write failed")
        self._log.commit_writes(writes, self._log.last_position, self._log.last_position)
