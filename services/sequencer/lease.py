"""Which sequencer is active: a lease in a NATS KV bucket (spec/replication.md, "The lease").

The bucket (``<PREFIX>_LEASE``, one key, ``sequencer``) has a TTL: a value
not rewritten within it expires. The active sequencer rewrites it every
``renew_s`` with the revision it last wrote (``update(last=...)``); a standby
tries to create it (``create``: only if absent) every ``try_s``. So at most
one holds it at a time, and when the holder dies, is paused or is cut off,
the key expires and the first standby to try after that takes it.

The lease decides who pulls requests and answers commands. It is not what
keeps two writers apart: the transaction log does that (every append names
the log position its writer last applied, store/txlog.py), so a deposed
sequencer that has not noticed yet commits nothing.

A holder is a ledger file (``holder``: its ``meta.file_id``): a sequencer
restarted on the same file takes its own unexpired lease back at once
instead of waiting for it to expire.

The lease lives on a thread of its own (``LeaseThread``), with its own event
loop and NATS connection, and is renewed there: a request's CPU work on the
sequencer's event loop (redaction, canonical form of a large append) cannot
hold a renewal back, so no producer can make the active one lose the lease.
The thread stops renewing when the event loop has not come round for
``stall_s`` (wedged, not busy): the lease then expires and a standby takes
over, as if the process were paused. A paused process's loop comes round as
soon as it runs again, and then stands down; one that still has not come
round ``wedged_s`` later never will (a deadlock): the thread writes every
thread's stack to stderr and ends the process (``exit_wedged``, status 70),
so its supervisor starts it again and the stacks say where it was stuck.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from laneledger.runtime.servicemain import cancel_tasks

LEASE_KEY = "sequencer"
RELEASE_TIMEOUT_S = 5.0  # giving the lease up on a clean stop takes at most this
log = logging.getLogger("laneledger.sequencer.lease")
T = TypeVar("T")


@dataclass(frozen=True)
class LeaseSettings:
    ttl_s: float = 2.0  # a lease not renewed for this long expires
    renew_s: float = 0.4  # how often the holder renews it
    try_s: float = 0.2  # how often a standby tries to take it
    # The lease thread stops renewing once the event loop has not come round
    # for this long: a loop wedged for good must not hold the lease for good.
    stall_s: float = 30.0
    # ... and ends the process once it has not come round for this long more.
    wedged_s: float = 30.0


WEDGED_EXIT_STATUS = 70  # EX_SOFTWARE


def exit_wedged(why: str) -> None:
    """End a process whose event loop is wedged: every thread's stack to
    stderr first (where it was stuck), then exit at once (``os._exit``: the
    loop that would run a clean exit is the one that is stuck)."""
    log.critical("%s: the process is wedged; its threads' stacks follow, then it exits", why)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(WEDGED_EXIT_STATUS)


def lease_bucket_config(bucket: str, settings: LeaseSettings, replicas: int) -> KeyValueConfig:
    return KeyValueConfig(
        bucket=bucket,
        description="laneledger: which sequencer is active",
        history=1,
        ttl=settings.ttl_s,
        storage=StorageType.FILE,
        replicas=replicas,
    )


class Lease:
    def __init__(
        self, js: JetStreamContext, bucket: str, holder: str, settings: LeaseSettings, replicas: int
    ) -> None:
        self._js = js
        self._bucket = bucket
        self.holder = holder
        self.settings = settings
        self._replicas = replicas
        self._kv: KeyValue | None = None
        self._revision = 0
        self.seen_holder: str | None = None  # who held it when we last looked
        self._who = {"holder": holder, "host": socket.gethostname(), "pid": os.getpid()}

    async def open(self) -> None:
        try:
            self._kv = await self._js.key_value(self._bucket)
        except BucketNotFoundError:
            config = lease_bucket_config(self._bucket, self.settings, self._replicas)
            self._kv = await self._js.create_key_value(config)

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None, "Lease.open() first"
        return self._kv

    async def acquire(self) -> bool:
        """Take the lease if nobody holds it (or this file does, from before
        a restart); False when another holds it. Raises on NATS errors."""
        try:
            self._revision = await self.kv.create(LEASE_KEY, self._value())
            self.seen_holder = self.holder
            return True
        except KeyWrongLastSequenceError:
            pass
        except KeyNotFoundError:
            # nats-py's create, refused because the key was there, looks it up
            # again; expired in between (TTL), the lookup raises this.
            return False  # the next try may take it
        try:
            entry = await self.kv.get(LEASE_KEY)
        except KeyNotFoundError:
            return False  # expired in between: the next try may take it
        self.seen_holder = _holder_of(entry.value)
        if self.seen_holder != self.holder:
            return False
        try:
            self._revision = await self.kv.update(LEASE_KEY, self._value(), last=entry.revision)
        except KeyWrongLastSequenceError:
            return False
        return True

    async def renew(self) -> bool:
        """Rewrite the lease; False when it is no longer ours (it expired,
        and maybe another took it). Raises on NATS errors."""
        try:
            self._revision = await self.kv.update(LEASE_KEY, self._value(), last=self._revision)
        except KeyWrongLastSequenceError:
            return False
        return True

    def _value(self) -> bytes:
        # renewed_at (Unix seconds): when the lease was last written, so an
        # operator (or bench/failover.py) can tell when it expires.
        return json.dumps({**self._who, "renewed_at": time.time()}).encode()

    async def release(self) -> None:
        """Give the lease up (a clean stop), so a standby need not wait for
        it to expire. Best effort: it expires anyway."""
        if self._kv is None:
            return  # never opened
        try:
            await self.kv.delete(LEASE_KEY, last=self._revision)
        except (nats.errors.Error, KeyWrongLastSequenceError, TimeoutError):
            pass


def _holder_of(value: bytes | None) -> str | None:
    try:
        holder = json.loads(value or b"{}").get("holder")
    except (ValueError, AttributeError):
        return None
    return holder if isinstance(holder, str) else None


class LeaseThread:
    """A ``Lease`` on a thread of its own, with its own event loop and NATS
    connection (``connect``, called on that loop), renewed there every
    ``renew_s`` once ``keep()`` is called. The sequencer's event loop calls
    ``open``/``acquire``/``release`` across, reads ``lost``, and calls
    ``beat()`` each time it comes round."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[NATS]],
        bucket: str,
        holder: str,
        settings: LeaseSettings,
        replicas: int,
        *,
        on_wedged: Callable[[str], None] = exit_wedged,
    ) -> None:
        self._connect = connect
        self._on_wedged = on_wedged
        self._bucket, self.holder, self.settings, self._replicas = bucket, holder, settings, replicas
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sequencer-lease", daemon=True)
        self._nc: NATS | None = None
        self._lease: Lease | None = None
        self._renewing: asyncio.Task[None] | None = None
        # Written by the lease thread, read by the event loop (one attribute
        # each, so no lock): why the lease is no longer ours, or None.
        self.lost: str | None = None
        self._beat = time.monotonic()  # written by the event loop

    @property
    def seen_holder(self) -> str | None:
        return self._lease.seen_holder if self._lease is not None else None

    async def _across(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the lease thread's loop; its result here."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def open(self) -> None:
        self._thread.start()
        await self._across(self._open())

    async def _open(self) -> None:
        self._nc = await self._connect()
        self._lease = Lease(self._nc.jetstream(), self._bucket, self.holder, self.settings, self._replicas)
        await self._lease.open()

    async def acquire(self) -> bool:
        assert self._lease is not None, "LeaseThread.open() first"
        return await self._across(self._lease.acquire())

    def beat(self) -> None:
        """The event loop came round: renewing goes on."""
        self._beat = time.monotonic()

    async def keep(self) -> None:
        """Renew the lease, just acquired, on the lease thread until it is
        lost or ``release``d."""
        self.lost = None
        self.beat()
        await self._across(self._start_renewing())

    async def _start_renewing(self) -> None:
        self._renewing = asyncio.create_task(self._renew_loop(), name="lease-renew")

    async def _renew_loop(self) -> None:
        assert self._lease is not None
        settings = self.settings
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(settings.renew_s)
            stalled = time.monotonic() - self._beat
            if stalled > settings.stall_s:
                self.lost = f"the event loop has not come round for {stalled:.1f} s: not renewing"
                await self._watch_for_wedge()
                return
            try:
                if not await self._lease.renew():
                    self.lost = "the lease is no longer this sequencer's"
                    return
                renewed_at = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - unknown: the lease may still be ours
                if time.monotonic() - renewed_at < settings.ttl_s:
                    log.warning("lease not renewed (%s); trying again", exc)
                    continue
                self.lost = f"lease not renewed for a whole TTL ({exc})"
                return

    async def _watch_for_wedge(self) -> None:
        """Renewing stopped for a stalled loop: return once it comes round
        (it then stands down); ``on_wedged`` if it has not ``wedged_s`` later."""
        stalled_since = self._beat
        settings = self.settings
        while self._beat == stalled_since:
            stalled = time.monotonic() - stalled_since
            if stalled > settings.stall_s + settings.wedged_s:
                self._on_wedged(f"the event loop has not come round for {stalled:.1f} s")
                return
            await asyncio.sleep(settings.renew_s)

    async def stop_renewing(self) -> None:
        await self._across(self._stop_renewing())

    async def _stop_renewing(self) -> None:
        # Cancelled once, a renewal whose reply lands with the cancel swallows
        # it (3.11's ``wait_for``, in nats-py's requests) and the loop renews
        # on: ``cancel_tasks`` asks again until it ends (a clean stop of the
        # sequencer hung here, waiting for it).
        if self._renewing is not None:
            await cancel_tasks([self._renewing], timeout_s=self.settings.ttl_s)
            self._renewing = None

    async def release(self) -> None:
        """Stop renewing and give the lease up (best effort), then close the
        thread's connection and end the thread."""
        if not self._thread.is_alive():
            return
        try:
            # Best effort, bounded: unreleased, the lease expires in a TTL.
            async with asyncio.timeout(RELEASE_TIMEOUT_S):
                await self._across(self._release())
        except TimeoutError:
            log.warning("the lease was not given up within %.0f s; it expires instead", RELEASE_TIMEOUT_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join)
            self._loop.close()

    async def _release(self) -> None:
        await self._stop_renewing()
        if self._lease is not None:
            await self._lease.release()
        if self._nc is not None:
            try:
                await self._nc.close()
            except Exception as exc:  # noqa: BLE001 - closing anyway
                log.debug("lease connection not closed cleanly: %s", exc)
