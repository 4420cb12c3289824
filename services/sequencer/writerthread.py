"""Where the ledger's SQLite connection is used: its own thread, or the event
loop when that thread has nothing in hand.

A connection must never be used from two threads at once, and the writer's
calls must run in the order they were made; one worker thread gives both.
Handing a small call to it costs more than the call, though: with two
requests per batch at 20 % of max load, the hand-off and the two threads
taking turns with the GIL made a commit take 4.9 ms on average, where on the
event loop it takes 0.6 ms (the sequencer's ``commit_seconds``, from
``bench/append.py``; README, "Performance"). ``run_here`` lets such a call run on the
event loop instead, which is safe exactly when the thread is idle: nothing
handed to it is still running or waiting, so the order holds and the
connection has one user. The sequencer writes a large batch that way too
and hands the thread only its COMMIT, the wait for the disk (service.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class WriterThread:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-writer")
        # Calls handed to the thread that have not returned (or been cancelled
        # before starting). Changed on the event loop only.
        self._in_hand = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def idle(self) -> bool:
        return self._in_hand == 0

    async def until_idle(self) -> None:
        """Return once the thread has nothing in hand (at once if so now)."""
        while not self.idle:
            await self._idle.wait()

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on the thread, after every call handed over before it."""
        loop = asyncio.get_running_loop()
        self._in_hand += 1
        self._idle.clear()
        handed = self._pool.submit(fn, *args)
        # Counted down when fn has returned, not when an awaiting task gives up
        # (a cancelled asyncio wrapper says done while fn still runs).
        handed.add_done_callback(lambda _: loop.call_soon_threadsafe(self._returned))
        return asyncio.wrap_future(handed, loop=loop)

    def _returned(self) -> None:
        self._in_hand -= 1
        if self._in_hand == 0:
            self._idle.set()

    def run_here(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` now, on the calling (event-loop) thread, its outcome
        as a done future; only while the thread is idle."""
        if not self.idle:
            raise RuntimeError("the writer thread has calls in hand; run_here would overtake them")
        outcome: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            outcome.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - delivered to whoever awaits it, as run() does
            outcome.set_exception(exc)
        return outcome

    def shutdown(self) -> None:
        """Wait for what the thread has in hand, then end it."""
        self._pool.shutdown(wait=True)
