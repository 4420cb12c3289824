"""The blob store of content references: JetStream object store buckets.

Normative text: ``spec/content.md``. Each tenant has its own bucket,
``LEDGER_BLOBS_<tenant token>`` (``subjects.tenant_bucket``), created by the
sequencer when the tenant's producer first sends it a command, never by a
producer (creating streams would let it capture other subjects): NATS
permissions cannot restrict an object store by object name, so only separate
buckets keep one tenant's producer from reading another's blobs over raw
JetStream. The shared bucket ``LEDGER_BLOBS`` (for the default prefix;
created by the sequencer at start) holds the blobs of the trusted producer
(no tenant-scoped client) and those written before tenant buckets existed.
Either way an object is named ``<tenant token>/<hex sha256>`` (a read names
its tenant even in the shared bucket); within a tenant blobs are
content-addressed and deduplicated: ``put`` skips the upload when an object
of that name already holds those bytes. Readers (:class:`BlobBuckets`) look
in the tenant's bucket, then in the shared one.

The object store keeps a SHA-256 of the bytes it stored (``ObjectInfo.digest``),
so presence (``has``) is checked against the name without reading the blob;
``get`` re-hashes what it read.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from nats.js.api import ObjectInfo, ObjectStoreConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import (
    BucketNotFoundError,
    DigestMismatchError,
    NotFoundError,
    ObjectDeletedError,
    ObjectNotFoundError,
)
from nats.js.object_store import ObjectStore

from laneledger.contract.contentref import hex_of
from laneledger.contract.errors import (
    EntityNotFound,
    IntegrityError,
    LedgerError,
    LedgerTimeout,
    LedgerUnavailable,
)
from laneledger.contract.subjects import Subjects, token, token_bucket
from laneledger.sdk.objectstores import create_object_store, open_object_store

T = TypeVar("T")
BYTES_PER_S = 1024 * 1024  # the slowest transfer a blob call's time bound allows for
MAX_BLOB_BYTES = 64 << 20  # read into memory; larger is refused


def bucket_name(subjects: Subjects = Subjects()) -> str:
    """``LEDGER_BLOBS`` for the default prefix (follows the stream names)."""
    return subjects.events_stream.removesuffix("_EVENTS") + "_BLOBS"


def tenant_bucket_name(tenant_token: str, subjects: Subjects = Subjects()) -> str:
    """``LEDGER_BLOBS_<tenant token>``: the bucket of one tenant's blobs."""
    return token_bucket(bucket_name(subjects), tenant_token)


def object_name(tenant_token: str, ref: str) -> str:
    """``<tenant token>/<hex>``: the tenant's token as in subjects, so the
    sequencer, which knows an append's tenant by its subject token, can look
    blobs up before it reads the lane."""
    return f"{tenant_token}/{hex_of(ref)}"


def object_store_digest(hex_sha256: str) -> str:
    """The digest string the JetStream object store keeps for those bytes."""
    return "SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(hex_sha256)).decode()


