"""The metrics service against a real nats-server and the real sequencer:
the known workload folds to the expected values, a killed service restarts
to exactly the fold of the whole ledger, cardinality stays bounded, and the
service copes with a stream that appears late and a nats-server restart."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from failure_logs import show_log_on_failure
from metrics_support import (
    EXPECTED_GAUGES,
    WORKLOAD_EVENTS,
    MetricsRunner,
    build_workload,
    bulk,
    check_expected,
    ledger_samples,
    metrics_process,
    parse,
    scrape,
    total,
    value,
)
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.metrics.__main__ import parse_args
from laneledger.services.metrics.fold import OTHER, LabelPolicy
from laneledger.services.metrics.service import MetricsSettings
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger


async def test_known_workload_folds_stage_by_stage(nats_server, client, tmp_path: Path):
    workload = await build_workload(client)
    async with MetricsRunner(nats_server.url, tmp_path / "metrics") as metrics:
        for stage, gauges in enumerate(EXPECTED_GAUGES):
            last = await workload.run_stage(stage)
            assert await metrics.wait_position(last) == last
            samples = await metrics.samples()
            for name, want in gauges.items():
                assert value(samples, name, tenant="acme") == want, (stage, name)
        samples = await metrics.samples()
        assert check_expected(samples) == []
        assert value(samples, "laneledger_metrics_folded_position") == last

        samples = await eventually(
            metrics.samples,
            until=lambda found: value(found, "laneledger_metrics_stream_last_position") == last,
            what=f"laneledger_metrics_stream_last_position {last}",
        )
        assert value(samples, "laneledger_metrics_consumer_lag_events") == 0

    # At rest: exact decimal sums, and the position committed with them.
    db = sqlite3.connect(tmp_path / "metrics" / "metrics.db")
    costs = {
        tuple(json.loads(labels)): Decimal(v)
        for labels, v in db.execute("SELECT labels, value FROM series WHERE metric = 'laneledger_cost'")
    }
    assert costs[("acme", "anthropic", "claude-sonnet-4", "USD")] == Decimal("0.1123")
    assert costs[("acme", "openai", "gpt-4.1", "USD")] == Decimal("0.000000000000000001")
    assert db.execute("SELECT value FROM meta WHERE key = 'position'").fetchone() == (str(last),)


async def test_killed_mid_stream_restarts_to_the_exact_fold(
    nats_server, client, tmp_path: Path, request: pytest.FixtureRequest
):
    workload = await build_workload(client)
    await workload.run()
    first_half = await bulk(client, "acme", 20, 25, name="bulk-1")
    proc = metrics_process(nats_server.url, tmp_path / "metrics", tmp_path, "--batch-size", "10")
    show_log_on_failure(request, proc)
    proc.start()

    async def folded_position() -> float | None:
        return value(parse(await scrape(proc.url)), "laneledger_metrics_folded_position")

    # Keep appending while it folds, and kill it in the middle. Batches fold one
    # after another, each after the previous one's commit: at 30 folded, at
    # least 20 are committed, whatever the kill interrupts.
    producing = asyncio.create_task(bulk(client, "globex", 20, 25, name="bulk-2"))
    await eventually(
        folded_position, until=lambda found: found is not None and found >= 30, what="30 events folded"
    )
    proc.kill()
    last = await producing
    assert last > first_half

    proc.start()
    restarted_at = int(proc.ready_line.rsplit("position=", 1)[1])
    assert 0 < restarted_at <= last

    after_restart = await eventually(
        lambda: scrape(proc.url),
        until=lambda text: value(parse(text), "laneledger_metrics_folded_position") == last,
        what=f"the restarted service to fold up to position {last}",
    )
    after_restart = parse(after_restart)
    assert proc.terminate() == 0  # a clean stop (SIGTERM)

    # The same ledger folded once, from scratch, by a fresh service.
    async with MetricsRunner(nats_server.url, tmp_path / "fresh", MetricsSettings(consumer="fresh")) as fresh:
        assert await fresh.wait_position(last) == last
        once = await fresh.samples()
    assert ledger_samples(after_restart) == ledger_samples(once)
    assert check_expected(once, extra_events=1000) == []
    assert total(once, "laneledger_events_total", event_type="stream.text_delta") == 1000


async def test_label_flood_through_the_service_stays_bounded(nats_server, client, tmp_path: Path):
    agent = await client.ensure_actor("acme", "agent:flood", "agent")
    lane = await client.create_lane("acme", "s1", "r1", "flood", actor_id=agent.id)
    events = []
    for i in range(60):
        events.append(
            make_event(
                lane.id,
                "cost.recorded",
                actor_id=agent.id,
                payload={
                    "provider": f"provider-{i}",
                    "model": f"model-{i}",
                    "amount": "0.01",
                    "currency": "USD",
                    "input_tokens": 1,
                },
            )
        )
        events.append(make_event(lane.id, f"ext.flood.kind-{i}", actor_id=agent.id))
    receipt = await client.append(lane, 0, events)
    settings = MetricsSettings(policy=LabelPolicy(max_values=3, caps={"currency": 1}))
    async with MetricsRunner(nats_server.url, tmp_path / "metrics", settings) as metrics:
        await metrics.wait_position(receipt.positions[-1])
        samples = await metrics.samples()
    cost_series = [labels for (name, labels) in samples if name == "laneledger_cost_total"]
    assert len(cost_series) == 4  # 3 (provider, model) pairs kept + one (other, other)
    assert value(
        samples, "laneledger_cost_total", tenant="acme", provider=OTHER, model=OTHER, currency="USD"
    ) == pytest.approx(0.57)
    ext = [
        labels
        for (name, labels) in samples
        if name == "laneledger_events_total" and ("family", "extension") in labels
    ]
    assert len(ext) == 4
    assert total(samples, "laneledger_events_total") == 120


async def test_starts_before_the_ledger_exists(nats_server, nc, tmp_path: Path, caplog):
    """Started before the sequencer made the streams: it waits, then folds."""
    settings = MetricsSettings(retry_s=0.1, lag_refresh_s=0.1)
    caplog.set_level(logging.INFO, logger="laneledger.runtime.follow")
    async with MetricsRunner(nats_server.url, tmp_path / "metrics", settings) as metrics:
        await eventually(
            lambda: caplog.text,
            until=lambda text: "cannot open a consumer on LEDGER_EVENTS" in text,
            what="the service to fail to find the stream at least once",
        )
        sequencer = Sequencer(
            nc, LedgerWriter(open_ledger(tmp_path / "ledger.db")), SequencerMetrics(CollectorRegistry())
        )
        await sequencer.start()
        try:
            async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
                workload = await build_workload(client)
                last = await workload.run()
            assert await metrics.wait_position(last) == last
            assert check_expected(await metrics.samples()) == []
        finally:
            await sequencer.stop()


async def test_keeps_folding_across_a_nats_server_restart(nats_server, client, tmp_path: Path):
    settings = MetricsSettings(stall_s=0.5, retry_s=0.1, lag_refresh_s=0.1)
    async with MetricsRunner(nats_server.url, tmp_path / "metrics", settings) as metrics:
        before = await bulk(client, "acme", 2, 10, name="before")
        assert await metrics.wait_position(before) == before
        await nats_server.arestart()
        after = await bulk(client, "acme", 2, 10, name="after")
        assert await metrics.wait_position(after, timeout=30) == after
        samples = await metrics.samples()
    assert total(samples, "laneledger_events_total", event_type="stream.text_delta") == 40


def test_options_and_environment(monkeypatch):
    monkeypatch.setenv("LANELEDGER_METRICS_PORT", "9999")
    monkeypatch.setenv("LANELEDGER_METRICS_DATA", "/tmp/somewhere")
    monkeypatch.setenv("LANELEDGER_METRICS_ALLOW", "tenant=acme,globex;provider=anthropic")
    args = parse_args(["--max-label-values", "7", "--label-cap", "model=20"])
    assert (args.http_port, args.data) == (9999, "/tmp/somewhere")
    assert args.policy == LabelPolicy(
        max_values=7,
        caps={"model": 20},
        allow={"tenant": frozenset({"acme", "globex"}), "provider": frozenset({"anthropic"})},
    )
    for bad in (["--label-caps", "colour=3"], ["--label-caps", "model=many"], ["--allow", "tenant"]):
        with pytest.raises(SystemExit) as refused:
            parse_args(bad)
        assert refused.value.code == 2, bad  # like every setting that does not parse
    assert WORKLOAD_EVENTS == 29
