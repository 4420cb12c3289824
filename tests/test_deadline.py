"""``deadline.within``: the SDK's time limit on its PubAck and receipt waits."""

from __future__ import annotations

import asyncio

import pytest

from laneledger.sdk.deadline import within


async def test_returns_the_result_and_leaves_no_timer_behind():
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    loop.call_later(0.01, future.set_result, "receipt")
    assert await within(future, 5.0) == "receipt"
    done = loop.create_future()
    done.set_result(7)
    assert await within(done, 0.0) == 7  # already done: no wait, no timer


async def test_a_timeout_fails_the_future_itself_and_a_late_answer_is_ignored():
    future = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await within(future, 0.01)
    assert future.done() and isinstance(future.exception(), TimeoutError)
    # The answer that comes too late finds the future done (AckInbox and the
    # receipt inbox check done() before setting it), and a second wait on
    # the same future reports the same timeout instead of hanging.
    with pytest.raises(TimeoutError):
        await within(future, 5.0)


async def test_cancelling_the_caller_cancels_the_future():
    future = asyncio.get_running_loop().create_future()
    waiter = asyncio.create_task(within(future, 5.0))
    await asyncio.sleep(0)  # one turn of the loop: the task runs up to its wait on the future
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert future.cancelled()
