"""Where one heavy append request's receipt latency goes, on an idle ledger.

A sequencer in this process (transaction log on, as shipped) on a nats-server
of its own, one SDK producer: ``--requests`` appends of ``--events`` events
each, one at a time with a pause between, so nothing queues. Per request it
prints the receipt latency and how long each stage took, and when it started
(ms after the publish): step 0 aside (``prepare``: in the prepare worker),
the writer's part (``write``: applying and committing, on the writer thread;
``txlog``, the log's append, is inside it), then ``stream`` (the committed
stream holding the batch) and ``answer`` (acks and receipts). The stages are
timed by wrapping the sequencer's own methods, so this is a diagnostic that
follows their names. Then a JSON line with the latencies' p50 and max.

    .venv/bin/python bench/heavy_request.py [--requests N] [--events E] [--checkpoint-in-commits]

``--checkpoint-in-commits``: the WAL checkpointed inside the writer's
COMMITs, as SQLite does by default, instead of from a thread of its own
(``SequencerSettings.checkpoint_aside``), for comparison.

This is the path every smaller request of another tenant waits behind when
it arrives while a heavy one commits (tests/test_adversarial.py, the events
flood).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
from prometheus_client import CollectorRegistry

from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer import mirror, offloop
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.store import LedgerWriter, open_ledger, txlogstream

# stage -> (start, end) of each call during the current request
spans: dict[str, list[tuple[float, float]]] = {}


def timed(owner: Any, method: str, stage: str) -> None:
    """Wrap ``owner.method`` (a coroutine function or a plain one) to record its spans."""
    original: Callable[..., Any] = getattr(owner, method)
    if asyncio.iscoroutinefunction(original):

        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(self, *args, **kwargs)
            finally:
                spans.setdefault(stage, []).append((started, time.perf_counter()))

    else:

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                spans.setdefault(stage, []).append((started, time.perf_counter()))

    setattr(owner, method, wrapper)


timed(offloop.OffLoop, "run", "prepare")
timed(LedgerWriter, "apply_batch", "write")
timed(txlogstream.JetStreamTxLog, "append_async", "txlog")
timed(mirror.CommittedStreamMirror, "durable_through", "stream")
timed(Sequencer, "_send_receipts", "answer")
STAGES = ("prepare", "write", "txlog", "stream", "answer")


async def run(requests: int, events: int, checkpoint_aside: bool = True) -> list[float]:
    with (
        tempfile.TemporaryDirectory(prefix="laneledger-heavy-") as tmp,
        NatsServer(Path(tmp) / "nats") as server,
    ):
        nc = await nats.connect(server.url)
        writer = LedgerWriter(open_ledger(Path(tmp) / "ledger.db"))
        sequencer = Sequencer(
            nc,
            writer,
            SequencerMetrics(CollectorRegistry()),
            SequencerSettings(checkpoint_aside=checkpoint_aside),
        )
        await sequencer.start()
        producer_nc = await nats.connect(server.url)
        client = LedgerClient(producer_nc)
        actor = await client.ensure_actor(tenant="acme", key="agent:bench@1", kind="agent")
        lane = await client.create_lane(
            tenant="acme", session_id="s", run_id="r", name="l", actor_id=actor.id
        )
        head, latencies = 0, []
        for i in range(requests + 2):  # two to warm up
            batch = [
                make_event(lane.id, "action.started", actor_id=actor.id, payload={"k": k, "i": i})
                for k in range(events)
            ]
            spans.clear()
            published = time.perf_counter()
            await client.append(lane, head, batch)
            ms = (time.perf_counter() - published) * 1000
            head += events
            if i >= 2:
                latencies.append(ms)
                stages = " ".join(
                    f"{stage} {sum(end - start for start, end in spans[stage]) * 1000:5.1f}"
                    f"@{(spans[stage][0][0] - published) * 1000:5.1f}"
                    for stage in STAGES
                    if stage in spans
                )
                print(f"receipt {ms:6.1f} ms | {stages}", flush=True)
            await asyncio.sleep(0.2)
        await client.close()
        await producer_nc.close()
        await sequencer.stop()
        await nc.close()
        return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument(
        "--checkpoint-in-commits",
        action="store_true",
        help="the WAL checkpointed inside the writer's COMMITs (SQLite's default)",
    )
    args = parser.parse_args()
    import uvloop

    uvloop.install()
    latencies = asyncio.run(run(args.requests, args.events, not args.checkpoint_in_commits))
    print(
        json.dumps(
            {
                "events_per_request": args.events,
                "wal_checkpoint": "in commits" if args.checkpoint_in_commits else "aside",
                "requests": len(latencies),
                "receipt_p50_ms": round(statistics.median(latencies), 1),
                "receipt_max_ms": round(max(latencies), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
