"""SIGKILL the tail, metrics and checkpoint services at random points while
four producer processes append: each restarts from what it had stored and
ends with exactly a fold of the ledger — nothing skipped, nothing applied
twice (``ledger_invariants``).

Short form: each service killed twice. Long form: six times each."""

from __future__ import annotations

import asyncio

import pytest
from fault_harness import FaultRig, fault_timeout, scaled, seeded_rng

ROUNDS = scaled(2, 6)


@fault_timeout
@pytest.mark.slow
async def test_sigkilled_consumers_resume_to_the_fold_of_the_ledger(nats_server, js, tmp_path, request):
    rng, seed = seeded_rng()
    async with FaultRig(nats_server.url, tmp_path, request) as rig:
        await rig.start_load()
        victims = [rig.tail, rig.metrics, rig.checkpoint]
        for _ in range(ROUNDS):
            rng.shuffle(victims)
            for victim in victims:
                await asyncio.sleep(rng.uniform(0.1, scaled(0.8, 2.0)))  # up, under load
                victim.kill()
                await asyncio.sleep(rng.uniform(0.0, 0.5))  # events go by while it is down
                await asyncio.to_thread(victim.start, 30.0)
        await rig.wait_for_outcomes(more=20)
        summary = await rig.finish(js)
    for victim in victims:
        assert victim.starts == ROUNDS + 1, victim
    print(f"consumer kills (seed {seed}): {ROUNDS} rounds, {summary}")
