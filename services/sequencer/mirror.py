"""Keeps LEDGER_EVENTS an exact, gap-free copy of the SQLite ledger.

Every committed event is published with ``Nats-Expected-Last-Sequence =
position - 1``, so JetStream itself refuses a gap or a repeat (error 10071).
SQLite is the source of truth: whenever the stream and the ledger disagree —
at start-up, after a crash between commit and publish, after a failed
publish — the mirror reads the stream's last sequence and republishes what
the ledger has beyond it.

A round of ``ATOMIC_FROM`` events or more (on a replicated stream, any
round) is published as atomic batches (``laneledger.store.atomicbatch``,
ADR-50) when the server and the stream allow them: up to 1,000 events
stored as a unit with one ack (and one fsync), fenced by
``Nats-Expected-Last-Sequence`` on the first. A smaller round, and every
round where batches are not allowed, goes one by one: each message carries
that header, publishes are pipelined and one in ``ACK_EVERY`` (and the
last) asks for an ack, awaited before the next group goes
(``_publish_one_by_one``). Rounds are published one after another by a
single task, in position order.

A message on the stream that the ledger did not write (published by a user
that should not have been able to, spec/wire.md "Foreign messages") takes a
position that belongs to a committed event. The mirror never skips past
one: every stream message it has not proven its own (by an ack for its
position) is compared with the ledger's event there, and a difference, or a
stream longer than the ledger, is a ``StreamFault``. It then stops
publishing and reports it (``on_fault``: the sequencer stops committing and
is not ready), and looks again every ``recheck_s``: once the stream equals
the ledger again (``laneledger repair-stream`` deleted it, and the mirror
recreated it from the ledger), it reports the recovery and goes on.

A deposed sequencer (``deposed()``: its lease was refused) finds the stream
past its ledger as a matter of course: its successor wrote it. That is not
reported as a fault; it publishes nothing more and is cancelled when the
sequencer stands down (``forget_fault``). The next activation checks the
stream afresh (``check_at_start``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from laneledger.contract.errors import IntegrityError
from laneledger.contract.model import CommittedEvent, decoder
from laneledger.contract.subjects import Subjects
from laneledger.sdk.pubacks import AckInbox, PubAck
from laneledger.store import CommittedRecord
from laneledger.store.atomicbatch import (
    ATOMIC_DISABLED,
    BatchAck,
    BatchUnanswered,
    batches,
    publish_batch,
    supports_atomic,
)
from laneledger.store.erasedcopies import erased_event
from laneledger.store.erasure import same_event

log = logging.getLogger("laneledger.sequencer.mirror")

WRONG_LAST_SEQUENCE = 10071

# Reads committed events after a position from the ledger: (position, body) rows.
ReadAfter = Callable[[int, int], Awaitable[list[tuple[int, bytes]]]]


_LANE_SUBJECTS = 10_000
# The smallest round published as an atomic batch. One nats-server with
# ``sync_interval: always`` answers an atomic batch commit in about 3.3 ms
# whatever its size (up to 64 events), and a round one by one in 0.4 ms
# plus 0.27 ms per event (an fsync each): equal at about 11 events. A lone
# request's receipt waits for its round, so small rounds go one by one (on
# R3 each message one by one is a consensus round of its own, and the
# receipts of a loaded cluster came later: there every round is a batch).
# spec/replication.md, "Atomic batches".
ATOMIC_FROM = 10
# A round one by one waits for the server's ack every this many events
# (``_publish_one_by_one``): flow control, so that another tenant's log
# write never queues behind a whole 1000-event round in nats-server
# (spec/replication.md, "Atomic batches", has the measurement).
ACK_EVERY = 32


def event_headers(position: int) -> dict[str, str]:
    # The only header: the stream sequence *is* the position, and the body
    # carries everything else.
    return {"Nats-Expected-Last-Sequence": str(position - 1)}


def _raise_if_cancel_requested() -> None:
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class StreamPublishError(Exception):
    """A committed event was not stored at its position (the mirror resyncs)."""


class StreamFault(IntegrityError):
    """The committed stream holds what the ledger did not write: a foreign
    message at ``details["position"]`` (``kind`` ``foreign_message``), a
    message deleted there whose erased copy is not the ledger's event
    (``message_deleted``), or more messages than the ledger has events
    (``stream_ahead``)."""


Notify = Callable[[StreamFault | None], None]  # a fault found (None: the stream is whole again)


class CommittedStreamMirror:
    def __init__(
        self,
        nc: NATS,
        subjects: Subjects,
        stream: str,
        read_after: ReadAfter,
        ledger_last_position: Callable[[], int],
        *,
        ensure_stream: Callable[[], Awaitable[None]] | None = None,
        on_fault: Notify | None = None,
        deposed: Callable[[], bool] = lambda: False,
        queue_batches: int = 64,
        ack_timeout_s: float = 10.0,
        recheck_s: float = 2.0,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._subjects = subjects
        self._stream = stream
        self._read_after = read_after
        self._ledger_last = ledger_last_position
        self._ack_timeout = ack_timeout_s
        self._ensure_stream = ensure_stream
        self._on_fault = on_fault
        self._deposed = deposed
        self._fault_reported = False  # on_fault told of ``fault`` (not found while deposed)
        self._recheck_s = recheck_s
        self.fault: StreamFault | None = None  # while set, nothing is published
        self._queue: asyncio.Queue[list[CommittedRecord]] = asyncio.Queue(queue_batches)
        self.published = 0  # the stream's last sequence, as far as we know
        self._submitted = 0  # the last position handed to ``submit``
        self._advanced = asyncio.Condition()  # notified when ``published`` grows
        self._acks = AckInbox(nc)
        # Atomic batches: set from the server's version and the stream's
        # allow_atomic at each catch-up; off for good once the stream refuses one.
        self.atomic = False
        self._atomic_from = ATOMIC_FROM  # the smallest atomic round, set with ``atomic``
        # Each lane's subject on the stream, by (tenant, session, run, lane):
        # four tokens to check or hash per event otherwise. Bounded: emptied
        # when it holds _LANE_SUBJECTS lanes.
        self._lane_subjects: dict[tuple[str, str, str, str], str] = {}

    async def submit(self, records: list[CommittedRecord]) -> None:
        """Queue one committed batch; waits when the mirror is far behind.
        A batch that committed nothing may still have found the ledger
        grown (``_queue_unsubmitted``)."""
        if records:
            self._submitted = max(self._submitted, records[-1].position)
            await self._queue.put(records)
        else:
            self._queue_unsubmitted()

    def _queue_unsubmitted(self) -> None:
        """The ledger holds events nobody handed over when the writer read
        them back from its transaction log: an empty round makes ``run``
        compare the stream with the ledger and publish them."""
        if self._ledger_last() > self._submitted and self._queue.empty():
            self._submitted = self._ledger_last()
            self._queue.put_nowait([])

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    async def durable_through(self, position: int) -> None:
        """Until the stream holds every position up to ``position``, acked
        (JetStream has stored it with the stream's replicas): receipts of a
        batch wait for this (spec/object-model.md, append step 7)."""
        if self.published >= position:
            return
        self._queue_unsubmitted()
        async with self._advanced:
            await self._advanced.wait_for(lambda: self.published >= position)

    async def flushed(self, position: int, *, look_s: float = 0.05) -> None:
        """``durable_through``, or until the mirror has a fault: then it
        publishes nothing until the stream is whole again, which a stop does
        not wait for (it looks every ``look_s``)."""
        while self.published < position and self.fault is None:
            try:
                async with asyncio.timeout(look_s):
                    await self.durable_through(position)
            except TimeoutError:
                pass

    async def _set_published(self, position: int) -> None:
        self.published = position
        async with self._advanced:
            self._advanced.notify_all()

    async def taken_up(self) -> None:
        """Until ``run`` has taken every queued batch (``backlog`` is 0)."""
        await self._queue.join()

    async def run(self) -> None:
        """Publish queued batches forever; resync on any failure.

        A cancel can be swallowed on the way (Python 3.11's ``wait_for``
        returns the result instead of raising when what it awaits completes
        in the same loop iteration as the cancel; nats-py turns a cancelled
        ``publish_async`` into another error), so the task also checks for a
        pending cancel itself: otherwise ``Sequencer.stop()`` waits forever
        on a mirror that went back to its queue.
        """
        while True:
            _raise_if_cancel_requested()
            if self.fault is not None:
                await self._until_whole_again()
            # Whatever else is queued goes in the same round: one ack wait per
            # round, not per batch, or small batches arriving faster than the
            # server answers would queue up behind each other.
            batches = [await self._queue.get()]
            while not self._queue.empty():
                batches.append(self._queue.get_nowait())
            for _ in batches:  # taken: what ``taken_up`` waits for
                self._queue.task_done()
            records = [record for batch in batches for record in batch]
            while True:
                try:
                    await self._publish_new(records)
                    break
                except asyncio.CancelledError:
                    raise
                except StreamFault as fault:
                    self._report(fault)
                    await self._until_whole_again()
                except IntegrityError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any NATS failure: resync and retry
                    _raise_if_cancel_requested()
                    log.warning("committed-stream publish failed (%s); resyncing", exc)
                    await asyncio.sleep(0.2)
                    try:
                        await self._resync_quietly()
                    except StreamFault as fault:
                        self._report(fault)
                        await self._until_whole_again()

    def _report(self, fault: StreamFault | None) -> None:
        self.fault = fault
        if fault is not None and self._deposed():
            log.info(
                "the committed stream is its successor's to write: this sequencer was deposed (%s)", fault
            )
            return
        if fault is None and not self._fault_reported:
            return
        self._fault_reported = fault is not None
        if self._on_fault is not None:
            self._on_fault(fault)

    def forget_fault(self) -> None:
        """The sequencer stood down: whatever the stream held is the active
        one's to find; the next ``check_at_start`` looks again."""
        self.fault = None
        self._fault_reported = False

    async def _until_whole_again(self) -> None:
        """While the stream holds what the ledger did not write, publish
        nothing; look again every ``recheck_s`` until it equals the ledger."""
        while self.fault is not None:
            await asyncio.sleep(self._recheck_s)
            try:
                await self.catch_up()
            except StreamFault as fault:
                self.fault = fault  # still there (or another): keep waiting
            except Exception as exc:  # noqa: BLE001 - NATS away: look again later
                log.debug("committed stream not checked (%s)", exc)
            else:
                log.warning("the committed stream equals the ledger again at position %d", self.published)
                self._report(None)

    async def check_at_start(self) -> None:
        """``catch_up``, except that a ``StreamFault`` is reported (and
        ``run`` waits for the stream to be whole) instead of raised: the
        sequencer starts, not ready, rather than exit and be unable to."""
        try:
            await self.catch_up()
        except StreamFault as fault:
            self._report(fault)
        else:
            self._report(None)  # whole: a fault reported before is over

    async def catch_up(self) -> None:
        """Republish everything the ledger has beyond the stream's last
        sequence, once the messages not yet proven ours are found to be the
        ledger's (``StreamFault`` otherwise). A missing stream is recreated
        (``ensure_stream``) and filled from position 1."""
        try:
            info = await self._js.stream_info(self._stream)
        except NotFoundError:
            if self._ensure_stream is None:
                raise
            log.warning("the committed stream %s is missing; recreating it from the ledger", self._stream)
            await self._ensure_stream()
            self.published = 0
            info = await self._js.stream_info(self._stream)
        last = info.state.last_seq
        self.atomic = bool(info.config.allow_atomic) and supports_atomic(self._nc)
        # Replicated, every message one by one is a consensus round of its own.
        self._atomic_from = ATOMIC_FROM if (info.config.num_replicas or 1) == 1 else 1
        ledger_last = self._ledger_last()
        if last > ledger_last:
            raise StreamFault(
                "the committed stream is ahead of the ledger database: it holds messages the "
                "ledger did not write, or the database is not the one this stream was written "
                "from (or it lost commits)",
                kind="stream_ahead",
                position=ledger_last + 1,
                stream=self._stream,
                stream_last_sequence=last,
                ledger_last_position=ledger_last,
            )
        await self._check_unproven(last)
        await self._set_published(last)
        while self.published < ledger_last:
            rows = await self._read_after(self.published, 1000)
            if not rows:
                break
            await self._publish_rows(rows)
        if self.published:
            log.info("committed stream at position %d", self.published)

    async def _check_unproven(self, last: int) -> None:
        """Compare with the ledger the stream messages no ack proved ours:
        those after ``published``. At start-up (nothing proven yet) the last
        one: the stream only grows at its end, so whatever a foreign
        publisher added while the sequencer was away ends it. A message an
        erasure deleted is compared by its erased copy (spec/erasure.md)."""
        first = self.published + 1 if self.published else last
        for position in range(max(first, 1), last + 1):
            stored = await self._read_after(position - 1, 1)
            body = bytes(stored[0][1]) if stored and stored[0][0] == position else None
            try:
                found = await self._js.get_msg(self._stream, position)
            except NotFoundError:
                copy = await erased_event(self._js, self._subjects, position)
                if body is None or copy != body:
                    raise StreamFault(
                        f"position {position} of the committed stream was deleted, and "
                        f"{self._subjects.erased_stream} holds no erased copy of the ledger's event there",
                        kind="message_deleted",
                        position=position,
                        stream=self._stream,
                    ) from None
                continue
            data = found.data or b""
            if body is None or not same_event(data, body):
                raise StreamFault(
                    f"position {position} of the committed stream holds a message the ledger did "
                    "not write (a foreign publish on its subjects)",
                    kind="foreign_message",
                    position=position,
                    stream=self._stream,
                    subject=found.subject,
                )

    async def _resync_quietly(self) -> None:
        try:
            await self.catch_up()
        except IntegrityError:
            raise
        except Exception as exc:  # noqa: BLE001 - NATS still down: the next attempt retries
            log.warning("resync failed (%s)", exc)

    async def _publish_new(self, records: list[CommittedRecord]) -> None:
        fresh = [r for r in records if r.position > self.published]
        if not fresh:
            if self._ledger_last() > self.published:
                await self.catch_up()
            return
        if fresh[0].position != self.published + 1:
            await self.catch_up()  # something before this batch is missing: fill from SQLite
            fresh = [r for r in fresh if r.position > self.published]
            if not fresh:
                return
        await self._publish([(r.position, self._lane_subject(r), r.body) for r in fresh])

    def _lane_subject(self, record: CommittedRecord) -> str:
        lane = (record.tenant, record.session_id, record.run_id, record.lane_id)
        subject = self._lane_subjects.get(lane)
        if subject is None:
            if len(self._lane_subjects) >= _LANE_SUBJECTS:
                self._lane_subjects.clear()
            subject = self._lane_subjects[lane] = self._subjects.events(*lane)
        return subject

    async def _publish_rows(self, rows: list[tuple[int, bytes]]) -> None:
        """Republish stored events (catch-up path): decode what routing needs."""
        items = []
        for position, body in rows:
            event = decoder(CommittedEvent).decode(body)
            items.append(
                (
                    position,
                    self._subjects.events(event.tenant, event.session_id, event.run_id, event.lane_id),
                    bytes(body),
                )
            )
        await self._publish(items)

    async def _publish(self, items: list[tuple[int, str, bytes]]) -> None:
        """Publish (position, subject, body) in position order: as atomic
        batches when allowed and the round is large enough for one
        (``ATOMIC_FROM`` on an R1 stream, any round on a replicated one),
        else one by one."""
        done = 0
        if self.atomic and len(items) >= self._atomic_from:
            for chunk in batches([len(body) for _, _, body in items]):
                first, last = items[chunk.start][0], items[chunk.stop - 1][0]
                try:
                    ack = await publish_batch(
                        self._nc,
                        [(subject, body) for _, subject, body in items[chunk.start : chunk.stop]],
                        expected_last_sequence=first - 1,
                        timeout=self._ack_timeout,
                    )
                except BatchUnanswered as exc:
                    raise StreamPublishError(str(exc)) from None
                if ack.error is not None and ack.error.err_code == ATOMIC_DISABLED:
                    log.warning("the committed stream refuses atomic batches; publishing one by one")
                    self.atomic = False
                    break
                await self._check_ack(ack, first, last)
                done = chunk.stop
        if done < len(items):
            await self._publish_one_by_one(items[done:])

    async def _publish_one_by_one(self, items: list[tuple[int, str, bytes]]) -> None:
        """Publish in position order, ``ACK_EVERY`` messages at a time, with
        an ack asked for each group's last one and awaited before the next.

        Every message carries ``Nats-Expected-Last-Sequence``, so JetStream
        stores message p only if the stream ends at p - 1. Published in order
        on one connection, a group's last message can therefore be stored at
        its position only if every earlier one was stored at its own: one ack
        per group proves the group, and a failure anywhere shows up there.
        The wait is flow control: a round of 1000 sent at once sat in the
        server ahead of the sequencer's next log write, another tenant's
        request (spec/replication.md, "Atomic batches"); it also gives the
        event loop back. A cancel during it leaves a prefix of the round
        stored, each event at its position: the next catch-up goes on.
        """
        for start in range(0, len(items), ACK_EVERY):
            group = items[start : start + ACK_EVERY]
            first = group[0][0]  # what a refusal names: the groups before it are stored
            for position, subject, body in group[:-1]:
                await self._nc.publish(subject, body, headers=event_headers(position))
            last, subject, body = group[-1]
            waiting = await self._acks.publish(subject, body, event_headers(last))
            try:
                ack = await asyncio.wait_for(waiting, self._ack_timeout)
            except TimeoutError:
                self._acks.forget(waiting)
                raise StreamPublishError(f"no ack for position {last} after {self._ack_timeout}s") from None
            await self._check_ack(ack, first, last)

    async def _check_ack(self, ack: PubAck | BatchAck, first: int, last: int) -> None:
        """Positions ``first``..``last`` are stored at their sequences, or raise."""
        if ack.error is not None:
            if ack.error.err_code == WRONG_LAST_SEQUENCE:
                log.info("stream is not where the ledger expects it before position %d", first)
            raise StreamPublishError(
                f"positions {first}..{last}: {ack.error.description} (err_code {ack.error.err_code})"
            )
        if ack.seq != last:
            raise IntegrityError(
                "committed stream sequence differs from ledger position",
                position=last,
                stream_sequence=ack.seq,
            )
        await self._set_published(last)
