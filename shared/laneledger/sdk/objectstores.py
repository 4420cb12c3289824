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

from typing import Any

from nats.js.api import ObjectStoreConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.object_store import OBJ_CHUNKS_PRE_TEMPLATE, ObjectStore

# Every chunk of an object but the last holds at least this much (nats-py
# writes 128 KiB chunks): bounds the reads of one object to size / 16 KiB + 1,
# however finely a hostile producer cut it.
MIN_CHUNK_BYTES = 16 << 10


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


async def read_chunks(js: JetStreamContext, bucket: str, nuid: str, size_bytes: int) -> bytes:
    """The chunks on ``$O.<bucket>.C.<nuid>`` in stream order, until
    ``size_bytes`` are read, there are no more, or one but the last is
    shorter than ``MIN_CHUNK_BYTES``. The caller checks what it got (size,
    digest): the metadata naming ``nuid`` may be a hostile producer's."""
    subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=bucket, obj=nuid)
    stream = stream_of(bucket)
    data = bytearray()
    seq = 1
    while len(data) < size_bytes:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            break
        if msg.seq is None:
            break
        chunk = msg.data or b""
        data += chunk
        if len(data) < size_bytes and len(chunk) < MIN_CHUNK_BYTES:
            break
        seq = msg.seq + 1
    return bytes(data)
