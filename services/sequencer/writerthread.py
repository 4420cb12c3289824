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

With a transaction log (``through_log``) the writer waits for the log's
acknowledgement before its ``COMMIT``, and may read the log before it writes
(store/txlog.py); the log runs on the event loop. A light batch (at most
``inline_commit_max`` requests and as many events, at most
``LOOP_COMMIT_BYTES`` of requests), when the file need not read the log first
(``LedgerWriter.commits_on_loop``), is written on the loop and the log's
append awaited there (``commit_staged_on_loop``): handing it to the thread,
which handed the append back to the loop and waited, cost four hand-offs
between the threads per batch (spec/replication.md, "Fencing by the log",
has the figures). Until that batch has committed, anything handed over (a
command, a read) waits its turn behind it, as it would on the thread. Every
other batch is applied on the thread, whole: a large one's writing would
hold the loop, and a read of the log, waited for on the loop, would
deadlock there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from laneledger.contract.model import AppendRejected
from laneledger.store.append import PreparedAppend
from laneledger.store.batch import BatchResult
from laneledger.store.writer import LedgerWriter

T = TypeVar("T")
# With a log, the most request bytes a batch written on the loop may hold:
# hashing and storing them stays well under a millisecond of the loop's time.
LOOP_COMMIT_BYTES = 64 * 1024


class WriterThread:
    def __init__(self, writer: LedgerWriter, *, inline_commit_max: int, through_log: bool = False) -> None:
        self._writer = writer
        self._inline_commit_max = inline_commit_max
        self._through_log = through_log
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-writer")
        # Calls handed to the thread that have not returned (or been cancelled
        # before starting), and the batch committing on the loop with the
        # calls queued behind it. Changed on the event loop only.
        self._in_hand = 0
        # What a new call waits for while it is not done: the batch committing
        # on the loop, or the last call queued behind it (done once that call
        # is on the thread).
        self._queue_end: asyncio.Future[Any] | None = None
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

    async def commit(
        self, batch: list[PreparedAppend], *, request_bytes: int = 0
    ) -> asyncio.Future[BatchResult]:
        """Apply ``batch`` and commit it in one transaction, after everything
        handed over before it. Returns once the batch is the writer's: the
        future is its outcome (``InternalError``: nothing of it was written),
        done already when it committed on the loop. ``request_bytes``: the
        size of its requests, which bounds what is written on the loop."""
        await self.until_idle()
        self._refuse_if_shut()
        writer = self._writer
        if self._through_log:
            if self._light(batch, request_bytes) and writer.commits_on_loop:
                return self._commit_on_loop(batch)
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

    def _light(self, batch: list[PreparedAppend], request_bytes: int) -> bool:
        """Whether writing ``batch`` costs the loop little: few requests, few
        events (one request may hold a thousand) and few bytes."""
        limit = self._inline_commit_max
        return (
            len(batch) <= limit
            and request_bytes <= LOOP_COMMIT_BYTES
            and sum(len(append.request.events) for append in batch) <= limit
        )

    def _commit_on_loop(self, batch: list[PreparedAppend]) -> asyncio.Future[BatchResult]:
        """Stage ``batch`` here and await its log append here; its outcome
        as ``commit``'s. A batch that wrote nothing is decided at once,
        unless it refused a request: that is decided again on the thread,
        where the file can first read what the log holds beyond it
        (``LedgerWriter.apply_batch``)."""
        writer = self._writer
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[BatchResult] = loop.create_future()
        try:
            staged = writer.stage_batch(batch)
            if not staged.writes:
                result = writer.commit_staged(staged)  # nothing to log: ends it
                if any(isinstance(r, AppendRejected) for r in result.receipts):
                    return self._hand_over(writer.apply_batch, batch)
                outcome.set_result(result)
                return outcome
        except Exception as exc:  # noqa: BLE001 - delivered to whoever awaits the outcome
            outcome.set_exception(exc)
            return outcome
        self._take()
        committing = loop.create_task(writer.commit_staged_on_loop(staged), name="ledger-commit-on-loop")
        self._queue_end = committing
        committing.add_done_callback(lambda _: self._returned())
        # Not cancelled with whoever awaits it: like a batch on the thread,
        # it ends on its own (a cancel mid-append would leave the file behind).
        return asyncio.shield(committing)

    def call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on the thread, after everything handed over before
        it: a command or a read that uses the writer or its reader."""
        self._refuse_if_shut()
        gate = self._queue_end
        if gate is None or gate.done():
            return self._hand_over(fn, *args)
        # Behind the batch committing on the loop (its transaction holds the
        # connection) and the calls queued behind it, in order. Counted in
        # hand from now, so no batch overtakes it.
        self._take()
        handed_over = self._queue_end = asyncio.get_running_loop().create_future()
        return asyncio.ensure_future(self._call_after(gate, handed_over, fn, *args))

    async def _call_after(
        self, gate: asyncio.Future[Any], handed_over: asyncio.Future[None], fn: Callable[..., T], *args: Any
    ) -> T:
        try:
            try:
                await asyncio.wait({gate})  # its outcome is its own awaiter's
            except BaseException:
                self._returned()  # cancelled before it was handed over
                raise
            handed = self._submit(fn, *args)
        finally:
            handed_over.set_result(None)  # the next queued call may go
        return await handed

    def _hand_over(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        self._take()
        return self._submit(fn, *args)

    def _take(self) -> None:
        self._in_hand += 1
        self._idle.clear()

    def _submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on the thread, already counted in hand."""
        loop = asyncio.get_running_loop()
        try:
            handed = self._pool.submit(fn, *args)
        except BaseException:
            self._returned()
            raise
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
