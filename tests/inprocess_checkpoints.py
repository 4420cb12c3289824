"""The checkpoint service without NATS: a ``CheckpointClient`` whose
transport is a direct call into a ``CheckpointService`` in this process, for
the checkpoint contract suites that run once in-process and once over NATS
(``checkpoints_under_test`` in checkpoint_fixtures.py).

As with ``InProcessLedgerClient``, only the transport is replaced: the client
builds, redacts and encodes each command; the service decodes it and runs it
(``execute``) in the scope the command's subject would give it (a tenant's
subject: that tenant's, as its bearer token over HTTP); the reply goes back
through its wire encoding and the client's decoding. The service's anchor
index is fed the in-process writer's commits (``WriterFollower``), caught up
before each request as a prompt follower of the stream would be. What only
NATS does (artifacts in JetStream's object store, request subjects and
their permissions, reply size limits) is tested over NATS alone.
"""

from __future__ import annotations

from inprocess_ledger import WriterFollower

from laneledger.contract.errors import LedgerError
from laneledger.contract.model import CheckpointCommand, ReplyOk, decode, encode
from laneledger.runtime.access import OPEN, Scope
from laneledger.runtime.requestserver import error_reply
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient
from laneledger.services.checkpoint.service import CheckpointService


class InProcessCheckpointClient(CheckpointClient):
    def __init__(self, ledger: LedgerClient, service: CheckpointService, index: WriterFollower) -> None:
        super().__init__(ledger)
        self.service = service
        self._index = index

    async def _exchange(self, op: str, body: bytes, timeout: float) -> bytes:
        await self._index.catch_up()
        tenant = self.ledger.tenant
        try:
            cmd = decode(body, CheckpointCommand)  # as the request server does
            result = await self.service.execute(cmd, OPEN if tenant is None else Scope(tenant))
            return encode(ReplyOk(result=result))
        except LedgerError as err:
            return error_reply(err)