class BlobStore:
    def __init__(
        self, js: JetStreamContext, obs: ObjectStore, bucket: str, *, timeout_s: float = 10.0
    ) -> None:
        self._js = js
        self._obs = obs
        self.bucket = bucket
        self.timeout_s = timeout_s  # per call, plus time for the blob's size

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        *,
        subjects: Subjects = Subjects(),
        bucket: str | None = None,
        replicas: int = 1,
        create: bool = True,
        timeout_s: float = 10.0,
    ) -> BlobStore:
        """Open the bucket, creating it (file storage, no expiry) if missing
        and ``create``; otherwise a missing bucket is ``EntityNotFound``
        (kind ``blob_bucket``)."""
        name = bucket or bucket_name(subjects)
        try:
            async with asyncio.timeout(timeout_s):
                try:
                    obs = await open_object_store(js, name)
                except (NotFoundError, BucketNotFoundError):
                    if not create:
                        raise EntityNotFound("no blob bucket", kind="blob_bucket", bucket=name) from None
                    obs = await create_object_store(
                        js,
                        name,
                        ObjectStoreConfig(
                            description="laneledger content-referenced payload values, by tenant and sha256",
                            storage=StorageType.FILE,
                            replicas=replicas,
                        ),
                    )
        except LedgerError:
            raise
        except TimeoutError:
            raise LedgerTimeout(f"open blob bucket {name}: no answer in {timeout_s:g}s") from None
        except Exception as exc:
            raise LedgerUnavailable(
                f"open blob bucket {name}: {type(exc).__name__}: {exc}", bucket=name
            ) from exc
        return cls(js, obs, name, timeout_s=timeout_s)

    async def _call(self, what: str, ref: str, call: Awaitable[T], size: int = 0) -> T:
        """One object store call, bounded in time, its errors as ledger errors
        (nats-py's object reads wait forever on a stalled consumer)."""
        timeout = self.timeout_s + size / BYTES_PER_S
        try:
            async with asyncio.timeout(timeout):
                return await call
        except (ObjectNotFoundError, ObjectDeletedError):
            raise EntityNotFound("no such blob", kind="blob", ref=ref) from None
        except DigestMismatchError as exc:
            raise IntegrityError(
                "blob chunks do not match the stored digest", kind="blob_mismatch", ref=ref
            ) from exc
        except TimeoutError:
            raise LedgerTimeout(f"{what}: no answer in {timeout:g}s", ref=ref) from None
        except LedgerError:
            raise
        except Exception as exc:
            raise LedgerUnavailable(f"{what}: {type(exc).__name__}: {exc}", ref=ref) from exc

    async def _info(self, tenant_token: str, ref: str) -> ObjectInfo | None:
        try:
            info = await self._call("blob info", ref, self._obs.get_info(object_name(tenant_token, ref)))
        except EntityNotFound:
            return None
        return None if info.deleted else info

    async def put(self, tenant: str, data: bytes) -> str:
        """Store ``data`` for ``tenant``; returns its ``sha256:<hex>``. Skipped
        when the blob is already there (do not replace chunks a reader may be
        reading)."""
        hex_sha = hashlib.sha256(data).hexdigest()
        ref = "sha256:" + hex_sha
        if await self.has(tenant, ref, len(data)):
            return ref
        info = await self._call(
            "upload blob", ref, self._obs.put(object_name(token(tenant), ref), data), len(data)
        )
        if info.digest != object_store_digest(hex_sha):
            raise IntegrityError(
                "the object store kept another digest for the uploaded blob",
                kind="blob_mismatch",
                ref=ref,
                stored_digest=info.digest,
            )
        return ref

    async def has(self, tenant: str, ref: str, size_bytes: int | None = None) -> bool:
        """Whether ``tenant`` has this blob (with this size, when given): an
        object under its name whose stored digest is the name's."""
        return await self._has(token(tenant), ref, size_bytes)

    async def _has(self, tenant_token: str, ref: str, size_bytes: int | None) -> bool:
        info = await self._info(tenant_token, ref)
        return (
            info is not None
            and info.digest == object_store_digest(hex_of(ref))
            and (size_bytes is None or info.size == size_bytes)
        )

    async def missing(self, tenant_token: str, refs: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The ``(ref, size_bytes)`` of ``refs`` that the tenant with this
        subject token (``subjects.token``) does not have, looked up
        concurrently. The sequencer's batch check."""
        found = await asyncio.gather(*(self._has(tenant_token, ref, size) for ref, size in refs))
        return [r for r, ok in zip(refs, found, strict=True) if not ok]

    async def get(self, tenant: str, ref: str) -> bytes:
        """The blob's bytes, checked against the name. ``EntityNotFound``
        (kind ``blob``) when absent, ``IntegrityError`` when they do not hash
        to it."""
        hex_sha = hex_of(ref)
        info = await self._info(token(tenant), ref)
        if info is None:
            raise EntityNotFound("no such blob", kind="blob", ref=f"sha256:{hex_sha}")
        if (info.size or 0) > MAX_BLOB_BYTES:
            raise IntegrityError(
                "blob larger than this reader takes",
                kind="blob_too_large",
                ref=f"sha256:{hex_sha}",
                size_bytes=info.size,
                limit_bytes=MAX_BLOB_BYTES,
            )
        found = await self._call(
            "read blob", ref, self._obs.get(object_name(token(tenant), ref)), info.size or 0
        )
        data = found.data or b""
        actual = hashlib.sha256(data).hexdigest()
        if actual != hex_sha:
            raise IntegrityError(
                "blob content does not match its sha256",
                kind="blob_mismatch",
                ref=f"sha256:{hex_sha}",
                found=actual,
            )
        return data

    async def refs(self, tenant: str) -> AsyncIterator[tuple[str, int]]:
        """Every ``(ref, size_bytes)`` stored for ``tenant``."""
        prefix = token(tenant) + "/"
        infos = await self._call("list blobs", tenant, self._list())
        for info in infos:
            if info.name.startswith(prefix):
                yield "sha256:" + info.name[len(prefix) :], info.size or 0

    async def _list(self) -> list[ObjectInfo]:
        try:
            return await self._obs.list(ignore_deletes=True)
        except NotFoundError:  # nats-py lists an empty bucket as "not found"
            return []


class BlobBuckets:
    """A tenant's blobs as readers see them: its own bucket, then the shared
    one (the trusted producer's, and blobs stored before tenant buckets).

    A bucket is looked up by ``$JS.API.STREAM.NAMES`` before it is opened:
    that a reader may always ask, while a tenant bucket's own API subjects
    are granted only for the tenants its NATS config was rendered for. An
    absent bucket is looked up again on the next read (it may be created
    meanwhile); an opened one is kept. Only ``ensure`` creates (the
    sequencer's)."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        subjects: Subjects = Subjects(),
        replicas: int = 1,
        timeout_s: float = 10.0,
    ) -> None:
        self._js = js
        self._subjects = subjects
        self._replicas = replicas
        self.timeout_s = timeout_s
        self.shared = bucket_name(subjects)
        self._open: dict[str, BlobStore] = {}

    async def ensure(self, tenant_token: str | None = None) -> BlobStore:
        """Open a tenant's bucket (None: the shared one), creating it if missing."""
        name = self.shared if tenant_token is None else tenant_bucket_name(tenant_token, self._subjects)
        if name not in self._open:
            self._open[name] = await BlobStore.open(
                self._js, bucket=name, replicas=self._replicas, timeout_s=self.timeout_s
            )
        return self._open[name]

    async def _existing(self, name: str) -> BlobStore | None:
        if name in self._open:
            return self._open[name]
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._js.find_stream_name_by_subject(f"$O.{name}.M.>")
        except NotFoundError:
            return None
        except TimeoutError:
            raise LedgerTimeout(
                f"look up blob bucket {name}: no answer in {self.timeout_s:g}s", bucket=name
            ) from None
        except Exception as exc:
            raise LedgerUnavailable(
                f"look up blob bucket {name}: {type(exc).__name__}: {exc}", bucket=name
            ) from exc
        try:
            store = await BlobStore.open(self._js, bucket=name, create=False, timeout_s=self.timeout_s)
        except EntityNotFound:  # deleted between the two calls
            return None
        self._open[name] = store
        return store

    async def stores(self, tenant_token: str) -> list[BlobStore]:
        """The buckets that may hold this tenant's blobs, in reading order."""
        found = []
        for name in (tenant_bucket_name(tenant_token, self._subjects), self.shared):
            store = await self._existing(name)
            if store is not None:
                found.append(store)
        return found

    async def missing(self, tenant_token: str, refs: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The ``(ref, size_bytes)`` of ``refs`` in none of the tenant's buckets."""
        for store in await self.stores(tenant_token):
            if not refs:
                break
            refs = await store.missing(tenant_token, refs)
        return refs

    async def get(self, tenant: str, ref: str) -> bytes:
        """The blob's bytes from the first bucket holding it (``BlobStore.get``)."""
        for store in await self.stores(token(tenant)):
            try:
                return await store.get(tenant, ref)
            except EntityNotFound:
                continue
        raise EntityNotFound("no such blob", kind="blob", ref=f"sha256:{hex_of(ref)}")
