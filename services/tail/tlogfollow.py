"""The tail follows LEDGER_TLOG: each checkpoint the sequencer signed is
checked against the tail's own tree and kept to be served
(spec/tlog.md, "Served by the tail").

Messages are read one by one by stream sequence (``next_by_subj`` from the
last sequence read, kept in the read model so a restart resumes). A
checkpoint of a tree larger than the tail's waits until the tail has applied
that many positions. One whose root is not the tail's root at its size, or a
message that is no checkpoint, is never served: logged as an error and
counted. The checkpoint's signature is not checked here (the tail holds no
key); its readers check it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from laneledger.contract.errors import LedgerError
from laneledger.contract.subjects import Subjects
from laneledger.tlog.checkpoint import (
    TreeHead,
)

from .metrics import TailMetrics
from .readmodel import ReadModel

log = logging.getLogger("laneledger.tail")


class CheckpointFollower:
    def __init__(
        self,
        js: JetStreamContext,
        subjects: Subjects,
        model: ReadModel,
        apply_thread: Executor,
        metrics: TailMetrics,
        interval_s: float,
    ) -> None:
        self._js = js
        self._subjects = subjects
        self._model = model
        self._apply_thread = apply_thread
        self._metrics = metrics
        self._interval_s = interval_s
        metrics.tlog_checkpoint_size.set(model.checkpoint_size or 0)

    async def run(self) -> None:
        while True:
            try:
                await self.read_new()
            except Exception as exc:  # noqa: BLE001 - NATS away: read again next time
                log.debug("cannot read %s: %s", self._subjects.tlog_stream, exc)
            await asyncio.sleep(self._interval_s)

    async def read_new(self) -> None:
        """Take every message after the last one read, up to the first
        checkpoint the tree does not reach yet."""
        while True:
            try:
                msg = await self._js.get_msg(
                    self._subjects.tlog_stream,
                    seq=self._model.checkpoint_sequence + 1,
                    subject=self._subjects.tlog_checkpoint,
                    next=True,
                )
            except NotFoundError:
                return  # nothing new (or no stream yet: no checkpoint signed)
            sequence = msg.seq
            if sequence is None:  # every stored message has one
                raise RuntimeError(f"{self._subjects.tlog_stream} answered a message without its sequence")
            data = msg.data or b""
            try:
                checkpoint: TreeHead | None = TreeHead.of_note(data)
            except LedgerError as exc:
                checkpoint = None
                log.error(
                    "message %d of %s is not a checkpoint: %s", msg.seq, self._subjects.tlog_stream, exc
                )
            if checkpoint is not None and checkpoint.size > self._model.applied:
                return  # the tree has not reached it: read it again once it has
            note = data.decode() if checkpoint is not None else ""
            loop = asyncio.get_running_loop()
            kept = await loop.run_in_executor(
                self._apply_thread, self._model.take_checkpoint, sequence, checkpoint, note
            )
            if kept:
                self._metrics.tlog_checkpoint_size.set(self._model.checkpoint_size or 0)
                continue
            self._metrics.tlog_checkpoint_mismatches.inc()
            if checkpoint is not None:
                log.error(
                    "the checkpoint of size %d (message %d of %s) does not match the tail's tree "
                    "at that size: not served",
                    checkpoint.size,
                    sequence,
                    self._subjects.tlog_stream,
                )
