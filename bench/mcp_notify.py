"""MCP subscription latency: commit -> ``notifications/resources/updated``,
and what an idle MCP server costs.

    .venv/bin/python bench/mcp_notify.py [--events N] [--interval-ms MS] [--idle-s S]

Everything on 127.0.0.1 in a temporary directory, as deployed: its own
nats-server, the sequencer and the tail (``bench/tail.py``'s ``Bench``),
``laneledger mcp --serve`` as a subprocess, and the official SDK's client
here, subscribed to ``korg://bench/ledger/recent`` and
``korg://bench/session/{root}/summary``. Each of N events is appended one at
a time; latency = the wall clock when the client has the notification - the
receipt's ``committed_at`` (the sequencer's wall clock, same machine).

Idle cost: the CPU seconds (utime + stime, /proc) of the MCP server and the
tail over ``--idle-s`` seconds with nothing committed, twice: with the
client connected and no subscription (the baseline: the process and its
HTTP server alone), then with the subscriptions open (the server follows the
tail's SSE; it polls nothing, so the two should not differ).

Prints p50/p99/max and, as the last line, one JSON object
(``notify_p50_ms``, ``notify_p99_ms``, ``notify_max_ms``, ``idle_cpu_s_mcp``,
``idle_cpu_s_mcp_unsubscribed``, ...).
On a loaded machine wall-clock figures say little: judge them on a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import warnings
from datetime import datetime

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from tail import Bench, cpu_seconds, log, percentile

TENANT = "bench"


async def run(args: argparse.Namespace) -> int:
    from laneledger.mcp.serve import mcp_url_of
    from laneledger.sdk.client import LaneRecorder, LedgerClient

    bench = Bench(argparse.Namespace())
    mcp_proc: asyncio.subprocess.Process | None = None
    try:
        tail_url = bench.start_ledger()
        ledger = await LedgerClient.connect(bench.nats.url, timeout=30)
        actor = await ledger.ensure_actor(TENANT, "agent:bench/mcp@1", "agent")
        lane = await LaneRecorder.open(ledger, TENANT, "bench-session", "run-1", "main", actor_id=actor.id)

        async def append(n: int) -> tuple[int, float]:
            receipt = await lane.append(
                [
                    lane.event(
                        "run.started" if n == 0 else "stream.text_delta",
                        actor_id=actor.id,
                        subject_id="run-1",
                        payload={} if n == 0 else {"text": f"t{n}"},
                    )
                ]
            )
            committed = datetime.fromisoformat(receipt.committed_at.replace("Z", "+00:00")).timestamp()
            return receipt.positions[0], committed

        root, _ = await append(0)
        mcp_proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "laneledger.cli", "mcp", "--serve"),
            *("--listen", "127.0.0.1:0", "--url", tail_url),
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        assert mcp_proc.stdout is not None
        url = mcp_url_of((await asyncio.wait_for(mcp_proc.stdout.readline(), 30)).decode())
        arrivals: asyncio.Queue[tuple[str, float]] = asyncio.Queue()

        async def on_message(message: object) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                arrivals.put_nowait((str(message.params.uri), time.time()))

        uris = [f"korg://{TENANT}/ledger/recent", f"korg://{TENANT}/session/{root}/summary"]
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            await session.initialize()
            mcp_pid, tail_pid = mcp_proc.pid, bench.procs["tail"].pid
            baseline = await idle_cpu(args.idle_s, mcp_pid, tail_pid)
            with warnings.catch_warnings():  # the handshake era's subscribe, which this server serves
                warnings.simplefilter("ignore")
                for uri in uris:
                    await session.subscribe_resource(uri)
            await asyncio.sleep(0.5)  # the server's feed connects
            latencies: dict[str, list[float]] = {uri: [] for uri in uris}
            for n in range(1, args.events + 1):
                _, committed = await append(n)
                for _ in uris:
                    uri, at = await asyncio.wait_for(arrivals.get(), 10)
                    latencies[uri].append((at - committed) * 1000)
                await asyncio.sleep(args.interval_ms / 1000)
            idle = await idle_cpu(args.idle_s, mcp_pid, tail_pid)
        await ledger.close()
        every = sorted(v for values in latencies.values() for v in values)
        log(f"laneledger mcp notify bench: {args.events} events, {len(uris)} subscriptions, dir {bench.dir}")
        for uri, values in latencies.items():
            values.sort()
            log(
                f"  {uri}: p50 {percentile(values, 0.5):.1f} ms  p99 {percentile(values, 0.99):.1f} ms"
                f"  max {values[-1]:.1f} ms"
            )
        log(
            f"  idle {args.idle_s:.0f} s, no subscription:"
            f" mcp {baseline[0]:.3f} CPU s, tail {baseline[1]:.3f} CPU s"
        )
        log(
            f"  idle {args.idle_s:.0f} s with subscriptions open:"
            f" mcp {idle[0]:.3f} CPU s, tail {idle[1]:.3f} CPU s"
        )
        print(
            json.dumps(
                {
                    "notify_p50_ms": round(percentile(every, 0.5), 2),
                    "notify_p99_ms": round(percentile(every, 0.99), 2),
                    "notify_max_ms": round(every[-1], 2),
                    "events": args.events,
                    "idle_s": args.idle_s,
                    "idle_cpu_s_mcp": round(idle[0], 4),
                    "idle_cpu_s_tail": round(idle[1], 4),
                    "idle_cpu_s_mcp_unsubscribed": round(baseline[0], 4),
                    "idle_cpu_s_tail_unsubscribed": round(baseline[1], 4),
                }
            ),
            flush=True,
        )
        return 0
    finally:
        if mcp_proc is not None:
            mcp_proc.terminate()
            await mcp_proc.wait()
        bench.cleanup()


async def idle_cpu(seconds: float, *pids: int) -> tuple[float, ...]:
    """The CPU seconds each process spends while nothing is committed."""
    before = [cpu_seconds(pid) for pid in pids]
    await asyncio.sleep(seconds)
    return tuple(cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=20.0, help="pause between appends")
    parser.add_argument("--idle-s", type=float, default=10.0)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
