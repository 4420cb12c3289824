"""StreamFollower on a stream with a sequence genuinely missing (a message
deleted): a verifier's follower (``on_gap="fail"``) names the gap once, with
its position; a service's follower (``on_gap="reread"``, the default) never
skips it, re-reading from its last position instead (runtime/follow.py)."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing

import pytest

from laneledger.runtime.follow import StreamFollower, StreamGap


async def stream_with_a_hole(js, last: int, deleted: int) -> None:
    await js.add_stream(name="LEDGER_EVENTS", subjects=["ledger.events.>"])
    for n in range(1, last + 1):
        await js.publish("ledger.events.t.s.r.l", str(n).encode())
    await js.delete_msg("LEDGER_EVENTS", deleted)


async def test_fail_hands_out_what_precedes_the_gap_then_names_it(nc, js):
    await stream_with_a_hole(js, last=10, deleted=5)
    follower = StreamFollower(nc, name="verify", on_gap="fail")
    got: list[tuple[int, bytes]] = []

    async def follow() -> None:
        async with aclosing(follower.batches(after=0)) as batches:
            async for batch in batches:
                got.extend(batch)

    with pytest.raises(StreamGap) as gap:
        await asyncio.wait_for(follow(), 10)
    assert [(p, int(body)) for p, body in got] == [(n, n) for n in range(1, 5)]
    assert (gap.value.position, gap.value.sequence) == (5, 6)
    assert follower.position == 4
    assert await js.consumers_info("LEDGER_EVENTS") == []  # the consumer went with it


async def test_fail_reads_in_steps_a_caller_bounds(nc, js):
    await stream_with_a_hole(js, last=10, deleted=8)
    follower = StreamFollower(nc, name="steps", on_gap="fail")
    await follower.open(after=2)
    try:
        got: list[int] = []
        while len(got) < 3:
            got.extend(p for p, _ in await follower.read(3 - len(got)))
        assert got == [3, 4, 5]  # no more than asked for; the rest stays buffered

        async def read_on() -> None:
            while True:
                got.extend(p for p, _ in await follower.read())

        with pytest.raises(StreamGap) as gap:
            await asyncio.wait_for(read_on(), 10)
        assert (gap.value.position, gap.value.sequence) == (8, 9)
        assert got == [3, 4, 5, 6, 7]
    finally:
        await follower.close()


async def test_reread_never_skips_a_missing_position(nc, js, caplog):
    await stream_with_a_hole(js, last=10, deleted=5)
    follower = StreamFollower(nc, name="service")
    got: list[int] = []
    rereads = 0
    await follower.open(after=0)
    try:
        deadline = time.monotonic() + 20
        while rereads < 4:  # the same hole, re-read again and again: paced, never skipped
            assert time.monotonic() < deadline, f"{rereads} re-reads; got {got}"
            got.extend(p for p, _ in await follower.read())
            rereads = caplog.text.count("gap after position 4")
    finally:
        await follower.close()
    assert got == [1, 2, 3, 4]
    assert follower.position == 4
