"""Signed tree heads: the active sequencer signs the ledger's Merkle tree
(spec/tlog.md) as C2SP checkpoints and publishes them on LEDGER_TLOG.

A checkpoint is signed every ``interval_s`` when the tree grew since the
last one, and on request (``<prefix>.tlog.sign``, trusted users: the reply
is the signed note). Each is published once per tree size
(``Nats-Msg-Id: tree-<size>``; a size already on the stream is not
published again, after a restart or a failover either: the stream's last
checkpoint is read first). Ed25519 signatures are deterministic, so two
sequencers with one key sign one size to the same bytes.

Only the active sequencer runs this (a task of its active role): a standby's
file may be behind, and the tree head it read would be stale.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from laneledger.contract.errors import InternalError, LedgerError
from laneledger.contract.model import ReplyOk, encode
from laneledger.contract.subjects import Subjects
from laneledger.runtime.requestserver import error_reply
from laneledger.tlog.checkpoint import (
    TreeHead,
    open_checkpoint,
    sign_checkpoint,
)
from laneledger.tlog.note import Signer

from .metrics import SequencerMetrics

log = logging.getLogger("laneledger.sequencer.treeheads")

# What signing may meet: the file (LedgerError), NATS refusing or timing out.
_SIGN_FAILURES = (LedgerError, nats.errors.Error, OSError, asyncio.TimeoutError)


@dataclass(frozen=True)
class TreeHeadSettings:
    signer: Signer  # its name is the log's origin
    interval_s: float = 10.0


class TreeHeads:
    def __init__(
        self,
        nc: NATS,
        reply_nc: NATS,
        subjects: Subjects,
        settings: TreeHeadSettings,
        read_head: Callable[[], Awaitable[tuple[int, bytes]]],
        metrics: SequencerMetrics,
    ) -> None:
        self._nc = nc
        self._js: JetStreamContext = nc.jetstream()
        self._reply_nc = reply_nc  # requesters name where replies go: never on ``nc``
        self._subjects = subjects
        self._settings = settings
        self._read_head = read_head
        self._metrics = metrics
        self._lock = asyncio.Lock()  # one signing at a time: the interval's and requests'
        self.latest: str | None = None  # the last signed note on the stream
        self._latest_size = -1

    async def _load_latest(self) -> None:
        """The stream's last checkpoint, so a size it holds is not published again."""
        try:
            msg = await self._js.get_last_msg(self._subjects.tlog_stream, self._subjects.tlog_checkpoint)
        except NotFoundError:
            return
        text = msg.data.decode() if msg.data else ""
        signer = self._settings.signer
        checkpoint, _ = open_checkpoint(text, [signer.verifier()], origin=signer.name)
        self.latest, self._latest_size = text, checkpoint.size

    async def sign(self) -> str:
        """A checkpoint of the tree as committed now: the last one when the
        tree has not grown, else a new one, published before it is returned."""
        async with self._lock:
            size, root = await self._read_head()
            if size == self._latest_size and self.latest is not None:
                return self.latest
            if size < self._latest_size:
                raise InternalError(
                    "the ledger's tree is smaller than the last checkpoint on the stream",
                    tree_size=size,
                    checkpoint_size=self._latest_size,
                )
            signer = self._settings.signer
            note = sign_checkpoint(TreeHead(signer.name, size, root), signer)
            await self._js.publish(
                self._subjects.tlog_checkpoint,
                note.encode(),
                stream=self._subjects.tlog_stream,
                headers={"Nats-Msg-Id": f"tree-{size}"},
            )
            self.latest, self._latest_size = note, size
            self._metrics.tree_heads_signed.inc()
            self._metrics.tree_head_size.set(size)
            return note

    async def run(self) -> None:
        """Sign at the interval and answer requests, until cancelled."""
        await self._load_latest()
        sub = await self._nc.subscribe(self._subjects.tlog_sign, cb=self._on_request)
        try:
            while True:
                try:
                    await self.sign()
                except _SIGN_FAILURES as exc:
                    # NATS away, say: the next interval tries again.
                    log.warning("signing a checkpoint failed: %s", exc)
                await asyncio.sleep(self._settings.interval_s)
        finally:
            await sub.unsubscribe()

    async def _on_request(self, msg: Msg) -> None:
        if not msg.reply:
            return
        try:
            reply = encode(ReplyOk(result={"checkpoint": await self.sign()}))
        except LedgerError as err:
            reply = error_reply(err)
        except _SIGN_FAILURES as exc:  # NATS failing mid-publish: the requester is told, not left waiting
            reply = error_reply(InternalError("signing a checkpoint failed", error=str(exc)))
        await self._reply_nc.publish(msg.reply, reply)
