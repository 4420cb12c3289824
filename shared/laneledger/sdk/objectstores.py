"""JetStream object stores opened bound to their stream, and read without a consumer.

nats-py reads an object's chunks through ``JetStreamContext.subscribe``
without naming the stream, so every read first asks
``$JS.API.STREAM.NAMES`` which stream holds the chunks. A producer that may
ask that may ask it without a filter, too, and get every stream's name,
tenants' bucket names (``LEDGER_BLOBS_<tenant>``) among them. Bound here,
reads name their stream (``OBJ_<bucket>``) and never ask; ``deploy/nats.conf``
does not grant ``STREAM.NAMES`` to producers (spec/wire.md, "NATS users and
tenants").

nats-py also reads an object through a push consumer, and a push consumer
delivers to whatever subject its creator names: a tenant allowed to create
one on its own bucket could have JetStream deliver its chunks into another
tenant's inbox. ``read_chunks`` reads an object message by message
(``STREAM.MSG.GET``, next by subject), so no producer needs to create
consumers, and none may.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from nats.js.api import ObjectInfo, ObjectStoreConfig, RawStreamMsg
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.object_store import OBJ_CHUNKS_PRE_TEMPLATE, OBJ_META_PRE_TEMPLATE, ObjectStore

# Every chunk of an object but the last holds at least this much (nats-py
# writes 128 KiB chunks): bounds the reads of one object to size / 16 KiB + 1,
# however finely a hostile producer cut it.
MIN_CHUNK_BYTES = 16 << 10
_NUID = re.compile(r"[A-Za-z0-9]{1,64}")  # an object's chunk subject token, as nats-py makes it


def stream_of(bucket: str) -> str:
    return f"OBJ_{bucket}"


class _StreamBound:
    """``js`` with ``subscribe`` bound to one stream; everything else as is."""

    def __init__(self, js: JetStreamContext, stream: str) -> None:
        self._js = js
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._js, name)

    async def subscribe(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("stream", self._stream)
        return await self._js.subscribe(subject, *args, **kwargs)


def bound(js: JetStreamContext, bucket: str) -> ObjectStore:
    stream = stream_of(bucket)
    return ObjectStore(name=bucket, stream=stream, js=_StreamBound(js, stream))  # type: ignore[arg-type]


async def open_object_store(js: JetStreamContext, bucket: str) -> ObjectStore:
    """An existing bucket (nats-py's ``BucketNotFoundError``/``NotFoundError``
    when absent), bound to its stream."""
    await js.object_store(bucket)  # the existence check (STREAM.INFO)
    return bound(js, bucket)


async def create_object_store(js: JetStreamContext, bucket: str, config: ObjectStoreConfig) -> ObjectStore:
    await js.create_object_store(bucket, config)
    return bound(js, bucket)


async def bound_bucket(js: JetStreamContext, bucket: str, max_bytes: int | None) -> None:
    """Give a bucket's stream this byte limit (None: unlimited) if it has
    another: a tenant's quota (``laneledger.runtime.tenants``) may change
    after its bucket was created. A full bucket refuses new chunks (discard
    new), which ``pubacks.limit_reached_by`` recognises."""
    stream = stream_of(bucket)
    wanted = -1 if max_bytes is None else max_bytes
    info = await js.stream_info(stream)
    if (info.config.max_bytes or -1) != wanted:
        await js.update_stream(info.config.evolve(max_bytes=wanted))


async def _chunk_msgs(js: JetStreamContext, stream: str, subject: str) -> AsyncIterator[RawStreamMsg]:
    """The messages on ``subject`` in stream order, one ``STREAM.MSG.GET`` each."""
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return
        if msg.seq is None:
            return
        yield msg
        seq = msg.seq + 1


async def read_chunks(js: JetStreamContext, bucket: str, nuid: str, size_bytes: int) -> bytes:
    """The chunks on ``$O.<bucket>.C.<nuid>`` in stream order, until
    ``size_bytes`` are read, there are no more, or one but the last is
    shorter than ``MIN_CHUNK_BYTES``. The caller checks what it got (size,
    digest): the metadata naming ``nuid`` may be a hostile producer's."""
    subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=bucket, obj=nuid)
    data = bytearray()
    if size_bytes <= 0:
        return b""
    async for msg in _chunk_msgs(js, stream_of(bucket), subject):
        chunk = msg.data or b""
        data += chunk
        if len(data) >= size_bytes or len(chunk) < MIN_CHUNK_BYTES:
            break
    return bytes(data)


async def erase_chunks(js: JetStreamContext, bucket: str, nuid: str, max_msgs: int) -> int:
    """Erase up to ``max_msgs`` chunks on ``$O.<bucket>.C.<nuid>``: a
    JetStream message delete overwrites the stored bytes, where a purge only
    marks them removed. How many were erased."""
    stream = stream_of(bucket)
    subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=bucket, obj=nuid)
    erased = 0
    async for msg in _chunk_msgs(js, stream, subject):
        assert msg.seq is not None  # _chunk_msgs yields numbered messages only
        await js.delete_msg(stream, msg.seq)
        erased += 1
        if erased >= max_msgs:
            break
    return erased


def names_own_chunks(info: ObjectInfo) -> bool:
    """Whether an object's metadata names chunks of its own: not a link, and
    a chunk subject token as nats-py makes it (no wildcard widening a read)."""
    return not info.is_link() and isinstance(info.nuid, str) and _NUID.fullmatch(info.nuid) is not None


def meta_subject(bucket: str, name: str) -> str:
    """The subject of an object's metadata (nats-py's naming)."""
    return OBJ_META_PRE_TEMPLATE.format(bucket=bucket, obj=base64.urlsafe_b64encode(name.encode()).decode())


async def erase_object(js: JetStreamContext, bucket: str, name: str) -> bool:
    """Erase an object so that neither its bytes nor its name stay in the
    stream's files: each chunk message, then each message of its metadata
    (which names it, and holds its digest), is deleted with
    ``STREAM.MSG.DELETE``, which overwrites the stored message; a purge only
    marks it removed, and nats-py's ``delete`` would write a delete marker
    naming the object again. Whether a live object was there (False: none,
    or one erased already, whose remains are erased all the same)."""
    stream = stream_of(bucket)
    metas = [msg async for msg in _chunk_msgs(js, stream, meta_subject(bucket, name))]
    if not metas:
        return False
    try:
        info: ObjectInfo | None = ObjectInfo.from_response(json.loads(metas[-1].data or b"{}"))
    except (ValueError, TypeError, KeyError):  # unreadable metadata: there is no chunk to find
        info = None
    live = info is not None and not info.deleted
    if info is not None and names_own_chunks(info):
        # As many chunks as a read of it takes (the bound of ``read_chunks``).
        await erase_chunks(js, bucket, info.nuid, (info.size or 0) // MIN_CHUNK_BYTES + 1)
    for msg in metas:
        assert msg.seq is not None  # _chunk_msgs yields numbered messages only
        await js.delete_msg(stream, msg.seq)
    return live
