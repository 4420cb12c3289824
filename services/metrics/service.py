"""The metrics service: follows LEDGER_EVENTS from the position its store
holds, folds each batch, and commits the batch's state with its position.

The fold runs on the event loop (so a scrape never sees half a batch); the
SQLite write runs in one dedicated thread. If a write fails, the in-memory
state is ahead of the file, so the service stops rather than go on: a restart
reloads the file and refolds from its position.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field

from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry, Counter, Histogram

from laneledger.contract.subjects import EVENTS_STREAM
from laneledger.runtime.follow import StreamFollower, StreamIdentity, StreamReplaced
from laneledger.runtime.servicemain import cancel_tasks, first_task_end

from .collector import LedgerCollector, Progress
from .fold import LabelPolicy, State, fold_message
from .store import MetricsStore, rows_of

log = logging.getLogger("laneledger.metrics")


class _FoldFailed(Exception):
    """The in-memory state may be ahead of the file: the service must stop."""


@dataclass(frozen=True)
class MetricsSettings:
    stream: str = EVENTS_STREAM
    consumer: str = "laneledger-metrics"  # one per running instance
    batch_size: int = 500
    lag_refresh_s: float = 1.0
    stall_s: float = 10.0  # re-open the follower after this long without events while behind
    retry_s: float = 1.0
    policy: LabelPolicy = field(default_factory=LabelPolicy)
    # Which committed stream the store was built from (follow.StreamIdentity);
    # None: not checked.
    identity: StreamIdentity | None = None


class MetricsService:
    def __init__(
        self,
        nc: NATS,
        store: MetricsStore,
        registry: CollectorRegistry,
        settings: MetricsSettings = MetricsSettings(),
    ) -> None:
        self._nc = nc
        self._store = store
        self._settings = settings
        self.state: State = store.load(settings.policy)
        self._follower = StreamFollower(
            nc,
            stream=settings.stream,
            name=settings.consumer,
            batch_size=settings.batch_size,
            identity=settings.identity,
        )
        self._stream_last = self.state.position
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-store")
        self._tasks: list[asyncio.Task[None]] = []
        self.ready = False
        registry.register(LedgerCollector(lambda: self.state, self.progress))
        self._batches = Counter(
            "laneledger_metrics_batches_folded",
            "Committed-stream batches folded and stored",
            registry=registry,
        )
        self._save_seconds = Histogram(
            "laneledger_metrics_store_commit_seconds",
            "Time to commit one folded batch and its position to SQLite",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=registry,
        )

    @property
    def position(self) -> int:
        return self.state.position

    def progress(self) -> Progress:
        return Progress(self.state.position, max(self._stream_last, self.state.position))

    async def start(self) -> None:
        await self._refresh_lag()
        self._tasks = [
            asyncio.create_task(self._follow(), name="metrics-follow"),
            asyncio.create_task(self._lag_loop(), name="metrics-lag"),
        ]
        self.ready = True
        log.info("metrics folding from position %d", self.state.position)

    async def wait(self) -> None:
        """Run until stopped; re-raise what killed the fold (a failed write)."""
        await first_task_end(self._tasks)

    async def stop(self) -> None:
        self.ready = False
        # Bounded: the follower's cleanup talks to NATS, which may be gone.
        await cancel_tasks(self._tasks, timeout_s=5.0)
        self._thread.shutdown(wait=True)  # a write in progress completes
        self._store.close()

    async def _follow(self) -> None:
        """Follow forever; a follower that fails or stalls is re-opened from the
        folded position. A failed fold or write is fatal (see the module doc)."""
        while True:
            try:
                await self._follow_once()
            except (_FoldFailed, StreamReplaced):
                raise
            except Exception as exc:  # noqa: BLE001 - NATS trouble, no stream yet: retry
                log.warning("following %s failed (%s); retrying", self._settings.stream, exc)
            await asyncio.sleep(self._settings.retry_s)

    async def _follow_once(self) -> None:
        batches = self._follower.batches(after=self.state.position)
        async with aclosing(batches):
            pending: asyncio.Future[list[tuple[int, bytes]]] | None = None
            try:
                while True:
                    # Wait without cancelling the read when idle; give it up
                    # only when the stream is ahead and nothing arrives (an
                    # ephemeral consumer lost in a nats-server restart never
                    # delivers again).
                    pending = asyncio.ensure_future(anext(batches))
                    while not (await asyncio.wait({pending}, timeout=self._settings.stall_s))[0]:
                        if self._stream_last > self.state.position:
                            log.warning(
                                "no events for %gs while %d behind; re-opening",
                                self._settings.stall_s,
                                self._stream_last - self.state.position,
                            )
                            return
                    try:
                        batch = pending.result()
                    except StopAsyncIteration:
                        return
                    await self._apply(batch)
            finally:
                if pending is not None and not pending.done():
                    pending.cancel()  # the generator closes its consumer
                    await asyncio.gather(pending, return_exceptions=True)

    async def _apply(self, batch: list[tuple[int, bytes]]) -> None:
        try:
            for position, body in batch:
                fold_message(self.state, position, body)
            rows = rows_of(self.state, self.state.take_changes())
            started = time.perf_counter()
            await asyncio.get_running_loop().run_in_executor(self._thread, self._store.save, rows)
        except Exception as exc:
            raise _FoldFailed(f"folding or storing up to position {self.state.position}") from exc
        self._save_seconds.observe(time.perf_counter() - started)
        self._batches.inc()

    async def _lag_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.lag_refresh_s)
            await self._refresh_lag()

    async def _refresh_lag(self) -> None:
        try:
            self._stream_last = await self._follower.refresh_stream_last()
        except Exception as exc:  # noqa: BLE001 - NATS away or no stream yet: keep the last value
            log.debug("could not read the stream's last sequence: %s", exc)
