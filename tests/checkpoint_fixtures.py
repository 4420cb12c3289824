"""Checkpoint service fixtures (a pytest plugin, registered in conftest.py).

* ``checkpoint_service``: the real service, in this process, on the test's
  nats-server, next to the in-process ``sequencer``; its SQLite file in
  ``tmp_path``.
* ``checkpoints``: a ``CheckpointClient`` over ``client``.
* ``saver``: a ``LaneledgerSaver`` (LangGraph's checkpointer) of tenant acme
  over ``client``, on ``checkpoint_service``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest_asyncio
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry

from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService, CheckpointSettings
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.service import Sequencer

if TYPE_CHECKING:
    from laneledger.adapters.langgraph import LaneledgerSaver

ANCHOR_WAIT_S = 10.0  # the service's bound; tests that want a timeout ask for less per save


@pytest_asyncio.fixture
async def checkpoint_service(
    nc: NATS, sequencer: Sequencer, tmp_path: Path
) -> AsyncIterator[CheckpointService]:
    store = CheckpointStore.open(tmp_path / "checkpoints.db")
    service = CheckpointService(
        nc,
        store,
        CheckpointMetrics(CollectorRegistry()),
        CheckpointSettings(anchor_wait_s=ANCHOR_WAIT_S, max_inline_bytes=4096, refresh_interval_s=0.2),
    )
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
        store.close()


@pytest_asyncio.fixture
async def checkpoints(client: LedgerClient, checkpoint_service: CheckpointService) -> CheckpointClient:
    return CheckpointClient(client)


@pytest_asyncio.fixture
async def saver(
    client: LedgerClient, checkpoint_service: CheckpointService
) -> AsyncIterator[LaneledgerSaver]:
    from laneledger.adapters.langgraph import LaneledgerSaver  # LangGraph only for the tests that use it

    saver = LaneledgerSaver(client, tenant="acme")
    await saver.setup()
    yield saver
