"""The blob store of content references: JetStream object store buckets.

Normative text: ``spec/content.md``. Each tenant has two buckets, created by
the sequencer when the tenant's producer first sends it a command, never by a
producer (creating streams would let it capture other subjects):

* ``LEDGER_UPLOADS_<tenant token>`` (``tenant_uploads_bucket_name``), where
  the tenant's producer uploads, expiring after ``UPLOAD_MAX_AGE_S``;
* ``LEDGER_BLOBS_<tenant token>`` (``tenant_bucket_name``), the committed
  blobs: only the sequencer writes it, copying an upload there (its bytes
  checked against the name, ``BlobBuckets.commit_upload``) before the append
  referencing it commits. The producer may read it, not write it: an object
  store delete or overwrite is just another message on ``$O.<bucket>.M.<name>``,
  so a producer that could put there could also unmake a committed blob.

NATS permissions cannot restrict an object store by object name, so only
separate buckets keep one tenant's producer from reading another's blobs over
raw JetStream. The shared bucket ``LEDGER_BLOBS`` (for the default prefix;
created by the sequencer at start) holds the blobs of trusted writers (the
trusted producer with no tenant-scoped client) and
those written before tenant buckets existed; only trusted users write it.
Either way an object is named ``<tenant token>/<hex sha256>`` (a read names
its tenant even in the shared bucket); within a tenant blobs are
content-addressed and deduplicated: ``put`` skips the upload when an object
of that name already holds those bytes. Readers (:class:`BlobBuckets`) look
in the tenant's committed bucket, then in the shared one.

The object store keeps a SHA-256 of the bytes it stored (``ObjectInfo.digest``),
so presence (``has``) is checked against the name without reading the blob;
``get`` re-hashes what it read. An upload is a producer's say-so, metadata
and all: ``read_upload`` trusts none of it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from nats.js.api import ObjectInfo, ObjectStoreConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import (
    BadObjectMetaError,
    BucketNotFoundError,
    DigestMismatchError,
    NotFoundError,
    ObjectDeletedError,
    ObjectNotFoundError,
)
from nats.js.object_store import (
    OBJ_STREAM_TEMPLATE,
    ObjectStore,
)

from laneledger.contract.contentref import hex_of
from laneledger.contract.errors import (
    EntityNotFound,
    IntegrityError,
    InvalidRequest,
    LedgerError,
    LedgerTimeout,
    LedgerUnavailable,
    QuotaExceeded,
)
from laneledger.contract.redaction import Redactor
from laneledger.contract.secretscan import secret_rules
from laneledger.contract.subjects import Subjects, token, token_bucket
from laneledger.sdk.directget import NoDirectGet, last_messages
from laneledger.sdk.objectstores import (
    bound_bucket,
    create_object_store,
    erase_object,
    meta_subject,
    names_own_chunks,
    open_object_store,
    read_chunks,
)
from laneledger.sdk.pubacks import limit_reached_by

log = logging.getLogger("laneledger.blobs")
T = TypeVar("T")
BYTES_PER_S = 1024 * 1024  # the slowest transfer a blob call's time bound allows for
MAX_BLOB_BYTES = 64 << 20  # read into memory; larger is refused
# How long an upload stays in a tenant's uploads bucket. The sequencer copies
# an upload into the committed bucket when an append referencing it commits;
# what is never committed, and the orphan chunks of a failed put (producers
# may not purge), age out instead of piling up. A day covers any producer's
# retries between upload and append.
UPLOAD_MAX_AGE_S = 24 * 3600


def bucket_name(subjects: Subjects = Subjects()) -> str:
    """``LEDGER_BLOBS`` for the default prefix (follows the stream names)."""
    return subjects.events_stream.removesuffix("_EVENTS") + "_BLOBS"


def tenant_bucket_name(tenant_token: str, subjects: Subjects = Subjects()) -> str:
    """``LEDGER_BLOBS_<tenant token>``: the bucket of one tenant's committed blobs."""
    return token_bucket(bucket_name(subjects), tenant_token)


def uploads_bucket_name(subjects: Subjects = Subjects()) -> str:
    """``LEDGER_UPLOADS`` for the default prefix: the stem of the tenants'
    uploads buckets (there is no shared one)."""
    return subjects.events_stream.removesuffix("_EVENTS") + "_UPLOADS"


def tenant_uploads_bucket_name(tenant_token: str, subjects: Subjects = Subjects()) -> str:
    """``LEDGER_UPLOADS_<tenant token>``: where one tenant's producer uploads."""
    return token_bucket(uploads_bucket_name(subjects), tenant_token)


