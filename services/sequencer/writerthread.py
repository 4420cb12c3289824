"""The one way to the sequencer's ``LedgerWriter``: batches through
``commit``, commands and reads through ``call``, all in the order they were
made, with the writer's connection never in two uses at once.

One worker thread gives that order and that single use. Handing a small call
to it costs more than the call, though: with two requests per batch at 20 %
of max load, the hand-off and the two threads taking turns with the GIL made
a commit take 4.9 ms on average, where on the event loop it takes 0.6 ms (the
sequencer's ``commit_seconds``, from ``bench/append.py``; docs/performance.md).
So ``commit`` first waits until the thread is idle (nothing
handed to it still running or waiting: the order holds, the connection is
free), then, in one step of the event loop:

* a batch of at most ``inline_commit_max`` requests is applied and committed
  right there, on the loop;
* a larger one is written on the loop (``stage_batch``, the CPU work) and only
  its ``COMMIT``, the wait for the disk, goes to the thread, while the loop
  finishes the previous batch and prepares the next one.

The staged transaction is handed over in the same step it was opened in, so
nothing can run in between, and whatever is handed over later queues behind
its commit. The writer enforces the rest: while a staged batch is open, any
other use of it raises, and only its own ``commit_staged`` (run here) ends it.

With a transaction log (``on_thread_only``) every batch is applied on the
thread, whole: the writer then waits for the log's acknowledgement, and may
read the log before it writes (store/txlog.py), and both are waits on the
event loop, which would deadlock there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from laneledger.store.append import PreparedAppend
from laneledger.store.batch import BatchResult
from laneledger.store.writer import LedgerWriter

T = TypeVar("T")


class WriterThread:
    def __init__(self, writer: LedgerWriter, *, inline_commit_max: int, on_thread_only: bool = False) -> None:
        self._writer = writer
        self._inline_commit_max = inline_commit_max
        self._on_thread_only = on_thread_only
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-writer")
        # Calls handed to the thread that have not returned (or been cancelled
        # before starting). Changed on the event loop only.
        self._in_hand = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._shut = False

    @property
    def idle(self) -> bool:
        return self._in_hand == 0

    async def until_idle(self) -> None:
        """Return once the thread has nothing in hand (at once if so now)."""
        while not self.idle:
            await self._idle.wait()

    async def commit(self, batch: list[PreparedAppend]) -> asyncio.Future[BatchResult]:
        """Apply ``batch`` and commit it in one transaction, after everything
        handed over before it. Returns once the batch is the writer's: the
        future is its outcome (``InternalError``: nothing of it was written),
        done already when it committed on the loop."""
        await self.until_idle()
        self._refuse_if_shut()
        writer = self._writer
        if self._on_thread_only:
            return self._hand_over(writer.apply_batch, batch)
        outcome: asyncio.Future[BatchResult] = asyncio.get_running_loop().create_future()
        try:
            if len(batch) <= self._inline_commit_max:
                outcome.set_result(writer.apply_batch(batch))
                return outcome
            staged = writer.stage_batch(batch)
        except Exception as exc:  # noqa: BLE001 - delivered to whoever awaits the outcome
            outcome.set_exception(exc)
            return outcome
        try:
            return self._hand_over(writer.commit_staged, staged)
        except BaseException:
            writer.roll_back_staged(staged)  # the thread refused it: leave nothing open
            raise

    def call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on the thread, after everything handed over before
        it: a command or a read that uses the writer or its reader."""
        self._refuse_if_shut()
        return self._hand_over(fn, *args)

    def _hand_over(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        handed = self._pool.submit(fn, *args)
        self._in_hand += 1
        self._idle.clear()
        # Counted down when fn has returned, not when an awaiting task gives up
        # (a cancelled asyncio wrapper says done while fn still runs).
        handed.add_done_callback(lambda _: loop.call_soon_threadsafe(self._returned))
        return asyncio.wrap_future(handed, loop=loop)

    def _returned(self) -> None:
        self._in_hand -= 1
        if self._in_hand == 0:
            self._idle.set()

    def _refuse_if_shut(self) -> None:
        if self._shut:
            raise RuntimeError("the ledger writer thread is shut down")

    def shutdown(self) -> None:
        """Wait for what the thread has in hand, then end it; ``commit`` and
        ``call`` refuse from now on. Blocks the caller: on the event loop use
        ``close``, since what the thread runs may wait on the loop."""
        self._shut = True
        self._pool.shutdown(wait=True)

    async def close(self) -> None:
        """``shutdown`` without blocking the loop: refuse new work, let the
        thread finish (its transaction log appends wait on this loop), end it."""
        self._shut = True
        await self.until_idle()
        self._pool.shutdown(wait=True)
