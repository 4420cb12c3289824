"""SSE delivery latency of the tail: commit -> frame received, at a fraction
of the maximum append load, with many concurrent subscribers.

    .venv/bin/python bench/tail.py [--seconds S] [--subscribers N] [--producers P]
                                   [--lanes L] [--load-fraction F] [--max-rate R] [--quick]

Everything runs on 127.0.0.1 in a temporary directory: its own nats-server,
the sequencer and the tail as subprocesses, exactly as deployed
(``python -m laneledger.services.sequencer``, ``python -m laneledger.services.tail``), producer
processes (``bench/producer.py``) and subscriber processes (this file, run
as ``--child``). Phases:

1. **max load** (skipped when ``--max-rate`` is given): P producers append
   1-event requests as fast as the ledger commits them, with the tail
   following the committed stream and no subscriber; committed events/s over
   the window (from the receipts).
2. **latency**: N subscribers (unfiltered ``GET /api/v1/events`` from the
   current position: every event goes to every subscriber), spread over
   subscriber processes; the producers offer ``--load-fraction`` (0.2) of
   the max as steady paced load. For every frame whose event was committed
   inside the window, latency = the wall clock when the frame's bytes
   arrived - the event's ``committed_at`` (the sequencer's wall clock, same
   machine). Each subscriber also checks that it got every position, in
   order.

It prints p50/p99 (and more), where the CPU went, and as the last line one
JSON object (``sse_p50_ms``, ``sse_p99_ms``, ...). Exit status 1 if a
subscriber missed or reordered an event. Bounded by a watchdog; leaves no
process behind.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from laneledger.devtools.benchkit import terminate

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(text: str = "") -> None:
    print(text, flush=True)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def save_latencies(path: str | Path, lat: array.array) -> None:
    """A subscriber process's latencies (ms), as raw float32s."""
    with open(path, "wb") as f:
        lat.tofile(f)


def load_latencies(paths: Iterable[Path]) -> array.array:
    """The latencies ``save_latencies`` wrote to these files, in one array."""
    lat = array.array("f")
    for path in paths:
        with open(path, "rb") as f:
            lat.frombytes(f.read())
    return lat


def cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


# -- subscriber child -------------------------------------------------------------------


async def child_main(cfg: dict) -> None:
    """Open ``connections`` tails, print ``ready``, read until ``end_wall``,
    write latencies (ms, float32) to ``out`` and print a JSON summary."""
    import aiohttp

    url = f"{cfg['url']}/api/v1/events?from_position={cfg['from_position']}"
    w0, w1, end = cfg["w0_wall"], cfg["w1_wall"], cfg["end_wall"]
    parsed: dict[bytes, float] = {}  # committed_at is one value per batch: parse once
    opened = 0
    all_open = asyncio.Event()

    def commit_time(stamp: bytes) -> float:
        t = parsed.get(stamp)
        if t is None:
            t = parsed[stamp] = datetime.fromisoformat(stamp.decode().replace("Z", "+00:00")).timestamp()
            if len(parsed) > 100_000:
                parsed.clear()
        return t

    async def follow(http: aiohttp.ClientSession) -> dict:
        nonlocal opened
        lat = array.array("f")
        expected, frames, gaps = cfg["from_position"] + 1, 0, 0
        async with http.get(url) as resp:
            opened += 1
            if opened == cfg["connections"]:
                all_open.set()
            buf = b""
            async for chunk in resp.content.iter_any():
                now = time.time()
                buf += chunk
                parts = buf.split(b"\n\n")
                buf = parts.pop()
                for frame in parts:
                    if not frame.startswith(b"id: "):
                        continue  # retry / keepalive
                    position = int(frame[4 : frame.index(b"\n")])
                    if position != expected:
                        gaps += 1
                    expected = position + 1
                    frames += 1
                    at = frame.find(b'"committed_at":"') + 16
                    t = commit_time(frame[at : frame.index(b'"', at)])
                    if w0 <= t < w1:
                        lat.append((now - t) * 1000.0)
                if now >= end:
                    break
        return {"frames": frames, "gaps": gaps, "last": expected - 1, "lat": lat}

    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        tasks = [asyncio.create_task(follow(http)) for _ in range(cfg["connections"])]
        await asyncio.wait_for(all_open.wait(), 30)
        print("ready", flush=True)
        results = await asyncio.gather(*tasks)
    lat = array.array("f")
    for r in results:
        lat.extend(r.pop("lat"))
    save_latencies(cfg["out"], lat)
    print(json.dumps({"subscribers": results}), flush=True)


