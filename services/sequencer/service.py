"""The sequencer: the only writer of the ledger.

Pulls append requests from its append streams in batches (``intake.py``:
LEDGER_APPEND, or one stream per tenant read fairly), applies them with the
``LedgerWriter`` in one dedicated thread (one SQLite transaction per batch),
acks the inbound messages only after the commit (the transaction log's
acknowledgement: spec/replication.md), sends each producer its receipt, and
hands the committed events to the mirror that publishes them on
LEDGER_EVENTS. Heavy requests are prepared in a worker process first
(``offloop.py``), so none holds the event loop long. Structure commands and
reads (``<prefix>.cmd.<op>``, or ``<prefix>.cmd.<tenant>.<op>`` scoped to a
tenant) run in the same writer thread, between batches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from laneledger.contract.contentref import request_may_reference
from laneledger.contract.errors import (
    InternalError,
    InvalidRequest,
    LedgerError,
    RequestError,
    RequestTooLarge,
)
from laneledger.contract.model import (
    AppendCommitted,
    AppendRejected,
    Command,
    EnsureActor,
    Erase,
    ErasurePage,
    Receipt,
)
from laneledger.contract.redaction import DEFAULT_REDACTOR, Redactor, redact_command
from laneledger.contract.subjects import REPLY_HEADER, RequestSubject, Subjects, reply_refusal, token
from laneledger.runtime.requestserver import RequestServer, ops_of
from laneledger.runtime.servicemain import cancel_tasks, first_task_end
from laneledger.runtime.tenants import Tenants
from laneledger.runtime.throttledlog import ThrottledWarning
from laneledger.sdk.blobstore import BlobBuckets
from laneledger.sqlite import WalCheckpointer
from laneledger.store import LedgerWriter
from laneledger.store.append import PreparedAppend, prepare_append, readable_ids
from laneledger.store.atomicbatch import supports_atomic
from laneledger.store.batch import BatchResult, CommittedRecord, rejection
from laneledger.store.chainkey import chain_key_stamp
from laneledger.store.erasure import ErasedBlobs
from laneledger.store.txlog import TxLogMoved
from laneledger.store.txlogstream import JetStreamTxLog, part_bytes

from .blobcheck import BlobCheck
from .commands import decide_command
from .intake import BatchBudget, Intake, Work
from .lease import LeaseSettings, LeaseThread
from .metrics import SequencerMetrics
from .mirror import CommittedStreamMirror, StreamFault
from .offloop import OffLoop, WorkerFailed, is_heavy
from .prepworker import Ref
from .receipts import check_receipt_fits, receipt_messages
from .retention import RETENTION_ACTOR, Retention
from .roles import RoleKeeper
from .streamcopies import StreamCopyEraser
from .streams import (
    ensure_stream,
    erased_stream_config,
    events_stream_config,
    tlog_stream_config,
    txlog_stream_config,
)
from .tenancy import scope_command
from .treeheads import TreeHeads, TreeHeadSettings
from .writerthread import WriterThread

log = logging.getLogger("laneledger.sequencer")

T = TypeVar("T")
COMMAND_OPS = ops_of(Command)
_PIPELINE = 2  # batches committing or waiting to be finished
_ERASING = 64  # append requests erased at once (JetStream API requests in flight)
_ANSWERING = 8  # committed batches waiting for their answers (without the log: for the committed stream)


@dataclass
class _Batch:
    msgs: list[Msg]
    outcomes: list[Receipt | None]  # request errors; None where the writer decides
    committing: asyncio.Future[BatchResult]
    started: float
    # Where each request's receipt goes: its Ledger-Reply-To when that lies in
    # the requester's inbox, else None (checked once, in _prepare_batch).
    inboxes: list[str | None]
    # Its events and bytes, held against SequencerSettings.unanswered_batches.
    work: Work
    # Requests that held secrets: securely erased from their append stream once
    # committed, as refused ones are (an ack alone leaves their bytes in the
    # stream's files).
    scrub: list[Msg] = field(default_factory=list)


class _Taken:
    """What the pull loop took and keeps under bounds: the work (events,
    bytes) of the requests not yet answered (``unanswered_batches``), and
    the batches not yet both answered and on the committed stream
    (``max_outstanding_batches``)."""

    def __init__(self) -> None:
        self.events = self.bytes = self.batches = 0
        self._changed = asyncio.Event()

    def add(self, work: Work) -> None:
        self.events += work.events
        self.bytes += work.bytes
        self.batches += 1

    def answered(self, work: Work) -> None:
        self.events -= work.events
        self.bytes -= work.bytes
        self._changed.set()

    def on_stream(self) -> None:
        self.batches -= 1
        self._changed.set()

    def done(self, work: Work) -> None:
        """A batch handed back: neither answered nor to be published."""
        self.answered(work)
        self.on_stream()

    async def below(self, limit: Work, batches: int, timeout: float) -> bool:
        """Wait (up to ``timeout``) until less than ``limit`` is unanswered,
        in both, and fewer than ``batches`` batches are outstanding."""
        try:
            async with asyncio.timeout(timeout):
                while self.events >= limit.events or self.bytes >= limit.bytes or self.batches >= batches:
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return False
        return True


@dataclass
class _Answer:
    """A committed batch's acks and receipts, sent once the committed stream
    holds every position up to ``through`` (the last any receipt reports;
    0 when the transaction log, which took the batch, is the promise)."""

    batch: _Batch
    receipts: list[Receipt]
    through: int
    committed_through: int  # the last position the batch committed (0: none)


@dataclass(frozen=True)
class SequencerSettings:
    subjects: Subjects = Subjects()
    replicas: int = 1
    batch_size: int = 500
    # A batch also holds at most this many events and bytes of requests
    # (intake.BatchBudget: a tenant's huge requests cannot make one batch,
    # and so another tenant's wait, long); one request is always taken.
    batch_events: int = 1000
    batch_bytes: int = 1 << 20
    # Batches' worth of events and bytes (batch_events, batch_bytes) taken
    # and not yet answered at which no more are taken: what a request taken
    # now waits behind (the commits ahead of it) is bounded in work, not only
    # in batches (one: bench/fairness.py's heavy floods wait a third as long
    # as with two, for the same throughput).
    unanswered_batches: int = 1
    # Batches outstanding (taken, and not yet both answered and on the
    # committed stream) at which no more are taken, however little they
    # hold (group commit): what arrives while this many are committing or
    # on their way to the committed stream joins one larger batch, instead
    # of making batches of a few requests each as fast as the log
    # acknowledges them. Each batch costs the event loop over a millisecond
    # whatever it holds (a log write, a COMMIT, a stream round, receipts); at
    # 1,400 requests/s batches of 3-4 kept the loop busy enough to double
    # the receipts' latency (spec/replication.md, "Group commit"). It also
    # bounds how far the committed stream trails the receipts.
    max_outstanding_batches: int = 2
    # A batch of at most this many requests commits on the event loop, once
    # the writer thread is idle (writerthread.py: cheaper than the hand-off),
    # with the log its append awaited there (and at most this many events
    # and LOOP_COMMIT_BYTES); a larger one is written on the loop too and
    # only its COMMIT (the fsync) runs on the thread, while the loop prepares
    # the next batch (with the log: applied on the thread, whole).
    inline_commit_max: int = 32
    # Checkpoint the ledger file's WAL from a thread of its own
    # (laneledger.sqlite.WalCheckpointer), not inside the writer's COMMITs,
    # which every request behind them waits for.
    checkpoint_aside: bool = True
    idle_wait_s: float = 0.5  # how long one wait for new requests lasts
    # How long one pull request for append requests lasts: a stop waits for
    # the open one to end (so nothing is delivered after it), at most this.
    pull_expires_s: float = 1.0
    max_request_bytes: int = 1024 * 1024
    backlog_refresh_s: float = 1.0  # how often the inbound backlog gauge is refreshed
    stream_recheck_s: float = 2.0  # how often a committed stream found foreign is looked at again
    # Secrets replaced before hashing (spec/content.md); the defaults plus
    # LANELEDGER_REDACT_* extras in the service.
    redactor: Redactor = DEFAULT_REDACTOR
    # The declared tenants and their limits (runtime/tenants.py); None: one
    # shared append stream and no limits.
    tenants: Tenants | None = None
    # Store every writer transaction on LEDGER_TXLOG before its SQLite
    # COMMIT (spec/replication.md). Off: the SQLite file is the only record
    # of the structure and the receipts (bench/append.py compares the two).
    txlog: bool = True
    # Be active only while holding the lease (roles.py), a standby otherwise;
    # None (a sequencer embedded in a program or a test): active from the
    # start. The service always runs with one (__main__.py). Only with the
    # log (a standby follows it): with ``txlog`` off there is no lease.
    lease: LeaseSettings | None = None
    # Opens the lease thread's own NATS connection (lease.py, ``LeaseThread``),
    # on that thread's event loop; needed with ``lease``.
    lease_nats: Callable[[], Awaitable[NATS]] | None = None
    # Sign the Merkle tree's heads and publish them on LEDGER_TLOG
    # (treeheads.py, spec/tlog.md); None: no signing key, no checkpoints.
    tree_heads: TreeHeadSettings | None = None
    # How often the active sequencer runs a retention round (retention.py).
    retention_interval_s: float = 3600.0
    # How often it tries again to delete the blobs and stream copies erasures
    # listed and a deletion left (spec/erasure.md, "Blobs", "The streams").
    erasure_retry_s: float = 600.0


class Sequencer:
    def __init__(
        self,
        nc: NATS,
        writer: LedgerWriter,
        metrics: SequencerMetrics,
        settings: SequencerSettings = SequencerSettings(),
        *,
        reply_nc: NATS | None = None,
    ) -> None:
        self._nc = nc
        # Receipts and command replies go where requesters say, so they leave
        # on their own connection, whose NATS user may publish to inboxes
        # only; ``nc`` (the committed stream, $JS.API) publishes nothing a
        # requester named. The same connection where no such user exists.
        self._reply_nc = reply_nc or nc
        self._refused_receipts = ThrottledWarning(
            log, "append refused: its receipt may not go where it asks (counted, acknowledged)"
        )
        self._js = nc.jetstream()
        self._writer = writer
        self._metrics = metrics
        self._settings = settings
        tenants = settings.tenants
        if tenants is not None:
            writer.inline_usage.limit = lambda tenant: tenants.limits_of(tenant).inline_bytes
        # Every use of the writer goes through it: batches, commands, reads.
        self._writer_thread = WriterThread(
            writer, inline_commit_max=settings.inline_commit_max, through_log=settings.txlog
        )
        self._halt = asyncio.Event()  # set: the pull loop stops (stop(), or standing down)
        self._tasks: list[asyncio.Task[None]] = []  # what ``wait`` watches
        self._active: list[asyncio.Task[None]] = []  # the active role's tasks
        self._intake: Intake | None = None  # the active role's, owned by its pull loop
        self.active = False
        self._stopped = False
        # activate / stand_down one at a time (the role keeper's and stop()'s)
        self._role_change = asyncio.Lock()
        self._roles: RoleKeeper | None = None
        self._blob_check: BlobCheck  # opened by start(), before any append is pulled
        self._offloop = OffLoop(settings.redactor, settings.max_request_bytes)
        self._checkpointer: WalCheckpointer | None = None  # started by start()
        self._taken = _Taken()  # each pull loop's own (_pull_loop)
        self._commands = RequestServer[Command](
            nc,
            base=settings.subjects.command_base,
            queue="sequencer",
            commands=Command,
            handler=self._on_command,
            counter=metrics.commands,
            log=log,
            what="command",
            other_op="other",
            too_large=_reply_too_large,
            reply_nc=self._reply_nc,
            refused=metrics.refused_replies.labels("reply"),
        )
        self.ready = False
        # The last commit's failure (a full disk, a read-only file), None once
        # a commit succeeds: while set, /readyz says not ready (``accepting``).
        self.store_error: LedgerError | None = None
        self._failed_batches = 0
        self._applied_counted = 0  # writer.applied_from_log already in the metric
        # A message on the committed stream the ledger did not write (spec/wire.md,
        # "Foreign messages"): while set, nothing is committed and /readyz is 503.
        self.stream_fault: StreamFault | None = None
        self._stream_whole = asyncio.Event()
        self._stream_whole.set()
        self.mirror = CommittedStreamMirror(
            nc,
            settings.subjects,
            settings.subjects.events_stream,
            read_after=lambda pos, n: self._in_writer(writer.reader.events_after, pos, n),
            ledger_last_position=lambda: writer.last_position,
            ensure_stream=self._ensure_events_stream,
            on_fault=self._on_stream_fault,
            # Its lease refused: a successor writes the stream (roles.py).
            deposed=lambda: self._roles is not None and self._roles.deposed,
            recheck_s=settings.stream_recheck_s,
        )
        # Read at scrape time: a value set when a batch is queued would stay
        # at 1 once the mirror drains the last batch of a burst.
        metrics.mirror_backlog.set_function(lambda: self.mirror.backlog)
        self.tree_heads = (
            TreeHeads(
                nc,
                self._reply_nc,
                settings.subjects,
                settings.tree_heads,
                read_head=lambda: self._in_writer(writer.tree_head),
                metrics=metrics,
            )
            if settings.tree_heads is not None
            else None
        )
        # Removes erased content's copies from the streams (streamcopies.py).
        self.stream_copies = StreamCopyEraser(
            self._js,
            settings.subjects,
            in_writer=self._in_writer,
            copies=lambda limit: writer.current(lambda: writer.stream_copies_to_erase(limit)),
            rewrite=writer.erased_log_record,
            done=writer.stream_copies_erased,
            blob_record_rewritten=writer.blob_record_rewritten,
            published_through=self.mirror.durable_through,
            stamp=chain_key_stamp(writer.chain_key),
            part_bytes=part_bytes(nc.max_payload),
        )
        # Erases what a tenant keeps no longer (retention.py): only with a
        # tenants file that sets content_retention_days for one.
        declared = settings.tenants
        self.retention = (
            Retention(
                declared,
                erase=lambda cmd: self._erase(cmd, None),
                actor_of=self._retention_actor,
                metrics=metrics,
                interval_s=settings.retention_interval_s,
            )
            if declared is not None and any(t.content_retention_days for t in declared.limits.values())
            else None
        )

    @property
    def accepting(self) -> bool:
        """Active and ready, the ledger database took the last commit, and the
        committed stream holds nothing the ledger did not write."""
        return self.ready and self.active and self.store_error is None and self.stream_fault is None

    @property
    def role(self) -> str:
        return "active" if self.active else "standby"

    @property
    def serving(self) -> bool:
        """What /readyz says: accepting, or a standby whose file is current."""
        if self.active or self._roles is None:
            return self.accepting
        return self.ready and self._roles.current

    async def _ensure_events_stream(self) -> None:
        s = self._settings
        atomic = supports_atomic(self._nc)
        await ensure_stream(
            self._js, events_stream_config(s.subjects.events_stream, s.subjects, s.replicas, atomic=atomic)
        )
        await ensure_stream(self._js, erased_stream_config(s.subjects, s.replicas))

    def _on_stream_fault(self, fault: StreamFault | None) -> None:
        """The mirror found what the ledger did not write on the committed
        stream (or, ``None``, that it is whole again): stop committing until
        it is repaired, loudly; then go on."""
        self.stream_fault = fault
        if fault is None:
            log.warning("the committed stream equals the ledger again; committing")
            self._metrics.stream_fault.set(0)
            self._stream_whole.set()
            return
        self._stream_whole.clear()
        self._metrics.stream_fault.set(1)
        self._metrics.stream_faults.labels(str(fault.details.get("kind", ""))).inc()
        log.error(
            "not committing, not ready: %s. Requests stay queued. Repair with "
            "`laneledger repair-stream --db <ledger.db> --nats <url>` (spec/wire.md, "
            '"Foreign messages"); committing resumes once the stream equals the ledger',
            fault,
        )

    async def _in_writer(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._writer_thread.call(fn, *args)

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        s = self._settings
        if s.checkpoint_aside:
            self._checkpointer = await self._in_writer(self._writer.checkpoint_aside)
        await self._ensure_events_stream()
        tenants = s.tenants
        blobs = BlobBuckets(
            self._js,
            subjects=s.subjects,
            replicas=s.replicas,
            blob_bytes=lambda token: tenants.limits_of_token(token).blob_bytes if tenants else None,
        )
        await blobs.ensure()  # the shared bucket; a tenant's on its first command
        self._blob_check = BlobCheck(blobs, self._metrics, s.redactor)
        if s.txlog:
            await self._open_txlog()
        await self._count_inline_bytes()
        self._metrics.last_position.set(self._writer.last_position)
        if s.lease is None or not s.txlog:
            await self.activate()
            self._tasks = self._active
        else:
            holder = await self._in_writer(self._writer.file_id)
            if s.lease_nats is None:
                raise ValueError("SequencerSettings.lease needs lease_nats, the lease thread's connection")
            lease = LeaseThread(s.lease_nats, s.subjects.lease_bucket, holder, s.lease, s.replicas)
            self._roles = RoleKeeper(self, lease, self._metrics)
            await self._roles.start()
            self._tasks = [asyncio.create_task(self._roles.run(), name="sequencer-roles")]
        self.ready = True
        log.info("sequencer ready, %s, at position %d", self.role, self._writer.last_position)

    async def _count_inline_bytes(self) -> None:
        """With tenants, sum each tenant's stored event bytes (its
        ``inline_bytes``) on the writer thread: one scan of the events table
        at start, by a standby too, so that taking over costs no scan; the
        writer keeps the count from then on (store/usage.py)."""
        if self._settings.tenants is not None:
            await self._in_writer(self._writer.inline_bytes_used)

    # -------------------------------------------------------------- roles

    async def activate(self) -> None:
        """Become the one that commits: the file first takes the log's last
        records, then requests are pulled, commands answered, the committed
        stream mirrored."""
        async with self._role_change:
            if self._stopped:
                raise RuntimeError("the sequencer is stopped")
            try:
                await self._activate()
            except BaseException:
                # Half active (NATS went away midway, say): undo it whole, so
                # the next try starts from a standby again.
                await self._stand_down(drain_timeout_s=5.0)
                raise

    async def _activate(self) -> None:
        s = self._settings
        if s.txlog:
            await self.follow()
        await self._count_inline_bytes()  # known already: a standby's follows the log
        await self.mirror.check_at_start()  # a foreign message: start, but commit nothing
        self._metrics.last_position.set(self._writer.last_position)
        if s.tenants is not None:  # one tenant's heavy requests must not cost another the worker's start
            await self._offloop.warm()
        budget = BatchBudget(s.batch_size, s.batch_events, s.batch_bytes)
        intake = self._intake = Intake(
            self._nc,
            self._js,
            s.subjects,
            s.replicas,
            budget,
            gate=self._ahead,
            pull_expires_s=s.pull_expires_s,
        )
        await intake.open(s.tenants)
        self._halt.clear()
        # The pull loop owns the intake from here: it stops it when it ends.
        self._active = [asyncio.create_task(self._pull_loop(intake), name="sequencer-pull")]
        await self._commands.start()  # served one at a time, in arrival order
        self._active += [
            asyncio.create_task(self.mirror.run(), name="sequencer-mirror"),
            asyncio.create_task(self._backlog_loop(intake), name="sequencer-backlog"),
        ]
        if self.tree_heads is not None:
            await ensure_stream(self._js, tlog_stream_config(s.subjects, s.replicas))
            self._active.append(asyncio.create_task(self.tree_heads.run(), name="sequencer-tree-heads"))
        if self.retention is not None:
            self._active.append(asyncio.create_task(self.retention.run(), name="sequencer-retention"))
        erasing = asyncio.create_task(self._erase_listed_while_active(), name="sequencer-erase-listed")
        self._active.append(erasing)
        self.active = True

    async def stand_down(self, *, drain_timeout_s: float = 10.0) -> None:
        """Stop committing: no more pulls or commands; the batch in hand
        finishes (the log refuses it if another took over), the mirror
        flushes, and the active tasks end."""
        async with self._role_change:
            await self._stand_down(drain_timeout_s)

    async def _stand_down(self, drain_timeout_s: float) -> None:
        self.active = False
        self._halt.set()
        if self._intake is not None:
            self._intake.wake()
        await self._commands.stop()
        pull_task = self._active[0] if self._active else None
        if pull_task is not None:
            # Not ``wait_for``: after its timeout it cancels once and then waits
            # for the task without bound, and the pull loop's batches may be
            # waiting for a committed stream that a deposed sequencer never
            # sees reach them. ``cancel_tasks`` asks again and gives up in time.
            # What the task ended with is left to the ``cancel_tasks`` below.
            _, running = await asyncio.wait({pull_task}, timeout=drain_timeout_s)
            await cancel_tasks(running, timeout_s=drain_timeout_s)
        try:
            async with asyncio.timeout(drain_timeout_s):
                if self._stopped and self._nc.is_connected:
                    # A stop flushes the mirror: receipts did not wait for
                    # the stream, so it may be rounds behind, and a cancel
                    # between a round's atomic batches would leave the rest
                    # to the next start (test_sequencer_crash.py).
                    await self.mirror.flushed(self._writer.last_position)
                else:  # deposed (the stream is the successor's), or NATS away
                    await self.mirror.taken_up()
        except TimeoutError:
            pass  # stopping anyway: the next start's catch-up publishes the rest
        await cancel_tasks(self._active, timeout_s=drain_timeout_s)
        self._active = []
        self._forget_stream_fault()

    def _forget_stream_fault(self) -> None:
        """Standing down: a standby publishes nothing, so what the committed
        stream holds is the active one's to find (a deposed one's mirror may
        have reported its successor's messages before it learnt it was
        deposed). The next activation checks the stream again."""
        self.mirror.forget_fault()
        if self.stream_fault is not None:
            log.info("standing down: the committed stream is left to the active sequencer to check")
            self.stream_fault = None
            self._metrics.stream_fault.set(0)
            self._stream_whole.set()

    async def follow(self) -> int:
        """Apply what the log holds beyond the file (a standby does, every
        few tenths of a second); how many records that was."""
        applied = await self._in_writer(self._writer.catch_up)
        self._count_log_use()
        return applied

    def active_tasks(self) -> list[asyncio.Task[None]]:
        return list(self._active)

    async def _open_txlog(self) -> None:
        """Commit through LEDGER_TXLOG from now on, once the file holds
        everything the log does (a file that missed its last commits, or an
        empty one: the ledger is rebuilt from the log)."""
        s = self._settings
        atomic = supports_atomic(self._nc)
        await ensure_stream(self._js, txlog_stream_config(s.subjects, s.replicas, atomic=atomic))
        txlog = JetStreamTxLog(
            self._js,
            s.subjects,
            asyncio.get_running_loop(),
            max_payload=self._nc.max_payload,
            chain_key=self._writer.chain_key,
            nc=self._nc,
        )
        await txlog.check_last_writer()  # another HMAC key on the log: do not start
        self._writer.use_txlog(txlog)
        applied = await self.follow()
        if self._writer.log_restarted_after is not None:
            log.warning(
                "%s ended before what the ledger file had applied from it (the stream was lost "
                "or reset): it starts again from the file, at position %d",
                s.subjects.txlog_stream,
                self._writer.log_restarted_after,
            )
        if self._writer.seeded_rows:
            log.info(
                "seeded %s with %d rows of the ledger file (up to position %d): a file rebuilt "
                "from the log alone now holds them",
                s.subjects.txlog_stream,
                self._writer.seeded_rows,
                self._writer.last_position,
            )
        if applied:
            log.info(
                "applied %d transactions from %s; the ledger is at position %d",
                applied,
                s.subjects.txlog_stream,
                self._writer.last_position,
            )

    def _count_log_use(self) -> None:
        writer = self._writer
        self._metrics.txlog_seq.set(writer.txlog_seq)
        self._metrics.txlog_applied.inc(writer.applied_from_log - self._applied_counted)
        self._applied_counted = writer.applied_from_log

    async def wait(self) -> None:
        """Run until stopped; re-raise if a task died (e.g. an integrity fault)."""
        await first_task_end(self._tasks)

    async def stop(self, *, drain_timeout_s: float = 10.0) -> None:
        """Stop pulling, let the current batch finish, flush the mirror; give
        the lease up."""
        self.ready = False
        self._stopped = True
        if self._roles is not None:
            await cancel_tasks(self._tasks, timeout_s=drain_timeout_s)
        await self.stand_down(drain_timeout_s=drain_timeout_s)
        if self._roles is not None:
            await self._roles.release()
        await self._writer_thread.close()
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.close)
        await self._offloop.close()

    async def _backlog_loop(self, intake: Intake) -> None:
        """Refresh the inbound backlog gauges from the consumers' info (and
        let the intake delete retired streams found empty)."""
        while True:
            try:
                backlog = await intake.backlog()
                self._metrics.inbound_backlog.set(sum(backlog.values()))
                for stream, pending in backlog.items():
                    self._metrics.stream_backlog.labels(stream).set(pending)
            except Exception as exc:  # noqa: BLE001 - NATS away: keep the last value
                log.debug("inbound backlog not refreshed: %s", exc)
            await asyncio.sleep(self._settings.backlog_refresh_s)

    # ----------------------------------------------------------------- appends

    async def _pull_loop(self, intake: Intake) -> None:
        """Fetch and read batch N+1 while the writer commits batch N.

        Batches reach the writer thread in fetch order (one worker), and are
        finished — acked, answered, mirrored — in that same order by
        ``_finish_loop``. At most ``_PIPELINE`` batches are in flight.
        """
        s = self._settings
        in_flight: asyncio.Queue[_Batch | None] = asyncio.Queue(maxsize=_PIPELINE)
        self._taken = _Taken()
        unanswered = Work(s.unanswered_batches * s.batch_events, s.unanswered_batches * s.batch_bytes)
        finisher = asyncio.create_task(self._finish_loop(in_flight), name="sequencer-finish")
        held: list[Msg] = []  # fetched as the stream was found foreign: committed once it is whole
        try:
            while not self._halt.is_set() and not finisher.done():
                if not self._stream_whole.is_set():
                    # A foreign message on the committed stream: commit nothing
                    # (requests stay queued) until the mirror finds it whole.
                    try:
                        async with asyncio.timeout(s.idle_wait_s):
                            await self._stream_whole.wait()
                    except TimeoutError:
                        pass
                    continue
                if not await self._taken.below(unanswered, s.max_outstanding_batches, s.idle_wait_s):
                    continue
                msgs, held = held or await intake.next_batch(s.idle_wait_s), []
                if msgs and not self._stream_whole.is_set():
                    held = msgs  # the fault came while this batch was being fetched
                elif msgs:
                    await self._submit(msgs, in_flight)
            # Stopping: take in what the open pull request still delivers and
            # commit it, so no request is left delivered but unacked (unless
            # committing is stopped: then stop() hands it back).
            await intake.wind_down()
            while self._stream_whole.is_set() and not finisher.done() and (msgs := intake.take(s.batch_size)):
                await self._submit(msgs, in_flight)
        finally:
            try:
                # What was held for a foreign stream goes back at once (not after the ack wait).
                await asyncio.gather(*(m.nak() for m in held), return_exceptions=True)
                await intake.stop()
                self._offloop.forget_untaken()  # every request taken was submitted above
            finally:
                await _end_finisher(finisher, in_flight)

    def _ahead(self, msg: Msg, work: Work) -> Coroutine[Any, Any, int] | None:
        """The intake's gate: what an append request needs before its batch,
        run aside while its stream is held (its cost in rate tokens returned):
        a heavy request's step 0, off the loop (offloop.py), then the blob
        lookups and copies it needs (``BlobCheck.warming``)."""
        if is_heavy(msg.data, work.events):
            return self._prepare_aside(msg)
        if not request_may_reference(msg.data):  # the common case: no decoding
            return None
        try:
            tenant_token = self._settings.subjects.parse_append(msg.subject).tenant_token
        except InvalidRequest:
            return None  # the batch refuses it
        if tenant_token is None:
            return None
        return self._blob_check.warming(tenant_token, msg.data)

    async def _prepare_aside(self, msg: Msg) -> int:
        try:
            subject = self._settings.subjects.parse_append(msg.subject)
        except InvalidRequest:
            return 0  # the batch refuses it
        try:
            prepared = await self._offloop.run(msg, subject.tenant_token, subject.lane_token)
        except WorkerFailed as exc:
            # The designed fallback, not a fault of the request: its batch
            # prepares it on the loop (the worker is started again).
            log.warning("a heavy request is prepared on the loop: %s", exc)
            return 0
        tenant_token = subject.tenant_token
        if tenant_token is None or not isinstance(prepared.outcome, PreparedAppend):
            return 0
        warming = self._blob_check.warming_refs(tenant_token, prepared.refs)
        return await warming if warming is not None else 0

    async def _submit(self, msgs: list[Msg], in_flight: asyncio.Queue[_Batch | None]) -> None:
        outcomes, prepared, named, scrub, inboxes = self._prepare_batch(msgs)
        # Its work, read off what step 0 decoded (a refused request: one event).
        events = sum(len(append.request.events) for append in prepared) + len(msgs) - len(prepared)
        work = Work(events, sum(len(m.data) for m in msgs))
        outcomes, prepared = await self._blob_check.apply(outcomes, prepared, named)
        started = time.perf_counter()  # commit_seconds: from here, waiting for the writer included
        # Waits for the writer thread (commits are in order anyway; what arrives
        # meanwhile makes the next batch larger), then commits on the loop or
        # hands the COMMIT to the thread (writerthread.py).
        committing = await self._writer_thread.commit(prepared, request_bytes=work.bytes)
        batch = _Batch(msgs, outcomes, committing, started, inboxes, work, scrub)
        self._taken.add(work)
        await in_flight.put(batch)

    async def _finish_loop(self, in_flight: asyncio.Queue[_Batch | None]) -> None:
        """Finish batches in commit order; answer them, in the same order, as
        soon as each may be (``_answer_loop``), so committing the next batches
        overlaps that wait."""
        answers: asyncio.Queue[_Answer | None] = asyncio.Queue(maxsize=_ANSWERING)
        answerer = asyncio.create_task(self._answer_loop(answers), name="sequencer-answer")
        try:
            while (batch := await in_flight.get()) is not None:
                answer = await self._finish_batch(batch)
                if answer is not None:
                    await answers.put(answer)
                else:  # handed back
                    self._taken.done(batch.work)
            await answers.put(None)
            await answerer
        except BaseException:
            answerer.cancel()
            raise

    async def _answer_loop(self, answers: asyncio.Queue[_Answer | None]) -> None:
        """Append step 7: ack a batch's requests and send its receipts, in
        commit order, once what they report survives a machine: with the
        transaction log, at once (the log's replicas took the batch before
        it committed); with ``txlog`` off, once its events (and every
        earlier one: a replay's too) are stored on the committed stream. A
        crash before that leaves the requests unacked: redelivered, they are
        answered from the ledger, and the mirror publishes what the stream
        lacks when the sequencer starts again."""
        on_stream: asyncio.Queue[int] = asyncio.Queue()  # each answered batch's last position
        releaser = asyncio.create_task(self._release_loop(on_stream), name="sequencer-release")
        try:
            while (answer := await answers.get()) is not None:
                await self.mirror.durable_through(answer.through)
                batch = answer.batch
                publish = self._nc.publish
                for msg in batch.msgs:  # plain publishes: no task, no future per message
                    await publish(msg.reply, b"+ACK")
                await self._send_receipts(batch.msgs, answer.receipts, batch.inboxes)
                self._taken.answered(batch.work)
                on_stream.put_nowait(answer.committed_through)
        finally:
            # Answering is over (every batch answered, or cancelled) and
            # nothing more is taken: no need to wait for the stream (the
            # mirror goes on publishing).
            releaser.cancel()

    async def _release_loop(self, on_stream: asyncio.Queue[int]) -> None:
        """A batch answered stays outstanding (``max_outstanding_batches``)
        until the committed stream holds its events: what arrives meanwhile
        joins one larger batch (group commit), and the stream trails the
        receipts by at most that many batches. The receipts do not wait for
        this (with the log)."""
        while True:
            await self.mirror.durable_through(await on_stream.get())
            self._taken.on_stream()

    def _prepare_batch(
        self, msgs: list[Msg]
    ) -> tuple[
        list[Receipt | None], list[PreparedAppend], list[list[Ref] | None], list[Msg], list[str | None]
    ]:
        """Step 0 for every message; a request error is its final outcome.
        Also, per prepared append, the content references found aside (None:
        prepared here), the messages that held secrets (see ``_Batch.scrub``)
        and where each receipt may go (``_Batch.inboxes``)."""
        outcomes: list[Receipt | None] = []
        prepared: list[PreparedAppend] = []
        named: list[list[Ref] | None] = []
        scrub: list[Msg] = []
        inboxes: list[str | None] = []
        for msg in msgs:
            inbox, refusal = self._receipt_inbox(msg)
            inboxes.append(inbox)
            aside = self._offloop.take(msg)  # prepared off the loop, ahead of the batch
            outcome = aside.outcome if aside is not None else None
            if isinstance(outcome, AppendRejected) and refusal is None:
                outcomes.append(outcome)
                continue
            try:
                append = self._prepare(msg, refusal, outcome if isinstance(outcome, PreparedAppend) else None)
                prepared.append(append)
                named.append(aside.refs if aside is not None and append is outcome else None)
                outcomes.append(None)  # decided by the writer (or the blob check)
                if append.redactions:
                    scrub.append(msg)
                    for rule, n in append.redactions.items():
                        self._metrics.redactions.labels(rule).inc(n)
            except RequestError as err:
                append_id, lane_id = readable_ids(msg.data)
                outcomes.append(rejection(err, append_id=append_id, lane_id=lane_id))
            except Exception as exc:
                log.exception("append request on %s could not be prepared", msg.subject)
                append_id, lane_id = readable_ids(msg.data)
                internal = InternalError(f"{type(exc).__name__}: {exc}")
                outcomes.append(rejection(internal, append_id=append_id, lane_id=lane_id))
        return outcomes, prepared, named, scrub, inboxes

    async def _finish_batch(self, batch: _Batch) -> _Answer | None:
        """The batch's commit outcome: what to answer once the committed
        stream has it, or None when the commit failed (its requests are
        handed back)."""
        msgs = batch.msgs
        try:
            result = await batch.committing
        except TxLogMoved as err:
            # Not a failure of the store: the log holds transactions this
            # file had not seen. The writer reads them before its next use;
            # the requests come back at once and are decided on that state.
            log.info("transaction log moved on; %d requests redelivered: %s", len(msgs), err)
            self._metrics.txlog_moved.inc()
            await asyncio.gather(*(m.nak() for m in msgs), return_exceptions=True)
            return None
        except LedgerError as err:
            # Nothing was written: hand every message back for redelivery, and
            # go not-ready until a commit succeeds. No receipt is sent: the
            # requests stay queued and commit once the disk takes writes again
            # (a rejection here would end them while their producers wait).
            self.store_error = err
            self._failed_batches += 1
            log.error(
                "the ledger database refused a commit; not ready, %d requests held "
                "for redelivery (%d batches failed so far): %s",
                len(msgs),
                self._failed_batches,
                err,
            )
            self._metrics.batch_failures.inc()
            await asyncio.gather(*(m.nak(delay=1.0) for m in msgs), return_exceptions=True)
            return None
        if self.store_error is not None and result.committed:  # a write went through
            log.warning(
                "the ledger database takes commits again after %d failed batches; ready", self._failed_batches
            )
            self.store_error, self._failed_batches = None, 0
        self._metrics.commit_seconds.observe(time.perf_counter() - batch.started)
        self._metrics.batch_size.observe(len(msgs))
        decided = iter(result.receipts)
        receipts = [o if o is not None else next(decided) for o in batch.outcomes]

        # Committed: erase what held secrets and what was refused (it may
        # hold a secret it was refused for, or one never read), then publish;
        # the inbound messages leave the work queue once the stream has the batch.
        secret = {id(msg) for msg in batch.scrub}
        erase = [
            msg
            for msg, receipt in zip(msgs, receipts, strict=True)
            if id(msg) in secret or isinstance(receipt, AppendRejected)
        ]
        if erase:
            await self._scrub(erase)
        self._metrics.events.inc(len(result.committed))
        self._metrics.last_position.set(self._writer.last_position)
        self._count_log_use()
        await self.mirror.submit(result.committed)
        # Without the log, the committed stream is the replicated copy the
        # receipts wait for: through what they report, replays included (an
        # event committed before a restart may still be on its way to it).
        # With the log, its acknowledgement was the promise: what the file
        # holds, the log held first (a replay's events too).
        committed_through = result.committed[-1].position if result.committed else 0
        through = 0
        if not self._settings.txlog:
            reported = (r.positions[-1] for r in receipts if isinstance(r, AppendCommitted) and r.positions)
            through = max(reported, default=0)
        return _Answer(batch, receipts, through, committed_through)

    async def _scrub(self, msgs: list[Msg]) -> None:
        """Erase decided requests from their append stream (those that held
        secrets, those refused): a JetStream message delete overwrites the
        stored bytes (an ack in a work queue only marks them removed). At
        most ``_ERASING`` at once. Best effort: a failure is logged, the
        request's outcome stands and it is acked."""

        async def erase(msg: Msg) -> None:
            stream = msg.metadata.stream
            try:
                await self._js.delete_msg(stream, msg.metadata.sequence.stream)
            except Exception as exc:  # noqa: BLE001 - logged; the outcome stands
                log.warning("could not erase a decided request from %s: %s", stream, exc)

        for start in range(0, len(msgs), _ERASING):
            await asyncio.gather(*(erase(msg) for msg in msgs[start : start + _ERASING]))

    def _prepare(self, msg: Msg, refusal: str | None, aside: PreparedAppend | None = None) -> PreparedAppend:
        """Step 0 of one request (the rest of it, when it was ``prepared``
        aside); ``refusal``: why its Ledger-Reply-To may not be answered
        (``_receipt_inbox``), which refuses it."""
        subject = self._settings.subjects.parse_append(msg.subject)
        if refusal is not None:
            # Refused before anything is applied; its receipt goes nowhere,
            # so it is counted instead.
            raise InvalidRequest(
                f"the {REPLY_HEADER} header is {refusal}",
                header=REPLY_HEADER,
                subject=msg.subject,
            )
        append = aside or prepare_append(
            msg.data,
            tenant_token=subject.tenant_token,
            lane_token=subject.lane_token,
            max_bytes=self._settings.max_request_bytes,
            # Signatures of actors the writer already knows are checked here,
            # overlapping the writer's commit of the previous batch.
            actor_keys=self._writer.actor_keys,
            redactor=self._settings.redactor,
        )
        check_receipt_fits(append, len(msg.data), self._reply_nc.max_payload)
        return append

    async def _send_receipts(
        self, msgs: list[Msg], receipts: list[Receipt], inboxes: list[str | None]
    ) -> None:
        """One message per reply subject per batch: a JSON array of the
        receipts addressed there, in request order (spec/wire.md)."""
        by_inbox: dict[str, list[Receipt]] = {}
        committed = replayed = 0
        for msg, receipt, reply_to in zip(msgs, receipts, inboxes, strict=True):
            if isinstance(receipt, AppendRejected):
                self._metrics.requests.labels("rejected", receipt.error.code).inc()
                if receipt.error.code == "lane_conflict":
                    self._metrics.lane_conflicts.inc()
            elif receipt.replayed:
                replayed += 1
            else:
                committed += 1
            if reply_to:
                by_inbox.setdefault(reply_to, []).append(receipt)
                continue
            if (msg.headers or {}).get(REPLY_HEADER):
                self._metrics.refused_replies.labels("receipt").inc()
            if isinstance(receipt, AppendRejected):
                # Nobody to tell: counted on its own, so the refusal is not silent.
                self._metrics.unanswered_rejections.labels(receipt.error.code).inc()
        self._metrics.requests.labels("committed", "").inc(committed)
        self._metrics.requests.labels("replayed", "").inc(replayed)
        self._metrics.replays.inc(replayed)
        for reply_to, batch in by_inbox.items():
            try:
                for message in receipt_messages(batch, self._reply_nc.max_payload):
                    await self._reply_nc.publish(reply_to, message)
            except nats.errors.Error as exc:
                log.warning("could not send receipts to %r: %s", reply_to, exc)

    def _receipt_inbox(self, msg: Msg) -> tuple[str | None, str | None]:
        """``(where the append's receipt may go, why not)``: its
        ``Ledger-Reply-To`` when that lies in the requester's inbox
        (``subjects.reply_refusal``); ``(None, None)`` without the header."""
        reply_to = (msg.headers or {}).get(REPLY_HEADER)
        if not reply_to:
            return None, None
        try:
            tenant_token: str | None = self._settings.subjects.parse_append(msg.subject).tenant_token
        except InvalidRequest:
            tenant_token = None
        # With a tenants file every tenant is in its own NATS account: its
        # receipts go to its own inbox only (spec/wire.md, "Replies").
        refusal = reply_refusal(reply_to, tenant_token, trusted_inbox=self._settings.tenants is None)
        if refusal is None:
            return reply_to, None
        self._refused_receipts.note(f"{msg.subject}: {REPLY_HEADER} {reply_to[:80]!r} is {refusal}")
        return None, refusal

    # ----------------------------------------------------------------- commands

    async def _on_command(self, cmd: Command, target: RequestSubject) -> Any:
        """One command for the request server: ``<prefix>.cmd.<tenant>.<op>``
        is answered for that tenant only (tenancy.py), ``<prefix>.cmd.<op>``
        for any (trusted users). Runs in the writer thread, between batches."""
        # Free-form fields redacted, secret-shaped identifiers refused, as the
        # SDK does before sending (spec/content.md): for producers that do not.
        # A large command's scan runs off the loop, as a heavy append's does
        # (its encoding, C code, costs about a millisecond a MiB to measure).
        if is_heavy(msgspec.json.encode(cmd), 0):
            cmd, rules = await self._offloop.redact_command(cmd)
        else:
            cmd, rules = redact_command(cmd, self._settings.redactor)
        for rule, n in rules.items():
            self._metrics.redactions.labels(rule).inc(n)
        if target.tenant is not None:
            await self._blob_check.tenant_seen(token(target.tenant))
        if isinstance(cmd, Erase):
            return await self._erase(cmd, target.tenant)
        return await self._in_writer(self._execute, cmd, target.tenant)

    def _execute(self, cmd: Command, tenant: str | None = None) -> Any:
        return self._writer.current(lambda: self._decide(cmd, tenant))

    async def _erase(self, cmd: Erase, tenant: str | None) -> ErasurePage:
        """One page of an erasure (spec/erasure.md). The erasure event, when
        this page committed it, is on the committed stream before the answer
        goes, as an append's events are before its receipt."""

        def erase() -> tuple[ErasurePage, list[CommittedRecord], ErasedBlobs]:
            scoped = cmd if tenant is None else scope_command(cmd, tenant, self._writer.reader)
            assert isinstance(scoped, Erase)
            return self._writer.erase(scoped)

        report, committed, blobs = await self._in_writer(lambda: self._writer.current(erase))
        if committed:
            await self.mirror.submit(committed)
            await self.mirror.durable_through(committed[-1].position)
        if blobs.unreferenced:
            # After the commit, which listed them (blobs_to_erase): a blob is
            # gone only once no event that is not erased names it. A failure
            # fails the request; the list keeps them, and appends naming them
            # refused, until a later erasure or activation deletes them.
            await self._delete_blobs(blobs.tenant, blobs.unreferenced)
        if report.erased and not report.dry_run:
            # Listed with the commit too (stream_copies_to_erase), and removed
            # by the background round: a delete from a large stream costs
            # milliseconds, and commands are answered one at a time.
            self.stream_copies.wake()
        if report.erased and not report.dry_run and cmd.committed_before is None:
            self._metrics.erased_events.labels(blobs.tenant, "request").inc(report.erased)
        return report

    async def _delete_blobs(self, tenant: str, hexes: list[str]) -> None:
        """Delete these blobs of the tenant from its buckets, then take them
        off the ledger's list of blobs to erase (spec/erasure.md, "Blobs")."""
        gone = await self._blob_check.erase(token(tenant), hexes)
        await self._in_writer(self._writer.blobs_deleted, tenant, hexes)
        log.info("deleted %d of %d erased blobs of tenant %s", len(gone), len(hexes), tenant)

    async def _erase_listed_while_active(self) -> None:
        """While active: at once, after each erasure, and every
        ``erasure_retry_s``, the blobs and stream copies erasures listed that
        are not deleted yet (an erasure's stream copies; or a crash, or a
        deletion that failed, between an erasure's commit and its deletions)."""
        while True:
            await self.erase_listed()
            await self.stream_copies.woken(self._settings.erasure_retry_s)

    async def erase_listed(self) -> None:
        """Delete the blobs erasures listed, then remove the stream copies
        they listed (and the log's names of the deleted blobs)."""
        await self.delete_listed_blobs()
        await self._count_stream_copies()
        try:
            await self.stream_copies.erase_listed()
        except (LedgerError, nats.errors.Error, TimeoutError) as exc:  # tried again next time
            log.warning("removing erased events' stream copies failed: %s", exc)
        await self._count_stream_copies()

    async def _count_stream_copies(self) -> None:
        writer = self._writer
        pending = await self._in_writer(lambda: writer.current(writer.stream_copies_pending))
        self._metrics.stream_copies_pending.set(pending)

    async def delete_listed_blobs(self) -> None:
        """Delete the blobs erasures listed (``LedgerWriter.blobs_to_erase``)."""
        listed = await self._in_writer(lambda: self._writer.current(self._writer.blobs_to_erase))
        by_tenant: dict[str, list[str]] = {}
        for tenant, sha in listed:
            by_tenant.setdefault(tenant, []).append(sha)
        for tenant, hexes in sorted(by_tenant.items()):
            try:
                await self._delete_blobs(tenant, hexes)
            except LedgerError as exc:  # tried again next time
                log.warning("deleting %d erased blobs of tenant %s failed: %s", len(hexes), tenant, exc)

    async def _retention_actor(self, tenant: str) -> str:
        """The tenant's retention actor (retention.py), ensured."""
        cmd = EnsureActor(tenant=tenant, key=RETENTION_ACTOR, kind="service")
        actor = await self._in_writer(lambda: self._writer.current(lambda: self._writer.ensure_actor(cmd)))
        return actor.id

    def _decide(self, cmd: Command, tenant: str | None) -> Any:
        if tenant is not None:
            cmd = scope_command(cmd, tenant, self._writer.reader)
        # Half the reply limit for a page's rows: their encoding in the reply
        # differs a little from the stored text.
        return decide_command(self._writer, cmd, max_page_bytes=self._nc.max_payload // 2)


async def _end_finisher(finisher: asyncio.Task[None], in_flight: asyncio.Queue[_Batch | None]) -> None:
    """The pull loop's end: the finisher finishes what was submitted, unless
    the pull loop is being cancelled (stand_down or stop gave up waiting).
    Then the finisher is cancelled too, even if the cancel already reached
    the pull loop elsewhere: its batches may wait for the committed stream
    to reach positions it never will (a successor wrote it; or it refuses
    them), and their requests, unacked, are redelivered and answered from
    the ledger."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        finisher.cancel()
        return
    try:
        await in_flight.put(None)
        await finisher
    except asyncio.CancelledError:
        finisher.cancel()
        raise


def _reply_too_large(op: str, size: int, limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"the reply is {size} bytes, more than the server's max_payload ({limit}); read the "
        f"structure with load_structure and the lanes' events page by page with load_lane",
        size_bytes=size,
        limit_bytes=limit,
        op=op,
    )
