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
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

LEASE_KEY = "sequencer"


@dataclass(frozen=True)
class LeaseSettings:
    ttl_s: float = 2.0  # a lease not renewed for this long expires
    renew_s: float = 0.4  # how often the holder renews it
    try_s: float = 0.2  # how often a standby tries to take it


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
