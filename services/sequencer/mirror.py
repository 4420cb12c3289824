"""Keeps LEDGER_EVENTS an exact, gap-free copy of the SQLite ledger.

Every committed event is published with ``Nats-Expected-Last-Sequence =
position - 1``, so JetStream itself refuses a gap or a repeat (error 10071).
SQLite is the source of truth: whenever the stream and the ledger disagree —
at start-up, after a crash between commit and publish, after a failed
publish — the mirror reads the stream's last sequence and republishes what
the ledger has beyond it.

Publishes within a batch are pipelined (``publish_async``) and their acks
awaited once per batch; batches are published one after another by a single
task, in position order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext
from nats.js.errors import APIError

from laneledger.errors import IntegrityError
from laneledger.model import CommittedEvent, decoder
from laneledger.store import CommittedRecord
from laneledger.subjects import Subjects

log = logging.getLogger("laneledger.sequencer.mirror")

WRONG_LAST_SEQUENCE = 10071

# Reads committed events after a position from the ledger: (position, body) rows.
ReadAfter = Callable[[int, int], Awaitable[list[tuple[int, bytes]]]]


def event_headers(record_id: str, position: int, event_type: str) -> dict[str, str]:
    return {
        "Nats-Msg-Id": record_id,
        "Nats-Expected-Last-Sequence": str(position - 1),
        "Ledger-Position": str(position),
        "Ledger-Event-Type": event_type,
    }


class CommittedStreamMirror:
    def __init__(
        self,
        js: JetStreamContext,
        subjects: Subjects,
        stream: str,
        read_after: ReadAfter,
        ledger_last_position: Callable[[], int],
        *,
        queue_batches: int = 64,
    ) -> None:
        self._js = js
        self._subjects = subjects
        self._stream = stream
        self._read_after = read_after
        self._ledger_last = ledger_last_position
        self._queue: asyncio.Queue[list[CommittedRecord]] = asyncio.Queue(queue_batches)
        self.published = 0  # the stream's last sequence, as far as we know

    async def submit(self, records: list[CommittedRecord]) -> None:
        """Queue one committed batch; waits when the mirror is far behind."""
        if records:
            await self._queue.put(records)

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    async def run(self) -> None:
        """Publish queued batches forever; resync on any failure."""
        while True:
            records = await self._queue.get()
            while True:
                try:
                    await self._publish_new(records)
                    break
                except asyncio.CancelledError:
                    raise
                except IntegrityError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any NATS failure: resync and retry
                    log.warning("committed-stream publish failed (%s); resyncing", exc)
                    await asyncio.sleep(0.2)
                    await self._resync_quietly()

    async def catch_up(self) -> None:
        """Republish everything the ledger has beyond the stream's last sequence."""
        info = await self._js.stream_info(self._stream)
        last = info.state.last_seq
        ledger_last = self._ledger_last()
        if last > ledger_last:
            raise IntegrityError(
                "the committed stream is ahead of the ledger database: "
                "the database is not the one this stream was written from, or it lost commits",
                stream=self._stream,
                stream_last_sequence=last,
                ledger_last_position=ledger_last,
            )
        self.published = last
        while self.published < ledger_last:
            rows = await self._read_after(self.published, 1000)
            if not rows:
                break
            await self._publish_rows(rows)
        if self.published:
            log.info("committed stream at position %d", self.published)

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
            return
        if fresh[0].position != self.published + 1:
            await self.catch_up()  # something before this batch is missing: fill from SQLite
            fresh = [r for r in fresh if r.position > self.published]
            if not fresh:
                return
        futures = [
            await self._js.publish_async(
                self._subjects.events(r.tenant, r.session_id, r.run_id, r.lane_id),
                r.body,
                headers=event_headers(r.event_id, r.position, r.event_type),
            )
            for r in fresh
        ]
        await self._settle(futures, [r.position for r in fresh])

    async def _publish_rows(self, rows: list[tuple[int, bytes]]) -> None:
        """Republish stored events (catch-up path): decode what routing needs."""
        futures, positions = [], []
        for position, body in rows:
            event = decoder(CommittedEvent).decode(body)
            futures.append(
                await self._js.publish_async(
                    self._subjects.events(event.tenant, event.session_id, event.run_id, event.lane_id),
                    bytes(body),
                    headers=event_headers(event.id, position, event.event_type),
                )
            )
            positions.append(position)
        await self._settle(futures, positions)

    async def _settle(self, futures: list, positions: list[int]) -> None:
        for future, position in zip(futures, positions):
            try:
                ack = await asyncio.wait_for(future, timeout=10)
            except APIError as exc:
                if exc.err_code == WRONG_LAST_SEQUENCE:
                    log.info("stream sequence moved under us at position %d; resyncing", position)
                raise
            if ack.seq != position:
                raise IntegrityError(
                    "committed stream sequence differs from ledger position",
                    position=position,
                    stream_sequence=ack.seq,
                )
            self.published = position
