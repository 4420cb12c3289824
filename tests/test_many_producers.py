"""Many producer processes against the sequencer process: contention on shared
("hot") lanes must end in exactly one outcome per append — committed or
lane_conflict — and a ledger that audits clean and equals LEDGER_EVENTS."""

from __future__ import annotations

import time

import pytest
from producer_proc import check_against_ledger, create_lanes, start_producers, wait_for_producers
from sequencer_process import wait_for_stream

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import compare_with_stream

N_LANES = 100
N_HOT = 10
N_PRODUCERS = 4
REQUESTS_PER_PRODUCER = 250


@pytest.mark.slow
async def test_many_producers_contend_and_every_append_has_one_outcome(
    nats_server, sequencer_proc, js, tmp_path
):
    started = time.monotonic()
    actor_id, lanes = await create_lanes(nats_server.url, N_LANES)
    producers = start_producers(
        nats_server.url,
        tmp_path,
        actor_id,
        lanes,
        producers=N_PRODUCERS,
        hot=N_HOT,
        requests=REQUESTS_PER_PRODUCER,
        seed=7,
        concurrency=4,
        hot_share=0.5,
        receipt_timeout=5.0,
        duration=20,
        time_limit=25,
    )
    try:
        await wait_for_producers(producers, timeout=30)
    finally:
        for producer in producers:
            producer.kill()
    lines = [line for producer in producers for line in producer.lines()]
    assert len(lines) == N_PRODUCERS * REQUESTS_PER_PRODUCER

    db = tmp_path / "ledger.db"
    summary = check_against_ledger(lines, db)
    assert summary["lane_conflict"] > 0, "the hot lanes should have produced contention"
    assert summary["committed"] > summary["lane_conflict"]
    assert {line["lane_id"] for line in lines} >= {lane.id for lane in lanes[:N_HOT]}

    audit = audit_ledger(db)
    assert audit.events == audit.last_position == summary["events"]
    assert audit.lanes == N_LANES
    await wait_for_stream(js, audit.last_position)
    assert await compare_with_stream(js, db) == summary["events"]

    # A clean stop (SIGTERM) leaves the stream equal to the ledger too.
    assert sequencer_proc.terminate() == 0
    assert await compare_with_stream(js, db) == summary["events"]
    print(f"many producers: {summary}, {time.monotonic() - started:.1f}s")
