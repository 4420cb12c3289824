"""Following the committed stream, for the services that derive from it.

Each consumer service (tail, metrics, checkpoint) keeps its progress in its
own SQLite file, in the same transaction as what it derived from the events:
the stream position it has applied. ``StreamFollower`` reads LEDGER_EVENTS
from the position after that, in order, in batches, and never skips one: the
stream sequence *is* the ledger position, so a batch that does not start
right after the last one is a gap, and the follower re-creates its consumer
from the right place. A restart therefore neither skips nor repeats: the
service applies ``(position, body)`` batches and stores the last position
with them.

The consumer is ephemeral (no acks, no server-side state to lose or reset):
the service's own database is the only record of how far it got.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from laneledger.contract.subjects import EVENTS_STREAM
from laneledger.runtime.pullfeed import PullFeed

log = logging.getLogger("laneledger.runtime.follow")


class StreamFollower:
    def __init__(
        self,
        nc: NATS,
        *,
        stream: str = EVENTS_STREAM,
        name: str,
        batch_size: int = 500,
        idle_timeout_s: float = 0.5,
        stall_check_s: float = 3.0,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._stream = stream
        self._name = name  # consumer name; one per service instance
        self._batch_size = batch_size
        self._idle_timeout_s = idle_timeout_s
        self._stall_check_s = stall_check_s
        self._feed: PullFeed | None = None
        self.stream_last = 0  # the stream's last sequence when last asked

    async def batches(self, after: int) -> AsyncIterator[list[tuple[int, bytes]]]:
        """Yield ``(position, body)`` batches, strictly in order from
        ``after + 1``; waits for new events when caught up. Iterate it inside
        ``contextlib.aclosing`` so leaving the loop removes the consumer."""
        position = after
        await self._open_until_done(position)
        quiet_since = asyncio.get_running_loop().time()
        try:
            while True:
                assert self._feed is not None
                msgs = await self._feed.next_batch(self._batch_size, self._idle_timeout_s)
                now = asyncio.get_running_loop().time()
                if msgs:
                    quiet_since = now
                elif now - quiet_since > self._stall_check_s:
                    # Quiet for a while: fine if caught up. If the stream is
                    # ahead, our consumer is gone (a nats-server restart drops
                    # it): make a new one from where we are.
                    quiet_since = now
                    if await self._stream_is_ahead_of(position):
                        log.warning("stalled at position %d behind the stream; re-reading", position)
                        await self._open_until_done(position)
                    continue
                batch: list[tuple[int, bytes]] = []
                gap = False
                for msg in msgs:
                    seq = msg.metadata.sequence.stream
                    if seq <= position:
                        continue  # already applied (a redelivery after re-opening)
                    if seq != position + 1:
                        gap = True  # a message went missing (reconnect): re-read from here
                        break
                    batch.append((seq, msg.data))
                    position = seq
                if batch:
                    yield batch
                if gap:
                    log.warning("gap after position %d; re-reading from there", position)
                    await self._open_until_done(position)
        finally:
            await self._close()

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
        """Open the consumer, retrying while NATS or the stream is not there
        yet (a service may start before the sequencer created the stream)."""
        delay = 0.1
        while True:
            try:
                await self._open(after)
                return
            except Exception as exc:  # noqa: BLE001 - retried; cancellation still ends it
                log.info("cannot open a consumer on %s yet (%s); retrying", self._stream, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _open(self, after: int) -> None:
        await self._close()
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
        self._feed = PullFeed(self._nc, self._stream, self._name, credits=2 * self._batch_size)
        await self._feed.start()

    async def _close(self) -> None:
        if self._feed is not None:
            await self._feed.stop()
            self._feed = None
            try:
                await asyncio.wait_for(self._js.delete_consumer(self._stream, self._name), 2)
            except Exception:  # noqa: BLE001 - gone already, or NATS away: it expires anyway
                pass
