"""A JetStream pull consumer fed by credits, for the sequencer's hot path.

nats-py's ``fetch()`` waits for each message with its own timer and task;
at tens of thousands of messages a second that bookkeeping costs more than
the ledger's own work. ``PullFeed`` instead keeps one pull request for up to
``credits`` messages outstanding at a time, receives the messages on a plain
subscription callback into a buffer, and hands the sequencer whatever has
arrived (up to a batch) as soon as anything has.

With ``pull_bytes`` a pull request also asks for at most that many bytes
(JetStream's ``max_bytes``), and the feed asks again only while its buffer
holds less than that: what nats-server has to send the feed at any time is
bounded in bytes, not only in messages, so a stream of large messages cannot
pile up in the server's buffer for this connection until the server drops
it as a slow consumer. ``pull_bytes`` must exceed the largest message (the
server's max_payload, with its headers), or that message is never delivered.

A pull request ends when all its messages were delivered or when it expires
(the server then sends a status message: 404/408, or 409 for conditions such
as a leadership change); either way the feed asks again, at once if the
buffer has room. A 503 means nobody serves the consumer (a cluster consumer
without a leader, or one that is gone): the feed notes it (``unavailable``)
and asks again only when ``next_batch`` next looks, like after a 409, so an
election cannot turn into a tight loop of unanswered requests.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

STATUS_HEADER = "Status"
NO_RESPONDERS = "503"


class PullFeed:
    def __init__(
        self,
        nc: NATS,
        stream: str,
        consumer: str,
        *,
        credits: int = 1000,
        expires_s: float = 1.0,
        max_buffered: int = 4000,
        pull_bytes: int | None = None,
        arrived: asyncio.Event | None = None,
    ) -> None:
        self._nc = nc
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._credits = credits
        self._expires_ns = int(expires_s * 1e9)
        self._expires_s = expires_s
        self._max_buffered = max_buffered
        self._pull_bytes = pull_bytes
        self._buffer: deque[Msg] = deque()
        self._buffered_bytes = 0
        # Set when a message arrives; several feeds read together share one.
        self._arrived = arrived or asyncio.Event()
        self._inbox = ""
        self._sub: Subscription | None = None
        self._outstanding = 0  # messages the current pull request may still deliver
        self._request_over = asyncio.Event()  # set once _outstanding reaches 0
        self._asked_at = 0.0
        self._winding_down = False
        self.unavailable = False  # the last pull request was answered 503

    async def start(self) -> None:
        self._inbox = self._nc.new_inbox()
        # With pull_bytes, what arrives is bounded by what was asked for (a
        # request's max_bytes, and a second one asked once the first seems
        # lost, on a buffer below max_bytes): the limit states that bound.
        pending_bytes = -1 if self._pull_bytes is None else 4 * self._pull_bytes
        self._sub = await self._nc.subscribe(
            self._inbox, cb=self._on_msg, pending_msgs_limit=-1, pending_bytes_limit=pending_bytes
        )
        await self._ask()

    async def stop(self) -> None:
        """Stop receiving, and hand back what arrived but was never taken:
        a nak makes the server redeliver it at once, where otherwise it would
        wait out the consumer's ack wait (ack-none consumers ignore naks)."""
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        while self._buffer:
            (msg,) = self.take(1)
            if msg.reply:
                try:
                    await msg.nak()
                except Exception:  # noqa: BLE001 - NATS away: the ack wait redelivers it
                    break

    @property
    def buffered(self) -> int:
        """Messages arrived and not yet taken."""
        return len(self._buffer)

    async def next_batch(self, max_msgs: int, timeout: float) -> list[Msg]:
        """Whatever has arrived, up to ``max_msgs``; waits up to ``timeout``
        for the first message and returns ``[]`` if none came."""
        if not self._buffer:
            self._arrived.clear()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
                # cancel that lands as its timeout fires, and a stopping
                # service would then hang here.
                async with asyncio.timeout(timeout):
                    await self._arrived.wait()
            except TimeoutError:
                pass
            await self.ask_if_idle()
        batch = self.take(max_msgs)
        await self.ask_if_idle()
        return batch

    async def _ask(self) -> None:
        self._outstanding = self._credits
        self._request_over.clear()
        self._asked_at = asyncio.get_running_loop().time()
        pull: dict[str, int] = {"batch": self._credits, "expires": self._expires_ns}
        if self._pull_bytes is not None:
            pull["max_bytes"] = self._pull_bytes
        await self._nc.publish(self._next_subject, json.dumps(pull).encode(), reply=self._inbox)

    async def wind_down(self) -> None:
        """Ask for nothing more and wait (bounded by the request's expiry) for
        the open pull request to end, so nothing is delivered after we go:
        a message delivered to a consumer that left would come back only after
        the ack wait, behind later ones."""
        self._winding_down = True
        if self._outstanding > 0:
            try:
                async with asyncio.timeout(self._expires_s + 1.0):
                    await self._request_over.wait()
            except TimeoutError:
                pass  # its end got lost (a reconnect): it has expired by now

    async def keep_buffered(self) -> None:
        """Mark every buffered message in progress, so JetStream does not
        redeliver one that waits here longer than the ack wait."""
        await asyncio.gather(*(m.in_progress() for m in list(self._buffer)), return_exceptions=True)

    def take(self, max_msgs: int) -> list[Msg]:
        """What has arrived, up to ``max_msgs``, without waiting."""
        taken = [self._buffer.popleft() for _ in range(min(max_msgs, len(self._buffer)))]
        self._buffered_bytes -= sum(len(m.data) for m in taken)
        return taken

    def _has_room(self) -> bool:
        if self._pull_bytes is not None and self._buffered_bytes >= self._pull_bytes:
            return False
        return len(self._buffer) < self._max_buffered

    async def ask_if_idle(self) -> None:
        """Ask the server for more if the last request is over and there is room."""
        # A request whose messages have all come is done; one older than its
        # expiry is done too even if its closing status got lost (reconnect).
        if self._winding_down:
            return
        stale = asyncio.get_running_loop().time() - self._asked_at > self._expires_s * 2
        if (self._outstanding <= 0 or stale) and self._has_room():
            await self._ask()

    async def _on_msg(self, msg: Msg) -> None:
        if not msg.data and msg.headers and STATUS_HEADER in msg.headers:
            # 408 expired / 409 (max ack pending, leadership change, …) / 503
            # (no one serves the consumer): this request is over. Ask again at
            # once after an expiry; after a 409 or 503 let next_batch ask when
            # it next looks, so a full ack window or a consumer without a
            # leader cannot turn into a tight loop of refused requests.
            status = msg.headers[STATUS_HEADER]
            self._outstanding = 0
            self._request_over.set()
            self.unavailable = status == NO_RESPONDERS
            if status not in ("409", NO_RESPONDERS):
                await self.ask_if_idle()
            return
        self.unavailable = False
        self._buffer.append(msg)
        self._buffered_bytes += len(msg.data)
        self._outstanding -= 1
        self._arrived.set()
        if self._outstanding <= 0:
            self._request_over.set()
            await self.ask_if_idle()
