"""LangGraph checkpointers compared: ``LaneledgerSaver`` against
``langgraph-checkpoint-sqlite``'s ``AsyncSqliteSaver``, on the same graph
state sizes, in the same run (spec/langgraph.md).

    .venv/bin/python bench/langgraph_savers.py [--ops N] [--quick]

Everything runs on 127.0.0.1 in a temporary directory: its own nats-server,
the sequencer and the checkpoint service as subprocesses, exactly as
deployed (``python -m laneledger.services.sequencer``, ``… .checkpoint``);
the SQLite saver on a file in the same directory. For each state size (one
channel holding a message list of about that many bytes; the largest is
over the checkpoint service's 256 KiB inline limit, so it is an artifact),
each saver, one thread:

* ``aput``: N checkpoints, one after the other, each the child of the last;
* ``aget_tuple``: N reads of checkpoints picked at random among them;
* ``alist``: N/10 lists of the thread's 10 newest.

Each op is timed alone (sequential: latency-bound, as a graph's steps
are); ops/s = ops / their summed time. The last line printed is one JSON
object. Bounded: every op has the SDK's timeouts, and the processes are
stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from laneledger.adapters.langgraph import LaneledgerSaver
from laneledger.contract.errors import LedgerError
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient

SIZES = (1_024, 16_384, 300_000)  # bytes of channel state; the last goes to an artifact
START_TIMEOUT_S = 30.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def state_of(size: int, step: int) -> dict[str, Any]:
    line = "x" * 96
    return {"messages": [f"{step}:{i}:{line}" for i in range(max(1, size // 100))]}


async def measure(saver: BaseCheckpointSaver[Any], thread: str, size: int, ops: int) -> dict[str, Any]:
    configs: list[Any] = []
    parent: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    put_s: list[float] = []
    for step in range(ops):
        cp = empty_checkpoint()
        cp["channel_values"] = state_of(size, step)
        cp["channel_versions"] = {"messages": step + 1}
        start = time.perf_counter()
        parent = await saver.aput(parent, cp, {"source": "loop", "step": step}, {"messages": step + 1})
        put_s.append(time.perf_counter() - start)
        configs.append(parent)
    rng = random.Random(7)
    get_s = []
    for _ in range(ops):
        config = rng.choice(configs)
        start = time.perf_counter()
        found = await saver.aget_tuple(config)
        get_s.append(time.perf_counter() - start)
        assert found is not None
    list_s = []
    where: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for _ in range(max(1, ops // 10)):
        start = time.perf_counter()
        listed = [t async for t in saver.alist(where, limit=10)]
        list_s.append(time.perf_counter() - start)
        assert len(listed) == min(10, ops)

    def figures(samples: list[float]) -> dict[str, float]:
        return {
            "per_s": len(samples) / sum(samples),
            "p50_ms": percentile(samples, 0.5) * 1000,
            "p99_ms": percentile(samples, 0.99) * 1000,
        }

    return {"aput": figures(put_s), "aget_tuple": figures(get_s), "alist": figures(list_s)}


def line(figures: dict[str, dict[str, float]]) -> str:
    return "  ".join(
        f"{op} {f['per_s']:8.1f}/s p50 {f['p50_ms']:6.2f} ms p99 {f['p99_ms']:6.2f} ms"
        for op, f in figures.items()
    )


def start_service(module: str, args: list[str], logs: Path) -> subprocess.Popen[bytes]:
    out = (logs / f"{module.rsplit('.', 1)[-1]}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", module, *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


async def ready(client: LedgerClient) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            await client.ensure_actor("bench", "service:bench-ready", "service")
            await CheckpointClient(client).info(refresh=True)
            return
        except LedgerError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def run(ops: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    results: dict[str, Any] = {"ops": ops, "sizes": list(sizes), "savers": {}}
    with tempfile.TemporaryDirectory(prefix="lg-bench-") as tmp, NatsServer(Path(tmp) / "nats") as server:
        root = Path(tmp)
        (root / "checkpoint").mkdir()
        procs = [
            start_service(
                "laneledger.services.sequencer",
                [
                    "--nats",
                    server.url,
                    "--db",
                    str(root / "ledger.db"),
                    "--http-host",
                    "127.0.0.1",
                    "--http-port",
                    "0",
                ],
                root,
            ),
            start_service(
                "laneledger.services.checkpoint",
                [
                    "--nats",
                    server.url,
                    "--data",
                    str(root / "checkpoint"),
                    "--http-host",
                    "127.0.0.1",
                    "--http-port",
                    "0",
                ],
                root,
            ),
        ]
        try:
            client = await LedgerClient.connect(server.url, timeout=10.0)
            try:
                await ready(client)
                laneledger = LaneledgerSaver(client, tenant="bench")
                await laneledger.setup()
                async with AsyncSqliteSaver.from_conn_string(str(root / "langgraph.sqlite")) as sqlite:
                    await sqlite.setup()
                    for name, saver in (("laneledger", laneledger), ("sqlite", sqlite)):
                        per_size = {}
                        for size in sizes:
                            per_size[str(size)] = await measure(saver, f"{name}-{size}", size, ops)
                            figures = per_size[str(size)]
                            print(f"{name:10s} {size:>7d} B  {line(figures)}", flush=True)
                        results["savers"][name] = per_size
            finally:
                await client.close()
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=200, help="puts and gets per size and saver (default 200)")
    parser.add_argument("--quick", action="store_true", help="20 ops, the two smaller sizes")
    args = parser.parse_args()
    ops, sizes = (20, SIZES[:2]) if args.quick else (args.ops, SIZES)
    print(json.dumps(asyncio.run(run(ops, sizes))))


if __name__ == "__main__":
    main()
