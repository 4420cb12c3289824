"""Ledger fixtures (a pytest plugin, registered in conftest.py).

* ``sequencer``: the real sequencer, in this process, on a SQLite file in
  ``tmp_path``; ``sequencer_proc``: the same as a real OS process;
* ``client``: a ``LedgerClient`` to it; ``actor``: an agent in tenant acme;
* ``small_sequencer``: a sequencer whose request size limit is small enough
  to exceed; ``small_ledger``: ``(client, actor, lane)`` on it;
* ``ledger_under_test``: a contract suite's ledger, run twice: in-process (a
  ``LedgerWriter`` behind ``InProcessLedgerClient``, no NATS) and over NATS
  (``client`` and ``sequencer``); ``.client`` and ``.writer`` either way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from failure_logs import show_log_on_failure
from inprocess_ledger import InProcessLedgerClient
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry
from sequencer_process import SequencerProcess

from laneledger.contract.model import Actor, Lane
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LedgerClient
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.store import LedgerWriter, open_ledger

SMALL_REQUEST_LIMIT = 16 * 1024  # small_sequencer's max_request_bytes
# The in-process sequencers' pull requests last this long (the service's: 1 s):
# stopping one waits for the open request to end, at every test's teardown.
PULL_EXPIRES_S = 0.2


async def start_sequencer(nc: NATS, db_path: Path, settings: SequencerSettings) -> Sequencer:
    writer = LedgerWriter(open_ledger(db_path))
    service = Sequencer(nc, writer, SequencerMetrics(CollectorRegistry()), settings)
    await service.start()
    return service


@pytest_asyncio.fixture
async def sequencer(nc: NATS, tmp_path: Path) -> AsyncIterator[Sequencer]:
    """The real sequencer, running in this test's event loop on its own NATS
    connection and a SQLite file in ``tmp_path``. Crash tests run it as a
    subprocess instead (``sequencer_proc``)."""
    service = await start_sequencer(
        nc, tmp_path / "ledger.db", SequencerSettings(pull_expires_s=PULL_EXPIRES_S)
    )
    try:
        yield service
    finally:
        await service.stop()


@pytest_asyncio.fixture
async def small_sequencer(nc: NATS, tmp_path: Path) -> AsyncIterator[Sequencer]:
    """A sequencer whose request size limit is ``SMALL_REQUEST_LIMIT``."""
    settings = SequencerSettings(max_request_bytes=SMALL_REQUEST_LIMIT, pull_expires_s=PULL_EXPIRES_S)
    service = await start_sequencer(nc, tmp_path / "ledger.db", settings)
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
    show_log_on_failure(request, seq)
    try:
        yield seq.start()
    finally:
        seq.stop()


@pytest_asyncio.fixture
async def client(nats_server: NatsServer, sequencer: Sequencer) -> AsyncIterator[LedgerClient]:
    async with await LedgerClient.connect(nats_server.url, timeout=5.0) as ledger:
        yield ledger


@pytest_asyncio.fixture
async def actor(client: LedgerClient) -> Actor:
    return await client.ensure_actor("acme", "agent:tests/main@1", "agent")


@pytest_asyncio.fixture
async def small_ledger(
    nats_server: NatsServer, small_sequencer: Sequencer
) -> AsyncIterator[tuple[LedgerClient, Actor, Lane]]:
    """A client of ``small_sequencer``, an actor and a lane (acme/s1/r1/main)."""
    client = await LedgerClient.connect(nats_server.url, timeout=5.0)
    actor = await client.ensure_actor("acme", "agent:bad-input@1", "agent")
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    try:
        yield client, actor, lane
    finally:
        await client.close()


@dataclass
class LedgerUnderTest:
    client: LedgerClient
    writer: LedgerWriter  # the store the client's requests end in, to look at directly


@pytest.fixture(
    params=[
        pytest.param("in-process", id="in-process"),
        pytest.param("nats", id="over-nats", marks=pytest.mark.nats),
    ]
)
def ledger_under_test(request: pytest.FixtureRequest) -> LedgerUnderTest:
    """The ledger a contract suite specifies, in-process and over NATS; a
    test run over NATS alone asks for it with ``OVER_NATS_ONLY``."""
    found: LedgerUnderTest = request.getfixturevalue(
        "ledger_over_nats" if request.param == "nats" else "ledger_in_process"
    )
    return found


@pytest_asyncio.fixture
async def ledger_in_process(tmp_path: Path) -> AsyncIterator[LedgerUnderTest]:
    conn = open_ledger(tmp_path / "ledger.db")
    writer = LedgerWriter(conn)
    try:
        yield LedgerUnderTest(InProcessLedgerClient(writer), writer)
    finally:
        conn.close()


@pytest_asyncio.fixture
async def ledger_over_nats(nats_server: NatsServer, sequencer: Sequencer) -> AsyncIterator[LedgerUnderTest]:
    # The ``client`` fixture's ledger, by hand: a suite may name its own
    # fixture ``client`` after ``ledger_under_test``.
    async with await LedgerClient.connect(nats_server.url, timeout=5.0) as ledger:
        yield LedgerUnderTest(ledger, sequencer._writer)


def client_of_ledger_under_test(ledger_under_test: LedgerUnderTest) -> LedgerClient:
    """A contract suite's module makes this its ``client`` fixture
    (``client = pytest.fixture(client_of_ledger_under_test, name="client")``):
    its tests, and ``actor``, then run in-process and over NATS. Not a fixture
    here: in this plugin it would replace ``client`` for every test."""
    return ledger_under_test.client


# For a test of what only NATS does, in a suite on ``ledger_under_test``.
OVER_NATS_ONLY = pytest.mark.parametrize(
    "ledger_under_test", [pytest.param("nats", id="over-nats", marks=pytest.mark.nats)], indirect=True
)
