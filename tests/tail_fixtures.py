"""The tail in this process (a pytest plugin, registered in conftest.py).

* ``start_tail``: a factory running the real ``TailService`` in this event
  loop on its own NATS connection, HTTP on 127.0.0.1 port 0, its data in
  ``tmp_path / "tail"``::

      tail = await start_tail(**TailSettings overrides)
      tail.api.get("/api/v1/lanes"); tail.feed.applied
      await start_tail.stop(tail)   # else every tail started is stopped at teardown
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest_asyncio
from nats.aio.client import Client as NATS
from tail_support import TailAPI

from laneledger.devtools.natsserver import NatsServer
from laneledger.services.tail.service import TailService, TailSettings


@dataclass
class RunningTail:
    service: TailService
    api: TailAPI
    url: str
    nc: NATS

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
        service = TailService(nc, TailSettings(**overrides))
        port = await service.start("127.0.0.1", 0)
        url = f"http://127.0.0.1:{port}"
        tail = RunningTail(service, TailAPI(url, self._session), url, nc)
        self.running.append(tail)
        return tail

    async def stop(self, tail: RunningTail) -> None:
        if tail in self.running:
            self.running.remove(tail)
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
