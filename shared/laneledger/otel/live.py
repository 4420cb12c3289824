"""``otel export --live``: the committed stream to an OTLP receiver, as it grows.

A durable JetStream consumer on the committed stream (ack policy *all*)
holds where the exporter is. Each batch of messages is mapped; the spans it
completes are sent; only once the receiver took them is the batch's last
message acknowledged, which acknowledges the batch. So a crash before the
acknowledgement delivers the batch again, and one after it never does: the
consumer's acknowledgement floor is "every span ending at or before here
was exported".

Spans still open at a restart (a run whose ``run.started`` is below the
floor and whose end is above it) are rebuilt, not stored: before reading the
durable consumer, the exporter re-reads the stream from position 1 to the
floor with an ephemeral consumer and feeds it to the mapper, sending
nothing (every span ending there was sent), then exports what the consumer
had delivered past the floor. That costs a read of the stream at each
start, and leaves no state of the exporter's own to lose or keep in step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from laneledger.contract.errors import TransportError
from laneledger.contract.model import CommittedEvent, decoder
from laneledger.contract.subjects import EVENTS_STREAM
from laneledger.otel.mapping import SpanMapper, SpanRecord
from laneledger.otel.sdkspans import SpanSender
from laneledger.runtime.follow import StreamFollower
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.retry import Backoff, logged, retry

log = logging.getLogger("laneledger.otel.live")
T = TypeVar("T")
_events = decoder(CommittedEvent)

DEFAULT_CONSUMER = "laneledger-otel"
# A receiver or a NATS that is away: waited out, as long as it takes.
AWAY = (TransportError, OSError, NotFoundError, NatsTimeout)
AWAY_BACKOFF = Backoff(first=0.2, cap=10.0)

Progress = Callable[[int, int], None]  # (spans sent in this batch, acknowledged through position)


class LiveExporter:
    def __init__(
        self,
        nc: NATS,
        client: LedgerClient,
        sender: SpanSender,
        mapper: SpanMapper,
        *,
        stream: str = EVENTS_STREAM,
        consumer: str = DEFAULT_CONSUMER,
        tenant: str | None = None,
        batch_size: int = 200,
        idle_s: float = 0.5,
        progress: Progress | None = None,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._client = client
        self._sender = sender
        self._mapper = mapper
        self._stream = stream
        self._consumer = consumer
        self._tenant = tenant  # export only its events (None: every tenant's)
        self._batch_size = batch_size
        self._idle_s = idle_s
        self._progress = progress
        self.position = 0  # the last position mapped

    async def run(self) -> None:
        """Export until cancelled."""
        while True:
            floor, delivered = await _retrying(self._ensure_consumer, "open the durable consumer")
            if delivered > self.position:
                await self._catch_up(floor, delivered)
            sub = await _retrying(
                lambda: self._js.pull_subscribe_bind(durable=self._consumer, stream=self._stream),
                "bind to the durable consumer",
            )
            try:
                await self._follow(sub)  # returns at a gap: catch up again, from the stream
            finally:
                try:
                    await sub.unsubscribe()
                except (NatsError, TimeoutError):
                    pass  # NATS away: the subscription went with the connection

    async def _follow(self, sub: JetStreamContext.PullSubscription) -> None:
        while True:
            try:
                msgs = await sub.fetch(self._batch_size, timeout=self._idle_s)
            except TimeoutError:  # nats-py's, or asyncio's raw one from a fetch cut by a reconnect
                continue
            except NotFoundError:
                return  # the consumer was deleted: made again, its redeliveries skipped
            except NatsError as exc:  # reconnecting: the client resubscribes by itself
                log.warning("cannot fetch from %s (%s); retrying", self._consumer, exc)
                await asyncio.sleep(0.5)
                continue
            if not await self._export_batch(msgs):
                return

    async def _ensure_consumer(self) -> tuple[int, int]:
        """The durable consumer (made on first start): its acknowledgement
        floor and the last position it delivered."""
        try:
            info = await self._js.consumer_info(self._stream, self._consumer)
        except NotFoundError:
            config = ConsumerConfig(
                durable_name=self._consumer,
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.ALL,
                ack_wait=60.0,
                max_ack_pending=4 * self._batch_size,
            )
            info = await self._js.add_consumer(self._stream, config)
        floor = info.ack_floor.stream_seq if info.ack_floor and info.ack_floor.stream_seq else 0
        delivered = info.delivered.stream_seq if info.delivered and info.delivered.stream_seq else 0
        return floor, max(floor, delivered)

    async def _catch_up(self, floor: int, delivered: int) -> None:
        """Rebuild the spans open at ``floor`` by mapping positions 1..floor
        again (sending nothing: what ended there was sent), then export what
        the consumer delivered but nobody acknowledged (floor+1..delivered):
        it hands those out again only after its ack wait, and acknowledging a
        later message acknowledges them too. After a gap the mapping is
        current up to ``self.position``, and reading starts after it."""
        follower = StreamFollower(self._nc, stream=self._stream, name=f"{self._consumer}-rebuild")
        # 0 at the start; after a gap, where mapping stopped. Reads retried in
        # place: a NATS restart must not end the exporter half-way through.
        await _retrying(lambda: follower.open(self.position), "open the committed stream")
        pending: list[SpanRecord] = []
        try:
            while self.position < delivered:
                batch = await _retrying(
                    lambda: follower.read(max_msgs=delivered - follower.position), "read the committed stream"
                )
                for position, body in batch:
                    spans = await self._feed(position, _events.decode(body))
                    if position > floor:
                        pending.extend(spans)
        finally:
            await follower.close()
        log.info("rebuilt %d open span(s) from positions 1..%d", self._mapper.open_spans, floor)
        await _retrying(lambda: self._sender.send(pending), f"send {len(pending)} span(s)")
        if self._progress is not None and delivered > floor:
            self._progress(len(pending), delivered)

    async def _export_batch(self, msgs: list[Msg]) -> bool:
        """Map, send, then acknowledge; False at a gap (a message after the
        next one due: the one due was lost in transit, at a reconnect), after
        exporting and acknowledging what came before it."""
        spans: list[SpanRecord] = []
        last: Msg | None = None
        contiguous = True
        for msg in msgs:
            position = msg.metadata.sequence.stream
            if position <= self.position:
                last = msg
                continue  # delivered again (an acknowledgement that did not arrive)
            if position != self.position + 1:
                log.warning("position %d came where %d was due; re-reading", position, self.position + 1)
                contiguous = False
                break
            spans.extend(await self._feed(position, _events.decode(msg.data)))
            last = msg
        if last is not None:
            await _retrying(lambda: self._sender.send(spans), f"send {len(spans)} span(s)")
            acked = last  # acknowledging it acknowledges everything before it (ack policy all)
            await _retrying(lambda: acked.ack_sync(timeout=5.0), "acknowledge the batch")
            if self._progress is not None:
                self._progress(len(spans), acked.metadata.sequence.stream)
        return contiguous

    async def _feed(self, position: int, event: CommittedEvent) -> list[SpanRecord]:
        if self._tenant is not None and event.tenant != self._tenant:
            self.position = position
            return []
        if not self._mapper.knows_lane(event.tenant, event.lane_id):
            lane = await _retrying(
                lambda: self._client.get_lane(event.lane_id, tenant=event.tenant), "read a lane"
            )
            self._mapper.add_lane(lane)
        self.position = position
        return self._mapper.feed(event)


async def _retrying(action: Callable[[], Awaitable[T]], what: str) -> T:
    """``action()`` until it succeeds: the exporter waits out a receiver or a
    NATS that is away rather than skip what it cannot deliver."""
    return await retry(action, AWAY_BACKOFF, retry_on=AWAY, on_retry=logged(log, what))