def blob_bucket_config(replicas: int = 1, max_bytes: int | None = None) -> ObjectStoreConfig:
    """A bucket of committed blobs (a tenant's, or the shared one): kept for
    good; ``max_bytes``: the tenant's ``blob_bytes`` (``runtime.tenants``)."""
    return ObjectStoreConfig(
        description="laneledger content-referenced payload values, by tenant and sha256",
        storage=StorageType.FILE,
        replicas=replicas,
        max_bytes=max_bytes,
    )


def uploads_bucket_config(replicas: int = 1, max_bytes: int | None = None) -> ObjectStoreConfig:
    """A tenant's uploads bucket: what is not copied in a day ages out;
    bounded by the tenant's ``blob_bytes`` too."""
    return ObjectStoreConfig(
        description="laneledger content-referenced payload values uploaded, not yet committed",
        storage=StorageType.FILE,
        replicas=replicas,
        ttl=UPLOAD_MAX_AGE_S,
        max_bytes=max_bytes,
    )


def object_name(tenant_token: str, ref: str) -> str:
    """``<tenant token>/<hex>``: the tenant's token as in subjects, so the
    sequencer, which knows an append's tenant by its subject token, can look
    blobs up before it reads the lane."""
    return f"{tenant_token}/{hex_of(ref)}"


