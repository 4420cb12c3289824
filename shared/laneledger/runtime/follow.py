"""Reading the committed stream in order: the one home for it.

The stream sequence *is* the ledger position, so whoever reads LEDGER_EVENTS
wants message ``k`` right after message ``k - 1``. ``StreamFollower`` reads
it that way, from the position after a given one, in batches, over an
ephemeral pull consumer (no acks, no server-side state to lose or reset) fed
by ``PullFeed``. It never hands out a message out of order: redeliveries (a
sequence at or below the last one handed out) are dropped, and a message
that does not come right after the last one leaves positions out.

Those may be **erased**: an erasure deletes each event it erases from the
stream, after publishing its erased form on LEDGER_ERASED (spec/erasure.md,
"The streams"). So positions left out are first looked for there
(``store.erasedcopies``, a bounded number at a time: a session's erasure
leaves a hole of thousands) and handed out in order, as if the stream held
them (``from_erased`` names them in the last batch). The ledger whose copies
to read is the one the stream is made for (``ledger_of_stream``): callers
name only the stream. A hole is seen when the message after it comes: an
erasure's own event always follows what it erased.

Only a position found in neither is a **gap**. What a gap means is the
caller's to say (``on_gap``):

- ``"reread"`` (the services: tail, metrics, checkpoint): a message went
  missing in transit (a reconnect), so the follower re-creates its consumer
  from the last position and reads on (paced, when the same gap comes back:
  then it is a hole, not a loss in transit). Each service keeps the position it
  applied in its own SQLite file, in the same transaction as what it derived
  from the events, so a restart neither skips nor repeats.
- ``"fail"`` (the verifier, ``audit.stream.check_stream``): the gap is a
  finding: the next ``read`` raises ``StreamGap`` naming the position and
  the sequence found there, instead of re-reading it forever; the verifier
  reads the missing sequence directly to tell a hole in the stream from a
  message lost on the way.

Either way the follower recovers a consumer that vanished (a nats-server
restart drops it): quiet for ``stall_check_s`` while the stream is ahead of
the last position, it re-creates the consumer from there. It waits (retrying)
while NATS or the stream is not there yet: a service may start before the
sequencer created the stream; a caller with a deadline bounds that itself.

Its pulls are bounded in bytes as well as messages (``max_bytes``, default
``READ_BUDGET_BYTES``; ``PullFeed``): a stream of events near the 1 MiB
max_payload is read a few messages at a time, never 500 at once, so neither
nats-server's per-client pending limit nor the reader's memory is
overrun.

Two ways to read: iterate ``batches(after)`` (the services), or drive
``open``/``read``/``close`` (a caller that keeps its own deadlines between
reads, as the verifier does).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Literal

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from laneledger.contract.errors import IntegrityError
from laneledger.contract.subjects import EVENTS_STREAM
from laneledger.runtime.pullfeed import PullFeed
from laneledger.sdk.retry import Backoff, Pauses, logged, retry
from laneledger.store.erasedcopies import LOOKUPS_AT_ONCE, erased_events, ledger_of_stream

log = logging.getLogger("laneledger.runtime.follow")

OnGap = Literal["reread", "fail"]
READ_BUDGET_BYTES = 8 * 1024 * 1024  # per pull request, and buffered at most
# Opening the consumer again, until NATS and the stream are there; and
# re-reading a gap that keeps coming back (a hole in the stream itself).
REREAD_BACKOFF = Backoff(first=0.1, cap=2.0)


class StreamGap(Exception):
    """The stream skipped sequences: ``sequence`` came where ``position`` was due."""

    def __init__(self, position: int, sequence: int) -> None:
        super().__init__(f"sequence {sequence} came where position {position} was due")
        self.position = position
        self.sequence = sequence


class StreamReplaced(IntegrityError):
    """The committed stream is not the one a store was derived from: it was
    deleted and recreated from the ledger (``laneledger repair-stream``).
    What the store holds may come from a message the ledger did not write,
    so the service stops; started again, it rebuilds from position 1
    (``rebuild_if_replaced``)."""

    code = "integrity_failure"


class StreamIdentity:
    """Which committed stream a service's derived store was built from: the
    stream's creation time, kept in a small file beside the store (written
    atomically). A stream recreated under the same name has another."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def recorded(self) -> str | None:
        try:
            return self.path.read_text().strip() or None
        except FileNotFoundError:
            return None

    def record(self, created: str) -> None:
        if self.recorded() == created:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(created + "\n")
        partial.replace(self.path)


async def stream_created(js: JetStreamContext, stream: str) -> str | None:
    """When ``stream`` was created (ISO 8601), None if it does not exist."""
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        return None
    return None if info.created is None else info.created.isoformat()


