"""The tail's one budget of read memory (services/tail/budget.py, spec/tail.md
"Limits and memory"): in-process, no nats-server, milliseconds."""

from __future__ import annotations

import asyncio

import pytest

from laneledger.contract.errors import QuotaExceeded
from laneledger.runtime.access import Scope
from laneledger.services.tail.budget import READ_MEMORY, ReadBudget

ACME, GLOBEX, INITECH, UMBRELLA = Scope("acme"), Scope("globex"), Scope("initech"), Scope("umbrella")


async def started(coro) -> asyncio.Task:
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)  # it has asked
    return task


async def test_readers_past_the_budget_wait_first_come_first_served_and_get_it_back():
    budget = ReadBudget(400)  # 100 per scope
    held = [await budget.take(scope, 100, wait_s=None) for scope in (ACME, GLOBEX, INITECH, UMBRELLA)]
    assert budget.used == 400
    order: list[str] = []

    async def reader(tenant: str, nbytes: int) -> None:
        async with budget.hold(Scope(tenant), nbytes, wait_s=None):
            order.append(tenant)
            await asyncio.sleep(0.01)

    first, second = await started(reader("x", 90)), await started(reader("y", 30))
    held[3].keep(50)  # 50 free: y's 30 would fit, but x asked first
    await asyncio.sleep(0.01)
    assert order == [] and not first.done() and not second.done()
    held[3].release()
    await asyncio.gather(first, second)
    assert order == ["x", "y"]
    for hold in held:
        hold.release()  # twice is harmless
    assert budget.used == 0 and not budget._by_scope and not budget._waiters


async def test_one_scope_holds_at_most_a_quarter_and_does_not_hold_up_the_others():
    budget = ReadBudget(400)
    mine = await budget.take(ACME, 100, wait_s=None)
    blocked = await started(budget.take(ACME, 10, wait_s=None))  # acme is at its share
    theirs = await budget.take(GLOBEX, 100, wait_s=None)  # not behind acme's waiter
    assert not blocked.done() and budget.used == 200
    mine.release()
    (await blocked).release()
    theirs.release()
    assert budget.used == 0
    # A reservation over the share is cut to it: it can always be granted.
    async with budget.hold(ACME, 10_000, wait_s=None) as whole:
        assert whole.nbytes == 100


async def test_a_reader_that_waits_too_long_is_a_typed_429_and_leaves_no_trace():
    budget = ReadBudget(400)
    held = [await budget.take(scope, 100, wait_s=None) for scope in (ACME, GLOBEX, INITECH, UMBRELLA)]
    with pytest.raises(QuotaExceeded) as refusal:
        await budget.take(GLOBEX, 1, wait_s=0.01)
    assert refusal.value.details["limit"] == READ_MEMORY
    assert refusal.value.details["retry_after_s"] == 1 and refusal.value.http_status == 429
    assert not budget._waiters
    for hold in held:
        hold.release()
    assert budget.used == 0


async def test_a_cancelled_waiter_gives_back_what_it_was_granted():
    budget = ReadBudget(400)
    mine = await budget.take(ACME, 100, wait_s=None)
    waiter = await started(budget.take(ACME, 50, wait_s=None))
    waiter.cancel()
    mine.release()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.used == 0 and not budget._waiters


async def test_keep_sets_a_hold_to_what_its_page_came_to():
    budget = ReadBudget(400)
    async with budget.hold(ACME, 100, wait_s=None) as held:
        held.keep(30)
        assert budget.used == 30
        held.keep(104)  # a few bytes of framing over the reservation: counted, not waited for
        assert budget.used == 104
    assert budget.used == 0
