"""deploy/nats.conf on a real nats-server: it parses, every service works under
its own user, and a producer's credentials cannot write the committed stream."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import nats
import pytest
from prometheus_client import CollectorRegistry

from laneledger.client import LaneRecorder, LedgerClient
from laneledger.natsserver import NatsServer, find_nats_server
from laneledger.store import LedgerWriter, open_ledger
from services.sequencer.metrics import SequencerMetrics
from services.sequencer.service import Sequencer

from conftest import show_log_on_failure

CONF = Path(__file__).resolve().parents[1] / "deploy" / "nats.conf"
USERS = ("producer", "sequencer", "tail", "metrics", "checkpoint")


@pytest.fixture
def passwords(monkeypatch) -> dict[str, str]:
    found = {user: f"test-{user}-secret" for user in USERS}
    monkeypatch.setenv("LANELEDGER_NATS_STORE_DIR", "/tmp/unused-by-nats-server-t")
    for user, password in found.items():
        monkeypatch.setenv(f"LANELEDGER_{user.upper()}_PASSWORD", password)
    return found


def test_nats_server_accepts_the_config(passwords):
    result = subprocess.run([find_nats_server(), "-t", "-c", str(CONF)], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert b"is valid" in result.stdout + result.stderr


@pytest.fixture
def secured_server(tmp_path, passwords, request):
    # The config's fixed ports are overridden: the client port is chosen by the
    # server, and -m -1 moves monitoring to a port of its choosing too.
    server = NatsServer(tmp_path / "nats", config=CONF, extra_args=("-m", "-1"))
    show_log_on_failure(request, server)
    with server:
        yield server


def url_for(server: NatsServer, user: str, passwords: dict[str, str]) -> str:
    return f"nats://{user}:{passwords[user]}@127.0.0.1:{server.port}"


async def test_services_run_under_their_users_and_producers_cannot_forge(secured_server, passwords, tmp_path):
    violations: list[Exception] = []

    async def remember(exc: Exception) -> None:
        violations.append(exc)

    seq_nc = await nats.connect(url_for(secured_server, "sequencer", passwords))
    sequencer = Sequencer(seq_nc, LedgerWriter(open_ledger(tmp_path / "ledger.db")),
                          SequencerMetrics(CollectorRegistry()))
    await sequencer.start()
    try:
        async with await LedgerClient.connect(url_for(secured_server, "producer", passwords)) as client:
            actor = await client.ensure_actor("acme", "agent:secured@1", "agent")
            lane = await LaneRecorder.open(client, "acme", "s", "r", "main", actor_id=actor.id)
            receipt = await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r")])
            assert receipt.positions == [1]

        forger = await nats.connect(url_for(secured_server, "producer", passwords), error_cb=remember)
        try:
            js = forger.jetstream()
            await forger.publish("ledger.events.acme.s.r.forged", b'{"forged": true}')
            with pytest.raises(Exception):  # no permission to talk to the stream API at all
                await js.stream_info("LEDGER_EVENTS")
            await forger.flush()
            await asyncio.sleep(0.2)
        finally:
            await forger.close()
        assert any("permissions violation" in str(e).lower() for e in violations), violations

        # Only the sequencer's committed event is in the stream.
        info = await seq_nc.jetstream().stream_info("LEDGER_EVENTS")
        assert info.state.messages == 1
    finally:
        await sequencer.stop()
        await seq_nc.close()


async def test_wrong_password_is_refused(secured_server, passwords):
    with pytest.raises(Exception):
        await nats.connect(f"nats://producer:wrong@127.0.0.1:{secured_server.port}",
                           max_reconnect_attempts=0, connect_timeout=2, allow_reconnect=False)


async def test_readers_cannot_publish_committed_events(secured_server, passwords):
    for user in ("tail", "metrics", "checkpoint"):
        violations: list[Exception] = []

        async def remember(exc: Exception) -> None:
            violations.append(exc)

        nc = await nats.connect(url_for(secured_server, user, passwords), error_cb=remember)
        try:
            await nc.publish("ledger.events.acme.s.r.l", b"{}")
            await nc.flush()
            await asyncio.sleep(0.2)
        finally:
            await nc.close()
        assert any("permissions violation" in str(e).lower() for e in violations), (user, violations)