def _is_blob(info: ObjectInfo | None, ref: str, size_bytes: int | None) -> bool:
    """Whether ``info`` is the blob ``ref`` names (of ``size_bytes``, when given):
    its stored digest is the name's."""
    return (
        info is not None
        and info.digest == object_store_digest(hex_of(ref))
        and (size_bytes is None or info.size == size_bytes)
    )


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
        config: ObjectStoreConfig | None = None,
        timeout_s: float = 10.0,
    ) -> BlobStore:
        """Open the bucket, creating it if missing and ``create`` (with
        ``config``, by default ``blob_bucket_config(replicas)``); otherwise a
        missing bucket is ``EntityNotFound`` (kind ``blob_bucket``)."""
        name = bucket or bucket_name(subjects)
        try:
            async with asyncio.timeout(timeout_s):
                try:
                    obs = await open_object_store(js, name)
                except (NotFoundError, BucketNotFoundError):
                    if not create:
                        raise EntityNotFound("no blob bucket", kind="blob_bucket", bucket=name) from None
                    obs = await create_object_store(js, name, config or blob_bucket_config(replicas))
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
        except BadObjectMetaError as exc:
            raise IntegrityError(
                "the blob's object metadata is not readable", kind="blob_mismatch", ref=ref
            ) from exc
        except TimeoutError:
            raise LedgerTimeout(f"{what}: no answer in {timeout:g}s", ref=ref) from None
        except LedgerError:
            raise
        except Exception as exc:
            if limit_reached_by(exc) is not None:
                raise QuotaExceeded(
                    f"{what}: the bucket {self.bucket} is full (the tenant's blob_bytes limit)",
                    limit="blob_bytes",
                    bucket=self.bucket,
                    ref=ref,
                ) from exc
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
        ref = "sha256:" + hashlib.sha256(data).hexdigest()
        if not await self.has(tenant, ref, len(data)):
            await self._upload(token(tenant), ref, data)
        return ref

    async def _upload(self, tenant_token: str, ref: str, data: bytes) -> None:
        """Store ``data`` (which hashes to ``ref``) under its name, unconditionally."""
        info = await self._call(
            "upload blob", ref, self._obs.put(object_name(tenant_token, ref), data), len(data)
        )
        if info.digest != object_store_digest(hex_of(ref)):
            raise IntegrityError(
                "the object store kept another digest for the uploaded blob",
                kind="blob_mismatch",
                ref=ref,
                stored_digest=info.digest,
            )

    async def lasting(self, tenant: str, ref: str, size_bytes: int) -> bool:
        """Whether a blob ``has`` found stays: in a bucket of committed blobs,
        always (the ledger never deletes one). See ``TenantBlobStore``."""
        return True

    async def has(self, tenant: str, ref: str, size_bytes: int | None = None) -> bool:
        """Whether ``tenant`` has this blob (with this size, when given): an
        object under its name whose stored digest is the name's."""
        return await self._has(token(tenant), ref, size_bytes)

    async def _has(self, tenant_token: str, ref: str, size_bytes: int | None) -> bool:
        return _is_blob(await self._info(tenant_token, ref), ref, size_bytes)

    async def infos(self, tenant_token: str, refs: list[str]) -> dict[str, ObjectInfo | None]:
        """The object info under each of ``refs`` (None: none, or deleted),
        in batched direct gets of their meta subjects (``directget.py``: one
        request per thousand); one lookup per ref, concurrently, where the
        bucket's stream allows no direct gets."""
        meta = {meta_subject(self.bucket, object_name(tenant_token, ref)): ref for ref in refs}
        stream = OBJ_STREAM_TEMPLATE.format(bucket=self.bucket)
        try:
            found = await last_messages(self._js._nc, stream, list(meta), timeout_s=self.timeout_s)
        except NoDirectGet:
            infos = await asyncio.gather(*(self._info(tenant_token, ref) for ref in refs))
            return dict(zip(refs, infos, strict=True))
        except LedgerError:
            raise
        except Exception as exc:  # the connection closed or draining, say
            raise LedgerUnavailable(f"blob lookups: {type(exc).__name__}: {exc}", bucket=self.bucket) from exc
        out: dict[str, ObjectInfo | None] = dict.fromkeys(refs)
        for subject, msg in found.items():
            try:
                info = ObjectInfo.from_response(json.loads(msg.data))
            except Exception as exc:
                raise IntegrityError(
                    "the blob's object metadata is not readable", kind="blob_mismatch", ref=meta[subject]
                ) from exc
            out[meta[subject]] = None if info.deleted else info
        return out

    async def missing(self, tenant_token: str, refs: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The ``(ref, size_bytes)`` of ``refs`` that the tenant with this
        subject token (``subjects.token``) does not have, looked up in
        batches (``infos``). The sequencer's batch check."""
        infos = await self.infos(tenant_token, [ref for ref, _ in refs])
        return [(ref, size) for ref, size in refs if not _is_blob(infos[ref], ref, size)]

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
        if not names_own_chunks(info):
            raise IntegrityError(
                "the blob's object metadata names no chunks", kind="blob_mismatch", ref=f"sha256:{hex_sha}"
            )
        # By message, not through a consumer (objectstores.read_chunks).
        size = info.size or 0
        data = await self._call("read blob", ref, read_chunks(self._js, self.bucket, info.nuid, size), size)
        actual = hashlib.sha256(data).hexdigest()
        if actual != hex_sha:
            raise IntegrityError(
                "blob content does not match its sha256",
                kind="blob_mismatch",
                ref=f"sha256:{hex_sha}",
                found=actual,
            )
        return data

    async def read_upload(self, tenant_token: str, ref: str, size_bytes: int) -> bytes | None:
        """The bytes a producer uploaded under this blob's name, exactly
        ``size_bytes`` that hash to ``ref``; None when there is no such
        upload (or it was deleted). Anything else is ``IntegrityError``: kind
        ``upload_mismatch`` (another size or digest, a link, a malformed
        object, chunks that are not those bytes), or ``blob_too_large`` (over
        ``MAX_BLOB_BYTES``).

        The producer wrote the metadata too, so none of it is trusted: the
        chunks are read message by message from the stream under the one
        subject the metadata names, never by a consumer (whose filter a
        hostile ``nuid`` could widen to the whole bucket), and never more
        than ``size_bytes`` plus one chunk."""
        hex_sha = hex_of(ref)

        def mismatch(why: str) -> IntegrityError:
            return IntegrityError(
                f"the upload is not the blob its name says: {why}", kind="upload_mismatch", ref=ref
            )

        try:
            info = await self._info(tenant_token, ref)
        except IntegrityError:
            raise mismatch("its metadata is not readable") from None
        if info is None:
            return None
        if size_bytes > MAX_BLOB_BYTES:
            raise IntegrityError(
                "blob larger than the ledger copies",
                kind="blob_too_large",
                ref=ref,
                size_bytes=size_bytes,
                limit_bytes=MAX_BLOB_BYTES,
            )
        if info.size != size_bytes:
            raise mismatch(f"its metadata gives another size than the reference's {size_bytes}")
        if info.digest != object_store_digest(hex_sha):
            raise mismatch("its metadata names another digest")
        if not names_own_chunks(info):
            raise mismatch("its metadata names no chunks of its own")
        data = await self._call(
            "read upload", ref, read_chunks(self._js, self.bucket, info.nuid, size_bytes), size_bytes
        )
        if len(data) != size_bytes or hashlib.sha256(data).hexdigest() != hex_sha:
            raise mismatch("its chunks do not hash to it")
        return data

    async def discard_upload(self, tenant_token: str, ref: str) -> None:
        """Erase an upload the sequencer has copied, or refused (so it stops
        counting against the tenant's ``blob_bytes``): its chunks and its
        metadata (which names it by the blob's SHA-256) overwritten, one
        message delete each, through the stream API (the sequencer may not
        publish on an uploads bucket's ``$O.`` subjects; a purge would leave
        the bytes in the stream's files: ``objectstores.erase_object``)."""
        name = object_name(tenant_token, ref)
        await self._call("erase upload", ref, erase_object(self._js, self.bucket, name), MAX_BLOB_BYTES)

    async def erase(self, tenant_token: str, ref: str) -> bool:
        """Erase the tenant's blob from this bucket, its bytes and its name
        out of the stream's files (``objectstores.erase_object``): an
        erasure left no event that is not erased referencing it
        (spec/erasure.md, "Blobs"). False when it was not there."""
        erasing = erase_object(self._js, self.bucket, object_name(tenant_token, ref))
        return await self._call("erase blob", ref, erasing, MAX_BLOB_BYTES)  # as long as the largest may take

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


class TenantBlobStore(BlobStore):
    """A tenant-scoped producer's blobs (``LedgerClient.blob_store`` of a
    client connected with ``tenant=``): reads are of the tenant's committed
    bucket, which only the sequencer writes; ``put`` uploads into the
    tenant's uploads bucket, whence the sequencer copies a blob into the
    committed one before the first append referencing it commits."""

    def __init__(self, committed: BlobStore, uploads: BlobStore) -> None:
        super().__init__(committed._js, committed._obs, committed.bucket, timeout_s=committed.timeout_s)
        self.uploads = uploads

    async def put(self, tenant: str, data: bytes) -> str:
        """Upload ``data`` for ``tenant``; returns its ``sha256:<hex>``.
        Skipped when the blob is committed already, or uploaded."""
        ref = "sha256:" + hashlib.sha256(data).hexdigest()
        if not await self.has(tenant, ref, len(data)):
            await self.uploads._upload(token(tenant), ref, data)
        return ref

    async def has(self, tenant: str, ref: str, size_bytes: int | None = None) -> bool:
        """Whether the blob is committed, or uploaded for the sequencer to
        copy when an append referencing it commits."""
        return await super().has(tenant, ref, size_bytes) or await self.uploads.has(tenant, ref, size_bytes)

    async def lasting(self, tenant: str, ref: str, size_bytes: int) -> bool:
        """Whether the blob is committed: an upload ages out (``UPLOAD_MAX_AGE_S``)."""
        return await super().has(tenant, ref, size_bytes)


class BlobBuckets:
    """A tenant's blobs as readers see them: its own committed bucket, then
    the shared one (trusted writers', and blobs stored before tenant buckets).

    A bucket is looked up by ``$JS.API.STREAM.NAMES`` before it is opened:
    that a reader may always ask, while a tenant bucket's own API subjects
    are granted only for the tenants its NATS config was rendered for. An
    absent bucket is looked up again on the next read (it may be created
    meanwhile); an opened one is kept. Only ``ensure`` and ``ensure_uploads``
    create, and only ``commit_upload`` writes (the sequencer's)."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        subjects: Subjects = Subjects(),
        replicas: int = 1,
        timeout_s: float = 10.0,
        blob_bytes: Callable[[str], int | None] = lambda tenant_token: None,
    ) -> None:
        self._js = js
        self._subjects = subjects
        self._replicas = replicas
        self.timeout_s = timeout_s
        self.shared = bucket_name(subjects)
        self._open: dict[str, BlobStore] = {}
        # A tenant's byte limit, by subject token: bounds its buckets (``ensure``).
        self._blob_bytes = blob_bytes

    async def ensure(self, tenant_token: str | None = None) -> BlobStore:
        """Open a tenant's committed bucket (None: the shared one), creating it if missing."""
        if tenant_token is None:
            return await self._ensure(self.shared, blob_bucket_config(self._replicas))
        name = tenant_bucket_name(tenant_token, self._subjects)
        return await self._ensure(name, blob_bucket_config(self._replicas, self._blob_bytes(tenant_token)))

    async def ensure_uploads(self, tenant_token: str) -> BlobStore:
        """Open a tenant's uploads bucket, creating it if missing."""
        name = tenant_uploads_bucket_name(tenant_token, self._subjects)
        return await self._ensure(name, uploads_bucket_config(self._replicas, self._blob_bytes(tenant_token)))

    async def _ensure(self, name: str, config: ObjectStoreConfig) -> BlobStore:
        """Open (creating) a bucket; one that was there gets ``config``'s byte
        limit, which the tenants file may have changed since."""
        if name not in self._open:
            store = await BlobStore.open(self._js, bucket=name, config=config, timeout_s=self.timeout_s)
            try:
                await bound_bucket(self._js, name, config.max_bytes)
            except Exception as exc:
                raise LedgerUnavailable(
                    f"bound blob bucket {name}: {type(exc).__name__}: {exc}", bucket=name
                ) from exc
            self._open[name] = store
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
        """The buckets that may hold this tenant's committed blobs, in reading order."""
        found = []
        for name in (tenant_bucket_name(tenant_token, self._subjects), self.shared):
            store = await self._existing(name)
            if store is not None:
                found.append(store)
        return found

    async def missing(self, tenant_token: str, refs: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The ``(ref, size_bytes)`` of ``refs`` in none of the tenant's
        buckets of committed blobs (an upload is not there yet)."""
        for store in await self.stores(tenant_token):
            if not refs:
                break
            refs = await store.missing(tenant_token, refs)
        return refs

    async def uploaded(self, tenant_token: str, refs: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The ``(ref, size_bytes)`` of ``refs`` the tenant may have uploaded,
        looked up concurrently: one round of lookups, so references to blobs
        nobody uploaded are refused without a copy tried for each. Whether
        an upload is the blob is ``commit_upload``'s to find (an unreadable
        one is kept here for it to refuse)."""
        uploads = await self._existing(tenant_uploads_bucket_name(tenant_token, self._subjects))
        if uploads is None:
            return []
        try:
            infos = await uploads.infos(tenant_token, [ref for ref, _ in refs])
        except IntegrityError:  # an unreadable upload among them: kept for commit_upload to refuse
            each = await asyncio.gather(
                *(uploads._info(tenant_token, ref) for ref, _ in refs), return_exceptions=True
            )
            return [r for r, info in zip(refs, each, strict=True) if info is not None]
        return [(ref, size) for ref, size in refs if infos[ref] is not None]

    async def commit_upload(
        self, tenant_token: str, ref: str, size_bytes: int, *, redactor: Redactor | None = None
    ) -> bool:
        """Copy the tenant's upload of this blob into its committed bucket
        (the sequencer, before an append referencing it commits): False
        when the tenant has no such upload; ``IntegrityError`` when the
        upload is not that blob (``BlobStore.read_upload``). With a
        ``redactor``, an upload holding a secret-shaped value is erased and
        ``InvalidRequest`` (``reason: "blob_secret"``, the ``rules``) raised:
        a blob cannot be redacted (it is named by its hash), so it is refused."""
        uploads = await self._existing(tenant_uploads_bucket_name(tenant_token, self._subjects))
        if uploads is None:
            return False
        data = await uploads.read_upload(tenant_token, ref, size_bytes)
        if data is None:
            return False
        if redactor is not None:
            # The whole blob at once (its size is bounded), off the event loop.
            rules = await asyncio.to_thread(secret_rules, data, redactor)
            if rules:
                await uploads.discard_upload(tenant_token, ref)
                raise InvalidRequest(
                    "the blob holds secret-shaped values; a blob is named by its hash and cannot be "
                    "redacted, so it is refused and its upload erased: redact the value, then store it",
                    reason="blob_secret",
                    ref=ref,
                    rules=sorted(rules),
                )
        committed = await self.ensure(tenant_token)
        await committed._upload(tenant_token, ref, data)
        try:
            # Erased, not purged: a purge leaves the bytes, and the name (the
            # blob's SHA-256), in the stream's files, where an erasure of the
            # committed copy would not reach them (spec/erasure.md, "Blobs").
            await uploads.discard_upload(tenant_token, ref)
        except LedgerError as exc:  # it ages out instead
            log.warning("could not discard the copied upload of %s: %s", ref, exc)
        return True

    async def erase(self, tenant_token: str, refs: list[str]) -> list[str]:
        """Erase these blobs of the tenant from each bucket that may hold
        them (its own committed one and the shared one, where a trusted
        writer's are, named by the tenant's token): the refs that were there."""
        erased = []
        for ref in refs:
            found = [await store.erase(tenant_token, ref) for store in await self.stores(tenant_token)]
            if any(found):
                erased.append(ref)
        return erased

    async def get(self, tenant: str, ref: str) -> bytes:
        """The blob's bytes from the first bucket holding it (``BlobStore.get``)."""
        for store in await self.stores(token(tenant)):
            try:
                return await store.get(tenant, ref)
            except EntityNotFound:
                continue
        raise EntityNotFound("no such blob", kind="blob", ref=f"sha256:{hex_of(ref)}")
