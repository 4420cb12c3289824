"""Following the committed stream, and checking anchors against it.

``AnchorIndex`` reads LEDGER_EVENTS with a ``StreamFollower`` from the
position its store has applied, and stores each batch — lane seq → event id,
the links, the new position — in one transaction. An anchor is then checked
against that table: the seq must hold exactly the event id the anchor names.
An anchor the service has not consumed yet may simply be ahead of it (the
event commits a moment later, or the stream is still being read), so the
check waits, bounded, for newer batches before it refuses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

from laneledger.contract.erasure import ERASURE_EVENT, LEDGER_SESSION
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import Anchor
from laneledger.contract.subjects import EVENTS_STREAM
from laneledger.runtime.follow import StreamFollower, StreamIdentity, StreamReplaced
from laneledger.sdk.checkpoints import LINKED_EVENT, AnchorMismatch, AnchorNotCommitted
from laneledger.sdk.retry import Backoff, Pauses

from .metrics import CheckpointMetrics
from .store import CheckpointStore, LaneEvent

log = logging.getLogger("laneledger.checkpoint.anchors")
# Following the stream again after an error (no stream yet, NATS away).
FOLLOW_BACKOFF = Backoff(first=0.4, cap=3.0)

Db = Callable[..., Awaitable[Any]]  # runs a store method on the database thread


class _EventHead(msgspec.Struct):
    """The fields of a committed event the index needs (others are ignored)."""

    id: str
    lane_id: str
    seq: int
    tenant: str
    session_id: str
    run_id: str
    event_type: str
    payload: msgspec.Raw


class _LinkPayload(msgspec.Struct):
    checkpoint_id: str | None = None


_head_decoder = msgspec.json.Decoder(_EventHead)
_link_decoder = msgspec.json.Decoder(_LinkPayload)


def lane_event(position: int, body: bytes) -> LaneEvent | None:
    """What the index keeps of one stream message; None for a body that is
    not a committed event (nothing else may be on the stream, but a bad
    message must not stop the service)."""
    try:
        head = _head_decoder.decode(body)
        linked = None
        if head.event_type == LINKED_EVENT:
            linked = _link_decoder.decode(head.payload).checkpoint_id
    except (msgspec.DecodeError, msgspec.ValidationError):
        log.error("position %d is not a committed event; skipped", position)
        return None
    return LaneEvent(
        position, head.lane_id, head.seq, head.id, head.session_id, head.run_id, linked, tenant=head.tenant
    )


# (tenant, the erasure's scope) of an erasure event on the committed stream.
OnErasure = Callable[[str, dict[str, Any]], Awaitable[None]]


class _Erasure(msgspec.Struct):
    class _Payload(msgspec.Struct):
        scope: dict[str, Any] = {}

    tenant: str
    session_id: str
    event_type: str
    payload: _Payload


_erasure_decoder = msgspec.json.Decoder(_Erasure)


def erasures_in(batch: list[tuple[int, bytes]]) -> list[tuple[str, dict[str, Any]]]:
    """The erasure events of a batch of the committed stream (only the
    sequencer writes there, and only it writes ``ext.laneledger.erased``)."""
    found = []
    for _, body in batch:
        if ERASURE_EVENT.encode() not in body:  # the cheap test first: most events are not
            continue
        try:
            event = _erasure_decoder.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if event.event_type == ERASURE_EVENT and event.session_id == LEDGER_SESSION:
            found.append((event.tenant, event.payload.scope))
    return found


class AnchorIndex:
    def __init__(
        self,
        nc: NATS,
        store: CheckpointStore,
        db: Db,
        metrics: CheckpointMetrics,
        *,
        consumer_name: str,
        stream: str = EVENTS_STREAM,
        batch_size: int = 500,
        identity: StreamIdentity | None = None,
        on_erasure: OnErasure | None = None,
    ) -> None:
        self._store = store
        self._on_erasure = on_erasure
        self._db = db
        self._metrics = metrics
        self._stream = stream
        self._follower = StreamFollower(
            nc, stream=stream, name=consumer_name, batch_size=batch_size, identity=identity
        )
        self.applied = store.applied_position()
        self.stream_last: int | None = None  # unknown until asked
        self.caught_up_once = False
        self.waiting = 0  # anchor checks waiting for the index right now
        self._progress = asyncio.Event()  # replaced after every applied batch

    # -- following -----------------------------------------------------------------

    async def run(self) -> None:
        """Apply the stream forever; on an error (no stream yet, NATS away)
        start again from the stored position after a pause."""
        pauses = Pauses(FOLLOW_BACKOFF)
        while True:
            try:
                async with aclosing(self._follower.batches(after=self.applied)) as batches:
                    async for batch in batches:
                        await self.apply_committed(batch)
                        pauses.reset()
            except (asyncio.CancelledError, StreamReplaced):
                raise  # StreamReplaced: the index is rebuilt at the next start
            except Exception as exc:  # noqa: BLE001 - logged; the loop starts over
                log.warning("following %s failed (%s: %s); retrying", self._stream, type(exc).__name__, exc)
                await pauses.wait()

    async def apply_committed(self, batch: list[tuple[int, bytes]]) -> None:
        """Store what the index keeps of committed events ((position, body), in
        order): what following LEDGER_EVENTS does with each batch. An erasure
        event is handed to ``on_erasure`` first: if that fails, the batch is
        applied again, and the erasure with it (it is idempotent)."""
        if self._on_erasure is not None:
            for tenant, scope in erasures_in(batch):
                await self._on_erasure(tenant, scope)
        events = [e for e in (lane_event(p, body) for p, body in batch) if e is not None]
        last = batch[-1][0]
        await self._db(self._store.apply_events, last, events)
        self.applied = last
        self._metrics.applied_position.set(last)
        if self.stream_last is not None and last >= self.stream_last:
            self.caught_up_once = True
        done, self._progress = self._progress, asyncio.Event()
        done.set()

    async def refresh(self) -> int:
        """Ask the server for the stream's last sequence."""
        self.stream_last = await self._follower.refresh_stream_last()
        self._metrics.stream_last.set(self.stream_last)
        if self.applied >= self.stream_last:
            self.caught_up_once = True
        return self.stream_last

    def lag(self) -> int | None:
        return None if self.stream_last is None else max(0, self.stream_last - self.applied)

    @staticmethod
    async def _wait(progress: asyncio.Event, timeout: float) -> None:
        try:
            await asyncio.wait_for(progress.wait(), timeout)
        except TimeoutError:
            pass

    async def wait_applied(self, position: int, timeout: float) -> bool:
        """Wait (at most ``timeout``) until ``position`` is applied."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.applied < position:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await self._wait(self._progress, remaining)
        return True

    # -- anchors --------------------------------------------------------------------

    async def check(
        self,
        anchor: Anchor,
        *,
        tenant: str | None,
        session_id: str | None,
        run_id: str | None,
        wait_s: float,
    ) -> str:
        """Refuse an anchor that does not name the committed event at its seq
        (``AnchorMismatch``), or whose event has not been consumed within
        ``wait_s`` (``AnchorNotCommitted``); return the tenant whose lane it
        is. ``tenant``: whose lane is meant (ids are each tenant's own); None
        for a save that names none, which is ``invalid_request`` naming
        ``$.checkpoint.tenant`` when several tenants have the lane there."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            # Taken before the read: a batch applied during it must wake us.
            progress = self._progress
            at = await self._db(self._store.events_at, anchor.lane_id, anchor.seq, tenant)
            if at:
                break
            remaining = started + wait_s - loop.time()
            if remaining <= 0:
                lane = await self._db(self._store.lane, tenant, anchor.lane_id)
                self._metrics.anchor_wait.observe(loop.time() - started)
                raise AnchorNotCommitted(
                    f"lane {anchor.lane_id} has no committed event at seq {anchor.seq} (waited {wait_s:g}s)",
                    kind="event",
                    id=anchor.event_id,
                    lane_id=anchor.lane_id,
                    seq=anchor.seq,
                    lane_last_seq=lane[2] if lane else 0,
                    applied_position=self.applied,
                    waited_s=wait_s,
                    reason=AnchorNotCommitted.reason,
                )
            self.waiting += 1
            try:
                await self._wait(progress, remaining)
            finally:
                self.waiting -= 1
        self._metrics.anchor_wait.observe(loop.time() - started)
        if len(at) > 1:
            raise InvalidRequest(
                "several tenants have the anchor's lane: name the checkpoint's tenant",
                path="$.checkpoint.tenant",
                lane_id=anchor.lane_id,
                tenants=sorted(t for t, _ in at),
            )
        [(tenant, found)] = at
        fields: dict[str, Any] = {}
        if found != anchor.event_id:
            fields["event_id"] = found
        lane = await self._db(self._store.lane, tenant, anchor.lane_id)
        if lane is not None:
            if session_id is not None and lane[0] != session_id:
                fields["session_id"] = lane[0]
            if run_id is not None and lane[1] != run_id:
                fields["run_id"] = lane[1]
        if fields:
            raise AnchorMismatch(
                f"the anchor does not match the committed event at seq {anchor.seq} of lane {anchor.lane_id}",
                kind="anchor",
                lane_id=anchor.lane_id,
                seq=anchor.seq,
                fields=sorted(fields),
                event_id=anchor.event_id,
                committed_event_id=found,
                committed={k: v for k, v in fields.items() if k != "event_id"},
                reason=AnchorMismatch.reason,
            )
        return tenant