# -- orchestration ------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        from laneledger.devtools.natsserver import NatsServer

        self.args = args
        self.tmp = tempfile.TemporaryDirectory(prefix="laneledger-tail-bench-")
        self.dir = Path(self.tmp.name)
        self.nats = NatsServer(self.dir / "nats")
        self.procs: dict[str, subprocess.Popen] = {}
        self.children: list[subprocess.Popen] = []

    # -- processes -----------------------------------------------------------------------

    def spawn_service(self, name: str, module: str, *args: str) -> str:
        out, err = self.dir / f"{name}.out", self.dir / f"{name}.err"
        env = dict(os.environ, LANELEDGER_LOG_LEVEL="WARNING")
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=o,
                stderr=e,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.procs[name] = proc
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = out.read_text(errors="replace")
            if " ready http=" in text:
                return text.split("http=", 1)[1].split()[0]
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not start:\n{err.read_text(errors='replace')[-3000:]}")

    def start_ledger(self) -> str:
        """nats-server, the sequencer and the tail, as deployed; the tail's URL."""
        self.nats.start()
        self.spawn_service(
            "sequencer",
            "laneledger.services.sequencer",
            "--nats",
            self.nats.url,
            "--db",
            str(self.dir / "ledger.db"),
            "--http-port",
            "0",
        )
        return self.spawn_service(
            "tail",
            "laneledger.services.tail",
            "--nats",
            self.nats.url,
            "--data",
            str(self.dir / "tail"),
            "--http-port",
            "0",
        )

    def spawn_child(self, argv: list[str], cfg: dict) -> subprocess.Popen:
        with open(self.dir / f"child-{len(self.children)}.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, *argv],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                preexec_fn=_die_with_parent,
            )
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(cfg) + "\n").encode())
        proc.stdin.flush()
        self.children.append(proc)
        return proc

    async def line(self, proc: subprocess.Popen, timeout: float) -> str:
        assert proc.stdout is not None
        raw = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)
        if not raw:
            raise RuntimeError(f"child {proc.pid} exited (code {proc.poll()}); see {self.dir}")
        return raw.decode()

    def cleanup(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for name in ("tail", "sequencer"):
            proc = self.procs.get(name)
            if proc is not None:
                terminate(proc)
        self.nats.stop()
        self.tmp.cleanup()

    def cpu(self) -> dict[str, float]:
        found = {name: cpu_seconds(p.pid) for name, p in self.procs.items()}
        found["nats-server"] = cpu_seconds(self.nats.pid or 0)
        for i, p in enumerate(self.children):
            kind = "subscribers" if "--child" in p.args else "producer"
            found[f"{kind} {i}"] = cpu_seconds(p.pid)
        return found

    # -- phases --------------------------------------------------------------------------

    async def producers(
        self, mode: str, seconds: float, rate: float = 0.0
    ) -> tuple[list[dict], float, float]:
        """Run the producers for one phase; returns their results and the
        window's (start, end) as wall-clock times."""
        import msgspec

        a, P = self.args, self.args.producers
        self.children = []
        procs = []
        for i in range(P):
            cfg = {
                "mode": mode,
                "url": self.nats.url,
                "actor_id": self.actor.id,
                "lanes": [msgspec.to_builtins(lane) for lane in self.lanes[i::P]],
                "events_per_append": 1,
                "window": 1024,
                "warmup_s": a.warmup,
                "seconds": seconds,
                "drain_s": 20.0,
                "rate": rate / P,
                "phase": i / P,
            }
            procs.append(self.spawn_child([str(BENCH_DIR / "producer.py")], cfg))
        for proc in procs:
            assert (await self.line(proc, 60)).strip() == "ready"
        t0 = time.monotonic() + 0.5
        offset = time.time() - time.monotonic()
        for proc in procs:
            proc.stdin.write(f"go {t0!r}\n".encode())  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        w0 = t0 + a.warmup
        return procs, w0 + offset, w0 + seconds + offset

    async def collect(self, procs: list[subprocess.Popen], timeout: float) -> list[dict]:
        results = [json.loads(await self.line(p, timeout)) for p in procs]
        for p in procs:
            p.stdin.close()  # type: ignore[union-attr]
            await asyncio.to_thread(p.wait, 30)
        return results

    async def run(self) -> int:
        from laneledger.sdk.client import LedgerClient

        a = self.args
        tail_url = self.start_ledger()
        client = await LedgerClient.connect(self.nats.url, timeout=30)
        try:
            self.actor = await client.ensure_actor("bench", "agent:bench/tail@1", "agent")
            self.lanes = [
                await client.create_lane(
                    "bench", "bench-session", "run-1", f"lane-{i}", actor_id=self.actor.id
                )
                for i in range(a.lanes)
            ]
        finally:
            await client.close()
        log(
            f"laneledger tail bench: {a.producers} producers, {a.lanes} lanes, "
            f"{a.subscribers} subscribers, {os.cpu_count()} cores, dir {self.dir}"
        )

        if a.max_rate:
            max_rate = a.max_rate
            log(f"max append load: given, {max_rate:,.0f} events/s")
        else:
            procs, w0, w1 = await self.producers("ledger", a.max_seconds)
            results = await self.collect(procs, a.warmup + a.max_seconds + 90)
            max_rate = sum(r["events_committed_window"] for r in results) / a.max_seconds
            log(f"max append load (tail following, no subscriber): {max_rate:,.0f} events/s")
        target = a.load_fraction * max_rate

        last = await self.tail_position(tail_url)
        procs, w0, w1 = await self.producers("paced", a.seconds, rate=target)
        subs_per_child = -(-a.subscribers // a.subscriber_procs)
        subscribers = []
        left = a.subscribers
        for i in range(a.subscriber_procs):
            n = min(subs_per_child, left)
            left -= n
            if n <= 0:
                break
            cfg = {
                "url": tail_url,
                "from_position": last,
                "connections": n,
                "w0_wall": w0,
                "w1_wall": w1,
                "end_wall": w1 + a.drain,
                "out": str(self.dir / f"lat-{i}.bin"),
            }
            subscribers.append(self.spawn_child([__file__, "--child"], cfg))
        for proc in subscribers:
            assert (await self.line(proc, 60)).strip() == "ready"
        await asyncio.sleep(max(0.0, w0 - time.time()))
        cpu0, t_cpu0 = self.cpu(), time.monotonic()
        await asyncio.sleep(max(0.0, w1 - time.time()))
        cpu1, t_cpu1 = self.cpu(), time.monotonic()
        produced = await self.collect(procs, a.warmup + a.seconds + 90)
        summaries = [json.loads(await self.line(p, a.drain + 60)) for p in subscribers]
        for p in subscribers:
            await asyncio.to_thread(p.wait, 30)

        lat = load_latencies(self.dir / f"lat-{i}.bin" for i in range(len(subscribers)))
        values = sorted(lat)
        subs = [s for summary in summaries for s in summary["subscribers"]]
        committed = sum(r["events_committed_window"] for r in produced)
        receipts = sorted(x for r in produced for x in r.get("latencies_ms", []))
        lossless = all(s["gaps"] == 0 for s in subs) and len(subs) == a.subscribers
        log(
            f"latency phase: offered {target:,.0f} events/s ({a.load_fraction:.0%} of max) for "
            f"{a.seconds:.0f} s, committed {committed / a.seconds:,.0f} events/s"
        )
        log(
            f"  SSE delivery (commit -> frame received), {len(values):,} frames to "
            f"{len(subs)} subscribers: p50 {percentile(values, 0.5):.1f} ms, "
            f"p90 {percentile(values, 0.9):.1f} ms, p99 {percentile(values, 0.99):.1f} ms, "
            f"max {values[-1] if values else float('nan'):.1f} ms"
        )
        log(
            f"  receipt latency (submit -> receipt), same phase: p50 {percentile(receipts, 0.5):.1f} ms, "
            f"p99 {percentile(receipts, 0.99):.1f} ms"
        )
        log(
            f"  every subscriber got every position in order: {'yes' if lossless else 'NO'} "
            f"(frames per subscriber {min(s['frames'] for s in subs):,}..{max(s['frames'] for s in subs):,})"
        )
        span = t_cpu1 - t_cpu0
        log(
            "  CPU during the phase (cores): "
            + ", ".join(
                f"{name} {(cpu1.get(name, 0) - cpu0.get(name, 0)) / span:.2f}"
                for name in sorted(cpu1)
                if cpu1.get(name, 0) - cpu0.get(name, 0) > 0.01 * span
            )
        )
        log(
            json.dumps(
                {
                    "max_append_events_per_s": round(max_rate),
                    "load_fraction": a.load_fraction,
                    "offered_events_per_s": round(target),
                    "subscribers": len(subs),
                    "frames": len(values),
                    "sse_p50_ms": round(percentile(values, 0.5), 2),
                    "sse_p99_ms": round(percentile(values, 0.99), 2),
                    "sse_max_ms": round(values[-1], 2) if values else None,
                    "receipt_p50_ms": round(percentile(receipts, 0.5), 2),
                    "receipt_p99_ms": round(percentile(receipts, 0.99), 2),
                    "lossless": lossless,
                }
            )
        )
        return 0 if lossless else 1

    async def tail_position(self, url: str) -> int:
        import aiohttp

        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 60
            while True:
                async with http.get(url + "/readyz") as resp:
                    ready = resp.status == 200
                async with http.get(url + "/metrics") as resp:
                    text = await resp.text()
                applied = next(
                    float(line.split()[1])
                    for line in text.splitlines()
                    if line.startswith("laneledger_tail_applied_position ")
                )
                lag = next(
                    float(line.split()[1])
                    for line in text.splitlines()
                    if line.startswith("laneledger_tail_lag_events ")
                )
                if ready and lag == 0:
                    return int(applied)
                if time.monotonic() > deadline:
                    raise RuntimeError("the tail did not catch up")
                await asyncio.sleep(0.2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=None, help="latency window (default 10 s)")
    p.add_argument("--max-seconds", type=float, default=None, help="max-load window (default 5 s)")
    p.add_argument("--subscribers", type=int, default=50)
    p.add_argument("--subscriber-procs", type=int, default=2, help="processes the subscribers share")
    p.add_argument("--producers", type=int, default=3)
    p.add_argument("--lanes", type=int, default=24)
    p.add_argument("--load-fraction", type=float, default=0.2)
    p.add_argument(
        "--max-rate",
        type=float,
        default=None,
        help="skip phase 1 and take this as the max append load (events/s)",
    )
    p.add_argument("--warmup", type=float, default=None, help="warm-up per phase (default 2 s)")
    p.add_argument("--drain", type=float, default=3.0, help="subscribers read this long after")
    p.add_argument("--quick", action="store_true", help="smoke run: 3 s windows, 1 s warm-up")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.seconds = args.seconds or (3.0 if args.quick else 10.0)
    args.max_seconds = args.max_seconds or (3.0 if args.quick else 5.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if args.quick else 2.0)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.child:
        asyncio.run(child_main(json.loads(sys.stdin.readline())))
        return 0

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(int(4 * (args.seconds + args.max_seconds + args.warmup) + 300))
    bench = Bench(args)
    try:
        return asyncio.run(bench.run())
    finally:
        signal.alarm(0)
        bench.cleanup()


if __name__ == "__main__":
    sys.exit(main())
