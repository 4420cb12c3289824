"""Where the sequencer takes append requests from: its append streams, fairly.

Without a tenants file there is one append stream (``LEDGER_APPEND``) read
by one ``PullFeed``. With one (``laneledger.runtime.tenants``), every
declared tenant has its own stream, ``LEDGER_APPEND_<token>``, bounded by its
backlog limits, and the intake takes from them in turns:

* a batch is bounded in requests, events and bytes (``BatchBudget``), and
  shared among the tenants that have requests waiting: a fair share of each
  bound for each (round-robin, starting one further every batch), what is
  left to those with more. Work is counted, not requests, so a tenant with a
  deep backlog of huge or many-event requests delays another's request by
  about one bounded batch, not by its backlog or its requests' size (and a
  tenant's first request of a batch joins it beyond the budget spent by
  another's, within its share of one more budget: ``_share``);
* a tenant is taken from no faster than its ``append_rate`` in work tokens
  (``work_tokens``: one per event or per ``TOKEN_BYTES`` of request, at least
  one per request; a token bucket ``append_burst`` deep): what it sends
  faster waits in its own stream, and JetStream refuses what goes beyond its
  backlog (the producer's ``QuotaExceeded``), so a flood costs the
  sequencer no more than the rate;
* a feed asks its stream for little more than its tenant may take, and for
  at most ``PULL_BYTES`` at a time (``PullFeed``): a request held in the
  sequencer's memory instead of the stream would be redelivered after the
  consumer's ack wait, and bytes asked for beyond what the sequencer reads
  would pile up in nats-server until it drops the sequencer as a slow
  consumer;
* a request that must wait for work of its own before it may be committed
  (``gate``: the lookups and copies of blobs it references,
  ``BlobCheck.warming``; the preparation of a heavy request off the event
  loop, ``offloop.py``) is held with the later requests of its stream while
  that work runs aside, kept from redelivery meanwhile; the other streams go
  on into batches, so a tenant's large uploads or heavy requests delay that
  tenant alone. The work reports what it cost in tokens beyond the request's
  own (a blob lookup: one, ``BlobCheck.warming``), charged to the tenant's
  bucket, so a flood of references to made-up blobs is held to the rate
  like a flood of bytes.

A stream no longer wanted (a tenant dropped from the file; the shared stream
once a file is given, or the tenants' streams once it is taken away) is
*retired*: moved to a subject nobody publishes on, read until empty like
the others, then deleted. Nothing it held is lost, and the wanted streams
can be created (JetStream streams may not overlap). Spec: spec/wire.md,
"Tenants and limits".
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from laneledger.contract.model import MAX_EVENTS_PER_APPEND, MAX_REQUEST_BYTES
from laneledger.contract.subjects import Subjects
from laneledger.runtime.pullfeed import PullFeed
from laneledger.runtime.tenants import TenantLimits, Tenants

from .streams import (
    LIMITS,
    SEQUENCER_CONSUMER,
    append_stream_config,
    ensure_consumer,
    ensure_stream,
    sequencer_consumer_config,
    tenant_append_stream_config,
)

log = logging.getLogger("laneledger.sequencer")


# A request's work in rate tokens: one per event, or per this many bytes of
# request, whichever is more (spec/wire.md, "Tenants and limits").
TOKEN_BYTES = 1024
# Asked of a stream in one pull request at most: a bound on what nats-server
# holds for the sequencer from one tenant (PullFeed). Never below a request's
# largest size (the server's max_payload), or that request could not be pulled.
PULL_BYTES = 2 << 20
# A tenant over its rate is taken from in slices of this much of its rate
# (``TokenBucket``), not a request at a time.
THROTTLED_SLICE_S = 0.01


class _Shape(msgspec.Struct):
    """What the intake reads of a request: how many events (not decoded)."""

    events: list[msgspec.Raw] = []


_shape = msgspec.json.Decoder(_Shape)


@dataclass(frozen=True, slots=True)
class Work:
    """What one request costs the sequencer: its events and bytes."""

    events: int
    bytes: int

    @classmethod
    def of(cls, msg: Msg) -> Work:
        """A request's work; one the batch will refuse unread (not JSON, not
        an object, too large) counts one event, and one with more events than
        an append may hold no more than that limit (the batch refuses it at
        once: it must not cost its tenant minutes of rate)."""
        size = len(msg.data) + len(msg.subject) + sum(len(k) + len(v) for k, v in (msg.headers or {}).items())
        try:
            events = len(_shape.decode(msg.data).events) if len(msg.data) <= MAX_REQUEST_BYTES else 1
        except (msgspec.DecodeError, RecursionError):
            events = 1
        return cls(min(max(1, events), MAX_EVENTS_PER_APPEND), size)

    @property
    def tokens(self) -> int:
        """Its cost in ``append_rate`` tokens."""
        return max(1, self.events, math.ceil(self.bytes / TOKEN_BYTES))


@dataclass(frozen=True, slots=True)
class BatchBudget:
    """What one batch may hold: requests, their events, their bytes. A batch
    always takes one request, however large (it is bounded by the request
    limits: 1000 events, the server's max_payload)."""

    requests: int = 500
    events: int = 1000
    bytes: int = 1 << 20


@dataclass(slots=True)
class _Left:
    requests: int
    events: int
    bytes: int

    def fits(self, work: Work) -> bool:
        return self.requests >= 1 and self.events >= work.events and self.bytes >= work.bytes

    def spend(self, work: Work) -> None:
        self.requests -= 1
        self.events -= work.events
        self.bytes -= work.bytes

    def share(self, among: int) -> _Left:
        """One of ``among`` takers' fair part of what is left."""
        return _Left(
            max(1, self.requests // among), max(1, self.events // among), max(1, self.bytes // among)
        )


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` at once. A request costing
    ``n`` tokens may be taken once the bucket holds them (a full bucket, for
    one costing more than the burst: it then goes into debt by the rest).

    A bucket found dry (a request it could not pay for) is *throttled*: it
    is taken from again only once it holds a slice of tokens (``slice_s`` of
    its rate; at least the request's cost, at most the burst), not each time
    one token trickles in. A tenant over its rate so sends its backlog in
    batches of a slice's worth, not one request per batch: each batch costs
    the sequencer a log write, a commit and a stream round whatever it
    holds, and a batch per token would spend the event loop every other
    tenant's receipts wait for (bench/fairness.py). Its requests wait at
    most ``slice_s`` more; a tenant within its rate never finds it dry."""

    def __init__(
        self,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        slice_s: float = THROTTLED_SLICE_S,
    ) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens, self._at = float(burst), clock()
        self._slice = max(1, int(rate * slice_s))
        self.throttled = False

    def available(self) -> int:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        return int(self._tokens)

    def take(self, n: int) -> None:
        self._tokens -= n

    def _needed(self, n: int) -> int:
        return min(max(n, self._slice) if self.throttled else n, self.burst)

    def ready(self, n: int = 1) -> bool:
        """Whether a request costing ``n`` may be taken now."""
        self.available()
        self.throttled = self._tokens < self._needed(n)
        return not self.throttled

    def wait_s(self, n: int = 1) -> float:
        """How long until a request costing ``n`` may be taken."""
        return max(0.0, (self._needed(n) - self._tokens) / self.rate)


# What a request must wait for before it may go into a batch (None: nothing);
# the work returns its cost in rate tokens, charged to the request's tenant.
Gate = Callable[[Msg, "Work"], Coroutine[Any, Any, int] | None]
# While a request's gate runs, its stream's held requests are marked in
# progress this often: well within the consumer's ack wait (streams.py).
HOLD_HEARTBEAT_S = 3.0


@dataclass
class _Source:
    stream: str
    feed: PullFeed
    bucket: TokenBucket | None  # None: not rate-limited
    retired: bool = False
    # Taken from the feed, in order, and not yet in a batch: the first waits
    # for its gate (``waiting``), the rest behind it.
    held: deque[Msg] = field(default_factory=deque)
    waiting: asyncio.Task[None] | None = None
    passed: Msg | None = None  # the first held request, once its gate has run
    peeked: tuple[Msg, Work] | None = None  # the first held request's work, once read

    def ready(self) -> bool:
        """Whether its next request may be taken now (its rate allowing)."""
        if self.waiting is not None or (work := self.next_work()) is None:
            return False
        return self.bucket is None or self.bucket.ready(work.tokens)

    def next_work(self) -> Work | None:
        """The work of its next request (moved from the feed to ``held``
        to be read); None when it has none."""
        if not self.held:
            self.held.extend(self.feed.take(1))
            if not self.held:
                return None
        first = self.held[0]
        if self.peeked is None or self.peeked[0] is not first:
            self.peeked = (first, Work.of(first))
        return self.peeked[1]


class Intake:
    def __init__(
        self,
        nc: NATS,
        js: JetStreamContext,
        subjects: Subjects,
        replicas: int,
        budget: BatchBudget,
        gate: Gate | None = None,
        pull_expires_s: float = 1.0,
    ) -> None:
        self._nc, self._js, self._subjects = nc, js, subjects
        self._pull_expires_s = pull_expires_s
        self._replicas, self._budget = replicas, budget
        self._batch_size = budget.requests
        self._gate = gate
        self._arrived = asyncio.Event()
        self._sources: list[_Source] = []
        self._turn = 0
        self._stopping = False  # set by wake(): ask the server for nothing more

    async def open(self, tenants: Tenants | None) -> None:
        """Retire the streams not wanted, make sure of the wanted ones and
        their consumers, and start reading all of them."""
        s = self._subjects
        # Each wanted stream with its tenant's limits (None: the shared stream).
        wanted: dict[str, tuple[StreamConfig, TenantLimits | None]] = {}
        if tenants is None:
            wanted[s.append_stream] = (append_stream_config(s.append_stream, s, self._replicas), None)
        else:
            for tenant_token, (_, tenant_limits) in tenants.by_token().items():
                name = s.tenant_append_stream(tenant_token)
                config = tenant_append_stream_config(name, s, tenant_token, tenant_limits, self._replicas)
                wanted[name] = (config, tenant_limits)
        retired = [name for name in await self._append_streams() if name not in wanted]
        for name in retired:
            await self._retire(name)
        for name, (config, limits) in wanted.items():
            await ensure_stream(self._js, config, updatable=LIMITS if limits is not None else ())
            await self._add(name, limits)
        for name in retired:
            await self._add(name, None, retired=True)

    async def _append_streams(self) -> list[str]:
        """The streams holding this ledger's append requests, retired ones too."""
        names: list[str] = []
        for subject in (self._subjects.append_wildcard, self._subjects.retired_append("*")):
            offset = 0
            while True:
                request = json.dumps({"subject": subject, "offset": offset}).encode()
                reply = json.loads((await self._nc.request("$JS.API.STREAM.NAMES", request, timeout=5)).data)
                found = reply.get("streams") or []
                names.extend(n for n in found if n not in names)
                offset += len(found)
                if not found or offset >= reply.get("total", 0):
                    break
        return names

    async def _retire(self, name: str) -> None:
        info = await self._js.stream_info(name)
        retired_at = [self._subjects.retired_append(name)]
        if info.config.subjects != retired_at:
            log.warning(
                "append stream %s is no longer wanted (tenants file): moving it aside; its %d requests "
                "are committed, then it is deleted",
                name,
                info.state.messages,
            )
            await self._js.update_stream(info.config.evolve(subjects=retired_at))

    async def _add(self, stream: str, limits: TenantLimits | None, *, retired: bool = False) -> None:
        await ensure_consumer(self._js, stream, sequencer_consumer_config())
        credits, buffered = 2 * self._batch_size, 8 * self._batch_size  # unlimited: read ahead
        bucket = None
        if limits is not None:
            # Rate-limited: ask for about what the tenant may take in a second.
            bucket = TokenBucket(limits.append_rate, limits.append_burst)
            credits = buffered = max(1, min(credits, limits.append_burst, int(limits.append_rate)))
        feed = PullFeed(
            self._nc,
            stream,
            SEQUENCER_CONSUMER,
            credits=credits,
            expires_s=self._pull_expires_s,
            max_buffered=buffered,
            max_bytes=PULL_BYTES,  # PullFeed raises it so the largest request fits
            arrived=self._arrived,
        )
        await feed.start()
        self._sources.append(_Source(stream, feed, bucket, retired))

    # ------------------------------------------------------------------ reading

    async def next_batch(self, timeout: float) -> list[Msg]:
        """A batch within the budget, shared fairly among the streams (see
        the module text); waits up to ``timeout`` for the first one (less
        when a tenant's rate lets more be taken sooner), ``[]`` if none."""
        if not any(source.ready() for source in self._sources):
            self._arrived.clear()
            wait = timeout
            for source in self._sources:
                if source.bucket is not None and source.waiting is None and (work := source.next_work()):
                    wait = min(wait, source.bucket.wait_s(work.tokens))
            try:
                async with asyncio.timeout(wait):
                    await self._arrived.wait()
            except TimeoutError:
                pass
        batch = self._share()
        if not self._stopping:
            for source in self._sources:
                await source.feed.ask_if_idle()
        return batch

    def _share(self) -> list[Msg]:
        """Rounds over the sources with requests ready: in each, every one
        takes up to its share of what the budget has left, the first request
        of each taken if it fits what is left (any request, while the batch
        is empty); until the budget is spent or nobody can take more.

        A source's first request of the batch that no longer fits what is
        left may still join beyond the budget if it fits the source's fair
        share of one more budget (``overdraft``): another tenant's small
        request is not sent to the next batch because one tenant's large
        request spent this one's budget. A batch is so at most its first
        request (or the budget, if more) plus one budget."""
        n = len(self._sources)
        order = [self._sources[(self._turn + i) % n] for i in range(n)]
        self._turn = (self._turn + 1) % n if n else 0
        b = self._budget
        left = _Left(b.requests, b.events, b.bytes)
        one_more = _Left(b.requests, b.events, b.bytes)
        batch: list[Msg] = []
        active = [source for source in order if source.ready()]
        first_round = True  # where each source's first request of the batch is
        while active:
            # Each its own copy of its shares: what it took is its own.
            share = left.share(len(active))
            overdraft = one_more.share(len(active)) if first_round else None
            took = [
                self._take(
                    source,
                    left,
                    dataclasses.replace(share),
                    batch,
                    overdraft and dataclasses.replace(overdraft),
                )
                for source in active
            ]
            active = [source for source, any_taken in zip(active, took, strict=True) if any_taken]
            first_round = False
        return batch

    def _take(
        self, source: _Source, left: _Left, share: _Left, batch: list[Msg], overdraft: _Left | None = None
    ) -> bool:
        """Append to ``batch`` the source's requests in order while they fit
        what is ``left`` of the batch and its ``share`` of it (the first one
        only what is left, or else the ``overdraft`` beyond the budget: then
        it alone is taken) and its rate, stopping before one whose gate has
        work to do (started aside: ``_hold``). Whether any was taken."""
        taken = 0
        while source.ready():
            first, work = source.held[0], source.next_work()
            assert work is not None  # ready: it has a next request
            beyond = False
            if batch and not (left.fits(work) and (not taken or share.fits(work))):
                if taken or overdraft is None or not overdraft.fits(work):
                    break
                beyond = True
            gate = None if self._gate is None or first is source.passed else self._gate(first, work)
            if gate is not None:
                source.waiting = asyncio.create_task(self._hold(source, gate), name=f"gate-{source.stream}")
                break
            batch.append(source.held.popleft())
            left.spend(work)
            share.spend(work)
            taken += 1
            if source.bucket is not None:
                source.bucket.take(work.tokens)
            if beyond:
                break
        return taken > 0

    async def _hold(self, source: _Source, work: Coroutine[Any, Any, int]) -> None:
        """Run a held request's gate, its cost charged to the source's rate;
        meanwhile keep the held requests, and those buffered behind them,
        from being redelivered. Whatever the gate's outcome, the request
        then goes on (the batch decides what becomes of it)."""
        task = asyncio.ensure_future(work)
        try:
            while not task.done():
                await asyncio.wait([task], timeout=HOLD_HEARTBEAT_S)
                if not task.done():
                    await asyncio.gather(
                        *(m.in_progress() for m in source.held),
                        source.feed.keep_buffered(),
                        return_exceptions=True,
                    )
            cost = task.result()
            if source.bucket is not None:
                source.bucket.take(cost)
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception:
            log.exception("the work ahead of a request on %s failed; the batch decides it", source.stream)
        finally:
            source.passed = source.held[0] if source.held else None
            source.waiting = None
            self._arrived.set()

    def take(self, max_msgs: int) -> list[Msg]:
        """What has arrived, up to ``max_msgs``, without waiting, limits or
        gates (stopping: delivered requests are better committed than
        redelivered; the batch does a gate's work itself)."""
        batch: list[Msg] = []
        for source in self._sources:
            if source.waiting is not None:
                source.waiting.cancel()
            while source.held and len(batch) < max_msgs:
                batch.append(source.held.popleft())
            batch.extend(source.feed.take(max_msgs - len(batch)))
        return batch

    def wake(self) -> None:
        """The sequencer is stopping: end the wait of ``next_batch`` now, and
        open no new pull request, so ``wind_down`` waits only for what is
        left of the open one's expiry (not an idle wait plus a fresh one's)."""
        self._stopping = True
        self._arrived.set()

    async def wind_down(self) -> None:
        await asyncio.gather(*(source.feed.wind_down() for source in self._sources))

    async def stop(self) -> None:
        for source in self._sources:
            if source.waiting is not None:
                source.waiting.cancel()
            # Held requests go back at once, not after the ack wait.
            await asyncio.gather(*(m.nak() for m in source.held), return_exceptions=True)
            source.held.clear()
            await source.feed.stop()

    # --------------------------------------------------------------- upkeep

    async def backlog(self) -> dict[str, int]:
        """Requests not yet committed, by stream (undelivered plus delivered
        and unacked); a retired stream found empty is deleted here."""
        found: dict[str, int] = {}
        for source in list(self._sources):
            info = await self._js.consumer_info(source.stream, SEQUENCER_CONSUMER)
            found[source.stream] = info.num_pending + info.num_ack_pending
            if source.retired and found[source.stream] == 0 and not (source.feed.buffered or source.held):
                await self._delete_retired(source)
        return found

    async def _delete_retired(self, source: _Source) -> None:
        if (await self._js.stream_info(source.stream)).state.messages:
            return
        await source.feed.stop()
        self._sources.remove(source)
        try:
            await self._js.delete_stream(source.stream)
        except NotFoundError:
            pass
        log.warning("retired append stream %s is empty: deleted", source.stream)
