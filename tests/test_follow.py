"""StreamFollower: reads the committed stream in order from a position, goes
live, and resumes exactly after the last position a service applied."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from polling import eventually

from laneledger.runtime.follow import StreamFollower


async def publish(js, first: int, last: int) -> None:
    for n in range(first, last + 1):
        await js.publish("ledger.events.t.s.r.l", str(n).encode())


async def collect(follower: StreamFollower, after: int, until: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    async with aclosing(follower.batches(after=after)) as batches:
        async for batch in batches:
            got.extend(batch)
            if got[-1][0] >= until:
                return got
    raise AssertionError("the follower stopped")


async def test_backfills_then_goes_live_in_order(nc, js):
    await js.add_stream(name="LEDGER_EVENTS", subjects=["ledger.events.>"])
    await publish(js, 1, 1200)
    follower = StreamFollower(nc, name="test-follow", batch_size=300)
    later = asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(publish(js, 1201, 1300)))
    got = await asyncio.wait_for(collect(follower, after=100, until=1300), 20)
    later.cancel()
    assert [p for p, _ in got] == list(range(101, 1301))
    assert all(int(body) == position for position, body in got)
    assert await follower.refresh_stream_last() == 1300


async def test_resumes_exactly_after_a_position(nc, js):
    await js.add_stream(name="LEDGER_EVENTS", subjects=["ledger.events.>"])
    await publish(js, 1, 50)
    first = await asyncio.wait_for(collect(StreamFollower(nc, name="a"), after=0, until=20), 10)
    applied = 20  # what a service would have stored with its derived state
    assert first[-1][0] >= applied
    second = await asyncio.wait_for(collect(StreamFollower(nc, name="a"), after=applied, until=50), 10)
    assert [p for p, _ in second] == list(range(21, 51))
    info = await js.consumers_info("LEDGER_EVENTS")
    assert info == []  # the ephemeral consumer is gone once the follower stops


async def test_survives_a_nats_server_restart(nats_server, nc, js):
    await js.add_stream(name="LEDGER_EVENTS", subjects=["ledger.events.>"])
    await publish(js, 1, 10)
    follower = StreamFollower(nc, name="restart", stall_check_s=0.5)
    got: list[tuple[int, bytes]] = []

    async def follow() -> None:
        async with aclosing(follower.batches(after=0)) as batches:
            async for batch in batches:
                got.extend(batch)
                if got[-1][0] >= 20:
                    return

    task = asyncio.create_task(follow())
    await eventually(lambda: len(got), until=lambda n: n >= 10, what="the first 10 events followed")
    await nats_server.arestart()  # its consumer (in memory) is gone after this
    await eventually(lambda: nc.is_connected, what="the client to reconnect")
    await publish(js, 11, 20)
    await asyncio.wait_for(task, 30)
    assert [p for p, _ in got] == list(range(1, 21))
