"""SIGKILL the sequencer at random points, again and again, while four
producer processes append over many lanes and the tail, metrics and
checkpoint services consume: no accepted append is lost or committed twice,
and afterwards every invariant holds (``ledger_invariants``).

Short form (``make test``): 3 kills. Long form (``make fault``): 20."""

from __future__ import annotations

import asyncio

import pytest
from fault_harness import FaultRig, fault_timeout, scaled, seeded_rng
from sequencer_process import ledger_last_position

from laneledger.audit.stream import compare_with_stream

KILLS = scaled(3, 20)


@fault_timeout
@pytest.mark.slow
async def test_sigkilled_sequencer_loses_no_accepted_append(nats_server, js, tmp_path, request):
    rng, seed = seeded_rng()
    stream_behind_at_kill = 0
    async with FaultRig(nats_server.url, tmp_path, request) as rig:
        await rig.start_load()
        for kill in range(KILLS):
            await asyncio.sleep(rng.uniform(0.1, scaled(1.0, 3.0)))  # up, under load
            rig.sequencer.kill()
            db_last = ledger_last_position(rig.db)
            stream_last = (await js.stream_info("LEDGER_EVENTS")).state.last_seq
            assert stream_last <= db_last, "the stream got ahead of SQLite"
            stream_behind_at_kill += stream_last < db_last
            # Down; producers keep publishing. The first outage outlasts their
            # receipt timeout (1 s), so some request is resent for certain:
            # short outages alone may all be answered in time.
            await asyncio.sleep(rng.uniform(0.1, 1.0) if kill else 1.5)
            await asyncio.to_thread(rig.sequencer.start, 30.0)
            assert rig.sequencer.position >= db_last, "a committed event was lost"
            # Ready means caught up: it republished what SQLite had beyond the stream.
            assert (await js.stream_info("LEDGER_EVENTS")).state.last_seq >= db_last
        await rig.wait_for_outcomes(more=20)
        summary = await rig.finish(js)
        # Restarting once more on the same database changes nothing.
        await asyncio.to_thread(rig.sequencer.restart, 30.0)
        assert rig.sequencer.position == summary["events"]
        assert await compare_with_stream(js, rig.db) == summary["events"]
    assert rig.sequencer.starts == KILLS + 2
    assert summary["resent"] > 0, "no request was ever resent: the kills missed the traffic"
    print(
        f"sequencer kills (seed {seed}): {KILLS} kills, stream behind SQLite at "
        f"{stream_behind_at_kill}, {summary}"
    )
