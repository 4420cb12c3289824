"""Atomic batch publish (laneledger.store.atomicbatch, ADR-50) on a real
nats-server: a batch is stored whole at consecutive sequences with one ack,
or not at all; the first message's expected sequence fences it."""

from __future__ import annotations

import asyncio

import pytest
from loop_turns import publishes_between_turns
from nats.js.api import StreamConfig
from polling import eventually

from laneledger.store.atomicbatch import (
    ATOMIC_DISABLED,
    BATCH_ID,
    BATCH_SEQUENCE,
    EXPECTED_LAST_SEQUENCE,
    MAX_BYTES,
    MAX_MESSAGES,
    WRONG_LAST_SEQUENCE,
    YIELD_EVERY,
    batches,
    publish_batch,
    supports_atomic,
)


def test_batches_are_cut_at_the_message_and_byte_bounds():
    assert batches([]) == []
    assert batches([10] * 3) == [range(3)]
    assert batches([1] * (MAX_MESSAGES + 1)) == [range(MAX_MESSAGES), range(MAX_MESSAGES, MAX_MESSAGES + 1)]
    half = MAX_BYTES // 2
    assert batches([half, half, 1, half]) == [range(2), range(2, 4)]
    assert batches([MAX_BYTES + 1, 1]) == [range(1), range(1, 2)]  # too big: alone


async def stream(js, name: str, atomic: bool) -> None:
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], allow_atomic=atomic or None))


async def messages_of(js, name: str) -> list[tuple[int, str, bytes]]:
    info = await js.stream_info(name)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1) if info.state.messages else ():
        msg = await js.get_msg(name, seq)
        found.append((seq, msg.subject, msg.data))
    return found


async def test_a_batch_is_stored_whole_at_consecutive_sequences_with_one_ack(nc, js):
    assert supports_atomic(nc)
    await stream(js, "A", atomic=True)
    await js.publish("a.before", b"0")
    ack = await publish_batch(nc, [("a.x", b"1"), ("a.y", b"2"), ("a.z", b"3")], expected_last_sequence=1)
    assert ack.error is None and (ack.seq, ack.count) == (4, 3)
    assert await messages_of(js, "A") == [
        (1, "a.before", b"0"),
        (2, "a.x", b"1"),
        (3, "a.y", b"2"),
        (4, "a.z", b"3"),
    ]
    full = await publish_batch(nc, [("a.many", b"m")] * MAX_MESSAGES, expected_last_sequence=4)
    assert (full.seq, full.count) == (4 + MAX_MESSAGES, MAX_MESSAGES)
    with pytest.raises(ValueError, match="1 to 1000"):
        await publish_batch(nc, [("a.many", b"m")] * (MAX_MESSAGES + 1))
    with pytest.raises(ValueError, match="1 to 1000"):
        await publish_batch(nc, [])


async def test_a_large_batch_gives_the_event_loop_back_while_it_publishes(nc, js, monkeypatch):
    await stream(js, "A", atomic=True)
    ack, steps = await publishes_between_turns(
        nc,
        monkeypatch,
        publish_batch(nc, [("a.many", b"m")] * MAX_MESSAGES, expected_last_sequence=0),
        publishes=MAX_MESSAGES,
    )
    assert ack.count == MAX_MESSAGES
    assert max(steps) <= YIELD_EVERY, steps


async def test_a_batch_cancelled_while_it_publishes_is_still_sent_whole(nc, js, monkeypatch):
    await stream(js, "A", atomic=True)
    sent = 0
    publish = nc.publish
    given_back = asyncio.Event()  # the batch has given the loop back once

    async def counted(*args, **kwargs):
        nonlocal sent
        sent += 1
        if sent == YIELD_EVERY:
            given_back.set()
        return await publish(*args, **kwargs)

    monkeypatch.setattr(nc, "publish", counted)
    publishing = asyncio.create_task(
        publish_batch(nc, [("a.many", b"m")] * MAX_MESSAGES, expected_last_sequence=0)
    )
    await given_back.wait()
    assert sent < MAX_MESSAGES
    publishing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await publishing
    assert sent == MAX_MESSAGES  # the commit went out, with no wait for its answer
    await eventually(
        lambda: js.stream_info("A"),
        until=lambda info: info.state.messages == MAX_MESSAGES,
        what="the cancelled batch to be stored whole",
    )


async def test_a_refused_batch_stores_nothing(nc, js):
    await stream(js, "A", atomic=True)
    await stream(js, "B", atomic=False)
    await publish_batch(nc, [("a.x", b"1")], expected_last_sequence=0)
    stale = await publish_batch(nc, [("a.x", b"2"), ("a.y", b"3")], expected_last_sequence=0)
    assert stale.error is not None and stale.error.err_code == WRONG_LAST_SEQUENCE
    disabled = await publish_batch(nc, [("b.x", b"1"), ("b.y", b"2")], expected_last_sequence=0)
    assert disabled.error is not None and disabled.error.err_code == ATOMIC_DISABLED
    assert await messages_of(js, "A") == [(1, "a.x", b"1")]
    assert await messages_of(js, "B") == []
    nobody = await publish_batch(nc, [("nobody.x", b"1")])
    assert nobody.error is not None and nobody.error.code == 503


async def test_a_message_landing_inside_a_batch_fences_it_out(nc, js):
    """Fencing by the first message's expected sequence: whatever another
    publisher stores between a batch's first message and its commit makes
    the commit fail, and nothing of the batch is stored."""
    await stream(js, "A", atomic=True)
    await nc.publish("a.1", b"1", headers={BATCH_ID: "b1", BATCH_SEQUENCE: "1", EXPECTED_LAST_SEQUENCE: "0"})
    await js.publish("a.foreign", b"f")
    ack = await publish_batch(nc, [("a.2", b"2")], expected_last_sequence=0)
    assert ack.error is not None and ack.error.err_code == WRONG_LAST_SEQUENCE
    assert await messages_of(js, "A") == [(1, "a.foreign", b"f")]


async def test_a_batch_never_committed_stores_nothing(nc, js):
    """A writer that dies between its batch's messages and the commit."""
    await stream(js, "A", atomic=True)
    for i in (1, 2):
        await nc.publish(f"a.{i}", b"x", headers={BATCH_ID: "dead", BATCH_SEQUENCE: str(i)})
    await nc.flush()
    assert await messages_of(js, "A") == []
    ack = await publish_batch(nc, [("a.after", b"y")], expected_last_sequence=0)
    assert (ack.seq, ack.count) == (1, 1)
