"""Retention (spec/erasure.md, "Retention"): a tenant's content older than its
``content_retention_days`` is erased by the same erasure as a request's, once
a day, with a dry run; in-process (the writer, a fixed clock) and the
tenants file's keys."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from inprocess_ledger import InProcessLedgerClient
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.audit.ledger import audit_ledger
from laneledger.contract import errors
from laneledger.contract.erasure import LEDGER_SESSION
from laneledger.contract.model import Erase, ErasurePage
from laneledger.runtime.tenants import TenantsFileError, parse_tenants
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.retention import RETENTION_ACTOR, Retention
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.store import LedgerWriter, erasure, open_ledger


class Clock:
    """The writer's clock, set by the test: what committed_at says."""

    def __init__(self) -> None:
        self.now = "2026-01-10T12:00:00.000000Z"

    def __call__(self) -> str:
        return self.now


@pytest.fixture
def ledger(tmp_path):
    clock = Clock()
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"), clock=clock)
    return InProcessLedgerClient(writer), clock, tmp_path / "ledger.db"


async def append(client, tenant: str, session: str, n: int, text: str) -> None:
    actor = await client.ensure_actor(tenant, "agent:t@1", "agent")
    lane = await client.create_lane(tenant, session, "r1", "main", actor_id=actor.id)
    head = (await client.get_lane(lane.id, tenant=tenant)).last_seq
    events = [
        make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": text}) for _ in range(n)
    ]
    await client.append(lane, head, events)


async def texts(client, tenant: str, session: str) -> list:
    return [e.payload.get("text") for e in (await client.load_session(session, tenant=tenant)).events]


async def test_content_committed_before_a_time_is_erased_and_newer_content_kept(ledger, monkeypatch):
    client, clock, db = ledger
    monkeypatch.setattr(erasure, "SCAN_WINDOW", 3)  # many pages, each a window of positions
    await append(client, "acme", "old", 3, "old")
    await append(client, "globex", "theirs", 2, "theirs")  # another tenant's, between
    clock.now = "2026-02-10T12:00:00.000000Z"
    await append(client, "acme", "new", 2, "new")
    actor = await client.ensure_actor("acme", RETENTION_ACTOR, "service")

    done = await client.erase(
        committed_before="2026-02-01T00:00:00Z", tenant="acme", actor_id=actor.id, reason="retention"
    )

    assert done.erased == 3
    assert await texts(client, "acme", "old") == [None, None, None]
    assert await texts(client, "acme", "new") == ["new", "new"]
    assert await texts(client, "globex", "theirs") == ["theirs", "theirs"]
    [event] = (await client.load_session(LEDGER_SESSION, tenant="acme")).events
    assert event.payload["scope"] == {"committed_before": "2026-02-01T00:00:00.000000Z"}
    assert audit_ledger(db).erased_events == 3
    # The next erasure starts where this one got to: nothing is read twice.
    reached = client.writer._db.execute("SELECT position FROM retention WHERE tenant = 'acme'").fetchone()[0]
    assert reached >= 3
    later = await client.erase(
        committed_before="2026-03-01T00:00:00Z", tenant="acme", actor_id=actor.id, reason="retention"
    )
    assert (later.erased, later.already_erased) == (2, 0)
    assert await texts(client, "acme", "new") == [None, None]


async def test_a_retention_erasure_names_its_tenant(ledger):
    client, _, _ = ledger
    actor = await client.ensure_actor("acme", RETENTION_ACTOR, "service")
    with pytest.raises(errors.InvalidRequest) as caught:
        await client.erase(committed_before="2026-02-01T00:00:00Z", actor_id=actor.id, reason="r")
    assert caught.value.details["path"] == "$.tenant"


def retention(client, tenants_toml: str, now: datetime) -> tuple[Retention, SequencerMetrics]:
    metrics = SequencerMetrics(CollectorRegistry())

    async def erase(cmd: Erase) -> ErasurePage:
        return await client._command(cmd, ErasurePage)

    async def actor_of(tenant: str) -> str:
        return (await client.ensure_actor(tenant, RETENTION_ACTOR, "service")).id

    tenants = parse_tenants(tenants_toml)
    return Retention(tenants, erase=erase, actor_of=actor_of, metrics=metrics, now=lambda: now), metrics


