"""JetStream atomic batch publish (ADR-50, nats-server 2.12+) on nats-py's core API.

nats-py has no batch publish. A batch is ordinary publishes with headers:
each message ``Nats-Batch-Id`` (one id per batch) and ``Nats-Batch-Sequence``
(1, 2, …), the last also ``Nats-Batch-Commit: 1``. The server holds the
messages until the commit and then stores all of them, at consecutive
sequences, or none; only the commit is a request, answered by one PubAck
naming the last message's sequence. So a batch of n messages costs one
acknowledgement (and, with ``sync_interval: always``, one fsync) instead of
n, and nothing else can land between its messages.

Fencing: ``Nats-Expected-Last-Sequence`` goes on the first message only; the
server checks it at the commit against the stream as it was before the
batch, so a batch lands only right after the sequence its writer expects.

The stream must allow it (``allow_atomic: true``); a server before 2.12 does
not know the headers and would store the messages one by one, so callers use
``supports_atomic`` before they rely on it. A batch the server did not hear
committed (a writer that died, a lost connection) is abandoned by the server
after 10 s without traffic: nothing of it is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.nuid import NUID

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
EXPECTED_LAST_SEQUENCE = "Nats-Expected-Last-Sequence"
# The server's limit on messages in one batch (ADR-50).
MAX_MESSAGES = 1000
# Our own bound on the bytes of one batch: the server holds them in memory
# until the commit.
MAX_BYTES = 8 * 1024 * 1024
# A batch's publishes give the event loop back this often: a thousand of
# them in one go held the sequencer's loop for about 4 ms, and a small
# request of another tenant waited behind it (tests/test_adversarial.py,
# the events flood: globex p99 27.5 -> 23.7 ms, mean of six runs each).
YIELD_EVERY = 64
MIN_SERVER = (2, 12, 0)
ATOMIC_DISABLED = 10174  # the stream does not allow atomic publish
WRONG_LAST_SEQUENCE = 10071


class BatchError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class BatchAck(msgspec.Struct):
    """The commit's PubAck: ``seq`` is the last message's sequence, ``count``
    how many the batch stored; ``error`` set when the batch was refused."""

    stream: str | None = None
    seq: int | None = None
    batch: str | None = None
    count: int = 0
    error: BatchError | None = None


class BatchUnanswered(Exception):
    """The commit was not answered in time: the batch may or may not be stored."""


_decode = msgspec.json.Decoder(BatchAck).decode
_ids = NUID()


def supports_atomic(nc: NATS) -> bool:
    """Whether the connected server knows atomic batches (2.12 or newer)."""
    version = nc.connected_server_version
    return (version.major, version.minor, version.patch) >= MIN_SERVER


def batches(sizes: Sequence[int]) -> list[range]:
    """Cut messages of these sizes (bytes) into consecutive batches within
    ``MAX_MESSAGES`` and ``MAX_BYTES`` (a message larger than ``MAX_BYTES``
    is a batch alone)."""
    found: list[range] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start == MAX_MESSAGES or total + size > MAX_BYTES):
            found.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        found.append(range(start, len(sizes)))
    return found


async def publish_batch(
    nc: NATS,
    messages: Sequence[tuple[str, bytes]],
    *,
    expected_last_sequence: int | None = None,
    per_message_headers: Sequence[dict[str, str]] | None = None,
    timeout: float = 10.0,
) -> BatchAck:
    """Publish ``messages`` ((subject, body), 1..``MAX_MESSAGES`` of them) as
    one atomic batch and return the commit's ack, refusals included (its
    ``error``). ``per_message_headers[i]`` go on message i. Raises ``BatchUnanswered``
    when the commit is not answered within ``timeout``; cancelled, it raises
    once the whole batch is sent, commit included, or while it waits for the
    answer."""
    if not 1 <= len(messages) <= MAX_MESSAGES:
        raise ValueError(f"an atomic batch holds 1 to {MAX_MESSAGES} messages, not {len(messages)}")
    batch_id = _ids.next().decode()
    last = len(messages)
    # A cancel that comes while the messages go out is held until the commit
    # is sent, as when the loop was not given back: a batch is never left
    # half sent (a stopping sequencer's last mirror round still reaches the
    # stream; tests/test_sequencer_crash.py).
    cancelled = False
    for i, (subject, body) in enumerate(messages, 1):
        own = per_message_headers[i - 1] if per_message_headers is not None else {}
        message_headers = {**own, BATCH_ID: batch_id, BATCH_SEQUENCE: str(i)}
        if i == 1 and expected_last_sequence is not None:
            message_headers[EXPECTED_LAST_SEQUENCE] = str(expected_last_sequence)
        if i < last:
            await nc.publish(subject, body, headers=message_headers)
            if i % YIELD_EVERY == 0 and not cancelled:
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    cancelled = True
            continue
        message_headers[BATCH_COMMIT] = "1"
        if cancelled:
            await nc.publish(subject, body, headers=message_headers)
            raise asyncio.CancelledError
        try:
            reply = await nc.request(subject, body, timeout=timeout, headers=message_headers)
        except nats.errors.TimeoutError:
            unanswered = f"batch {batch_id} of {last}: no answer to its commit in {timeout}s"
            raise BatchUnanswered(unanswered) from None
        except nats.errors.NoRespondersError:
            return BatchAck(error=BatchError(code=503, description="no stream listens on this subject"))
    try:
        return _decode(reply.data)
    except msgspec.DecodeError:
        return BatchAck(error=BatchError(description=f"unreadable commit answer: {reply.data[:200]!r}"))
