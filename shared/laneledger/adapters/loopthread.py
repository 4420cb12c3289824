"""A thread with its own event loop that runs jobs one at a time, in the
order they were posted: the bridge from a harness's synchronous callbacks to
the async ledger client (spec/openai-agents.md, "The bridge").

A synchronous callback must return at once and may be called from any
thread, so it only posts a job (``post``: ``call_soon_threadsafe`` onto the
thread's queue, never a network round trip). The jobs run serially on the
thread's loop, which owns its NATS connection, so the ledger sees them in
the order the harness made them. An async caller that must wait for its job
(a hook that may stop a tool) awaits ``call`` from its own loop without
blocking it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from laneledger.contract.errors import LedgerTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S")
Job = Callable[[S], Awaitable[Any]]


class LoopThread(Generic[S]):
    """Runs ``Job``s against a state ``S`` that ``open_state`` makes on the
    thread's loop (and ``close_state`` ends there)."""

    def __init__(
        self,
        open_state: Callable[[], Awaitable[S]],
        close_state: Callable[[S], Awaitable[None]],
        *,
        name: str = "laneledger-recorder",
    ) -> None:
        self._open_state = open_state
        self._close_state = close_state
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[Job[S], concurrent.futures.Future[Any]] | None] | None = None
        self._thread: threading.Thread | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.closing = threading.Event()  # set by close(): jobs stop retrying at its deadline

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> concurrent.futures.Future[None]:
        """Start the thread; the future resolves once the state is open (or
        carries the error that kept it from opening)."""
        self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
        self._thread.start()
        return self._ready

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        try:
            state = await self._open_state()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the start
            self._ready.set_exception(exc)
            self._done.set_result(None)
            return
        self._queue = asyncio.Queue()
        self._ready.set_result(None)
        try:
            while (item := await self._queue.get()) is not None:
                job, future = item
                if not future.set_running_or_notify_cancel():
                    continue  # its caller gave up waiting before it began: it must not run
                try:
                    future.set_result(await job(state))
                except Exception as exc:  # noqa: BLE001 - handed to the job's caller
                    future.set_exception(exc)
        finally:
            try:
                await self._close_state(state)
            finally:
                self._done.set_result(None)

    def close(self) -> concurrent.futures.Future[None]:
        """Stop after the jobs posted so far; resolves when the state is closed."""
        self.closing.set()
        if self._thread is None and not self._done.done():  # never started: nothing to stop
            self._done.set_result(None)
        if self._loop is not None and self._queue is not None and not self._done.done():
            queue = self._queue
            self._loop.call_soon_threadsafe(queue.put_nowait, None)
        return self._done

    # -- jobs -------------------------------------------------------------------------------

    def post(self, job: Job[S]) -> concurrent.futures.Future[Any]:
        """Queue ``job`` behind every job posted before it; thread-safe, never blocks."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self._loop is None or self._queue is None or self.closing.is_set():
            future.set_exception(RuntimeError("the recorder thread is not running"))
            return future
        queue = self._queue
        self._loop.call_soon_threadsafe(queue.put_nowait, (job, future))
        return future

    async def call(self, job: Job[S], *, wait: float) -> Any:
        """Run ``job`` on the thread and await its result from the caller's
        loop. If it has not begun within ``wait`` seconds (jobs before it are
        still running) it is withdrawn, never to run, and this raises
        ``LedgerTimeout``; once begun, it is awaited to its end (its own
        appends are bounded by their timeouts)."""
        future = self.post(job)
        waiting = asyncio.wrap_future(future)
        try:
            return await asyncio.wait_for(asyncio.shield(waiting), wait)
        except TimeoutError:
            if future.cancel():
                raise LedgerTimeout(
                    f"the recorder did not reach this call within {wait} s (the ledger is slow or down)"
                ) from None
            return await waiting


def result_within(future: concurrent.futures.Future[T], timeout: float | None) -> T:
    """``future.result(timeout)``, raising ``LedgerTimeout`` when it runs out."""
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        raise LedgerTimeout(f"the recorder did not finish within {timeout} s") from None
