"""The tail service: follows LEDGER_EVENTS into its read model and serves the
HTTP API (live tail, history, blobs, verification, Korg's reads, the
transparency log, OpenAPI) next to /healthz, /readyz and /metrics; follows
LEDGER_TLOG for the checkpoints it serves.

``TailService`` takes its NATS connection and settings from the caller
(``__main__`` in production, the tests in-process), so the same object runs
both ways.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry

from laneledger.contract.errors import InternalError
from laneledger.contract.ids import new_id
from laneledger.contract.subjects import EVENTS_STREAM, Subjects
from laneledger.runtime.access import AccessPolicy, access_middleware
from laneledger.runtime.follow import StreamFollower, StreamIdentity, StreamReplaced
from laneledger.runtime.httpjson import errors_middleware
from laneledger.runtime.opsserver import counting_middleware, ops_routes, start_http
from laneledger.runtime.servicemain import cancel_tasks, first_task_end
from laneledger.sdk.client import LedgerClient
from laneledger.tlog.cosignature import CosignatureVerifier

from .budget import ReadBudget
from .feed import Feed
from .handlers.activity import Activity
from .handlers.blobs import BlobReader, blob_route
from .handlers.causal import CausalTree
from .handlers.causation import Causation
from .handlers.console import console_routes
from .handlers.costs import Costs
from .handlers.history import History
from .handlers.korg import KorgReads, missing_token_hint
from .handlers.korgread import KorgRead
from .handlers.sessions import Sessions
from .handlers.sse import Tail, TerminalLookup
from .handlers.timeline import Timeline
from .handlers.transparency import Transparency
from .handlers.verify import Verifier
from .limits import LimitSettings, ReadLimits
from .metrics import TailMetrics
from .readmodel import ReadModel
from .rewinds import InvalidationLookup
from .routetable import QUERY_TOKEN_PATHS, openapi_route
from .tlogfollow import CheckpointFollower

log = logging.getLogger("laneledger.tail")


@dataclass(frozen=True)
class TailSettings:
    data_dir: Path
    subjects: Subjects = Subjects()
    events_stream: str = EVENTS_STREAM
    heartbeat_s: float = 15.0
    ready_max_lag: int = 1000  # /readyz is false while further behind than this
    ring_size: int = 4096  # recent events kept in memory for live subscribers
    batch_size: int = 500  # stream messages per applied batch, at most
    hmac_key: bytes | None = None  # to verify HMAC-keyed chains
    korg_tenant: str = "korg"  # whose journal and blobs the Korg read routes serve
    access: AccessPolicy = field(default_factory=AccessPolicy)  # no tokens: open (access.py)
    ledger_timeout_s: float = 5.0  # sequencer commands (structure reads)
    watch_interval_s: float = 1.0  # how often the stream's last sequence (and LEDGER_TLOG) is read
    tlog_witnesses: tuple[CosignatureVerifier, ...] = ()  # whose cosignatures the tail keeps
    stall_s: float = 5.0  # behind without progress this long: re-open the follower
    shutdown_grace_s: float = 1.0  # for subscribers to finish before they are cancelled
    limits: LimitSettings = field(default_factory=LimitSettings)  # per token: live tails, expensive reads


class TailService:
    def __init__(
        self,
        nc: NATS,
        settings: TailSettings,
        registry: CollectorRegistry | None = None,
        *,
        ledger: LedgerClient | None = None,
    ) -> None:
        """``ledger``: where structure reads go (the sequencer over ``nc`` when
        None); the tests' in-process tail passes a client of an in-process
        writer (tests/tail_fixtures.py)."""
        self.nc = nc
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.metrics = TailMetrics(self.registry)
        self.model = ReadModel(Path(settings.data_dir) / "tail.db")
        # Which committed stream the read model was built from (follow.StreamIdentity).
        self.stream_identity = StreamIdentity(Path(settings.data_dir) / "stream-identity")
        self._apply_thread = ThreadPoolExecutor(1, thread_name_prefix="tail-apply")
        self._readers = ThreadPoolExecutor(4, thread_name_prefix="tail-read")
        self.feed = Feed(self.model, self._readers, capacity=settings.ring_size)
        self.metrics.applied_position.set(self.feed.applied)
        self.ledger = ledger or LedgerClient(
            nc, subjects=settings.subjects, timeout=settings.ledger_timeout_s
        )
        self.limits = ReadLimits(settings.limits, self.metrics.expensive_reads)
        self.read_memory = ReadBudget(settings.limits.read_memory_bytes, self.metrics.read_memory)
        self.tail = Tail(
            self.feed,
            self.metrics,
            heartbeat_s=settings.heartbeat_s,
            terminal_before=TerminalLookup(self.model, self._readers),
            invalidated=InvalidationLookup(self.model, self._readers),
            limit=self.limits.tails,
            budget=self.read_memory,
        )
        self.checkpoints = CheckpointFollower(
            nc.jetstream(),
            settings.subjects,
            self.model,
            self._apply_thread,
            self.metrics,
            settings.watch_interval_s,
        )
        self._consumer = f"laneledger-tail-{new_id()[-12:]}"
        self.stream_last: int | None = None  # None: not known right now
        self._tasks: list[asyncio.Task[None]] = []
        self._follow_task: asyncio.Task[None] | None = None
        self._applying: asyncio.Task[None] | None = None
        self._erasing: asyncio.Task[None] | None = None
        # Erasures not yet carried out, as the routes see them: set in the
        # event loop once a page's positions have left the feed's ring.
        self.erasures_pending = self.model.erasures_pending
        self._runner: web.AppRunner | None = None
        self.app = self._make_app()

    def _make_app(self) -> web.Application:
        s = self.settings
        app = web.Application(
            middlewares=[
                counting_middleware(self.metrics.requests),
                errors_middleware,
                access_middleware(
                    s.access, query_token_paths=QUERY_TOKEN_PATHS, missing_token_hint=missing_token_hint
                ),
            ]
        )
        app.add_routes(ops_routes(self.registry, self.ready))
        app.add_routes([web.get("/api/v1/events", self.tail.handle, name="events")])
        memory = self.read_memory
        history = History(self.model, self._readers, self.feed, self.ledger, self.limits.reads, memory)
        app.add_routes(history.routes())
        app.add_routes([CausalTree(self.model, self._readers, self.feed, self.ledger).route()])
        app.add_routes([Timeline(self.model, self._readers, self.feed, self.ledger).route()])
        app.add_routes(
            Transparency(
                self.model,
                self._readers,
                self.feed,
                self._apply_thread,
                s.tlog_witnesses,
                self.limits,
                memory,
            ).routes()
        )
        self._verifier = Verifier(self.model, self._readers, self.feed, self.ledger, s.hmac_key, self.limits)
        app.add_routes(
            [
                blob_route(BlobReader(self.nc.jetstream(), s.subjects, s.ledger_timeout_s)),
                self._verifier.route(),
                openapi_route(),
                Costs(self.model, self._readers, self.feed).route(),
                Sessions(self.model, self._readers, self.feed).route(),
                Causation(self.model, self._readers).route(),
                Activity(self.model, self._readers, self.feed).route(),
                *console_routes(),
            ]
        )
        korg = KorgReads(
            s.korg_tenant,
            self.nc.jetstream(),
            s.subjects,
            s.ledger_timeout_s,
            self.model,
            self._readers,
            self.feed,
        )
        app.add_routes(korg.routes())
        app.add_routes(KorgRead(self.model, self._readers, self.feed).routes(s.korg_tenant))
        return app

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Start following and serving; returns the bound HTTP port."""
        self._tasks = [
            asyncio.create_task(self._follow_forever(), name="tail-follow"),
            asyncio.create_task(self._watch(), name="tail-watch"),
            asyncio.create_task(self.checkpoints.run(), name="tail-checkpoints"),
        ]
        self._runner, bound = await start_http(self.app, host, port)
        self._erase_when_due()  # erasures a stop left unfinished
        return bound

    async def wait(self) -> None:
        """Until the follower or the watcher dies (re-raised) or the service is
        stopped: both retry what NATS throws at them, so an end is a bug the
        process must not outlive while serving a read model that stopped."""
        await first_task_end(self._tasks)

    async def stop(self) -> None:
        self.feed.close()  # subscribers end at their next look at the feed
        self._verifier.stopping.set()
        open_tails = set(self.tail.tasks)
        if open_tails:
            _, stuck = await asyncio.wait(open_tails, timeout=self.settings.shutdown_grace_s)
            for task in stuck:  # blocked writing to a client that does not read
                task.cancel()
        await cancel_tasks(self._tasks, timeout_s=10.0)
        if self._applying is not None:
            await asyncio.gather(self._applying, return_exceptions=True)
        if self._erasing is not None:  # a page in the apply thread finishes; the rest resumes at start
            self._erasing.cancel()
            await asyncio.gather(self._erasing, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.ledger.close()
        self._apply_thread.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        self.model.close()

    def ready(self) -> bool:
        """Connected, and the read model within ``ready_max_lag`` of the stream."""
        return (
            self.nc.is_connected
            and self.stream_last is not None
            and self.stream_last - self.feed.applied <= self.settings.ready_max_lag
        )

    # -- following the committed stream ----------------------------------------------------

    async def _follow_forever(self) -> None:
        while True:
            self._follow_task = asyncio.create_task(self._follow_once())
            try:
                await self._follow_task
            except StreamReplaced:
                raise  # what the read model holds may not be the ledger's: rebuilt at the next start
            except asyncio.CancelledError:
                current = asyncio.current_task()
                assert current is not None  # a coroutine runs in a task
                if current.cancelling():
                    raise  # the service is stopping
                log.warning("the follower stalled at position %d; re-opening", self.feed.applied)
            except Exception as exc:  # noqa: BLE001 - NATS away, stream missing: retry
                log.warning(
                    "following %s failed (%s); retrying from position %d",
                    self.settings.events_stream,
                    exc,
                    self.feed.applied,
                )
            self.metrics.follower_restarts.inc()
            await asyncio.sleep(0.5)

    async def _follow_once(self) -> None:
        follower = StreamFollower(
            self.nc,
            stream=self.settings.events_stream,
            name=self._consumer,
            batch_size=self.settings.batch_size,
            identity=self.stream_identity,
        )
        async with aclosing(follower.batches(after=self.model.applied)) as batches:
            async for batch in batches:
                # Shielded: a cancel (stall watchdog, stop) must not separate
                # a committed batch from its publication to subscribers.
                self._applying = asyncio.ensure_future(self.apply_committed(batch))
                await asyncio.shield(self._applying)

    async def apply_committed(self, batch: list[tuple[int, bytes]]) -> None:
        """Apply committed events ((position, body), in order) and publish them
        to subscribers: what following LEDGER_EVENTS does with each batch."""
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(self._apply_thread, self.model.apply, batch)
        self.metrics.apply_seconds.observe(time.perf_counter() - started)
        self.feed.publish(rows)
        self.metrics.applied_position.set(self.feed.applied)
        if self.stream_last is not None:
            self.metrics.lag.set(max(self.stream_last - self.feed.applied, 0))
        self._erase_when_due()

    # -- erasures (spec/erasure.md, Readers) -------------------------------------------------

    def _erase_when_due(self) -> None:
        """Carry out the erasures the read model has folded, unless that is
        under way already."""
        self._count_pending()
        due = self.model.erasures_pending or not self.model.wal_shredded
        if due and (self._erasing is None or self._erasing.done()):
            self._erasing = asyncio.create_task(self._erase(), name="tail-erase")

    def _count_pending(self) -> None:
        self.erasures_pending = self.model.erasures_pending
        self.metrics.erasures_pending.set(self.erasures_pending)

    async def _erase(self) -> None:
        """One bounded page at a time on the apply thread, so batches of the
        stream are applied between pages and a large session never holds the
        tail up for long; each page's positions leave the feed's ring."""
        loop = asyncio.get_running_loop()
        while self.model.erasures_pending or not self.model.wal_shredded:
            try:
                page = await loop.run_in_executor(self._apply_thread, self.model.erase_page)
            except InternalError:  # SQLite failed: the erasure stays pending, tried again
                log.exception("erasing in the read model failed; retrying")
                await asyncio.sleep(1.0)
                continue
            self.feed.forget(page.erased)
            self._count_pending()
            self.metrics.erased_events.inc(len(page.erased))
            if not page.more and not self.model.wal_shredded:
                await asyncio.sleep(0.5)  # a reader's snapshot held the WAL: truncate again soon

    async def refresh_stream_last(self) -> int:
        """The committed stream's last sequence, asked now."""
        async with asyncio.timeout(2.0):
            info = await self.nc.jetstream().stream_info(self.settings.events_stream)
        self.stream_last = info.state.last_seq
        self.metrics.stream_last.set(self.stream_last)
        self.metrics.lag.set(max(self.stream_last - self.feed.applied, 0))
        return self.stream_last

    async def _watch(self) -> None:
        """Keep the lag (and so readiness) current, and re-open a follower that
        is behind but has stopped moving (e.g. its consumer vanished with a
        nats-server restart)."""
        interval = self.settings.watch_interval_s
        seen, still = self.feed.applied, 0.0
        while True:
            try:
                last = await self.refresh_stream_last()
            except Exception as exc:  # noqa: BLE001 - NATS away or no stream: not ready
                self.stream_last = None
                log.debug("cannot read the committed stream's state: %s", exc)
                await asyncio.sleep(interval)
                continue
            applied = self.feed.applied
            if applied < last and applied == seen:
                still += interval
                if still >= self.settings.stall_s and self._follow_task is not None:
                    self._follow_task.cancel()
                    still = 0.0
            else:
                still = 0.0
            seen = applied
            await asyncio.sleep(interval)
