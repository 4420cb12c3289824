"""Storage quotas on what is kept inline (spec/wire.md, "Tenants and limits"):
a tenant's events in the ledger (``inline_bytes``) and its inline checkpoint
state (``checkpoint_state_bytes``). The accounting in-process on real SQLite
files; the refusals end to end over a real nats-server."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from ledger_fixtures import start_sequencer
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.contract import errors
from laneledger.contract.model import AppendCommitted, AppendRejected, CreateLane, EnsureActor, encode
from laneledger.runtime.tenants import parse_tenants
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService, CheckpointSettings
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.service import SequencerSettings
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append
from laneledger.store.txlog import MemoryTxLog


def _writer(path: Path, limit: int | None, log: MemoryTxLog | None = None) -> LedgerWriter:
    writer = LedgerWriter(open_ledger(path))
    if log is not None:
        writer.use_txlog(log)
    writer.inline_usage.limit = lambda tenant: limit if tenant == "acme" else None
    return writer


def _append(writer: LedgerWriter, tenant: str, append_id: str, text: str) -> AppendCommitted | AppendRejected:
    actor = writer.ensure_actor(EnsureActor(tenant=tenant, key=f"agent:{tenant}", kind="agent"))
    lane = writer.create_lane(CreateLane(tenant=tenant, session_id="s", run_id="r", name="main"))
    last = writer.reader.get_lane(lane.id, tenant).last_seq
    event = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": text})
    body = encode({"lane_id": lane.id, "expected_last_seq": last, "append_id": append_id, "events": [event]})
    (receipt,) = writer.apply_batch([prepare_append(body, tenant_token=tenant)]).receipts
    assert isinstance(receipt, AppendCommitted | AppendRejected)
    return receipt


def test_inline_bytes_are_the_stored_event_bodies_and_survive_a_restart(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "ledger.db", None)
    for i in range(3):
        assert isinstance(_append(writer, "acme", f"a{i}", "x" * 900), AppendCommitted)
    assert isinstance(_append(writer, "globex", "g0", "y" * 900), AppendCommitted)
    stored = writer.reader._rows("SELECT tenant, length(body) FROM events", ())
    used = writer.inline_bytes_used()
    assert used == {
        "acme": sum(n for t, n in stored if t == "acme"),
        "globex": sum(n for t, n in stored if t == "globex"),
    }
    assert used["acme"] > 3 * 900
    # Another writer on the same file (a restart) counts the same.
    assert _writer(tmp_path / "ledger.db", None).inline_bytes_used() == used


def test_an_append_past_the_limit_is_refused_naming_the_tenants_own_figures(tmp_path: Path) -> None:
    probe = _writer(tmp_path / "probe.db", None)
    _append(probe, "acme", "p", "x" * 900)
    one = probe.inline_bytes_used()["acme"]  # what one such event takes
    writer = _writer(tmp_path / "ledger.db", 2 * one + one // 2)
    assert isinstance(_append(writer, "globex", "g", "y" * 900), AppendCommitted)  # counted apart
    for i in range(2):
        assert isinstance(_append(writer, "acme", f"a{i}", "x" * 900), AppendCommitted)
    used = writer.inline_bytes_used()["acme"]
    refused = _append(writer, "acme", "a2", "x" * 900)
    assert isinstance(refused, AppendRejected)
    assert refused.error.code == "quota_exceeded" and refused.error.retryable
    details = refused.error.details
    assert details == {
        "limit": "inline_bytes",
        "tenant": "acme",
        "used_bytes": used,
        "request_bytes": details["request_bytes"],
        "limit_bytes": 2 * one + one // 2,
    }
    assert abs(details["request_bytes"] - one) < 16  # the event as stored (its seq, hashes: a few digits)
    assert writer.reader.last_position() == 3  # nothing of it stored
    # A small event still fits; another tenant is not held by acme's limit.
    assert isinstance(_append(writer, "acme", "a3", "x"), AppendCommitted)
    assert isinstance(_append(writer, "globex", "g2", "y" * 900), AppendCommitted)


def test_a_standby_that_follows_the_log_counts_what_the_active_stored(tmp_path: Path) -> None:
    log = MemoryTxLog()
    active = _writer(tmp_path / "active.db", None, log)
    for i in range(3):
        _append(active, "acme", f"a{i}", "x" * 900)
    used = active.inline_bytes_used()["acme"]
    standby = _writer(tmp_path / "standby.db", used, log)  # its file only from the log
    assert standby.inline_bytes_used() == active.inline_bytes_used()
    refused = _append(standby, "acme", "a3", "x" * 900)  # taken over: the limit is reached
    assert isinstance(refused, AppendRejected) and refused.error.details["used_bytes"] == used
    # The active appends again (it does not know the limit): the standby reads it from the log.
    active.inline_usage.limit = lambda tenant: None
    assert isinstance(_append(active, "globex", "g", "y"), AppendCommitted)
    assert standby.catch_up() >= 1  # what a standby's follow loop runs
    assert standby.inline_bytes_used() == active.inline_bytes_used()


# ------------------------------------------------- end to end, over NATS


def _tenants(acme: str) -> str:
    return f"[tenants.acme]\n{acme}\n[tenants.globex]\n"


async def _lanes(client: LedgerClient) -> dict[str, tuple]:
    """``{tenant: (agent, lane)}`` for acme and globex."""
    lanes = {}
    for tenant in ("acme", "globex"):
        agent = await client.ensure_actor(tenant, f"agent:{tenant}", "agent")
        lanes[tenant] = (agent, await client.create_lane(tenant, "s", "r", "main", actor_id=agent.id))
    return lanes


def _events(lanes: dict[str, tuple], tenant: str, n: int) -> list:
    """``n`` events of about 1.6 KB stored each (1000 characters: inline)."""
    agent, lane = lanes[tenant]
    return [
        make_event(lane.id, "stream.text_delta", actor_id=agent.id, payload={"t": "z" * 1000})
        for _ in range(n)
    ]


async def test_the_sequencer_refuses_inline_events_past_inline_bytes(nats_server, nc, tmp_path: Path) -> None:
    settings = SequencerSettings(tenants=parse_tenants(_tenants('inline_bytes = "8KiB"')))
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=10.0, tenant_inboxes=True) as client:
            lanes = await _lanes(client)
            events = functools.partial(_events, lanes)

            _, lane = lanes["acme"]
            committed = await client.append(lane, 0, events("acme", 4))
            with pytest.raises(errors.QuotaExceeded) as refused:
                await client.append(lane, committed.last_seq, events("acme", 4), retries=0)
            details = refused.value.details
            assert details["limit"] == "inline_bytes" and details["tenant"] == "acme"
            assert details["limit_bytes"] == 8 << 10 and details["used_bytes"] > 4000
            assert set(details) == {"limit", "tenant", "used_bytes", "request_bytes", "limit_bytes"}
            # globex's events are its own: acme's full quota does not touch them.
            _, glane = lanes["globex"]
            assert (await client.append(glane, 0, events("globex", 6))).last_seq == 6
    finally:
        await sequencer.stop()
    # A restart counts what the file holds: still full.
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=10.0, tenant_inboxes=True) as client:
            _, lane = lanes["acme"]
            with pytest.raises(errors.QuotaExceeded):
                await client.append(lane, committed.last_seq, events("acme", 4), retries=0)
    finally:
        await sequencer.stop()


async def test_the_checkpoint_service_refuses_inline_state_past_checkpoint_state_bytes(
    nats_server, nc, tmp_path: Path
) -> None:
    tenants = parse_tenants(_tenants('checkpoint_state_bytes = "64KiB"'))
    settings = CheckpointSettings(tenants=tenants)

    async def service() -> tuple[CheckpointService, CheckpointStore]:
        store = CheckpointStore.open(tmp_path / "checkpoints.db")
        running = CheckpointService(nc, store, CheckpointMetrics(CollectorRegistry()), settings)
        await running.start()
        return running, store

    state = {"notes": "n" * 20_000}
    running, store = await service()
    try:
        async with (
            await LedgerClient.connect(nats_server.url, tenant="acme", timeout=10.0) as acme,
            await LedgerClient.connect(nats_server.url, tenant="globex", timeout=10.0) as globex,
        ):
            for revision in range(3):
                await CheckpointClient(acme).save("k", expected_revision=revision, format="f", state=state)
            with pytest.raises(errors.QuotaExceeded) as refused:
                await CheckpointClient(acme).save("k", expected_revision=3, format="f", state=state)
            details = refused.value.details
            assert details["limit"] == "checkpoint_state_bytes" and details["tenant"] == "acme"
            assert details["limit_bytes"] == 64 << 10 and details["used_bytes"] >= 60_000
            assert set(details) == {"limit", "tenant", "used_bytes", "request_bytes", "limit_bytes"}
            assert (await CheckpointClient(acme).latest("k")).revision == 3  # nothing written
            # A trusted save naming no tenant lands in the key's namespace: acme's, full.
            trusted_client = LedgerClient.connect(nats_server.url, timeout=10.0, tenant_inboxes=True)
            async with await trusted_client as trusted:
                with pytest.raises(errors.QuotaExceeded) as refused:
                    await CheckpointClient(trusted).save("k", expected_revision=3, format="f", state=state)
                assert refused.value.details["tenant"] == "acme"
            # globex has its own quota.
            for revision in range(3):
                await CheckpointClient(globex).save("k", expected_revision=revision, format="f", state=state)
    finally:
        await running.stop()
        store.close()
    running, store = await service()  # a restart counts what the store keeps
    try:
        async with await LedgerClient.connect(nats_server.url, tenant="acme", timeout=10.0) as acme:
            with pytest.raises(errors.QuotaExceeded):
                await CheckpointClient(acme).save("k", expected_revision=3, format="f", state=state)
            # Erasing revisions frees their bytes.
            await CheckpointClient(acme).erase(keys=["k"])
            await CheckpointClient(acme).save("k", expected_revision=3, format="f", state=state)
    finally:
        await running.stop()
        store.close()


def test_the_example_tenants_file_documents_every_limit_at_its_default() -> None:
    import dataclasses

    from laneledger.runtime.tenants import TenantLimits, load_tenants

    path = Path(__file__).parents[1] / "deploy" / "tenants.toml"
    assert load_tenants(str(path)).defaults == TenantLimits()
    text = path.read_text()
    missing = [f.name for f in dataclasses.fields(TenantLimits) if f"\n{f.name} = " not in text]
    assert missing == []


async def test_a_standby_that_takes_over_knows_the_tenants_inline_usage(
    nats_server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Real sequencer processes, each on its own file: the standby's count is
    the replicated file's, so after the active is killed acme is still at its
    limit, and globex is not held by it."""
    from test_standby import sequencer as sequencer_process

    tenants = tmp_path / "tenants.toml"
    tenants.write_text(_tenants('inline_bytes = "8KiB"'))
    first = sequencer_process(nats_server.url, tmp_path, "first", request, "--tenants-file", str(tenants))
    second = sequencer_process(nats_server.url, tmp_path, "second", request, "--tenants-file", str(tenants))
    first.start()
    second.start()
    assert "role=standby" in second.ready_line
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=10.0, tenant_inboxes=True) as client:
            lanes = await _lanes(client)
            events = functools.partial(_events, lanes)

            _, lane = lanes["acme"]
            filled = await client.append(lane, 0, events("acme", 4))
            with pytest.raises(errors.QuotaExceeded) as before:
                await client.append(lane, filled.last_seq, events("acme", 2), retries=0)
            first.kill()

            async def refused_by_the_new_active() -> errors.QuotaExceeded | None:
                try:
                    await client.append(lane, filled.last_seq, events("acme", 2), retries=0, timeout=2.0)
                except errors.QuotaExceeded as exc:
                    return exc
                except errors.LedgerError:
                    return None  # no active sequencer yet
                raise AssertionError("the new active sequencer committed past acme's inline_bytes")

            after = await eventually(refused_by_the_new_active, what="the standby to take over", timeout=20)
            assert after.details["used_bytes"] == before.value.details["used_bytes"]
            _, glane = lanes["globex"]
            assert (await client.append(glane, 0, events("globex", 4))).last_seq == 4
    finally:
        first.stop()
        second.stop()
