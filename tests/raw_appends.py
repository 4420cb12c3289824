"""Append requests published straight to JetStream, as a producer without the
SDK would (bytes the SDK would never send, or checks it would make first),
and the receipts the sequencer sends to their ``Ledger-Reply-To`` inbox."""

from __future__ import annotations

import asyncio

from laneledger.contract.ids import new_id
from laneledger.contract.model import Receipt, decoder
from laneledger.contract.subjects import inbox_prefix

RECEIPT_WAIT_S = 10.0  # only a failing test waits this long


class Inbox:
    """Publishes raw append bytes and collects the receipts they get."""

    def __init__(self, nc, *, tenant: str | None = None) -> None:
        """``tenant``: receipts in that tenant's inbox, as the sequencer
        requires of a request on its subjects when a tenants file is in force."""
        self.nc, self.js = nc, nc.jetstream()
        self.receipts: asyncio.Queue[Receipt] = asyncio.Queue()
        self.subject = nc.new_inbox() if tenant is None else f"{inbox_prefix(tenant)}.{new_id()}"

    async def __aenter__(self) -> Inbox:
        self.sub = await self.nc.subscribe(self.subject, cb=self._on)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.sub.unsubscribe()

    async def _on(self, msg) -> None:
        for receipt in decoder(list[Receipt]).decode(msg.data):
            await self.receipts.put(receipt)

    async def send(self, subject: str, body: bytes, *, reply: bool = True) -> None:
        headers = {"Ledger-Reply-To": self.subject} if reply else None
        await self.js.publish(subject, body, headers=headers)

    async def next(self) -> Receipt:
        return await asyncio.wait_for(self.receipts.get(), timeout=RECEIPT_WAIT_S)

    async def ask(self, subject: str, body: bytes) -> Receipt:
        """Send one request and wait for its receipt."""
        await self.send(subject, body)
        return await self.next()