async def test_a_round_erases_each_tenants_old_content_once_a_day_and_a_dry_run_only_counts(ledger):
    client, clock, _ = ledger
    await append(client, "acme", "s1", 3, "acme")
    await append(client, "globex", "s1", 2, "globex")
    await append(client, "initech", "s1", 1, "initech")
    clock.now = "2026-03-01T00:00:00.000000Z"
    toml = """
    [tenants.acme]
    content_retention_days = 30
    [tenants.globex]
    content_retention_days = 30
    retention_dry_run = true
    [tenants.initech]
    """
    rounds, metrics = retention(client, toml, datetime(2026, 3, 1, 9, tzinfo=UTC))

    done = {r.tenant: r for r in await rounds.round()}

    assert set(done) == {"acme", "globex"}  # initech keeps its content for good
    assert (done["acme"].erased, done["acme"].erasure_id) == (3, "retention-acme-2026-03-01")
    assert done["acme"].committed_before == "2026-01-30T00:00:00.000000Z"
    assert (done["globex"].erased, done["globex"].dry_run) == (2, True)
    assert await texts(client, "acme", "s1") == [None, None, None]
    assert await texts(client, "globex", "s1") == ["globex", "globex"]
    assert await texts(client, "initech", "s1") == ["initech"]
    sample = metrics.registry.get_sample_value
    assert sample("laneledger_sequencer_erased_events_total", {"tenant": "acme", "trigger": "retention"}) == 3
    assert sample("laneledger_sequencer_retention_would_erase", {"tenant": "globex"}) == 2
    # Again the same day: the same erasure, nothing more to erase, no second event.
    again = {r.tenant: r for r in await rounds.round()}
    assert again["acme"].erased == 0
    assert len((await client.load_session(LEDGER_SESSION, tenant="acme")).events) == 1
    with pytest.raises(errors.EntityNotFound):  # a dry run commits nothing
        await client.load_session(LEDGER_SESSION, tenant="globex")


async def test_a_tenant_with_nothing_old_enough_gets_no_erasure_event(ledger):
    client, _, _ = ledger
    await append(client, "acme", "s1", 2, "recent")
    rounds, _ = retention(
        client, "[tenants.acme]\ncontent_retention_days = 30\n", datetime(2026, 1, 11, tzinfo=UTC)
    )
    [done] = await rounds.round()
    assert done.erased == 0
    with pytest.raises(errors.EntityNotFound):
        await client.load_session(LEDGER_SESSION, tenant="acme")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("content_retention_days = -1", "a whole number of days"),
        ("content_retention_days = 1.5", "a whole number of days"),
        ('retention_dry_run = "yes"', "true or false"),
    ],
)
def test_the_tenants_files_retention_keys_are_checked(table, message):
    with pytest.raises(TenantsFileError, match=message):
        parse_tenants(f"[tenants.acme]\n{table}\n")
    limits = parse_tenants("[tenants.acme]\ncontent_retention_days = 7\nretention_dry_run = true\n").limits
    assert (limits["acme"].content_retention_days, limits["acme"].retention_dry_run) == (7, True)


@pytest.mark.nats
async def test_the_active_sequencer_runs_retention_rounds(nats_server, nc, tmp_path):
    """The deployed path: a sequencer whose tenants file sets
    content_retention_days starts the rounds when it becomes active, over
    NATS, with its own writer (whose clock committed acme's events long ago)."""
    clock = Clock()  # 2026-01-10: more than 30 days before today
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"), clock=clock)
    tenants = parse_tenants("[tenants.acme]\ncontent_retention_days = 30\n[tenants.globex]\n")
    settings = SequencerSettings(tenants=tenants, retention_interval_s=0.2, pull_expires_s=0.5)
    sequencer = Sequencer(nc, writer, SequencerMetrics(CollectorRegistry()), settings)
    async with await LedgerClient.connect(nats_server.url, timeout=5.0, tenant_inboxes=True) as client:
        await sequencer.start()
        try:
            await append(client, "acme", "old", 2, "old")
            await append(client, "globex", "old", 1, "theirs")  # globex keeps everything

            async def erased() -> bool:
                return await texts(client, "acme", "old") == [None, None]

            await eventually(erased, what="acme's old content erased by retention", timeout=10)
            assert await texts(client, "globex", "old") == ["theirs"]
            [event] = (await client.load_session(LEDGER_SESSION, tenant="acme")).events
            assert event.id.startswith("retention-acme-") and event.payload["reason"].startswith("retention")
            retention_actor = await client.ensure_actor("acme", RETENTION_ACTOR, "service")
            assert event.actor_id == retention_actor.id
        finally:
            await sequencer.stop()
