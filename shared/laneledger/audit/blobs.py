"""Blob checks for ``audit_ledger``: every content reference of a committed
payload is stored for the event's tenant, and its bytes hash to the reference
and have its size (``spec/verify.md``; Korg §6.4: a missing blob is an
integrity failure).

The audit is synchronous and streams SQLite in a worker thread; the blob
store (``laneledger.sdk.blobstore``: the tenant's bucket, then the shared one)
is asynchronous.
:class:`BlobChecks` is the bridge: the audit thread calls it, and it runs the
store's coroutine on the caller's event loop and waits for the answer. A blob
is read once per (tenant, ref, size): verified ones are remembered, up to a
bound, so memory does not grow with the number of events.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from pathlib import Path

from nats.js.client import JetStreamContext

from laneledger.audit.ledger import LedgerAudit, audit_ledger
from laneledger.contract.errors import EntityNotFound, IntegrityError
from laneledger.contract.subjects import Subjects
from laneledger.sdk.blobstore import BlobBuckets

REMEMBERED = 100_000  # verified (tenant, ref, size) kept, least recently used out


class BlobChecks:
    def __init__(
        self, store: BlobBuckets, loop: asyncio.AbstractEventLoop, *, remembered: int = REMEMBERED
    ) -> None:
        self._store = store
        self._loop = loop
        self._remembered = remembered
        self._verified: OrderedDict[tuple[str, str, int], None] = OrderedDict()
        self.read = 0  # blobs actually fetched and hashed

    def __call__(self, tenant: str, ref: str, size_bytes: int) -> tuple[str, str] | None:
        key = (tenant, ref, size_bytes)
        if key in self._verified:
            self._verified.move_to_end(key)
            return None
        problem = asyncio.run_coroutine_threadsafe(self._check(tenant, ref, size_bytes), self._loop).result()
        if problem is None:
            self._verified[key] = None
            if len(self._verified) > self._remembered:
                self._verified.popitem(last=False)
        return problem

    async def _check(self, tenant: str, ref: str, size_bytes: int) -> tuple[str, str] | None:
        try:
            data = await self._store.get(tenant, ref)
        except EntityNotFound:
            return "blob_missing", f"blob {ref} is not stored for tenant {tenant!r}"
        except IntegrityError as exc:  # bytes that do not hash to the name
            return "blob_mismatch", f"blob {ref}: {exc.message}"
        self.read += 1
        if len(data) != size_bytes:
            return ("blob_mismatch", f"blob {ref} is {len(data)} bytes, the reference says {size_bytes}")
        return None


async def open_blob_store(js: JetStreamContext, subjects: Subjects = Subjects()) -> BlobBuckets:
    """The ledger's blob buckets, read-only: a verifier creates nothing (a
    tenant with no bucket, and no blob in the shared one, misses its blobs)."""
    return BlobBuckets(js, subjects=subjects)


async def audit_ledger_with_blobs(
    db_path: str | Path, store: BlobBuckets, *, hmac_key: bytes | None = None, strict_actors: bool = False
) -> LedgerAudit:
    """``audit_ledger`` in a worker thread, checking blobs against ``store``
    on this event loop."""
    checks = BlobChecks(store, asyncio.get_running_loop())
    return await asyncio.to_thread(
        audit_ledger, db_path, hmac_key=hmac_key, blob_check=checks, strict_actors=strict_actors
    )
