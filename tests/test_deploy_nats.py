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


# -- per-tenant producers (laneledger nats-config) ---------------------------------

TENANTS = ("acme", "globex")


@pytest.fixture
def tenant_server(tmp_path, passwords, monkeypatch, request):
    """A real nats-server on deploy/nats.conf rendered for two tenants."""
    from laneledger.natsconfig import password_variable, render

    for tenant in TENANTS:
        passwords[f"producer-{tenant}"] = f"test-{tenant}-secret"
        monkeypatch.setenv(password_variable(tenant), passwords[f"producer-{tenant}"])
    rendered = tmp_path / "nats.conf"
    rendered.write_text(render(CONF.read_text(), TENANTS))
    result = subprocess.run([find_nats_server(), "-t", "-c", str(rendered)], capture_output=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    server = NatsServer(tmp_path / "nats", config=rendered, extra_args=("-m", "-1"))
    show_log_on_failure(request, server)
    with server:
        yield server


async def attempts(url: str, *, publish=(), subscribe=()) -> list[str]:
    """Publish and subscribe as the user of ``url``; the permission violations
    the server reported, lowercased."""
    violations: list[str] = []

    async def remember(exc: Exception) -> None:
        violations.append(str(exc).lower())

    nc = await nats.connect(url, error_cb=remember)
    try:
        for subject in subscribe:
            await nc.subscribe(subject)
        for subject in publish:
            await nc.publish(subject, b"{}")
        await nc.flush()
        await asyncio.sleep(0.3)  # the server's -ERR lines arrive asynchronously
    finally:
        await nc.close()
    return violations


def refused(violations: list[str], subject: str) -> bool:
    return any("permissions violation" in v and f'"{subject.lower()}"' in v for v in violations)


async def test_a_tenant_producer_appends_for_its_tenant_and_reads_only_its_inbox(
        tenant_server, passwords, tmp_path):
    from laneledger.subjects import inbox_prefix

    seq_nc = await nats.connect(url_for(tenant_server, "sequencer", passwords))
    sequencer = Sequencer(seq_nc, LedgerWriter(open_ledger(tmp_path / "ledger.db")),
                          SequencerMetrics(CollectorRegistry()))
    await sequencer.start()
    try:
        for tenant in TENANTS:  # each tenant's producer works end to end on its own inbox
            async with await LedgerClient.connect(
                    url_for(tenant_server, f"producer-{tenant}", passwords),
                    inbox_prefix=inbox_prefix(tenant)) as client:
                actor = await client.ensure_actor(tenant, "agent:secured@1", "agent")
                lane = await LaneRecorder.open(client, tenant, f"s-{tenant}", "r", "main",
                                               actor_id=actor.id)
                receipt = await lane.append([lane.event("run.started", actor_id=actor.id,
                                                        subject_id="r")])
                assert receipt.last_seq == 1

        url = url_for(tenant_server, "producer-acme", passwords)
        violations = await attempts(
            url,
            subscribe=["_INBOX.>", "_INBOX_globex.>", "ledger.append.>", "ledger.append.globex.>"],
            publish=["ledger.append.globex.l1", "ledger.events.acme.s.r.l",
                     "$JS.API.CONSUMER.CREATE.LEDGER_APPEND", "$JS.API.STREAM.PURGE.LEDGER_EVENTS"])
        for subject in ("_INBOX.>", "_INBOX_globex.>", "ledger.append.>", "ledger.append.globex.>",
                        "ledger.append.globex.l1", "ledger.events.acme.s.r.l",
                        "$JS.API.CONSUMER.CREATE.LEDGER_APPEND",
                        "$JS.API.STREAM.PURGE.LEDGER_EVENTS"):
            assert refused(violations, subject), (subject, violations)
        # What it may do, it may: no violation for its own subjects.
        allowed = await attempts(url, subscribe=["_INBOX_acme.x.>"],
                                 publish=["ledger.append.acme.some-lane"])
        assert allowed == [], allowed

        info = await seq_nc.jetstream().stream_info("LEDGER_EVENTS")
        assert info.state.messages == 2  # the two tenants' run.started, nothing forged
    finally:
        await sequencer.stop()
        await seq_nc.close()


async def test_only_the_sequencer_writes_events_and_consumers_append_as_no_one_else(
        tenant_server, passwords):
    forged_events = ["ledger.events.acme.s.r.l", "$JS.API.STREAM.PURGE.LEDGER_EVENTS",
                     "$JS.API.STREAM.DELETE.LEDGER_EVENTS", "$JS.API.STREAM.MSG.DELETE.LEDGER_EVENTS"]
    for user in ("producer", "producer-acme", "tail", "metrics", "checkpoint"):
        violations = await attempts(url_for(tenant_server, user, passwords), publish=forged_events)
        for subject in forged_events:
            assert refused(violations, subject), (user, subject, violations)
    for user in ("tail", "metrics", "checkpoint"):  # readers append as no tenant's producer
        violations = await attempts(url_for(tenant_server, user, passwords),
                                    publish=["ledger.append.acme.l1"],
                                    subscribe=["ledger.append.>"])
        assert refused(violations, "ledger.append.acme.l1"), (user, violations)
        assert refused(violations, "ledger.append.>"), (user, violations)
    # The tail's Korg endpoint appends in its Korg tenant, and only there.
    assert await attempts(url_for(tenant_server, "tail", passwords),
                          publish=["ledger.append.korg.l1"]) == []


def test_nats_config_renders_the_shipped_file_and_refuses_bad_tenants(tmp_path):
    from laneledger.cli import main
    from laneledger.natsconfig import render

    template = CONF.read_text()
    assert render(template, []) == template  # the shipped file is the template, unchanged
    out = tmp_path / "rendered.conf"
    assert main(["nats-config", "--template", str(CONF), "--tenant", "acme",
                 "--korg-tenant", "korg-tools", "-o", str(out)]) == 0
    text = out.read_text()
    assert "user: producer-acme" in text and '"ledger.append.korg-tools.>"' in text
    assert '"ledger.append.korg.>"' not in text  # the tail's one append subject moved
    for bad in ("a b", "acme.x", "*", ""):
        assert main(["nats-config", "--template", str(CONF), "--tenant", bad]) == 2, bad
    assert main(["nats-config", "--template", str(CONF), "--tenant", "a-b", "--tenant", "a_b"]) == 2
