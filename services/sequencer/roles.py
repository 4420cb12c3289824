"""Active or standby: the sequencer's role, kept by the lease (lease.py).

A standby follows LEDGER_TXLOG (its file takes every new record, every
``try_s``) and tries to take the lease; once it has it, it becomes active:
it reads the log's last records, then pulls requests, answers commands and
mirrors the committed stream. A standby that finds the log written with
another chain key (``ChainKeyDiffers``) ends instead. The active one's lease
is renewed on the lease's own thread (lease.py, ``LeaseThread``), which a busy
event loop cannot hold back; when renewing is refused (the lease expired, or
another holds it), has not succeeded for a whole TTL (cut off from NATS), or
stopped because this loop stalled for ``stall_s``, it stands down (a loop
still stalled ``wedged_s`` later ends the process: lease.py): it stops pulling and
answering, finishes nothing new, and follows again. Whatever it was doing
when it was deposed is refused by the log (store/txlog.py) and redelivered to
its successor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

import nats.errors
import nats.js.errors

from laneledger.sdk.retry import Backoff, logged, retry
from laneledger.store.chainkey import ChainKeyDiffers

from .lease import LeaseThread
from .metrics import SequencerMetrics

log = logging.getLogger("laneledger.sequencer.roles")

# What NATS answers while it settles: a lease bucket just made on a cluster
# has no leader yet ("no response from stream"), a node is still joining.
# The first try of the lease waits that out, for a while, rather than end
# the service; later tries are the standby's loop, which always goes on.
NATS_SETTLING = (
    nats.errors.NoRespondersError,
    nats.errors.TimeoutError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)
FIRST_TRY_BACKOFF = Backoff(first=0.1, cap=2.0, within=30.0)


class Roles(Protocol):
    """What the keeper asks of the sequencer."""

    active: bool

    async def activate(self) -> None: ...
    async def stand_down(self) -> None: ...
    async def follow(self) -> int: ...  # catch up from the log; how many records it applied
    def active_tasks(self) -> list[asyncio.Task[None]]: ...


class RoleKeeper:
    def __init__(self, sequencer: Roles, lease: LeaseThread, metrics: SequencerMetrics) -> None:
        self._seq = sequencer
        self._lease = lease
        self._metrics = metrics
        self.lag = 0  # log records the file was behind at the last look
        self._followed_at = 0.0  # when the file last took the whole log (monotonic)
        self._was_standby = False

    @property
    def current(self) -> bool:
        """A standby whose file took the whole log within the last few looks."""
        return time.monotonic() - self._followed_at < 5 * self._lease.settings.try_s

    @property
    def deposed(self) -> bool:
        """The lease is no longer this sequencer's (renewing it was refused
        or stopped), whether or not it has stood down yet."""
        return self._lease.lost is not None

    async def start(self) -> None:
        """Open the lease and try it once: a lone sequencer (or one restarted
        on its own file) is active before this returns."""
        await self._lease.open()
        taken = await retry(
            self._lease.acquire,
            FIRST_TRY_BACKOFF,
            retry_on=NATS_SETTLING,
            on_retry=logged(log, "try the lease"),
        )
        if taken:
            await self._become_active()
        else:
            self._became_standby()

    async def run(self) -> None:
        """Keep the role until cancelled; re-raise if an active task failed."""
        settings = self._lease.settings
        while True:
            if self._seq.active:
                await self._watch(settings.renew_s)
                self._lease.beat()
                if self._lease.lost is not None:
                    await self._stand_down(self._lease.lost)
            else:
                try:
                    self.lag = await self._seq.follow()
                    self._followed_at = time.monotonic()
                    self._metrics.txlog_lag.set(self.lag)
                    if await self._lease.acquire():
                        await self._become_active()
                        continue
                except (asyncio.CancelledError, ChainKeyDiffers):
                    raise  # another HMAC key wrote the log: never take over (store/chainkey.py)
                except Exception as exc:  # noqa: BLE001 - NATS away: try again
                    log.warning("standby could not follow the log or try the lease: %s", exc)
                self._show_holder()
                await asyncio.sleep(settings.try_s)

    async def _watch(self, seconds: float) -> None:
        tasks = self._seq.active_tasks()
        done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # an integrity fault ends the service, as without a lease
            raise RuntimeError(f"sequencer task {task.get_name()} ended while active")

    async def _stand_down(self, why: str) -> None:
        log.warning("%s: standing down to standby", why)
        self._metrics.lease_lost.inc()
        await self._lease.stop_renewing()
        await self._seq.stand_down()
        self._became_standby()

    async def _become_active(self) -> None:
        await self._lease.keep()
        try:
            await self._seq.activate()
        except BaseException:
            await self._lease.stop_renewing()  # a standby again: the lease expires
            raise
        self.lag = 0
        self._metrics.active.set(1)
        self._metrics.txlog_lag.set(0)
        if self._was_standby:
            self._metrics.failovers.inc()
            log.warning("took the lease over: active")
        self._show_holder()

    def _became_standby(self) -> None:
        self._was_standby = True
        self._metrics.active.set(0)
        self._show_holder()
        log.info("standby: following the transaction log; the lease is %s's", self._lease.seen_holder)

    def _show_holder(self) -> None:
        self._metrics.lease_holder.clear()
        if self._lease.seen_holder is not None:
            self._metrics.lease_holder.labels(self._lease.seen_holder).set(1)

    async def release(self) -> None:
        """A clean stop: give the lease up (if it is still this sequencer's)
        so a standby need not wait for it to expire; end the lease thread."""
        await self._lease.release()
