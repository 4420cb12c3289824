"""The tail as a service: readiness, metrics, exactly-once application of the
committed stream across a clean stop, a kill -9 and a nats-server restart,
and the process conventions (ready line, SIGTERM)."""

from __future__ import annotations

import asyncio
import sqlite3

import aiohttp
import pytest
from polling import eventually
from prometheus_client import CollectorRegistry
from tail_support import DEADLINE_S, TailProcess, fill, new_lane, wait_applied, wait_ready

from laneledger.contract.errors import TransportError
from laneledger.sdk.client import LedgerClient
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger

pytestmark = pytest.mark.timeout(120)


def read_model_positions(path) -> list[int]:
    db = sqlite3.connect(path)
    try:
        return [p for (p,) in db.execute("SELECT position FROM events ORDER BY position")]
    finally:
        db.close()


def ledger_bodies(path) -> dict[int, bytes]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT position, body FROM events"))
    finally:
        db.close()


def tail_bodies(path) -> dict[int, bytes]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT position, body FROM events"))
    finally:
        db.close()


async def test_ready_only_when_connected_and_caught_up(nats_server, nc, tmp_path, start_tail):
    # The tail starts before any sequencer: no committed stream yet.
    tail = await start_tail(ready_max_lag=10)
    assert (await tail.api.get("/healthz")).status == 200
    assert (await tail.api.get("/readyz")).status == 503
    sequencer = Sequencer(
        nc, LedgerWriter(open_ledger(tmp_path / "ledger.db")), SequencerMetrics(CollectorRegistry())
    )
    await sequencer.start()
    client = await LedgerClient.connect(nats_server.url, timeout=5.0)
    try:
        actor = await client.ensure_actor("acme", "agent:tests/main@1", "agent")
        lane = await new_lane(client, actor)
        positions = await fill(client, lane, actor, 40)
        await wait_applied(tail.service, positions[-1])
        await wait_ready(tail.api)
        metrics = (await tail.api.get("/metrics")).body.decode()
        assert "laneledger_tail_applied_position 40.0" in metrics
        for name in (
            "laneledger_tail_subscribers",
            "laneledger_tail_frames_sent_total",
            "laneledger_tail_lag_events",
            "laneledger_tail_stream_last_sequence",
        ):
            assert name in metrics
        # Further behind than the bound: not ready (the bound is the service's own rule).
        tail.service.stream_last = tail.feed.applied + 11
        assert tail.service.ready() is False
        tail.service.stream_last = tail.feed.applied + 10
        assert tail.service.ready() is True
    finally:
        await client.close()
        await sequencer.stop()


async def test_a_restarted_tail_neither_skips_nor_repeats(client, actor, start_tail, tmp_path):
    lane = await new_lane(client, actor)
    first = await start_tail()
    writing = asyncio.create_task(fill(client, lane, actor, 3000, per_append=50))
    await wait_applied(first.service, 700)
    await start_tail.stop(first)  # mid-stream: appends go on
    stopped_at = read_model_positions(tmp_path / "tail" / "tail.db")
    assert stopped_at == list(range(1, len(stopped_at) + 1))
    positions = await writing
    second = await start_tail()
    await wait_applied(second.service, positions[-1])
    assert read_model_positions(tmp_path / "tail" / "tail.db") == list(range(1, 3001))
    assert tail_bodies(tmp_path / "tail" / "tail.db") == ledger_bodies(tmp_path / "ledger.db")


async def test_a_killed_tail_process_resumes_exactly(client, actor, nats_server, tmp_path):
    lane = await new_lane(client, actor)
    tail = await TailProcess(nats_server.url, tmp_path / "tail-proc").start()
    try:
        writing = asyncio.create_task(fill(client, lane, actor, 4000, per_append=40))
        db_path = tmp_path / "tail-proc" / "tail.db"
        await eventually(
            lambda: db_path.exists() and len(read_model_positions(db_path)),
            until=lambda applied: applied >= 1000,
            what="the tail process to apply 1000 events",
        )
        tail.kill()  # SIGKILL, mid-stream
        positions = await writing
        await tail.start()
        async with aiohttp.ClientSession() as http:

            async def verify_report() -> dict:
                async with http.get(tail.url + "/api/v1/verify") as resp:
                    return await resp.json()

            report = await eventually(
                verify_report,
                until=lambda found: found["last_position"] >= positions[-1],
                what=f"the restarted tail's /api/v1/verify at position {positions[-1]}",
            )
        assert report["intact"] is True and report["events"] == 4000
        assert read_model_positions(db_path) == list(range(1, 4001))
        assert tail_bodies(db_path) == ledger_bodies(tmp_path / "ledger.db")
        assert tail.terminate() == 0  # SIGTERM: a clean exit
    finally:
        tail.stop()


async def test_follows_across_a_nats_server_restart(client, actor, nats_server, start_tail):
    tail = await start_tail(stall_s=1.0)
    lane = await new_lane(client, actor)
    before = await fill(client, lane, actor, 10)
    await wait_applied(tail.service, before[-1])
    await nats_server.arestart()
    after = await eventually(  # the SDK reconnects; resend until the ledger answers
        lambda: fill(client, lane, actor, 10, start_seq=10),
        what="an append after the restart",
        timeout=DEADLINE_S,
        interval=0.2,
        retry_on=TransportError,  # still reconnecting
    )
    await wait_applied(tail.service, after[-1])
    async with tail.api.stream({"lane_id": lane.id}) as stream:
        assert [f.position for f in await stream.collect(20)] == before + after
