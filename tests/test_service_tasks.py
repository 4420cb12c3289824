"""A service's background tasks run until its ``stop()``; one that ends
before that must end the process (``servicemain.first_task_end`` behind each
service's ``wait()``, ``until_stopped`` in each entry point) rather than leave
it serving from a loop that stopped."""

from __future__ import annotations

import asyncio
import time

import pytest

from laneledger.runtime.servicemain import cancel_tasks, first_task_end, until_stopped


class Boom(BaseException):
    """Not an ``Exception``: what the services' retry loops do not catch."""


async def test_the_first_task_to_fail_is_re_raised():
    async def fail_soon():
        await asyncio.sleep(0.01)  # the scenario: the failure comes while the others still run
        raise ValueError("the fold's write failed")

    forever = asyncio.create_task(asyncio.sleep(3600))
    with pytest.raises(ValueError, match="write failed"):
        await first_task_end([forever, asyncio.create_task(fail_soon())])
    assert not forever.done()  # the others are the service's stop() to end
    forever.cancel()


async def test_a_cancelled_task_ends_the_wait_and_no_tasks_return_at_once():
    task = asyncio.create_task(asyncio.sleep(3600))
    asyncio.get_running_loop().call_later(0.01, task.cancel)
    assert await asyncio.wait_for(first_task_end([task]), 5) is None  # no error raised
    assert task.cancelled()
    assert await asyncio.wait_for(first_task_end([]), 1) is None


async def test_cancel_tasks_asks_again_when_a_task_swallowed_the_cancel():
    """As Python 3.11's asyncio.wait_for does under nats-py's requests: the
    task goes on to its next sleep after the first cancel."""
    swallowed = 0

    async def refresh_loop() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed == 0:
                    swallowed += 1
                    continue
                raise

    task = asyncio.create_task(refresh_loop())
    await asyncio.sleep(0)  # let it reach its sleep
    started = time.monotonic()
    await cancel_tasks([task], timeout_s=10)
    assert task.cancelled() and swallowed == 1
    assert time.monotonic() - started < 2  # asked again within a quarter second, not at the timeout


async def test_cancel_tasks_gives_up_at_its_timeout_and_says_so(caplog):
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    await cancel_tasks([task], timeout_s=0.6)
    assert not task.done()
    assert "stubborn did not end within 0.6 s" in caplog.text
    release.set()
    task.cancel()
    await asyncio.wait([task], timeout=1)


async def test_a_dead_tail_watcher_ends_the_tail_instead_of_serving_on(start_tail, monkeypatch):
    tail = await start_tail()
    stop = asyncio.Event()  # never set: no signal comes

    async def broken() -> int:
        raise Boom("the watcher broke")

    monkeypatch.setattr(tail.service, "refresh_stream_last", broken)
    with pytest.raises(Boom):
        await asyncio.wait_for(until_stopped(stop, tail.service.wait()), 10)
