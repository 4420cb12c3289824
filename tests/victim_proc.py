"""The adversarial suite's victim as an OS process of its own (not a test
module: pytest does not collect it): a tenant's producer appending one event
at a steady pace, each receipt timed.

::

    python tests/victim_proc.py --nats URL --tenant T --session-id S --every SECONDS

It opens a lane of its own (``LaneRecorder.open``, with an agent actor), prints
``ready``, and appends one ``stream.text_delta`` event every ``--every``
seconds, awaiting each receipt, until a line (or EOF) comes on stdin; then it
prints one JSON line, ``{"latencies": [seconds, ...], "receipts": [...]}``,
the receipts as builtins, and exits.

Its own process, because that is what another tenant's producer is: run in
the attacker's process it shared an event loop with it, and every receipt's
latency then included however long the attacker's loop was busy building
its 1000-event requests (about 11 ms each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import msgspec

from laneledger.contract.model import AppendCommitted
from laneledger.sdk.client import LaneRecorder, LedgerClient


async def run(args: argparse.Namespace) -> dict[str, list]:
    client = await LedgerClient.connect(args.nats, tenant=args.tenant, timeout=5.0)
    try:
        actor = await client.ensure_actor(args.tenant, f"agent:{args.tenant}@1", "agent")
        recorder = await LaneRecorder.open(
            client, args.tenant, args.session_id, "r-1", "main", actor_id=actor.id
        )
        stop = asyncio.create_task(asyncio.to_thread(sys.stdin.readline))
        print("ready", flush=True)
        latencies: list[float] = []
        receipts: list[object] = []
        n = 0
        while not stop.done():
            event = recorder.event("stream.text_delta", actor_id=actor.id, payload={"n": n})
            started = time.perf_counter()
            receipt = await recorder.append([event])
            latencies.append(time.perf_counter() - started)
            if not isinstance(receipt, AppendCommitted):
                raise SystemExit(f"victim append {n} refused: {receipt}")
            receipts.append(msgspec.to_builtins(receipt))
            n += 1
            await asyncio.sleep(args.every)
        return {"latencies": latencies, "receipts": receipts}
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nats", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--every", type=float, required=True, help="seconds between appends")
    result = asyncio.run(run(parser.parse_args()))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
