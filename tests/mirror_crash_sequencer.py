"""The sequencer as a process that dies in the window receipts no longer
wait out: its receipts sent, the committed stream not yet holding their
events (tests/test_receipt_promise.py). ``python -m mirror_crash_sequencer
ARGS`` (with tests/ on PYTHONPATH) runs the real sequencer with ARGS; the
first time its mirror is about to publish appended events, it waits until a
batch's receipts have been sent and flushed to nats-server, then exits with
status 137, as SIGKILL would, before publishing anything."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from laneledger.services.sequencer.__main__ import main
from laneledger.services.sequencer.mirror import CommittedStreamMirror
from laneledger.services.sequencer.service import Sequencer

_receipts_sent = asyncio.Event()
_real_send_receipts = Sequencer._send_receipts


async def _send_receipts_and_flush(self: Sequencer, *args: Any) -> None:
    await _real_send_receipts(self, *args)
    await self._reply_nc.flush()
    _receipts_sent.set()


async def _die_once_receipts_went_out(self: CommittedStreamMirror, items: list[Any]) -> None:
    await _receipts_sent.wait()
    os._exit(137)


Sequencer._send_receipts = _send_receipts_and_flush  # type: ignore[method-assign]
# Only a round of events reaches ``_publish`` (structure commands commit no
# event), so the actor and the lane go through and the first append is the one.
CommittedStreamMirror._publish = _die_once_receipts_went_out  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
