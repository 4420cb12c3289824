"""The TypeScript SDK's producer beside the Python SDK's, in the same run.

    .venv/bin/python bench/sdk_ts.py [--appends 3000] [--lanes 16]

One nats-server and the real sequencer (``python -m
laneledger.services.sequencer``, as deployed) on a fresh store; then each
SDK, as a process of its own and one after the other, appends ``--appends``
one-event appends over ``--lanes`` lanes, every lane a LaneRecorder
appending back to back and waiting for each receipt (so ``--lanes`` appends
are in flight). Each prints committed events/s, the submit → receipt
latency (p50, p99) and its own CPU seconds per append: on a shared machine
the CPU figure is the one to compare, the wall-clock ones only on a quiet
machine. Needs ``make sdk-ts`` first. Ends with one JSON line
(``bench/report.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "shared"))

from laneledger.devtools.natsserver import NatsServer  # noqa: E402
from laneledger.sdk.client import LaneRecorder, LedgerClient  # noqa: E402

PRODUCER = ROOT / "sdk-ts" / "dist" / "tools" / "bench.js"
SEQUENCER = [sys.executable, "-m", "laneledger.services.sequencer", "--http-host", "127.0.0.1"]
SEQUENCER += ["--http-port", "0"]
TEXT = "a tool call's result, about a hundred bytes long: ".ljust(100, "x")


async def python_producer(url: str, session: str, appends: int, lanes: int) -> dict[str, float]:
    """The workload of sdk-ts/tools/bench.ts, through the Python SDK."""
    async with await LedgerClient.connect(url) as client:
        actor = await client.ensure_actor("acme", "agent:bench-py@1", "agent")
        recorders = [
            await LaneRecorder.open(client, "acme", session, "r1", f"lane-{i}", actor_id=actor.id)
            for i in range(lanes)
        ]
        latencies: list[float] = []
        cpu0, t0 = time.process_time(), time.perf_counter()

        async def run(lane: LaneRecorder, first: int) -> None:
            for i in range(first, appends, lanes):
                event = lane.event("note.bench.step", actor_id=actor.id, payload={"i": i, "text": TEXT})
                started = time.perf_counter()
                await lane.append([event])
                latencies.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(run(lane, i) for i, lane in enumerate(recorders)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    latencies.sort()
    return {
        "appends": appends,
        "lanes": lanes,
        "wall_s": wall,
        "committed_per_s": appends / wall,
        "receipt_p50_ms": latencies[len(latencies) // 2],
        "receipt_p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "cpu_s": cpu,
        "cpu_ms_per_append": cpu * 1000 / appends,
    }


def last_json(text: str) -> dict[str, float]:
    return json.loads(next(line for line in reversed(text.splitlines()) if line.startswith("{")))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--appends", type=int, default=3000)
    p.add_argument("--lanes", type=int, default=16)
    p.add_argument("--python-producer", nargs=2, metavar=("URL", "SESSION"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.python_producer:  # a child: the Python SDK's half, in a process of its own
        url, session = args.python_producer
        print(json.dumps(asyncio.run(python_producer(url, session, args.appends, args.lanes))))
        return 0
    node = shutil.which("node")
    if node is None or not PRODUCER.exists():
        raise SystemExit(f"needs node and {PRODUCER.relative_to(ROOT)}: run `make sdk-ts`")
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as nats:
        env = dict(os.environ, LANELEDGER_LOG_LEVEL="WARNING")
        with open(Path(tmp) / "sequencer.out", "wb") as out:
            sequencer = subprocess.Popen(
                [*SEQUENCER, "--nats", nats.url, "--db", str(Path(tmp) / "ledger.db")],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            deadline = time.monotonic() + 30
            while "laneledger-sequencer ready" not in (Path(tmp) / "sequencer.out").read_text(
                errors="replace"
            ):
                if time.monotonic() > deadline or sequencer.poll() is not None:
                    raise SystemExit("the sequencer did not start")
                time.sleep(0.05)
            counts = [str(args.appends), str(args.lanes)]
            runs = {
                "python": [
                    *(sys.executable, __file__, "--appends", counts[0], "--lanes", counts[1]),
                    *("--python-producer", nats.url, "bench-py"),
                ],
                "typescript": [node, str(PRODUCER), nats.url, "bench-ts", *counts],
            }
            result = {}
            for name, cmd in runs.items():
                done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
                result[name] = last_json(done.stdout)
                r = result[name]
                print(
                    f"{name:>10}: {r['committed_per_s']:,.0f} events/s, receipt p50 "
                    f"{r['receipt_p50_ms']:.1f} ms p99 {r['receipt_p99_ms']:.1f} ms, "
                    f"{r['cpu_ms_per_append']:.3f} ms CPU per append",
                    flush=True,
                )
        finally:
            sequencer.terminate()
            sequencer.wait(20)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
