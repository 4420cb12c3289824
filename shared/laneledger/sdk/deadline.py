"""Awaiting a bare future with a time limit, cheaply.

The SDK waits on two futures per append (the stream's PubAck, then the
receipt). ``asyncio.timeout`` does task bookkeeping (current task, cancel
counting, a reschedule) on every use, about half the cost of such a wait at
append rates; a timer that fails the future itself does the same job with one
``call_later``. Measured by ``bench/append.py`` (the producers' CPU per event).
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

T = TypeVar("T")


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


async def within(future: asyncio.Future[T], timeout: float) -> T:
    """``await future``, or ``TimeoutError`` after ``timeout`` seconds: the
    future itself is then failed with it (so its producer sees it done), as
    ``asyncio.timeout`` would have cancelled it. Cancelling the caller
    cancels the future, as a plain ``await`` does."""
    if future.done():
        return future.result()
    timer = asyncio.get_running_loop().call_later(timeout, _expire, future)
    try:
        return await future
    finally:
        timer.cancel()
