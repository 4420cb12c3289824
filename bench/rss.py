"""The sequencer's resident memory across a long ledger: it must stay flat,
not grow with the number of committed events.

    .venv/bin/python bench/rss.py [--events N] [--events-per-append E] [--lanes L]

Everything runs on 127.0.0.1 in a temporary directory: its own nats-server
and the sequencer as a subprocess (``python -m laneledger.services.sequencer``, as
deployed) on a fresh SQLite file. This process appends N events (default one
million) through the SDK (``LedgerClient.submit``), E events per append over
L lanes with a bounded window of appends in flight, and reads the
sequencer's ``VmRSS`` from ``/proc`` every tenth of the way. The figure is
the growth from the first sample (after warm-up, at 10 %) to the last; the
final line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from laneledger.devtools.natsserver import NatsServer  # noqa: E402
from laneledger.sdk.client import LedgerClient, make_event  # noqa: E402

WINDOW = 64  # appends in flight


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def start_sequencer(nats_url: str, db: Path, logs: Path) -> subprocess.Popen:
    out, err = logs / "sequencer.out", logs / "sequencer.err"
    cmd = [
        sys.executable,
        "-m",
        "laneledger.services.sequencer",
        "--nats",
        nats_url,
        "--db",
        str(db),
        "--http-port",
        "0",
    ]
    env = dict(os.environ, LANELEDGER_LOG_LEVEL="WARNING")
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=o, stderr=e, env=env, start_new_session=True
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if "laneledger-sequencer ready" in out.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("sequencer did not start:\n" + err.read_text(errors="replace")[-3000:])


async def drive(url: str, pid: int, events: int, per_append: int, lanes: int) -> dict:
    samples: list[tuple[int, int]] = []  # (events committed, RSS KiB)
    async with await LedgerClient.connect(url) as ledger:
        actor = await ledger.ensure_actor("acme", "agent:bench-rss/main@1", "agent")
        lane_list = [
            await ledger.create_lane("acme", "s-rss", "r-rss", f"lane-{i}", actor_id=actor.id)
            for i in range(lanes)
        ]
        heads = {lane.id: 0 for lane in lane_list}
        appends = events // per_append
        step = max(1, appends // 10)
        in_flight: set[asyncio.Task] = set()
        started = time.perf_counter()
        for i in range(appends):
            lane = lane_list[i % lanes]
            batch = [
                make_event(
                    lane.id,
                    "action.started",
                    actor_id=actor.id,
                    payload={"model": "claude-sonnet", "input_tokens": 1200 + i, "output_tokens": 300},
                )
                for _ in range(per_append)
            ]
            handle = await ledger.submit(lane, heads[lane.id], batch)
            heads[lane.id] += per_append
            in_flight.add(asyncio.ensure_future(handle.receipt(timeout=60)))
            if len(in_flight) >= WINDOW:
                done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a rejection raises here: the run is invalid
            if (i + 1) % step == 0:
                await asyncio.gather(*in_flight)
                in_flight.clear()
                samples.append(((i + 1) * per_append, rss_kib(pid)))
                print(
                    f"{samples[-1][0]:>9} events  sequencer RSS {samples[-1][1] / 1024:7.1f} MiB", flush=True
                )
        await asyncio.gather(*in_flight)
        seconds = time.perf_counter() - started
    first, last = samples[0][1], samples[-1][1]
    return {
        "events": appends * per_append,
        "events_per_append": per_append,
        "lanes": lanes,
        "seconds": round(seconds, 1),
        "rss_mib_at_10pct": round(first / 1024, 1),
        "rss_mib_at_end": round(last / 1024, 1),
        "rss_mib_max": round(max(s[1] for s in samples) / 1024, 1),
        "rss_growth_mib_10pct_to_end": round((last - first) / 1024, 1),
        "samples": [[n, round(kib / 1024, 1)] for n, kib in samples],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--events-per-append", type=int, default=20)
    parser.add_argument("--lanes", type=int, default=200)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    with (
        tempfile.TemporaryDirectory(prefix="laneledger-rss-") as tmp,
        NatsServer(Path(tmp) / "nats") as server,
    ):
        sequencer = start_sequencer(server.url, Path(tmp) / "ledger.db", Path(tmp))
        try:
            result = asyncio.run(
                drive(server.url, sequencer.pid, args.events, args.events_per_append, args.lanes)
            )
        finally:
            sequencer.send_signal(signal.SIGTERM)
            try:
                sequencer.wait(30)
            except subprocess.TimeoutExpired:
                sequencer.kill()
    print(
        f"sequencer RSS {result['rss_mib_at_10pct']} MiB at 10 % -> {result['rss_mib_at_end']} MiB after "
        f"{result['events']:,} events ({result['rss_growth_mib_10pct_to_end']:+} MiB)"
    )
    print(json.dumps({"bench": "rss", **result}))


if __name__ == "__main__":
    main()
