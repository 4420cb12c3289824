"""A slow subscriber slows only itself and never loses an event, and the
tail's memory stays bounded while tens of thousands of events flow past it.

The tail runs as its own process (so its memory is its own: VmRSS from
/proc). 20,000 events of ~3.5 KB (about 70 MB of canonical JSON) are
appended while two subscribers follow the whole ledger: a fast one, and a
slow one that reads one frame at a time with pauses and, after its first
thousand frames, stops reading altogether until the fast one has everything.
Nothing is queued per subscriber in the tail (a subscriber is a cursor over
the read model), so the tail's resident memory must grow by far less than
what the slow subscriber has not yet read.
"""

from __future__ import annotations

import asyncio
import re
import socket

import aiohttp
import pytest
from polling import eventually
from tail_support import TailProcess, new_lane

from laneledger.sdk.client import LedgerClient, make_event

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

N = 20_000
# 3 KB inline: no single value over 1 KiB, so nothing becomes a content reference.
PAYLOAD = {"text": "x" * 1000, "more": "y" * 1000, "rest": "z" * 1000}
PER_APPEND = 200
RSS_GROWTH_LIMIT = 40 << 20  # bytes; the unread backlog peaks at ~60 MB


async def read_positions(response: aiohttp.ClientResponse, n: int, on_frame=None) -> list[int]:
    """Event ids of the next ``n`` event frames, one frame at a time; each
    frame's data must be the event at that position."""
    positions: list[int] = []
    current: int | None = None
    while len(positions) < n:
        line = await response.content.readline()
        assert line, f"the stream ended after {len(positions)} frames"
        if line.startswith(b"id: "):
            current = int(line[4:])
        elif line.startswith(b"data: ") and current is not None:
            assert b'"position":%d,' % current in line
            positions.append(current)
            current = None
            if on_frame is not None:
                await on_frame(len(positions))
    return positions


async def test_slow_subscriber_gets_everything_in_order_with_bounded_memory(
    client: LedgerClient, actor, nats_server, tmp_path
):
    lane = await new_lane(client, actor)
    tail = await TailProcess(nats_server.url, tmp_path / "tail", "--ring-size", "1024").start()
    samples: list[int] = []
    fast_done = asyncio.Event()
    baseline: list[int] = []

    async def sample_memory() -> None:
        for _ in range(int(150 / 0.1)):  # bounded: at most the test's length
            samples.append(tail.rss_bytes())
            await asyncio.sleep(0.1)  # the sampling period, not a wait

    async def write() -> None:
        head = 0
        for _ in range(N // PER_APPEND):
            events = [
                make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=PAYLOAD)
                for _ in range(PER_APPEND)
            ]
            receipt = await client.append(lane, head, events, timeout=60)
            head = receipt.last_seq

    async def slow_pace(read: int) -> None:
        if read == 1000:
            baseline.append(max(samples[-5:]))  # warm: ring full, caches in use
            # Stop reading while the rest of the ledger flows past (bounded wait).
            await asyncio.wait_for(fast_done.wait(), 150)
        elif read % 50 == 0:
            await asyncio.sleep(0.01)  # the scenario: a reader slower than the writer

    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    sampler = asyncio.create_task(sample_memory())
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async with (
                http.get(tail.url + "/api/v1/events") as slow,
                http.get(tail.url + "/api/v1/events") as fast,
            ):
                writer = asyncio.create_task(write())
                slow_reader = asyncio.create_task(read_positions(slow, N, slow_pace))
                fast_positions = await read_positions(fast, N)
                fast_done.set()
                await writer
                slow_positions = await slow_reader
            async with http.get(tail.url + "/metrics") as resp:
                metrics = await resp.text()
    finally:
        sampler.cancel()
        tail.stop()
    assert fast_positions == list(range(1, N + 1))
    assert slow_positions == list(range(1, N + 1))
    assert "laneledger_tail_frames_sent_total 40000.0" in metrics
    growth = max(samples) - baseline[0]
    assert growth < RSS_GROWTH_LIMIT, (
        f"the tail's RSS grew by {growth / 2**20:.1f} MiB while a subscriber lagged "
        f"(baseline {baseline[0] / 2**20:.1f} MiB, peak {max(samples) / 2**20:.1f} MiB)"
    )


# -- many subscribers and one at a frame per second --------------------------------------

SUBSCRIBERS = 200
MANY_N = 1500
MANY_PAYLOAD = {"text": "x" * 700}  # ~1.2 KB events: 200 x 1.8 MB are read in this test
MANY_RSS_GROWTH_LIMIT = 64 << 20  # bytes (see the test's docstring)
_EVENT_FRAME = re.compile(rb'id: (\d+)\nevent: ledger-event\ndata: .*"position":(\d+),', re.S)