async def rebuild_if_replaced(
    nc: NATS, stream: str, identity: StreamIdentity, rebuild: Callable[[], None], *, what: str
) -> None:
    """At a service's start, before it opens what it derived from ``stream``:
    if the stream is not the one ``identity`` recorded, ``rebuild()`` (the
    derived store starts again from position 1, read anew from the stream)
    and record the new one. No stream yet: nothing to compare."""
    created = await stream_created(nc.jetstream(), stream)
    if created is None:
        return
    was = identity.recorded()
    if was is not None and was != created:
        log.warning(
            "%s was recreated (created %s, not %s): rebuilding %s from position 1", stream, created, was, what
        )
        rebuild()
    identity.record(created)


class StreamFollower:
    def __init__(
        self,
        nc: NATS,
        *,
        stream: str = EVENTS_STREAM,
        name: str,
        batch_size: int = 500,
        max_bytes: int | None = None,
        idle_timeout_s: float = 0.5,
        stall_check_s: float = 3.0,
        on_gap: OnGap = "reread",
        identity: StreamIdentity | None = None,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._stream = stream
        self._name = name  # consumer name; one per service instance
        self._batch_size = batch_size
        self._max_bytes = READ_BUDGET_BYTES if max_bytes is None else max_bytes
        self._idle_timeout_s = idle_timeout_s
        self._stall_check_s = stall_check_s
        self._on_gap = on_gap
        self._identity = identity
        self._feed: PullFeed | None = None
        # Taken from the feed, not yet handed out: what comes after a hole
        # while the hole's erased copies are handed out, a batch at a time.
        self._held: deque[Msg] = deque()
        self._gap: StreamGap | None = None  # found by the last read, acted on by the next
        self._regap_position = 0  # where the last re-read gap was
        self._regap_pauses = Pauses(REREAD_BACKOFF)  # how often in a row it came back
        self._quiet_since = 0.0
        self.position = 0  # the last sequence handed out
        self.stream_last = 0  # the stream's last sequence when last asked
        self.from_erased: frozenset[int] = frozenset()  # the last batch's positions read on LEDGER_ERASED

    async def batches(self, after: int) -> AsyncGenerator[list[tuple[int, bytes]], None]:
        """Yield ``(position, body)`` batches, strictly in order from
        ``after + 1``; waits for new events when caught up. Iterate it inside
        ``contextlib.aclosing`` so leaving the loop removes the consumer."""
        await self.open(after)
        try:
            while True:
                batch = await self.read()
                if batch:
                    yield batch
        finally:
            await self.close()

    async def open(self, after: int) -> None:
        """Start reading at ``after + 1``: (re-)create the consumer, retrying
        while NATS or the stream is not there yet."""
        self.position = after
        self._gap = None
        await self._open_until_done(after)

    async def read(self, max_msgs: int | None = None) -> list[tuple[int, bytes]]:
        """The next ``(position, body)`` messages in order (at most
        ``max_msgs``, default the batch size; the rest stay buffered), waiting
        up to ``idle_timeout_s`` for the first; ``[]`` if none came. Raises
        ``StreamGap`` under ``on_gap="fail"`` once the messages before a gap
        were handed out."""
        if self._gap is not None:
            gap, self._gap = self._gap, None
            if self._on_gap == "fail":
                raise gap
            # A message lost in transit comes back at once when re-read; the
            # same gap again is a hole in the stream itself: re-read it, but
            # paced, rather than re-create the consumer as fast as NATS answers.
            if gap.position == self._regap_position:
                await self._regap_pauses.wait()
            else:
                self._regap_position = gap.position
                self._regap_pauses.reset()
            log.warning("gap after position %d (%s); re-reading from there", self.position, gap)
            await self._open_until_done(self.position)
        assert self._feed is not None, "read() before open()"
        self.from_erased = frozenset()
        limit = self._batch_size if max_msgs is None else max(1, min(max_msgs, self._batch_size))
        now = asyncio.get_running_loop().time()
        if not self._held:
            msgs = await self._feed.next_batch(limit, self._idle_timeout_s)
            now = asyncio.get_running_loop().time()
            if not msgs:
                if now - self._quiet_since > self._stall_check_s:
                    # Quiet for a while: fine if caught up. If the stream is
                    # ahead, our consumer is gone (a nats-server restart drops
                    # it): make a new one from where we are.
                    self._quiet_since = now
                    if await self._stream_is_ahead_of(self.position):
                        log.warning("stalled at position %d behind the stream; re-reading", self.position)
                        await self._open_until_done(self.position)
                return []
            self._held.extend(msgs)
        self._quiet_since = now
        return await self._hand_out(limit)

    async def _hand_out(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` positions in order from the held messages, a hole
        before one filled with its erased copies."""
        batch: list[tuple[int, bytes]] = []
        erased: list[int] = []
        while self._held and len(batch) < limit:
            seq = self._held[0].metadata.sequence.stream
            if seq <= self.position:
                self._held.popleft()  # already handed out (a redelivery after re-opening)
            elif seq == self.position + 1:
                batch.append((seq, self._held.popleft().data))
                self.position = seq
            else:
                copies = await self._erased_copies(
                    self.position + 1, min(seq, self.position + 1 + limit - len(batch))
                )
                if not copies:
                    self._gap = StreamGap(self.position + 1, seq)
                    self._held.clear()  # what follows the gap is read again (reread) or never (fail)
                    break
                batch.extend(copies)
                erased.extend(p for p, _ in copies)
                self.position = copies[-1][0]
        self.from_erased = frozenset(erased)
        return batch

    async def _erased_copies(self, first: int, end: int) -> list[tuple[int, bytes]]:
        """The erased copies of positions ``first``, ``first + 1``, … before
        ``end``, as far as they go on without one missing (looked up a chunk
        at a time: a message lost in transit costs one chunk's lookups)."""
        ledger = await ledger_of_stream(self._js, self._stream)
        copies: list[tuple[int, bytes]] = []
        if ledger is None:
            return copies
        for start in range(first, end, LOOKUPS_AT_ONCE):
            chunk = range(start, min(start + LOOKUPS_AT_ONCE, end))
            found = await erased_events(self._js, ledger, chunk)
            for position in chunk:
                if position not in found:
                    return copies
                copies.append((position, found[position]))
        return copies

    @property
    def unavailable(self) -> bool:
        """Whether the consumer's last pull request was answered 503: nobody
        serves it right now (a cluster consumer without a leader)."""
        return self._feed is not None and self._feed.unavailable

    async def _check_identity(self) -> None:
        """Every (re)open: the stream is still the one the store came from."""
        assert self._identity is not None
        created = await stream_created(self._js, self._stream)
        if created is None:
            raise NotFoundError  # retried: the stream does not exist yet
        was = self._identity.recorded()
        if was is None:
            self._identity.record(created)
        elif was != created:
            raise StreamReplaced(
                f"{self._stream} was recreated (created {created}, the store was built from one "
                f"created {was}): what this service derived from it must be rebuilt; it does so "
                "when started again",
                kind="stream_replaced",
                stream=self._stream,
            )

    async def refresh_stream_last(self) -> int:
        """Ask the server for the stream's last sequence (for lag and readiness)."""
        info = await self._js.stream_info(self._stream)
        self.stream_last = info.state.last_seq
        return self.stream_last

    async def _stream_is_ahead_of(self, position: int) -> bool:
        try:
            return await self.refresh_stream_last() > position
        except Exception as exc:  # noqa: BLE001 - NATS away: look again later
            log.debug("cannot read the stream's state: %s", exc)
            return False

    async def _open_until_done(self, after: int) -> None:
        # Anything but a replaced stream is waited out (cancellation still ends it).
        await retry(
            lambda: self._open(after),
            REREAD_BACKOFF,
            retry_on=lambda exc: not isinstance(exc, StreamReplaced),
            on_retry=logged(log, f"open a consumer on {self._stream}", logging.INFO),
        )
        self._quiet_since = asyncio.get_running_loop().time()

    async def _open(self, after: int) -> None:
        await self.close()
        if self._identity is not None:
            await self._check_identity()
        config = ConsumerConfig(
            name=self._name,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=60.0,
            mem_storage=True,
        )
        try:
            await self._js.delete_consumer(self._stream, self._name)
        except NotFoundError:
            pass
        await self._js.add_consumer(self._stream, config)
        self._feed = PullFeed(
            self._nc, self._stream, self._name, credits=2 * self._batch_size, max_bytes=self._max_bytes
        )
        await self._feed.start()

    async def close(self) -> None:
        """Stop reading and remove the consumer (best effort: it expires anyway)."""
        self._held.clear()
        if self._feed is not None:
            feed, self._feed = self._feed, None
            try:
                await feed.stop()
            except Exception:  # noqa: BLE001 - NATS away: the subscription went with it
                pass
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
                # cancel that lands as the deletion completes, and a follower
                # re-reading in a loop would then never stop.
                async with asyncio.timeout(2):
                    await self._js.delete_consumer(self._stream, self._name)
            except Exception:  # noqa: BLE001 - gone already, or NATS away: it expires anyway
                pass
