"""Stop and restart nats-server on the same store, mid-load: the producers,
the sequencer and the consumers reconnect on their own, and afterwards every
invariant holds (``ledger_invariants``). Rounds alternate a clean stop
(SIGTERM) and a crash (SIGKILL) of the server; its store and port are kept.

Short form: 2 rounds. Long form: 8."""

from __future__ import annotations

import asyncio

import pytest
from fault_harness import FaultRig, fault_timeout, scaled, seeded_rng

ROUNDS = scaled(2, 8)


@fault_timeout
@pytest.mark.slow
async def test_nats_server_restarts_under_load_lose_nothing(nats_server, js, tmp_path, request):
    rng, seed = seeded_rng()
    async with FaultRig(nats_server.url, tmp_path, request) as rig:
        await rig.start_load()
        for round_no in range(ROUNDS):
            await asyncio.sleep(rng.uniform(0.3, scaled(1.0, 3.0)))  # up, under load
            if round_no % 2:
                nats_server.kill()
            else:
                await nats_server.astop()
            await asyncio.sleep(rng.uniform(0.2, 1.0))  # producers fail to publish, and resend
            await nats_server.astart()
            await rig.wait_for_outcomes(more=20)  # the whole path works again
        for service in rig.services:
            assert service.running and service.starts == 1, f"{service} did not ride it out"
        summary = await rig.finish(js)
    print(f"nats-server restarts (seed {seed}): {ROUNDS} rounds, {summary}")