async def read_all(response: aiohttp.ClientResponse, n: int) -> list[int]:
    """Positions of the next ``n`` event frames, read in whatever chunks
    arrive (200 of these run at once, so no per-line reads)."""
    positions: list[int] = []
    pending = b""
    while len(positions) < n:
        chunk = await response.content.readany()
        assert chunk, f"the stream ended after {len(positions)} frames"
        *frames, pending = (pending + chunk).split(b"\n\n")
        for frame in frames:
            found = _EVENT_FRAME.match(frame)
            if found:
                assert found[1] == found[2], frame[:200]  # the frame's id is its event's position
                positions.append(int(found[1]))
    return positions


def small_receive_buffer(addr_info) -> socket.socket:
    """A client socket whose kernel receive buffer is 4 KiB: what the slow
    reader has not read backs up toward the tail (the tail's side of the
    connection still buffers what Linux gives its socket)."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


async def metric(http: aiohttp.ClientSession, url: str, name: str) -> float:
    async with http.get(url + "/metrics") as resp:
        text = await resp.text()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, name
    return float(found[1])


async def test_200_subscribers_and_one_reading_a_frame_a_second(
    client: LedgerClient, actor, nats_server, tmp_path
):
    """200 subscribers follow the whole ledger while 1,500 events are
    appended, and one more reads a single frame per second, on a socket that
    buffers almost nothing, until the others have everything and a few
    seconds more. Every subscriber gets every event, in order; the slow one
    has read only a handful by the time the others are done (it slowed only
    itself); and the tail process's RSS, sampled from /proc throughout,
    grows by less than MANY_RSS_GROWTH_LIMIT over its level with all 201
    connected: per subscriber the tail holds a cursor and at most one page."""
    lane = await new_lane(client, actor)
    # 201 tails of one (open) scope: over the default per-token limit (spec/tail.md, "Limits and memory").
    tail = await TailProcess(
        nats_server.url, tmp_path / "tail", "--ring-size", "1024", "--max-tails-per-token", "256"
    ).start()
    samples: list[int] = []
    others_done = asyncio.Event()
    slow_read_when_others_done: list[int] = []

    async def sample_memory() -> None:
        while True:
            samples.append(tail.rss_bytes())
            await asyncio.sleep(0.1)  # the sampling period, not a wait

    async def write() -> None:
        head = 0
        for _ in range(MANY_N // 50):
            events = [
                make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=MANY_PAYLOAD)
                for _ in range(50)
            ]
            head = (await client.append(lane, head, events, timeout=60)).last_seq

    async def one_frame_a_second(read: int) -> None:
        if not others_done.is_set():
            await asyncio.sleep(1.0)  # the scenario: one frame a second
        elif not slow_read_when_others_done:
            slow_read_when_others_done.append(read)
            await asyncio.sleep(3.0)  # lagging far behind while the memory is sampled

    unlimited = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    try:
        async with (
            aiohttp.ClientSession(connector=unlimited, timeout=timeout) as http,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(socket_factory=small_receive_buffer),
                timeout=timeout,
                read_bufsize=4096,
            ) as slow_http,
        ):
            responses = [await http.get(tail.url + "/api/v1/events") for _ in range(SUBSCRIBERS)]
            slow = await slow_http.get(tail.url + "/api/v1/events")
            await eventually(
                lambda: metric(http, tail.url, "laneledger_tail_subscribers"),
                until=lambda subscribers: subscribers >= SUBSCRIBERS + 1,
                what=f"{SUBSCRIBERS + 1} subscribers",
            )
            baseline = tail.rss_bytes()
            sampler = asyncio.create_task(sample_memory())
            slow_reader = asyncio.create_task(read_positions(slow, MANY_N, one_frame_a_second))
            readers = [asyncio.create_task(read_all(r, MANY_N)) for r in responses]
            await write()
            received = await asyncio.wait_for(asyncio.gather(*readers), 120)
            others_done.set()
            slow_positions = await asyncio.wait_for(slow_reader, 120)
            sampler.cancel()
            frames = await metric(http, tail.url, "laneledger_tail_frames_sent_total")
            for response in (*responses, slow):
                response.close()
    finally:
        tail.stop()
    expected = list(range(1, MANY_N + 1))
    assert all(positions == expected for positions in received)
    assert slow_positions == expected
    assert frames == (SUBSCRIBERS + 1) * MANY_N
    # One frame a second: it had read a few dozen at most when 200 others had all 1,500.
    assert slow_read_when_others_done[0] < MANY_N // 10, slow_read_when_others_done
    growth = max(samples) - baseline
    print(
        f"tail RSS: {baseline / 2**20:.1f} MiB with {SUBSCRIBERS + 1} subscribers connected, "
        f"peak {max(samples) / 2**20:.1f} MiB (+{growth / 2**20:.1f} MiB)"
    )
    assert growth < MANY_RSS_GROWTH_LIMIT, (
        f"the tail's RSS grew by {growth / 2**20:.1f} MiB with {SUBSCRIBERS} subscribers and "
        f"a slow one (baseline {baseline / 2**20:.1f} MiB, peak {max(samples) / 2**20:.1f} MiB)"
    )
