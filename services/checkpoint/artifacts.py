"""Artifact blobs: a JetStream object store bucket, content-addressed.

Producers upload a blob under ``sha256/<hex>`` (``CheckpointClient.put_artifact``)
before saving the checkpoint that references it. Living in JetStream, the
blobs are reachable by every producer over the same NATS connection and
survive the service's own disk. A tenant-scoped producer
(``<prefix>.checkpoint.<tenant>.<op>``) uses its tenant's own bucket,
``<bucket>_<tenant token>`` (``subjects.tenant_bucket``), which the service
creates on demand and NATS permissions confine it to; the trusted producer
uses the shared bucket. The bucket can be written by producers, so
the service never trusts a name: before a save references a blob it checks
that it exists with the referenced size and that its bytes hash to the name
(hashed once per stored version, remembered in the store by the object's
nuid, which changes whenever the object is replaced).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.object_store import ObjectStore

from laneledger.contract.clock import system_clock
from laneledger.contract.errors import IntegrityError, InvalidRequest, LedgerUnavailable
from laneledger.contract.model import ArtifactRef
from laneledger.contract.redaction import Redactor
from laneledger.contract.secretscan import json_secret_rules
from laneledger.contract.subjects import tenant_bucket
from laneledger.runtime.tenants import Tenants
from laneledger.sdk.checkpoints import (
    ArtifactMismatch,
    ArtifactMissing,
    artifact_name,
    artifact_timeout,
    is_json_media_type,
    object_call,
    object_store_digest,
)
from laneledger.sdk.objectstores import bound_bucket, create_object_store, erase_object, open_object_store

from .store import CheckpointStore

if TYPE_CHECKING:
    from typing_extensions import Buffer

Db = Callable[..., Awaitable[Any]]


class _Hasher(io.BufferedIOBase):
    """A write-only sink for nats-py's ``get(writeinto=…)``: hashes and counts,
    and keeps the bytes when asked (a JSON artifact, to look for secrets).
    A ``BufferedIOBase`` since that is what nats-py asks for; it calls ``write`` only."""

    def __init__(self, *, keep: bool = False) -> None:
        super().__init__()
        self.sha = hashlib.sha256()
        self.size = 0
        self.kept: bytearray | None = bytearray() if keep else None

    def write(self, data: Buffer, /) -> int:
        chunk = memoryview(data)
        self.sha.update(chunk)
        self.size += chunk.nbytes
        if self.kept is not None:
            self.kept += chunk
        return chunk.nbytes


class ArtifactStore:
    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        store: CheckpointStore,
        db: Db,
        *,
        replicas: int = 1,
        timeout_s: float = 10.0,
        tenants: Tenants | None = None,
    ) -> None:
        self._js = js
        self._tenants = tenants  # bounds each tenant bucket by its artifact_bytes
        self.bucket = bucket
        self._store = store
        self._db = db
        self._replicas = replicas
        self._timeout_s = timeout_s  # per call, plus time for the blob's size
        self._open: dict[str, ObjectStore] = {}  # bucket name -> its object store

    def name_for(self, tenant: str | None) -> str:
        """The bucket of a tenant's scoped requests; None: the shared one."""
        return self.bucket if tenant is None else tenant_bucket(self.bucket, tenant)

    async def ensure(self, tenant: str | None = None) -> str:
        """Open a bucket, creating it (file storage, no expiry) if missing;
        its name."""
        name = self.name_for(tenant)
        if name not in self._open:
            max_bytes = (
                self._tenants.limits_of(tenant).artifact_bytes
                if self._tenants is not None and tenant is not None
                else None
            )
            try:
                try:
                    obs = await open_object_store(self._js, name)
                    await bound_bucket(self._js, name, max_bytes)
                except NotFoundError:
                    obs = await create_object_store(
                        self._js,
                        name,
                        ObjectStoreConfig(
                            description="laneledger checkpoint artifacts, by sha256",
                            storage=StorageType.FILE,
                            replicas=self._replicas,
                            max_bytes=max_bytes,
                        ),
                    )
            except Exception as exc:
                raise LedgerUnavailable(f"cannot open the artifact bucket: {exc}", bucket=name) from exc
            self._open[name] = obs
        return name

    async def _bucket(self, tenant: str | None) -> ObjectStore:
        if self.bucket not in self._open:
            raise LedgerUnavailable("the artifact bucket is not open yet", bucket=self.bucket)
        return self._open[await self.ensure(tenant)]

    async def verify(
        self, ref: ArtifactRef, tenant: str | None = None, *, redactor: Redactor | None = None
    ) -> None:
        """Refuse a reference whose blob is absent from the bucket of
        ``tenant`` (``ArtifactMissing``), of another size (``ArtifactMismatch``),
        or whose bytes do not hash to its name (``IntegrityError``: the bucket
        holds bad data); with a ``redactor``, also a JSON artifact holding a
        secret-shaped value (``InvalidRequest``: an artifact is immutable, so
        it cannot be redacted; the SDK redacts state before it spills it)."""
        obs = await self._bucket(tenant)
        name = artifact_name(ref.sha256)
        info = await object_call("artifact info", ref.sha256, obs.get_info(name), self._timeout_s)
        if info.size != ref.size_bytes:
            raise ArtifactMismatch(
                "the stored artifact has another size than the reference",
                kind="artifact",
                id=ref.sha256,
                fields=["size_bytes"],
                size_bytes=ref.size_bytes,
                stored_size_bytes=info.size,
                reason=ArtifactMismatch.reason,
            )
        if info.digest != object_store_digest(ref.sha256):
            raise IntegrityError(
                "the artifact stored under this sha256 has another digest",
                sha256=ref.sha256,
                stored_digest=info.digest,
            )
        if await self._db(self._store.artifact_verified, ref.sha256, info.nuid):
            return
        json_artifact = redactor is not None and is_json_media_type(ref.media_type)
        sink = _Hasher(keep=json_artifact)
        await object_call(
            "read artifact",
            ref.sha256,
            obs.get(name, writeinto=sink),
            artifact_timeout(self._timeout_s, info.size),
        )
        if sink.sha.hexdigest() != ref.sha256 or sink.size != ref.size_bytes:
            raise IntegrityError(
                "artifact bytes do not hash to their name", sha256=ref.sha256, size_bytes=sink.size
            )
        if redactor is not None and sink.kept is not None:
            _refuse_secrets(bytes(sink.kept), ref, redactor)
        await self._db(self._store.mark_artifact, ref.sha256, sink.size, info.nuid, system_clock())

    async def _existing(self, tenant: str | None) -> ObjectStore | None:
        """A bucket to read from, or None when that tenant has none: a read
        never creates one. Asked with STREAM.NAMES, which the service's user
        may always publish, unlike STREAM.INFO of a tenant bucket that a
        config rendered without that tenant grants no rights on."""
        name = self.name_for(tenant)
        if tenant is None or name in self._open:
            return await self._bucket(tenant)
        try:
            await self._js.find_stream_name_by_subject(f"$O.{name}.M.>")
        except NotFoundError:
            return None
        except Exception as exc:
            raise LedgerUnavailable(f"cannot look up the artifact bucket: {exc}", bucket=name) from exc
        return await self._bucket(tenant)

    async def read(self, sha256: str, tenants: Sequence[str | None] = (None,)) -> bytes:
        """The blob's bytes from the first of these tenants' buckets that
        holds it (None: the shared one), checked against the name (for the
        HTTP API)."""
        name = artifact_name(sha256)
        for tenant in tenants:
            obs = await self._existing(tenant)
            if obs is None:
                continue
            try:
                info = await object_call("artifact info", sha256, obs.get_info(name), self._timeout_s)
                break
            except ArtifactMissing:
                continue
        else:
            raise ArtifactMissing(
                "no such artifact in the bucket", kind="artifact", id=sha256, reason=ArtifactMissing.reason
            )
        found = await object_call(
            "read artifact", sha256, obs.get(name), artifact_timeout(self._timeout_s, info.size or 0)
        )
        data = found.data or b""
        if hashlib.sha256(data).hexdigest() != sha256:
            raise IntegrityError("artifact bytes do not hash to their name", sha256=sha256)
        return data

    async def erase(self, sha256: str, tenant: str | None = None) -> bool:
        """Erase a blob from ``tenant``'s bucket so that its bytes and its
        name leave the stream's files (``objectstores.erase_object``: every
        chunk and metadata message overwritten). False when there was none."""
        if await self._existing(tenant) is None:
            return False
        erasing = erase_object(self._js, self.name_for(tenant), artifact_name(sha256))
        return await object_call("erase artifact", sha256, erasing, self._timeout_s)


def _refuse_secrets(data: bytes, ref: ArtifactRef, redactor: Redactor) -> None:
    rules = json_secret_rules(data, redactor)  # None: not JSON after all, opaque bytes
    if rules:
        raise InvalidRequest(
            "the JSON artifact holds secret-shaped values; an artifact cannot be redacted, so "
            "save the state redacted (the SDK does)",
            path="$.checkpoint.artifact",
            sha256=ref.sha256,
            rules=sorted(rules),
        )
