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

import aiohttp
import pytest

from laneledger.client import LedgerClient, make_event
from tail_support import TailProcess, new_lane

pytestmark = pytest.mark.timeout(180)

N = 20_000
PAYLOAD = {"text": "x" * 3000}
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
        client: LedgerClient, actor, nats_server, tmp_path):
    lane = await new_lane(client, actor)
    tail = await TailProcess(nats_server.url, tmp_path / "tail", "--ring-size", "1024").start()
    samples: list[int] = []
    fast_done = asyncio.Event()
    baseline: list[int] = []

    async def sample_memory() -> None:
        for _ in range(int(150 / 0.1)):  # bounded: at most the test's length
            samples.append(tail.rss_bytes())
            await asyncio.sleep(0.1)

    async def write() -> None:
        head = 0
        for _ in range(N // PER_APPEND):
            events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=PAYLOAD)
                      for _ in range(PER_APPEND)]
            receipt = await client.append(lane, head, events, timeout=60)
            head = receipt.last_seq

    async def slow_pace(read: int) -> None:
        if read == 1000:
            baseline.append(max(samples[-5:]))  # warm: ring full, caches in use
            # Stop reading while the rest of the ledger flows past (bounded wait).
            await asyncio.wait_for(fast_done.wait(), 150)
        elif read % 50 == 0:
            await asyncio.sleep(0.01)

    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    sampler = asyncio.create_task(sample_memory())
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async with http.get(tail.url + "/api/v1/events") as slow, \
                    http.get(tail.url + "/api/v1/events") as fast:
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
        f"(baseline {baseline[0] / 2**20:.1f} MiB, peak {max(samples) / 2**20:.1f} MiB)")


