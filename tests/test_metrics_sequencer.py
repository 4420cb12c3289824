"""The sequencer's operational metrics added for the metrics issue: lane
conflicts, idempotent replays and the inbound backlog."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.contract import errors
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.intake import BatchBudget, Intake
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.store import LedgerWriter, open_ledger

SETTINGS = SequencerSettings(backlog_refresh_s=0.05)


async def test_conflicts_replays_and_inbound_backlog(nats_server, nc, js, tmp_path: Path):
    registry = CollectorRegistry()
    metrics = SequencerMetrics(registry)
    sample = registry.get_sample_value
    sequencer = Sequencer(nc, LedgerWriter(open_ledger(tmp_path / "ledger.db")), metrics, SETTINGS)
    await sequencer.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            agent = await client.ensure_actor("acme", "agent:seq-metrics", "agent")
            lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=agent.id)
            event = make_event(lane.id, "stream.text_delta", actor_id=agent.id, payload={"text": "a"})
            await client.append(lane, 0, [event], append_id="once")
            assert (await client.append(lane, 0, [event], append_id="once")).replayed
            with pytest.raises(errors.LaneConflict):
                await client.append(
                    lane,
                    0,
                    [make_event(lane.id, "stream.text_delta", actor_id=agent.id, payload={"text": "b"})],
                )
    finally:
        await sequencer.stop()
    assert sample("laneledger_sequencer_lane_conflicts_total") == 1
    assert sample("laneledger_sequencer_idempotent_replays_total") == 1
    assert (
        sample("laneledger_sequencer_append_requests_total", {"outcome": "rejected", "code": "lane_conflict"})
        == 1
    )

    # Requests arriving while nothing pulls are the backlog ...
    subject = Subjects().append("acme", lane.id)
    for _ in range(30):
        await js.publish(subject, b"{}")
    idle = Sequencer(nc, LedgerWriter(open_ledger(tmp_path / "other.db")), metrics, SETTINGS)
    intake = Intake(nc, js, Subjects(), replicas=1, budget=BatchBudget())
    await intake.open(None)  # read (delivered, unacked: still backlog), never committed
    refreshing = asyncio.create_task(idle._backlog_loop(intake))  # only its refresher runs

    def backlog() -> float | None:
        return sample("laneledger_sequencer_inbound_backlog_requests")

    try:
        await eventually(backlog, until=lambda n: n == 30, what="a backlog of 30 requests", timeout=10)
    finally:
        refreshing.cancel()
        await asyncio.gather(refreshing, return_exceptions=True)
        await intake.stop()
        idle._writer_thread.shutdown()
    stream = {"stream": Subjects().append_stream}
    assert sample("laneledger_sequencer_stream_backlog_requests", stream) == 30

    # ... which a running sequencer drains (each gets a rejection) back to zero.
    sequencer = Sequencer(nc, LedgerWriter(open_ledger(tmp_path / "ledger.db")), metrics, SETTINGS)
    await sequencer.start()
    try:
        await eventually(backlog, until=lambda n: n == 0, what="the backlog drained", timeout=10)
    finally:
        await sequencer.stop()
    assert (
        sample(
            "laneledger_sequencer_append_requests_total", {"outcome": "rejected", "code": "invalid_request"}
        )
        == 30
    )
