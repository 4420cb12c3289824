"""NATS request/reply serving: how the sequencer's commands and the checkpoint
service's requests are answered (spec/wire.md).

A request arrives on ``<base>.<op>`` (any tenant) or ``<base>.<tenant>.<op>``
(``RequestSubject``) with a tagged command as its body, whose ``op`` must be
the subject's. The answer is a ``Reply``: ``ReplyOk`` with what the handler
returned, or ``ReplyError`` with the typed error (a bug becomes a logged
``internal``). Every request is counted by op and outcome; an op no command
has is counted under one label, so the metric stays bounded whatever is
published. A reply NATS would refuse (over the server's ``max_payload``) is
replaced by ``request_too_large`` rather than leaving the caller to time out.

Where a reply goes is the requester's word, so it is checked before anything
runs (``subjects.reply_refusal``): a reply subject outside the requester's
inbox is refused (the request is not served, nothing is published, the
refusal is counted with outcome ``reply_refused``). Replies are published on
``reply_nc``, a connection whose NATS user may publish to inboxes only
(deploy/nats.conf), so even a check that let one through could not make the
service write to the committed stream or the JetStream API.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, get_args

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import Counter

from laneledger.contract.errors import InternalError, InvalidRequest, LedgerError, RequestTooLarge
from laneledger.contract.model import ErrorBody, ReplyError, ReplyOk, decode, encode
from laneledger.contract.subjects import RequestSubject, reply_refusal
from laneledger.runtime.servicemain import cancel_tasks

C = TypeVar("C")

# (op, reply bytes, the server's max_payload) -> the error sent instead
TooLarge = Callable[[str, int, int], RequestTooLarge]


def ops_of(commands: Any) -> frozenset[str]:
    """The ops (tags) of a tagged union of msgspec command structs."""
    return frozenset(kind.__struct_config__.tag for kind in get_args(commands))


def error_reply(err: LedgerError) -> bytes:
    """The encoded ``ReplyError`` carrying ``err``."""
    return encode(ReplyError(error=ErrorBody(**err.to_wire())))


class RequestServer(Generic[C]):
    """Serves the requests under ``base`` in queue group ``queue``.

    ``commands`` is the tagged union the bodies decode to; ``handler(cmd,
    target)`` runs one and returns the result to send. ``counter`` is a
    Prometheus counter labelled (op, outcome), outcome ``ok`` or an error
    code; an unknown op counts as ``other_op``. ``what`` names a request in
    the log ("<what> <op> failed"). ``too_large`` builds the error sent in
    place of an oversized reply. ``refused``: a counter of requests refused
    for their reply subject, besides ``counter``'s ``reply_refused``.

    Requests arrive on ``nc``; replies leave on ``reply_nc`` (``nc`` when
    not given: one connection, one NATS user, for a deployment without
    per-service users). By default requests are served one at a time, in
    arrival order, in the subscription's own task. ``concurrent=True`` serves each in a task of its
    own (a handler that may wait must not hold up the requests behind it);
    ``stop`` drains those.
    """

    def __init__(
        self,
        nc: NATS,
        *,
        base: str,
        queue: str,
        commands: Any,
        handler: Callable[[C, RequestSubject], Awaitable[Any]],
        counter: Counter,
        log: logging.Logger,
        what: str,
        other_op: str,
        too_large: TooLarge,
        concurrent: bool = False,
        reply_nc: NATS | None = None,
        refused: Counter | None = None,
    ) -> None:
        self._nc = nc
        self._reply_nc = reply_nc or nc
        self._refused = refused
        self._base = base
        self._queue = queue
        self._commands = commands
        self._handler = handler
        self._counter = counter
        self._log = log
        self._what = what
        self._other_op = other_op
        self._too_large = too_large
        self._concurrent = concurrent
        self.ops = ops_of(commands)
        self._sub: Subscription | None = None
        self._serving: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Subscribe; once this returns the server has the subscription, so a
        request sent right away (from another connection) finds a responder."""
        cb = self._spawn if self._concurrent else self.serve
        self._sub = await self._nc.subscribe(f"{self._base}.>", queue=self._queue, cb=cb)
        await self._nc.flush()

    async def stop(self, drain_timeout_s: float = 5.0) -> None:
        """Take no more requests; give those being served ``drain_timeout_s``,
        then cancel what is left (``cancel_tasks``: bounded again, and asked
        again where a cancel was swallowed)."""
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        if not self._serving:
            return
        _, pending = await asyncio.wait(set(self._serving), timeout=drain_timeout_s)
        await cancel_tasks(pending, timeout_s=drain_timeout_s)

    async def _spawn(self, msg: Msg) -> None:
        task = asyncio.create_task(self.serve(msg), name=f"{self._queue}-request")
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def serve(self, msg: Msg) -> None:
        """Answer one request. Never raises: whatever fails is its reply."""
        op = msg.subject.rsplit(".", 1)[-1]
        label = op if op in self.ops else self._other_op
        try:
            target: RequestSubject | None = RequestSubject.parse(msg.subject, self._base, msg.headers)
            bad_subject = None
        except LedgerError as err:
            target, bad_subject = None, err  # answered once the reply subject is known to be fine
        if msg.reply and not self._reply_allowed(msg):
            self._counter.labels(label, "reply_refused").inc()
            if self._refused is not None:
                self._refused.inc()
            return
        try:
            if bad_subject is not None:
                raise bad_subject
            assert target is not None
            cmd = decode(msg.data, self._commands)
            tag = type(cmd).__struct_config__.tag
            if tag != op:
                raise InvalidRequest(
                    "the body's op differs from the subject's", path="$.op", op=tag, subject_op=op
                )
            reply = encode(ReplyOk(result=await self._handler(cmd, target)))
            outcome = "ok"
        except LedgerError as err:
            reply, outcome = error_reply(err), err.code
        except Exception as exc:  # noqa: BLE001 - a bug in the handler: logged, answered internal
            self._log.exception("%s %s failed", self._what, op)
            internal = InternalError(f"{type(exc).__name__}: {exc}")
            reply, outcome = error_reply(internal), internal.code
        self._counter.labels(label, outcome).inc()
        if not msg.reply:
            return  # published without a reply subject: nobody to answer
        if len(reply) > self._reply_nc.max_payload:
            reply = error_reply(self._too_large(op, len(reply), self._reply_nc.max_payload))
        await self._send(msg, reply)

    def _reply_allowed(self, msg: Msg) -> bool:
        """Whether the reply may go where the request says: an inbox of the
        tenant whose subjects it came on, a trusted one, or the server's
        reply subject for a request from a tenant's account."""
        refusal = reply_refusal(
            msg.reply, RequestSubject.scope_token(msg.subject, self._base), request_reply=True
        )
        if refusal is not None:
            self._log.debug("refused to answer %s on %r: %s", msg.subject, msg.reply[:80], refusal)
        return refusal is None

    async def _send(self, msg: Msg, reply: bytes) -> None:
        """The one place a reply is published: on the replies connection, to
        a reply subject ``serve`` checked."""
        try:
            await self._reply_nc.publish(msg.reply, reply)
        except nats.errors.Error as exc:
            self._log.warning("could not answer %s on %s: %s", msg.subject, msg.reply, exc)
