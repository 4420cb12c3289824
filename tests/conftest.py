"""Shared pytest fixtures and hooks for laneledger's tests.

Sections, in order:

* reporting hooks: logs of the servers a test used are added to its failure report
* nats-server: ``nats_server`` (a real nats-server with JetStream, per test),
  ``nc`` (a connected nats-py client to it) and ``js`` (``nc.jetstream()``)
* the ledger: ``sequencer`` (the real sequencer, in this process, on a SQLite
  file in ``tmp_path``), ``client`` (a ``LedgerClient``) and ``actor``

Async tests and fixtures run on a function-scoped loop (``asyncio_mode = "auto"``
in pyproject.toml); async fixtures are still declared with
``pytest_asyncio.fixture`` so they work in strict mode too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
import pytest_asyncio
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from prometheus_client import CollectorRegistry
from sequencer_process import SequencerProcess

from laneledger.contract.model import Actor
from laneledger.devtools.natscluster import NatsCluster
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LedgerClient
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger

# -- reporting hooks ------------------------------------------------------------

# Servers whose log a failing test's report should show.
_SERVERS_TO_REPORT = pytest.StashKey[list[NatsServer]]()
_LOG_LINES_IN_REPORT = 200


def show_log_on_failure(request: pytest.FixtureRequest, server: NatsServer) -> None:
    """Add ``server``'s log to the report of the test if it fails (in setup,
    call or teardown). For fixtures and tests that start servers of their own."""
    request.node.stash.setdefault(_SERVERS_TO_REPORT, []).append(server)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.failed:
        for server in item.stash.get(_SERVERS_TO_REPORT, []):
            tail = "\n".join(server.log_text().splitlines()[-_LOG_LINES_IN_REPORT:])
            report.sections.append((f"nats-server log {server.log_path}", tail or "(empty)"))
    return report


# -- nats-server ------------------------------------------------------------------


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


# -- the ledger -------------------------------------------------------------------


@pytest_asyncio.fixture
async def sequencer(nc: NATS, tmp_path: Path) -> AsyncIterator[Sequencer]:
    """The real sequencer, running in this test's event loop on its own NATS
    connection and a SQLite file in ``tmp_path``. Crash tests run it as a
    subprocess instead (see ``tests/sequencer_process.py``)."""
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    service = Sequencer(nc, writer, SequencerMetrics(CollectorRegistry()))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@pytest.fixture
def sequencer_proc(
    nats_server: NatsServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[SequencerProcess]:
    """The sequencer as a real process on ``tmp_path/ledger.db``; stopped (no
    process left) at teardown, before the nats-server."""
    seq = SequencerProcess(nats_server.url, tmp_path / "ledger.db", log_dir=tmp_path)
    show_log_on_failure(request, seq)  # duck-typed: log_path + log_text()
    try:
        yield seq.start()
    finally:
        seq.stop()


@pytest_asyncio.fixture
async def client(nats_server: NatsServer, sequencer: Sequencer) -> AsyncIterator[LedgerClient]:
    ledger = await LedgerClient.connect(nats_server.url, timeout=5.0)
    try:
        yield ledger
    finally:
        await ledger.close()


@pytest_asyncio.fixture
async def actor(client: LedgerClient) -> Actor:
    return await client.ensure_actor("acme", "agent:tests/main@1", "agent")
