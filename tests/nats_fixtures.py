"""NATS fixtures (a pytest plugin, registered in conftest.py).

* ``nats_server``: a real nats-server with JetStream, per test;
* ``cluster``: a three-node nats-server cluster, per test;
* ``nc``: a connected nats-py client to ``nats_server``; ``js``: ``nc.jetstream()``.

A test using ``nats_server`` or ``cluster`` is marked ``nats`` automatically
(conftest.py).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio
from failure_logs import show_log_on_failure
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from laneledger.devtools.natscluster import NatsCluster
from laneledger.devtools.natsserver import NatsServer

_MONITOR = re.compile(r"Starting http monitor on (\S+:\d+)")


def jetstream_settings(server: NatsServer) -> dict[str, Any]:
    """What a running server says of its JetStream settings (``/varz``);
    it must have been started with monitoring (``-m -1``)."""
    found = _MONITOR.findall(server.log_text())
    assert found, "the server was started without monitoring (-m -1)"
    with urllib.request.urlopen(f"http://{found[-1]}/varz", timeout=5) as reply:
        settings: dict[str, Any] = json.load(reply)["jetstream"]["config"]
    return settings


@pytest.fixture
def nats_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[NatsServer]:
    """A real nats-server with JetStream on 127.0.0.1, on a port it chose, storing
    in this test's ``tmp_path``; stopped (no process left) after the test. Tests
    may stop, kill or restart it; its log is shown if the test fails."""
    server = NatsServer(tmp_path / "nats")
    show_log_on_failure(request, server)
    with server:
        yield server


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[NatsCluster]:
    """A three-node nats-server cluster with JetStream on loopback, stored in
    this test's ``tmp_path``; every node's log is shown if the test fails."""
    nodes = NatsCluster(tmp_path / "cluster", size=3)
    nodes.start()
    for node in nodes.nodes:
        show_log_on_failure(request, node)
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest_asyncio.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[NATS]:
    """A nats-py client connected to ``nats_server``. It reconnects quickly and
    without giving up, so tests can restart the server under it.

    Teardown closes it (close() flushes what was published) rather than
    draining: with nats-py 2.16 a pull subscription whose ``fetch`` timed out
    can keep a late "408 Request Timeout" status in its queue, and ``drain()``
    then waits for that queue the full ``drain_timeout`` (30 s). Tests that
    test draining drain themselves."""
    client = await nats.connect(
        nats_server.url,
        name="laneledger-tests",
        connect_timeout=2,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
    )
    try:
        yield client
    finally:
        await client.close()  # a no-op if the test closed it


@pytest.fixture
def js(nc: NATS) -> JetStreamContext:
    """JetStream on ``nc``."""
    return nc.jetstream()
