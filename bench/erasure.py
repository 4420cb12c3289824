"""What erasing costs (spec/erasure.md): a session of N events (default
10,000), committed through the real sequencer (in this process, on a real
nats-server, with its transaction log), is erased with ``LedgerClient.erase``
— every page one transaction-log record and one SQLite transaction — and
timed, and so is the time until the sequencer's background round has
removed the erased events' copies from the streams (spec/erasure.md, "The
streams"); meanwhile another lane's producer appends one event at a time,
and its receipts' latency until then is printed beside the same producer's
with nothing erased. Prints the figures, then a JSON line.

    .venv/bin/python bench/erasure.py [--events N] [--limit PAGE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import nats
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry

from laneledger.devtools.benchkit import percentile
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.store import LedgerWriter, open_ledger

PER_APPEND = 500


def payload(i: int) -> dict:
    return {"email": f"person{i}@example.org", "text": f"what the customer said, turn {i}", "n": i}


async def probe(recorder: LaneRecorder, actor_id: str, stop: asyncio.Event) -> list[float]:
    """One append at a time until ``stop``: each receipt's latency, in ms."""
    latencies = []
    while not stop.is_set():
        started = time.perf_counter()
        await recorder.append([recorder.event("stream.text_delta", actor_id=actor_id, payload={"t": 1})])
        latencies.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.01)
    return latencies


def spread(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"p50 {percentile(ms, 50):.1f} ms, p99 {percentile(ms, 99):.1f} ms ({len(ms)} appends)"


async def run(events: int, limit: int) -> dict:
    with (
        tempfile.TemporaryDirectory(prefix="laneledger-erasure-") as tmp,
        NatsServer(Path(tmp) / "nats") as server,
    ):
        writer = LedgerWriter(open_ledger(Path(tmp) / "ledger.db"))
        sequencer = Sequencer(
            await _connect(server.url), writer, SequencerMetrics(CollectorRegistry()), SequencerSettings()
        )
        await sequencer.start()
        client = await LedgerClient.connect(server.url, timeout=30.0)
        try:
            actor = await client.ensure_actor("acme", "agent:bench/erasure@1", "agent")
            lane = await client.create_lane("acme", "erased", "r1", "main", actor_id=actor.id)
            for first in range(0, events, PER_APPEND):
                batch = [
                    make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=payload(i))
                    for i in range(first, min(first + PER_APPEND, events))
                ]
                await client.append(lane, first, batch)
            other = await LaneRecorder.open(client, "acme", "other", "r1", "main", actor_id=actor.id)

            stop = asyncio.Event()
            quiet = asyncio.create_task(probe(other, actor.id, stop))
            await asyncio.sleep(3.0)
            stop.set()
            before = await quiet

            stop = asyncio.Event()
            during = asyncio.create_task(probe(other, actor.id, stop))
            started = time.perf_counter()
            done = await client.erase("erased", actor_id=actor.id, reason="bench", limit=limit)
            seconds = time.perf_counter() - started
            # Then the background round removes the copies on the streams.
            while True:  # polled: the round has no event to wait on from here
                if not await sequencer._in_writer(writer.stream_copies_pending):
                    break
                await asyncio.sleep(0.05)
            streams_seconds = time.perf_counter() - started
            stop.set()
            while_erasing = sorted(await during)
            before.sort()
            assert done.erased == events, done
        finally:
            await client.close()
            await sequencer.stop()
    return {
        "events": events,
        "page_limit": limit,
        "erase_seconds": round(seconds, 2),
        "erased_per_s": round(events / seconds),
        "streams_clean_seconds": round(streams_seconds, 2),
        "other_lane_p50_ms_quiet": round(percentile(before, 50), 1),
        "other_lane_p99_ms_quiet": round(percentile(before, 99), 1),
        "other_lane_p50_ms_erasing": round(percentile(while_erasing, 50), 1),
        "other_lane_p99_ms_erasing": round(percentile(while_erasing, 99), 1),
        "_shown": (spread(before), spread(while_erasing)),
    }


async def _connect(url: str) -> NATS:
    return await nats.connect(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--limit", type=int, default=200, help="events per erase page (1-500)")
    args = parser.parse_args()
    result = asyncio.run(run(args.events, args.limit))
    quiet, erasing = result.pop("_shown")
    print(
        f"erased a {result['events']:,}-event session in {result['erase_seconds']} s "
        f"({result['erased_per_s']:,} events/s, pages of {result['page_limit']}), and from the "
        f"streams {result['streams_clean_seconds']} s after it began; another lane's appends "
        f"meanwhile: {erasing}; with nothing erased: {quiet}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
