"""JetStream publishes whose acks come back on one shared subscription.

A JetStream publish is a core NATS publish with a reply subject; the stream
answers there with a PubAck. nats-py's ``js.publish`` makes a request (a
timer, a future and a random token per message) and ``publish_async`` a
semaphore and a token per message; at ledger rates that bookkeeping is most
of the cost. ``AckInbox`` routes every ack to ``<inbox>.<n>`` on a single
wildcard subscription and resolves a plain future. Used by the SDK for
appends and by the sequencer for the committed stream.
"""

from __future__ import annotations

import asyncio
import itertools

import msgspec
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription


class ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class PubAck(msgspec.Struct):
    """The stream's answer; ``error`` is set when it refused the message."""

    stream: str | None = None
    seq: int | None = None
    duplicate: bool = False
    error: ApiError | None = None


# JetStream's "store failed" (JSStreamStoreFailedF): a discard-new stream at
# one of its limits answers with it, the description naming the limit.
STORE_FAILED = 10077
_LIMIT_REACHED = {"maximum messages exceeded": "max_msgs", "maximum bytes exceeded": "max_bytes"}


def limit_reached(error: ApiError) -> str | None:
    """Which limit of a full stream refused a publish (``max_msgs`` or
    ``max_bytes``), or None when it was refused for another reason."""
    if error.err_code != STORE_FAILED:
        return None
    return _LIMIT_REACHED.get(error.description or "")


def limit_reached_by(exc: BaseException) -> str | None:
    """``limit_reached`` for a nats-py exception: a JetStream refusal in
    ``exc`` or in what it was raised while handling (nats-py's object store
    put tries to purge a failed upload's chunks, which a producer may not:
    that error then hides the refusal)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, nats.js.errors.APIError):
            found = limit_reached(ApiError(err_code=seen.err_code or 0, description=seen.description or ""))
            if found is not None:
                return found
        seen = seen.__context__
    return None


NO_RESPONDERS = PubAck(error=ApiError(code=503, description="no stream listens on this subject"))
_decode = msgspec.json.Decoder(PubAck).decode


class AckInbox:
    def __init__(self, nc: NATS) -> None:
        self._nc = nc
        self._prefix = ""
        self._sub: Subscription | None = None
        self._waiting: dict[str, asyncio.Future[PubAck]] = {}
        self._tokens = itertools.count(1)

    async def publish(
        self, subject: str, body: bytes, headers: dict[str, str] | None = None
    ) -> asyncio.Future[PubAck]:
        """Publish ``body`` to JetStream; the returned future gets its PubAck.
        The caller bounds the wait and calls ``forget`` if it gives up."""
        if self._sub is None:
            self._prefix = self._nc.new_inbox()
            self._sub = await self._nc.subscribe(f"{self._prefix}.*", cb=self._on_ack)
        token = str(next(self._tokens))
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        future.ack_token = token  # type: ignore[attr-defined]
        self._waiting[token] = future
        try:
            await self._nc.publish(subject, body, reply=f"{self._prefix}.{token}", headers=headers)
        except BaseException:
            self._waiting.pop(token, None)
            raise
        return future

    def forget(self, future: asyncio.Future[PubAck]) -> None:
        self._waiting.pop(getattr(future, "ack_token", ""), None)

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        for future in self._waiting.values():
            future.cancel()
        self._waiting.clear()

    async def _on_ack(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject.rsplit(".", 1)[-1], None)
        if future is None or future.done():
            return  # late: the publisher gave up waiting
        if not msg.data:
            # A status message instead of an ack: 503 means nothing took it.
            future.set_result(NO_RESPONDERS)
            return
        try:
            future.set_result(_decode(msg.data))
        except msgspec.DecodeError:
            future.set_result(PubAck(error=ApiError(description="unreadable ack")))
