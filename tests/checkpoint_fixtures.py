"""Checkpoint service fixtures (a pytest plugin, registered in conftest.py).

* ``checkpoint_service``: the real service, in this process, on the test's
  nats-server, next to the in-process ``sequencer``; its SQLite file in
  ``tmp_path``.
* ``checkpoints``: a ``CheckpointClient`` over ``client``.
* ``saver``: a ``LaneledgerSaver`` (LangGraph's checkpointer) of tenant acme
  over ``client``, on ``checkpoint_service``.
* ``checkpoints_under_test``: a checkpoint contract suite's service, run
  twice: in-process (a ``CheckpointService`` behind
  ``InProcessCheckpointClient``, its anchor index fed by an in-process
  ``LedgerWriter``; no NATS) and over NATS (``checkpoint_service`` and the
  sequencer); ``.client``, ``.checkpoints`` and ``.service`` either way. A
  module opts in by replacing two fixtures; its tests are unchanged::

      client = pytest.fixture(client_of_checkpoints_under_test, name="client")
      checkpoints = pytest.fixture(checkpoints_of_checkpoints_under_test, name="checkpoints")

  A test of what only NATS does asks for ``CHECKPOINTS_OVER_NATS_ONLY``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from inprocess_checkpoints import InProcessCheckpointClient
from inprocess_ledger import InProcessLedgerClient, WriterFollower
from ledger_fixtures import LedgerUnderTest
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


def new_checkpoint_service(nc: NATS, db_path: Path, ledger: LedgerClient | None = None) -> CheckpointService:
    """The service the tests run, in-process or over NATS: the same settings."""
    return CheckpointService(
        nc,
        CheckpointStore.open(db_path),
        CheckpointMetrics(CollectorRegistry()),
        CheckpointSettings(anchor_wait_s=ANCHOR_WAIT_S, max_inline_bytes=4096, refresh_interval_s=0.2),
        ledger=ledger,
    )


@pytest_asyncio.fixture
async def checkpoint_service(
    nc: NATS, sequencer: Sequencer, tmp_path: Path
) -> AsyncIterator[CheckpointService]:
    service = new_checkpoint_service(nc, tmp_path / "checkpoints.db")
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
        service._store.close()


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


@dataclass
class CheckpointsUnderTest:
    client: LedgerClient
    checkpoints: CheckpointClient
    service: CheckpointService


@pytest.fixture(
    params=[
        pytest.param("in-process", id="in-process"),
        pytest.param("nats", id="over-nats", marks=pytest.mark.nats),
    ]
)
def checkpoints_under_test(request: pytest.FixtureRequest) -> CheckpointsUnderTest:
    """The checkpoint service a contract suite specifies, in-process and over NATS."""
    found: CheckpointsUnderTest = request.getfixturevalue(
        "checkpoints_over_nats" if request.param == "nats" else "checkpoints_in_process"
    )
    return found


@pytest_asyncio.fixture
async def checkpoints_in_process(
    ledger_in_process: LedgerUnderTest, tmp_path: Path
) -> AsyncIterator[CheckpointsUnderTest]:
    writer = ledger_in_process.writer
    # NATS never connected; the service's structure reads go to the writer.
    service = new_checkpoint_service(NATS(), tmp_path / "checkpoints.db", InProcessLedgerClient(writer))
    anchors = service.anchors

    async def stream_last() -> int:  # the committed stream's last sequence: the writer's last position
        return writer.reader.last_position()

    anchors._follower.refresh_stream_last = stream_last  # type: ignore[method-assign]
    index = WriterFollower(writer, lambda: anchors.applied, anchors.apply_committed)
    follower = asyncio.create_task(index.run())
    client = ledger_in_process.client
    try:
        yield CheckpointsUnderTest(client, InProcessCheckpointClient(client, service, index), service)
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await service.stop()
        service._store.close()


@pytest_asyncio.fixture
async def checkpoints_over_nats(
    ledger_over_nats: LedgerUnderTest, checkpoint_service: CheckpointService
) -> CheckpointsUnderTest:
    client = ledger_over_nats.client
    return CheckpointsUnderTest(client, CheckpointClient(client), checkpoint_service)


# A module's ``client`` and ``checkpoints`` (see this module's docstring); not
# fixtures here: in this plugin they would replace ``client`` for every test.
def client_of_checkpoints_under_test(checkpoints_under_test: CheckpointsUnderTest) -> LedgerClient:
    return checkpoints_under_test.client


def checkpoints_of_checkpoints_under_test(checkpoints_under_test: CheckpointsUnderTest) -> CheckpointClient:
    return checkpoints_under_test.checkpoints


# For a test of what only NATS does, in a suite on ``checkpoints_under_test``.
CHECKPOINTS_OVER_NATS_ONLY = pytest.mark.parametrize(
    "checkpoints_under_test", [pytest.param("nats", id="over-nats", marks=pytest.mark.nats)], indirect=True
)
