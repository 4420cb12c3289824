"""Fixtures and helpers for the checkpoint service's tests (not a test module).

Test modules import the fixtures they use by name, which registers them::

    from checkpoint_support import checkpoint_service, checkpoints  # noqa: F401

* ``checkpoint_service``: the real service, in this process, on the test's
  nats-server, next to conftest's in-process ``sequencer``; its SQLite file
  in ``tmp_path``.
* ``checkpoints``: a ``CheckpointClient`` over conftest's ``client``.
* ``CheckpointProcess``: the service as a real OS process
  (``python -m laneledger.services.checkpoint``), with ``kill()`` (SIGKILL) and ``restart()``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from prometheus_client import CollectorRegistry
from service_process import ServiceProcess

from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService, CheckpointSettings
from laneledger.services.checkpoint.store import CheckpointStore

ANCHOR_WAIT_S = 10.0  # the service's bound; tests that want a timeout ask for less per save


@pytest_asyncio.fixture
async def checkpoint_service(nc, sequencer, tmp_path: Path) -> AsyncIterator[CheckpointService]:
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


async def wait_until(predicate, timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``predicate`` (sync or async) until true; bounded in time."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g}s")
        await asyncio.sleep(0.02)


class CheckpointProcess(ServiceProcess):
    """``python -m laneledger.services.checkpoint`` on ``data_dir``; its logs beside it."""

    def __init__(
        self, nats_url: str, data_dir: str | os.PathLike[str], *, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.nats_url = nats_url
        self.data_dir = Path(data_dir)
        super().__init__(
            "laneledger.services.checkpoint",
            [
                "--nats",
                nats_url,
                "--data",
                str(self.data_dir),
                "--http-host",
                "127.0.0.1",
                "--http-port",
                "0",
                *extra_args,
            ],
            self.data_dir.parent,
            log_name=self.data_dir.name,
        )
