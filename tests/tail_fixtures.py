"""The tail in this process (a pytest plugin, registered in conftest.py).

* ``start_tail``: a factory running the real ``TailService`` in this event
  loop on its own NATS connection, HTTP on 127.0.0.1 port 0, its data in
  ``tmp_path / "tail"``::

      tail = await start_tail(**TailSettings overrides)
      tail.api.get("/api/v1/lanes"); tail.feed.applied
      tail.ingest.post("/api/agent/tool-call", json_body=...)  # Korg's writes
      await start_tail.stop(tail)   # else every tail started is stopped at teardown

  Beside each tail runs the ingest service, as a deployment runs them: the
  tail serves Korg's reads, the ingest (``tail.ingest``, its own NATS
  connection, the tail's tokens and Korg tenant) Korg's writes.

* The same without NATS, for tests of route logic (``make test-fast``): the
  real ``TailService`` app served by aiohttp's ``TestServer``, its read model
  fed what an in-process ``LedgerWriter`` commits (``WriterFollower``, through
  the service's own ``apply_committed``), its structure reads
  answered by that writer. A module opts in by replacing two fixtures; its
  tests are unchanged::

      client = pytest.fixture(client_in_process, name="client")
      start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

  What only the real stream shows (SSE over a live follower, restart of the
  follower, readiness, blobs in JetStream, NATS users) stays on ``start_tail``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest_asyncio
from aiohttp.test_utils import TestServer
from inprocess_ledger import InProcessLedgerClient, WriterFollower
from ledger_fixtures import LedgerUnderTest
from nats.aio.client import Client as NATS
from tail_support import INGEST_CONTRACT, TailAPI

from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LedgerClient
from laneledger.services.ingest.korg import KorgSettings
from laneledger.services.ingest.service import IngestService, IngestSettings
from laneledger.services.tail.service import TailService, TailSettings
from laneledger.store import LedgerWriter


@dataclass(eq=False)  # a key of the in-process starter: by identity
class RunningTail:
    service: TailService
    api: TailAPI
    url: str
    nc: NATS
    # The ingest service beside it (None in process: no NATS), its answers
    # checked against its own document.
    ingest_api: TailAPI | None = None
    ingest_service: IngestService | None = None
    ingest_nc: NATS | None = None

    @property
    def ingest(self) -> TailAPI:
        assert self.ingest_api is not None, "no ingest service beside an in-process tail"
        return self.ingest_api

    @property
    def ingest_url(self) -> str:
        return self.ingest.base_url

    @property
    def feed(self):
        return self.service.feed


class TailStarter:
    def __init__(self, nats_url: str, data_dir: Path, session: aiohttp.ClientSession) -> None:
        self._nats_url = nats_url
        self._data_dir = data_dir
        self._session = session
        self.running: list[RunningTail] = []

    async def __call__(self, **overrides: Any) -> RunningTail:
        overrides.setdefault("data_dir", self._data_dir)
        overrides.setdefault("watch_interval_s", 0.2)
        nc = await nats.connect(
            self._nats_url, name="laneledger-tail-test", reconnect_time_wait=0.1, max_reconnect_attempts=-1
        )
        port = overrides.pop("port", 0)  # a restarted tail at the URL its clients know
        settings = TailSettings(**overrides)
        service = TailService(nc, settings)
        port = await service.start("127.0.0.1", port)
        url = f"http://127.0.0.1:{port}"
        ingest_nc = await nats.connect(self._nats_url, name="laneledger-ingest-test")
        ingest = IngestService(
            ingest_nc,
            IngestSettings(
                subjects=settings.subjects,
                korg=KorgSettings(tenant=settings.korg_tenant),
                access=settings.access,
            ),
        )
        ingest_url = f"http://127.0.0.1:{await ingest.start('127.0.0.1', 0)}"
        ingest_api = TailAPI(ingest_url, self._session, INGEST_CONTRACT)
        tail = RunningTail(service, TailAPI(url, self._session), url, nc, ingest_api, ingest, ingest_nc)
        self.running.append(tail)
        return tail

    async def stop(self, tail: RunningTail) -> None:
        if tail in self.running:
            self.running.remove(tail)
            if tail.ingest_service is not None and tail.ingest_nc is not None:
                await tail.ingest_service.stop()
                await tail.ingest_nc.close()
            await tail.service.stop()
            await tail.nc.close()


@pytest_asyncio.fixture
async def start_tail(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[TailStarter]:
    async with aiohttp.ClientSession(read_bufsize=1 << 21) as session:
        starter = TailStarter(nats_server.url, tmp_path / "tail", session)
        try:
            yield starter
        finally:
            for tail in list(starter.running):
                await starter.stop(tail)


# -- without NATS ------------------------------------------------------------------------


class InProcessTailStarter:
    """``start_tail``'s interface (``RunningTail``, ``stop``) over a writer in
    this process; ``nc`` is never connected, so a use of NATS fails loudly."""

    def __init__(self, writer: LedgerWriter, data_dir: Path, session: aiohttp.ClientSession) -> None:
        self._writer = writer
        self._data_dir = data_dir
        self._session = session
        self._running: dict[RunningTail, tuple[TestServer, asyncio.Task[None]]] = {}

    async def __call__(self, **overrides: Any) -> RunningTail:
        overrides.setdefault("data_dir", self._data_dir)
        nc = NATS()
        service = TailService(nc, TailSettings(**overrides), ledger=InProcessLedgerClient(self._writer))
        server = TestServer(service.app, host="127.0.0.1", port=0)
        await server.start_server()
        url = str(server.make_url("")).rstrip("/")
        tail = RunningTail(service, TailAPI(url, self._session), url, nc)
        follower = asyncio.create_task(
            WriterFollower(
                self._writer,
                lambda: service.feed.applied,
                service.apply_committed,
                batch_size=service.settings.batch_size,
            ).run(),
            name="tail-follow-writer",
        )
        self._running[tail] = (server, follower)
        return tail

    async def stop(self, tail: RunningTail) -> None:
        if tail not in self._running:
            return
        server, follower = self._running.pop(tail)
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await server.close()
        await tail.service.stop()

    async def stop_all(self) -> None:
        for tail in list(self._running):
            await self.stop(tail)


def client_in_process(ledger_in_process: LedgerUnderTest) -> LedgerClient:
    """A module's ``client`` (see this module's docstring): the in-process
    ledger's, so ``actor`` and the tail's writer are the same store."""
    return ledger_in_process.client


@contextlib.asynccontextmanager
async def in_process_tails(writer: LedgerWriter, data_dir: Path) -> AsyncIterator[InProcessTailStarter]:
    """Tails in-process over ``writer``, all stopped on exit (for a test with
    a writer of its own, e.g. HMAC-keyed; else ``start_tail_in_process``)."""
    async with aiohttp.ClientSession(read_bufsize=1 << 21) as session:
        starter = InProcessTailStarter(writer, data_dir, session)
        try:
            yield starter
        finally:
            await starter.stop_all()


async def start_tail_in_process(
    ledger_in_process: LedgerUnderTest, tmp_path: Path
) -> AsyncIterator[InProcessTailStarter]:
    """A module's ``start_tail`` (see this module's docstring)."""
    async with in_process_tails(ledger_in_process.writer, tmp_path / "tail") as starter:
        yield starter
