"""The committed event at a ledger position, read from the committed stream
itself: its stream sequence is its position (spec/wire.md). The ingest keeps
no read model; a Korg ``triggered_by`` is resolved here, one message get.
An event an erasure deleted from the stream is read from its erased copy
(spec/erasure.md): its envelope, all a cause is checked by, is kept."""

from __future__ import annotations

import asyncio
import time

import msgspec
from nats.errors import TimeoutError as NatsTimeout
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from laneledger.contract.errors import LedgerTimeout
from laneledger.contract.subjects import Subjects
from laneledger.store.erasedcopies import erased_event

POLL_S = 0.02  # between looks at a position the sequencer has receipted but not yet mirrored


class Committed(msgspec.Struct, frozen=True):
    """What a cause is checked by (the rest of the body is skipped)."""

    id: str
    tenant: str
    session_id: str
    event_type: str


_committed = msgspec.json.Decoder(Committed)


class CommittedEvents:
    def __init__(self, js: JetStreamContext, subjects: Subjects, timeout_s: float) -> None:
        self._js = js
        self._subjects = subjects
        self._stream = subjects.events_stream
        self._timeout_s = timeout_s

    async def at(self, position: int, grace_s: float) -> Committed | None:
        """The committed event at ``position``; None when there is none, or the
        message there is not a committed event. A position not on the stream
        yet is looked for again for ``grace_s``: the sequencer answers an
        append before it mirrors it, and a client may chain on that receipt."""
        deadline = time.monotonic() + grace_s
        while True:
            try:
                async with asyncio.timeout(self._timeout_s):
                    data = await self._body(position)
            except (TimeoutError, NatsTimeout):
                raise LedgerTimeout(
                    "the committed stream did not answer in time", stream=self._stream, position=position
                ) from None
            if data is None:
                if time.monotonic() >= deadline:
                    return None
                await asyncio.sleep(POLL_S)
                continue
            try:
                return _committed.decode(data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return None  # a foreign message (spec/wire.md): names no event

    async def _body(self, position: int) -> bytes | None:
        """Message ``position``, or its erased copy; None if neither is there."""
        try:
            message = await self._js.get_msg(self._stream, seq=position)
        except NotFoundError:
            return await erased_event(self._js, self._subjects, position)
        return message.data or b""
