"""The ledger without NATS: a ``LedgerClient`` whose transport is a direct
call into a ``LedgerWriter`` in this process, for contract suites that run
once in-process (milliseconds) and once over NATS through the sequencer
(``ledger_under_test`` in ledger_fixtures.py).

Everything but the transport is the real thing: the client builds, redacts
and encodes each request as it would publish it; the sequencer's own code
decodes it, checks it (``prepare_append``) and decides it (the writer,
``decide_command``); the reply goes back through its wire encoding and the
client's decoding, so an error arrives as the same typed error with the same
details. What only NATS does (JetStream acks, reply size limits, subjects'
permissions) is tested over NATS alone.

``WriterFollower`` stands in for following LEDGER_EVENTS: the read models
(the tail's, the checkpoint service's anchor index) are fed the writer's
committed events, in order, through their own ``apply_committed``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from nats.aio.client import Client as NATS

from laneledger.contract.errors import LedgerError, RequestError
from laneledger.contract.ids import new_id
from laneledger.contract.model import AppendCommitted, Command, Lane, Receipt, ReplyOk, decode, encode
from laneledger.contract.redaction import DEFAULT_REDACTOR, redact_command
from laneledger.runtime.requestserver import error_reply
from laneledger.sdk.client import LedgerClient, raise_if_rejected
from laneledger.services.sequencer.commands import decide_command
from laneledger.store import LedgerWriter
from laneledger.store.append import prepare_append, readable_ids
from laneledger.store.batch import rejection

# nats-server's default max_payload: the sequencer sizes a structure page to
# half of its connection's.
NATS_MAX_PAYLOAD = 1024 * 1024
FOLLOW_INTERVAL_S = 0.01  # how often WriterFollower.run looks for newly committed events


class InProcessLedgerClient(LedgerClient):
    def __init__(self, writer: LedgerWriter) -> None:
        super().__init__(NATS())  # never connected: a use of NATS fails loudly
        self.writer = writer

    async def _request(self, op: str, body: bytes) -> bytes:
        try:
            cmd, _ = redact_command(decode(body, Command), DEFAULT_REDACTOR)  # as the sequencer does
            result = self.writer.current(
                lambda: decide_command(self.writer, cmd, max_page_bytes=NATS_MAX_PAYLOAD // 2)
            )
            return encode(ReplyOk(result=result))
        except LedgerError as err:
            return error_reply(err)

    async def append(  # type: ignore[override]  # retries, timeout: a transport's, so none here
        self,
        lane: Lane,
        expected_last_seq: int,
        events: Iterable[Mapping[str, Any]],
        *,
        append_id: str | None = None,
    ) -> AppendCommitted:
        append_id = append_id or new_id()
        body = await self.append_body(lane, expected_last_seq, list(events), append_id)
        # The subject it would be published on carries the tenant and lane.
        subject = self.subjects.parse_append(self.subjects.append(lane.tenant, lane.id))
        receipt: Receipt
        try:
            prepared = prepare_append(
                body,
                tenant_token=subject.tenant_token,
                lane_token=subject.lane_token,
                actor_keys=self.writer.actor_keys,
                redactor=DEFAULT_REDACTOR,
            )
            [receipt] = self.writer.apply_batch([prepared]).receipts
        except RequestError as err:
            sent_append_id, lane_id = readable_ids(body)
            receipt = rejection(err, append_id=sent_append_id, lane_id=lane_id)
        [received] = decode(encode([receipt]), list[Receipt])  # a receipts message (spec/wire.md)
        return raise_if_rejected(received)


class WriterFollower:
    """Feeds ``apply_committed`` the writer's committed events after
    ``applied()``, in order, one batch at a time, as a follower of the
    committed stream would: ``run()`` forever (a task; cancel it), or
    ``catch_up()`` now (to stand for a follower that is prompt: everything
    committed before a request is applied before it is served)."""

    def __init__(
        self,
        writer: LedgerWriter,
        applied: Callable[[], int],
        apply_committed: Callable[[list[tuple[int, bytes]]], Awaitable[None]],
        *,
        batch_size: int = 500,
    ) -> None:
        self._writer = writer
        self._applied = applied
        self._apply_committed = apply_committed
        self._batch_size = batch_size
        self._lock = asyncio.Lock()  # one batch at a time: a position is applied once

    async def catch_up(self) -> None:
        async with self._lock:
            while batch := self._writer.reader.events_after(self._applied(), self._batch_size):
                await self._apply_committed(batch)

    async def run(self) -> None:
        while True:
            await self.catch_up()
            await asyncio.sleep(FOLLOW_INTERVAL_S)
