"""Artifact blobs: a JetStream object store bucket, content-addressed.

Producers upload a blob under ``sha256/<hex>`` (``CheckpointClient.put_artifact``)
before saving the checkpoint that references it. Living in JetStream, the
blobs are reachable by every producer over the same NATS connection and
survive the service's own disk. The bucket can be written by producers, so
the service never trusts a name: before a save references a blob it checks
that it exists with the referenced size and that its bytes hash to the name
(hashed once per stored version, remembered in the store by the object's
nuid, which changes whenever the object is replaced).
"""

from __future__ import annotations

import hashlib
from typing import Any, Awaitable, Callable

from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from laneledger.checkpoints import (
    ArtifactMismatch,
    artifact_name,
    artifact_timeout,
    object_call,
    object_store_digest,
)
from laneledger.clock import system_clock
from laneledger.errors import IntegrityError, LedgerUnavailable
from laneledger.model import ArtifactRef

from .store import CheckpointStore

Db = Callable[..., Awaitable[Any]]


class _Hasher:
    """A write-only sink for nats-py's ``get(writeinto=…)``: hashes and counts."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return len(data)


class ArtifactStore:
    def __init__(self, js: JetStreamContext, bucket: str, store: CheckpointStore, db: Db,
                 *, replicas: int = 1, timeout_s: float = 10.0) -> None:
        self._js = js
        self.bucket = bucket
        self._store = store
        self._db = db
        self._replicas = replicas
        self._timeout_s = timeout_s  # per call, plus time for the blob's size
        self._obs = None

    async def ensure(self) -> None:
        """Open the bucket, creating it (file storage, no expiry) if missing."""
        try:
            self._obs = await self._js.object_store(self.bucket)
        except NotFoundError:
            self._obs = await self._js.create_object_store(
                self.bucket,
                ObjectStoreConfig(description="laneledger checkpoint artifacts, by sha256",
                                  storage=StorageType.FILE, replicas=self._replicas),
            )

    def _bucket(self):
        if self._obs is None:
            raise LedgerUnavailable("the artifact bucket is not open yet", bucket=self.bucket)
        return self._obs

    async def verify(self, ref: ArtifactRef) -> None:
        """Refuse a reference whose blob is absent (``ArtifactMissing``), of
        another size (``ArtifactMismatch``), or whose bytes do not hash to its
        name (``IntegrityError``: the bucket holds bad data)."""
        obs = self._bucket()
        name = artifact_name(ref.sha256)
        info = await object_call("artifact info", ref.sha256, obs.get_info(name), self._timeout_s)
        if info.size != ref.size_bytes:
            raise ArtifactMismatch(
                "the stored artifact has another size than the reference",
                kind="artifact", id=ref.sha256, fields=["size_bytes"], size_bytes=ref.size_bytes,
                stored_size_bytes=info.size, reason=ArtifactMismatch.reason,
            )
        if info.digest != object_store_digest(ref.sha256):
            raise IntegrityError("the artifact stored under this sha256 has another digest",
                                 sha256=ref.sha256, stored_digest=info.digest)
        if await self._db(self._store.artifact_verified, ref.sha256, info.nuid):
            return
        sink = _Hasher()
        await object_call("read artifact", ref.sha256, obs.get(name, writeinto=sink),
                          artifact_timeout(self._timeout_s, info.size))
        if sink.sha.hexdigest() != ref.sha256 or sink.size != ref.size_bytes:
            raise IntegrityError("artifact bytes do not hash to their name", sha256=ref.sha256,
                                 size_bytes=sink.size)
        await self._db(self._store.mark_artifact, ref.sha256, sink.size, info.nuid, system_clock())

    async def read(self, sha256: str) -> bytes:
        """The blob's bytes, checked against the name (for the HTTP API)."""
        obs, name = self._bucket(), artifact_name(sha256)
        info = await object_call("artifact info", sha256, obs.get_info(name), self._timeout_s)
        found = await object_call("read artifact", sha256, obs.get(name),
                                  artifact_timeout(self._timeout_s, info.size or 0))
        data = found.data or b""
        if hashlib.sha256(data).hexdigest() != sha256:
            raise IntegrityError("artifact bytes do not hash to their name", sha256=sha256)
        return data
