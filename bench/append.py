"""Append throughput and receipt latency of the whole ledger path, against raw
JetStream publishing of the same bytes.

    .venv/bin/python bench/append.py [--seconds S] [--producers P] [--lanes L]
                                     [--events-per-append E] [--quick]
                                     [--latency-at EVENTS_PER_S] [--no-bare]

Everything runs on 127.0.0.1 in a temporary directory: its own nats-server,
the sequencer as a subprocess (``python -m laneledger.services.sequencer``) on a fresh
SQLite file, and P producer processes (``bench/producer.py``). Phases:

1. **max load** - P producers append realistic events (~300-500 bytes of
   canonical JSON each; model/tool calls, deltas, a ``cost.recorded`` in eight)
   to their own share of L lanes with ``LedgerClient.submit``: each lane's head
   is tracked locally and up to ``--window`` appends per producer are in
   flight. After a warm-up, committed events are counted for S seconds from the
   receipts, and cross-checked with the sequencer's
   ``laneledger_sequencer_events_committed_total`` and the database.
2. **raw baseline** - a separate JetStream stream with the same settings as
   ``LEDGER_APPEND`` (file storage, work queue) and P processes
   ``js.publish_async``-ing the same append-request bodies (same generator,
   same header) with up to ``--window`` acks outstanding. Counted in events
   (each message carries E), so the two figures compare.
3. **latency at 20 %** - an open-loop load of ``--load-fraction`` (0.2) of the
   committed throughput of phase 1, spread over the producers with steady
   inter-arrival times; the time from ``submit`` to receipt of every append in
   the window gives p50 and p99.
3b. **floor** - the same open-loop load, the raw phase's bodies
   ``js.publish_async``-ed to a stream like ``LEDGER_APPEND``, and again to
   one fsynced before each ack (as ``LEDGER_TXLOG`` and ``LEDGER_EVENTS``
   are; on R3 the two are the same stream, run once): each publish's latency
   to its JetStream ack, the floor under a receipt (``floor_*``,
   ``floor_synced_*``).
4. **bare max load** - phase 1 again, but the producers publish the raw
   phase's way (pre-built bodies, ``js.publish_async``, no SDK) to the
   ledger's subjects and count receipts on one subscription: what the ledger
   commits when its producers cost no more than raw ones (``bare_*``).
5. **ceiling** - the sequencer is replaced by ``bench/null_sequencer.py``,
   which does the sequencer's NATS traffic (pull, ack, one event published per
   event with one ack per batch, one receipt message per producer per batch)
   and none of the ledger's work, and phase 1 runs again against it. What the
   producers reach then is the most this architecture's processes commit on
   this machine whatever the ledger costs: ``ceiling_per_s``, ``ceiling_ratio``.
6. **bare ceiling** - phase 4's producers against the stand-in: the most any
   sequencer could commit here with producers as cheap as the baseline's
   (``bare_ceiling_*``). ``--no-bare`` skips phases 4 and 6.

``--unmirrored-ceiling-too``: phases 5 and 6 again with the stand-in's
``--no-mirror`` (nothing published to LEDGER_EVENTS: the ceiling of a design
in which the place of commit is also the committed stream), keys
``unmirrored_ceiling_*`` and ``unmirrored_bare_ceiling_*``.

``--cluster`` runs everything on a three-node nats-server cluster on
loopback with R3 streams (the sequencer's ``--replicas 3``; the raw stream
R3 too); the ceiling phases are skipped there (the stand-in connects to one
server).

``--txlog-off-too``: after phase 3, the sequencer is restarted with
``--txlog off`` (the SQLite file alone, without the replicated transaction
log of spec/replication.md) and phases 1 and 3 run again, 3 at the same
offered rate: what committing through LEDGER_TXLOG costs, in the same run
(``txlog_off_*`` keys). The sequencer then goes back to ``--txlog on``.

``--unsealed-too``: likewise with ``--seal-content off`` (events not sealed,
so not erasable: spec/erasure.md), ``unsealed_*`` keys: what sealing costs.

``--latency-at N`` runs phase 3 alone, at N events/s, for comparing two copies
of the code at the same load without the other phases' minutes.

Each phase also reports where the CPU went (from /proc: the sequencer's
event-loop and writer threads, nats-server, producers, and everything else on
the machine, which on a shared machine says how much to trust the figures) and
the sequencer's batch-size and commit-time histograms.

The last line of output is one JSON object with ``committed_per_s``,
``raw_publish_per_s``, ``ratio``, ``receipt_p50_ms_at_20pct``,
``receipt_p99_ms_at_20pct`` and more. Exit status 1 when a consistency check
failed (the figures are then not to be trusted).

The sequencer runs as ``python -m laneledger.services.sequencer``, exactly as deployed.
``PYTHONPATH=<tree>/shared:<tree>`` measures another copy of the code (the
output names which one it measured).

The run is bounded (a watchdog ends it) and leaves no process behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from prometheus_client.parser import text_string_to_metric_families

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from producer import EventFactory, request_body  # noqa: E402

from laneledger.contract.canonical import canonicalize  # noqa: E402
from laneledger.contract.ids import new_id  # noqa: E402
from laneledger.contract.model import Lane  # noqa: E402
from laneledger.contract.subjects import Subjects  # noqa: E402
from laneledger.devtools.benchkit import die_with_parent, percentile  # noqa: E402
from laneledger.devtools.natscluster import NatsCluster  # noqa: E402
from laneledger.devtools.natsserver import NatsServer  # noqa: E402
from laneledger.sdk.client import LedgerClient  # noqa: E402
from laneledger.services.sequencer.streams import append_stream_config  # noqa: E402

TENANT = "bench"
RAW_STREAM = "BENCH_RAW"
RAW_PREFIX = "benchraw"
CLK_TCK = os.sysconf("SC_CLK_TCK")
M = "laneledger_sequencer_"
HEADLINE = (
    "committed_per_s",
    "raw_publish_per_s",
    "ratio",
    "receipt_p50_ms_at_20pct",
    "receipt_p99_ms_at_20pct",
    "floor_p50_ms_at_20pct",
    "floor_p99_ms_at_20pct",
)


def log(text: str = "") -> None:
    print(text, flush=True)


# -- processes: CPU time from /proc -----------------------------------------------------


def _proc_ticks(path: str) -> int:
    try:
        with open(path) as f:
            stat = f.read()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def cpu_seconds(pid: int) -> float:
    return _proc_ticks(f"/proc/{pid}/stat") / CLK_TCK


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return {}
    return {tid: _proc_ticks(f"/proc/{pid}/task/{tid}/stat") / CLK_TCK for tid in tids}


def system_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, all cores."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + parts[4]  # idle + iowait
    total = sum(parts[:8])
    return (total - idle) / CLK_TCK, total / CLK_TCK


@dataclass
class CpuSnapshot:
    at: float
    procs: dict[str, float]
    seq_threads: dict[int, float]
    busy: float
    total: float


# -- metrics -------------------------------------------------------------------------------


class LoopbackCluster:
    """``--cluster``: a three-node nats-server cluster on loopback in the
    place of the one server (``url``: every node's, comma-separated)."""

    def __init__(self, base: Path) -> None:
        self.cluster = NatsCluster(base)

    @property
    def url(self) -> str:
        return ",".join(self.cluster.urls)

    async def astart(self) -> None:
        await asyncio.to_thread(self.cluster.start)

    def stop(self) -> None:
        self.cluster.stop()


def nats_pids(nats: NatsServer | LoopbackCluster) -> list[int]:
    servers = nats.cluster.nodes if isinstance(nats, LoopbackCluster) else [nats]
    return [s.pid for s in servers if s.pid is not None]


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def mdiff(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def code_fingerprint() -> dict[str, str]:
    """Which sequencer and library code this run measured (they change between runs)."""
    import hashlib

    import laneledger
    import laneledger.services.sequencer

    digest = hashlib.sha256()
    roots = [Path(laneledger.services.sequencer.__file__).parent, Path(laneledger.__file__).parent]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        head = ""
    return {
        "code_sha256": digest.hexdigest()[:12],
        "git_head": head,
        "sequencer_from": str(roots[0]),
        "laneledger_from": str(roots[1]),
    }


def histogram(m0: dict[str, float], m1: dict[str, float], prefix: str, scale: float = 1.0) -> list[str]:
    """A Prometheus histogram's counts between two scrapes, per bucket, non-empty ones."""
    buckets = sorted(
        (float(k.split("le=")[1].rstrip("}")), mdiff(m1, m0, k)) for k in m1 if k.startswith(prefix)
    )
    out, prev = [], 0.0
    for le, cum in buckets:  # cumulative counts -> per bucket
        if cum - prev > 0:
            out.append(f"<={le * scale:g}: {cum - prev:.0f}")
        prev = cum
    return out


# -- the benchmark ----------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    results: list[dict[str, Any]] = field(default_factory=list)
    cpu0: CpuSnapshot | None = None
    cpu1: CpuSnapshot | None = None
    m_before: dict[str, float] = field(default_factory=dict)  # before the phase started
    m0: dict[str, float] = field(default_factory=dict)  # at the window's start
    m1: dict[str, float] = field(default_factory=dict)  # at the window's end
    m0_at: float = 0.0
    m1_at: float = 0.0
    per_second: list[float] = field(default_factory=list)
    append_backlog_at_end: int | None = None


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.P = args.producers
        self.E = args.events_per_append
        self.tmp = tempfile.TemporaryDirectory(prefix="laneledger-bench-", dir=args.dir)
        self.dir = Path(self.tmp.name)
        self.db = self.dir / "ledger.db"
        self.nats: NatsServer | LoopbackCluster = (
            LoopbackCluster(self.dir / "cluster") if args.cluster else NatsServer(self.dir / "nats")
        )
        self.replicas = 3 if args.cluster else 1
        self.sequencer: subprocess.Popen | None = None
        self.producers: list[subprocess.Popen] = []
        self.metrics_url = ""
        self.readers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bench-io")
        self.checks: list[tuple[str, bool, str]] = []
        self.null_sequencer = False  # set by start_sequencer: the ceiling phase's stand-in runs
        self.null_mirrored = True  # and whether it publishes to LEDGER_EVENTS
        # The sequencer's settings beyond the defaults: --txlog-off-too and
        # --unsealed-too set them for their phases at the end.
        self.sequencer_flags: list[str] = []

    # -- lifecycle -----------------------------------------------------------------------------

    def start_sequencer(self, null: bool = False, mirrored: bool = True) -> None:
        """The real sequencer, or (``null``) the stand-in of the ceiling phase
        (bench/null_sequencer.py), which takes the real one's place
        (``mirrored=False``: with ``--no-mirror``)."""
        out, err = self.dir / "sequencer.out", self.dir / "sequencer.err"
        self.null_sequencer = null
        self.null_mirrored = mirrored
        if null:
            cmd = [sys.executable, str(BENCH_DIR / "null_sequencer.py"), "--nats", self.nats.url]
            cmd += [] if mirrored else ["--no-mirror"]
            ready = "null-sequencer ready"
        else:
            cmd = [
                sys.executable,
                "-m",
                "laneledger.services.sequencer",
                "--nats",
                self.nats.url,
                "--db",
                str(self.db),
                "--http-port",
                "0",
            ]
            ready = "laneledger-sequencer ready"
        if self.args.batch_size:
            cmd += ["--batch-size", str(self.args.batch_size)]
        if not null:
            cmd += self.sequencer_flags
        if not null:
            cmd += ["--replicas", str(self.replicas)]
        env = dict(os.environ, LANELEDGER_LOG_LEVEL="WARNING")
        with open(out, "wb") as o, open(err, "wb") as e:
            self.sequencer = subprocess.Popen(
                cmd,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=o,
                stderr=e,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = out.read_text(errors="replace")
            if ready in text:
                if not null:
                    self.metrics_url = text.split("http=", 1)[1].split()[0] + "/metrics"
                return
            if self.sequencer.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("sequencer did not start:\n" + err.read_text(errors="replace")[-3000:])

    def stop_sequencer(self) -> None:
        assert self.sequencer is not None
        self.sequencer.send_signal(signal.SIGTERM)
        try:
            self.sequencer.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.sequencer.pid, signal.SIGKILL)
            self.sequencer.wait()
        self.sequencer = None

    def cleanup(self, failed: bool = False) -> None:
        """Synchronous, idempotent; runs whatever happened before."""
        if self.sequencer is not None and (failed or self.sequencer.poll() is not None):
            err = self.dir / "sequencer.err"
            tail = err.read_text(errors="replace")[-4000:] if err.exists() else ""
            print(f"sequencer exit code {self.sequencer.poll()}; its stderr ends:\n{tail}", file=sys.stderr)
        for proc in self.producers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.producers.clear()
        if self.sequencer is not None:
            self.stop_sequencer()
        self.nats.stop()
        self.readers.shutdown(wait=False, cancel_futures=True)
        self.tmp.cleanup()

    # -- observation ---------------------------------------------------------------------------

    async def scrape(self) -> tuple[dict[str, float], float]:
        """The sequencer's metrics and the (monotonic) moment they were read."""
        t = time.monotonic()
        try:
            async with self.http.get(self.metrics_url) as resp:
                text = await resp.text()
        except aiohttp.ClientError as exc:
            assert self.sequencer is not None
            if self.sequencer.poll() is not None:
                raise RuntimeError(f"the sequencer died (exit code {self.sequencer.returncode})") from None
            raise RuntimeError(f"cannot read the sequencer's metrics: {exc}") from exc
        return parse_metrics(text), (t + time.monotonic()) / 2

    def cpu_snapshot(self) -> CpuSnapshot:
        assert self.sequencer is not None
        procs = {
            "sequencer": cpu_seconds(self.sequencer.pid),
            "nats-server": sum(cpu_seconds(pid) for pid in nats_pids(self.nats)),
            "bench (this process)": cpu_seconds(os.getpid()),
        }
        for i, p in enumerate(self.producers):
            procs[f"producer {i}"] = cpu_seconds(p.pid)
        busy, total = system_busy_seconds()
        return CpuSnapshot(time.monotonic(), procs, thread_cpu_seconds(self.sequencer.pid), busy, total)

    async def stream_msgs(self, name: str) -> int:
        return (await self.js.stream_info(name)).state.messages

    async def db_counts(self) -> tuple[int, int, int]:
        def read() -> tuple[int, int, int]:
            conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
            try:
                n, top = conn.execute("SELECT count(*), coalesce(max(position), 0) FROM events").fetchone()
                heads = conn.execute("SELECT coalesce(sum(last_seq), 0) FROM lanes").fetchone()[0]
                return n, top, heads
            finally:
                conn.close()

        return await asyncio.to_thread(read)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append((name, ok, detail))
        log(f"  check {'ok  ' if ok else 'FAIL'} {name}: {detail}")

    # -- producers -----------------------------------------------------------------------------

    def _spawn_producer(self, cfg: dict) -> subprocess.Popen:
        """Start one producer process and hand it its config; its stderr goes
        to producer-<pid>.err."""
        with open(self.dir / "producer-tmp.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(BENCH_DIR / "producer.py")],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                preexec_fn=die_with_parent,
            )
        os.replace(self.dir / "producer-tmp.err", self.dir / f"producer-{proc.pid}.err")
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(cfg) + "\n").encode())
        proc.stdin.flush()
        return proc

    async def _line(self, proc: subprocess.Popen, timeout: float) -> str:
        loop = asyncio.get_running_loop()
        assert proc.stdout is not None
        line = await asyncio.wait_for(loop.run_in_executor(self.readers, proc.stdout.readline), timeout)
        if not line:
            raise RuntimeError(
                f"producer {proc.pid} exited early (code {proc.poll()}); "
                f"see its log:\n{self._producer_log_tail(proc)}"
            )
        return line.decode()

    def _producer_log_tail(self, proc: subprocess.Popen) -> str:
        path = self.dir / f"producer-{proc.pid}.err"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    async def run_phase(
        self,
        name: str,
        mode: str,
        seconds: float,
        extra: list[dict[str, Any]] | None = None,
        monitor_ledger: bool = True,
    ) -> Phase:
        args, P = self.args, self.P
        phase = Phase(name)
        if monitor_ledger:
            phase.m_before, _ = await self.scrape()
        drain_s = 30.0
        for i in range(P):
            cfg = {
                "mode": mode,
                "url": self.nats.url,
                "actor_id": self.actor.id,
                "lanes": [msgspec.to_builtins(lane) for lane in self.lanes[i::P]],
                "events_per_append": self.E,
                "window": args.window,
                "warmup_s": args.warmup,
                "seconds": seconds,
                "drain_s": drain_s,
                "raw_prefix": RAW_PREFIX,
                **(extra[i] if extra else {}),
            }
            self.producers.append(self._spawn_producer(cfg))
        for proc in self.producers:
            if (await self._line(proc, 60)).strip() != "ready":
                raise RuntimeError("producer not ready")
        t0 = time.monotonic() + 0.3
        for proc in self.producers:
            assert proc.stdin is not None
            proc.stdin.write(f"go {t0!r}\n".encode())
            proc.stdin.flush()
        w0 = t0 + args.warmup
        w1 = w0 + seconds

        await asyncio.sleep(max(0.0, w0 - time.monotonic()))
        phase.cpu0 = self.cpu_snapshot()
        if monitor_ledger:
            phase.m0, phase.m0_at = await self.scrape()
            prev, prev_at = phase.m0, phase.m0_at
            while True:
                nxt = prev_at + 1.0
                if nxt > w1 - 0.05:
                    break
                await asyncio.sleep(max(0.0, nxt - time.monotonic()))
                cur, cur_at = await self.scrape()
                phase.per_second.append(mdiff(cur, prev, M + "events_committed_total") / (cur_at - prev_at))
                prev, prev_at = cur, cur_at
        await asyncio.sleep(max(0.0, w1 - time.monotonic()))
        phase.cpu1 = self.cpu_snapshot()
        if monitor_ledger:
            phase.m1, phase.m1_at = await self.scrape()
            phase.append_backlog_at_end = await self.stream_msgs("LEDGER_APPEND")

        for proc in self.producers:
            phase.results.append(json.loads(await self._line(proc, drain_s + 60)))
        for proc in self.producers:
            proc.stdin.close()  # type: ignore[union-attr]
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.producers.clear()
        return phase

    async def settle(self, expected_events: float, before: dict[str, float]) -> dict[str, float]:
        """Wait until the sequencer has committed and mirrored everything sent."""
        deadline = time.monotonic() + 60
        while True:
            m, _ = await self.scrape()
            committed = mdiff(m, before, M + "events_committed_total")
            backlog = await self.stream_msgs("LEDGER_APPEND")
            mirrored = (await self.js.stream_info("LEDGER_EVENTS")).state.last_seq
            if (
                committed >= expected_events
                and backlog == 0
                and m.get(M + "mirror_backlog_batches", 0) == 0
                and mirrored == m.get(M + "last_position")
            ):
                return m
            if time.monotonic() > deadline:
                log(
                    f"  (not settled after 60 s: committed {committed:.0f}/{expected_events:.0f}, "
                    f"append backlog {backlog}, events stream at {mirrored})"
                )
                return m
            await asyncio.sleep(0.2)

    # -- reporting -----------------------------------------------------------------------------

    def report_cpu(self, phase: Phase) -> dict[str, float]:
        a, b = phase.cpu0, phase.cpu1
        assert a is not None and b is not None
        wall = b.at - a.at
        cores = {k: (b.procs.get(k, 0.0) - a.procs.get(k, 0.0)) / wall for k in b.procs}
        producers = sum(v for k, v in cores.items() if k.startswith("producer"))
        busy = (b.busy - a.busy) / wall
        other = max(0.0, busy - sum(cores.values()))
        assert self.sequencer is not None
        main_tid = self.sequencer.pid
        threads = {
            tid: (b.seq_threads.get(tid, 0.0) - a.seq_threads.get(tid, 0.0)) / wall for tid in b.seq_threads
        }
        loop_thread = threads.pop(main_tid, 0.0)
        others = sorted(threads.values(), reverse=True)
        writer = "" if self.null_sequencer else " = the SQLite writer"
        log(
            f"  CPU (cores, of {os.cpu_count()}): machine busy {busy:.2f}; "
            f"{'null sequencer' if self.null_sequencer else 'sequencer'} {cores['sequencer']:.2f} "
            f"(event-loop thread {loop_thread:.2f}, busiest other thread {others[0] if others else 0:.2f}"
            f"{writer}); nats-server {cores['nats-server']:.2f}; producers {producers:.2f} "
            f"({', '.join(f'{v:.2f}' for k, v in cores.items() if k.startswith('producer'))}); "
            f"bench {cores['bench (this process)']:.2f}; everything else on the machine {other:.2f}"
        )
        return {
            "machine_busy": busy,
            "sequencer": cores["sequencer"],
            "sequencer_loop_thread": loop_thread,
            "sequencer_writer_thread": others[0] if others else 0.0,
            "nats_server": cores["nats-server"],
            "producers": producers,
            "other_processes": other,
        }

    def report_sequencer(self, phase: Phase) -> dict[str, float]:
        m0, m1 = phase.m0, phase.m1
        wall = phase.m1_at - phase.m0_at
        batches = mdiff(m1, m0, M + "batch_requests_count")
        reqs = mdiff(m1, m0, M + "batch_requests_sum")
        commit_s = mdiff(m1, m0, M + "commit_seconds_sum")
        out = {
            "batches_per_s": batches / wall,
            "mean_batch_requests": reqs / batches if batches else 0.0,
            "mean_commit_ms": 1000 * commit_s / batches if batches else 0.0,
        }
        hist = histogram(m0, m1, M + "batch_requests_bucket")
        commit_hist = histogram(m0, m1, M + "commit_seconds_bucket", scale=1000)
        log(
            f"  sequencer: {out['batches_per_s']:.0f} batches/s, mean {out['mean_batch_requests']:.1f} "
            f"requests/batch; batch sizes [{'; '.join(hist)}]; its commit_seconds metric: mean "
            f"{out['mean_commit_ms']:.2f} ms/batch [{'; '.join(commit_hist)}]; "
            f"LEDGER_APPEND backlog at the window's end: {phase.append_backlog_at_end} messages"
        )
        return out

    # -- the run ---------------------------------------------------------------------------------

    async def wait_idle(self) -> None:
        """Wait (bounded) until the machine is quiet, so others' work does not skew the figures."""
        deadline = time.monotonic() + self.args.wait_idle
        while True:
            b0, _ = system_busy_seconds()
            await asyncio.sleep(1.0)
            busy = system_busy_seconds()[0] - b0
            if busy < 0.25:
                return
            if time.monotonic() >= deadline:
                if self.args.wait_idle > 0:
                    log(
                        f"(the machine is still busy, {busy:.2f} cores in use by other processes; "
                        "starting anyway)"
                    )
                return

    async def run(self) -> int:
        await self.wait_idle()
        await self.nats.astart()
        await asyncio.to_thread(self.start_sequencer)
        self.http = aiohttp.ClientSession()
        self.client = await LedgerClient.connect(self.nats.url, timeout=30.0)
        self.js = self.client.nc.jetstream()
        try:
            return await self._run()
        finally:
            await self.http.close()
            await self.client.close()

    def step(self) -> str:
        """The next phase's "[i/n]"."""
        self.steps_done += 1
        return f"[{self.steps_done}/{self.steps}]"

    async def _run(self) -> int:
        args, P, E = self.args, self.P, self.E
        self.steps_done = 0
        self.steps = 1 if args.latency_at is not None else 6 if args.no_bare else 8
        if args.cluster and args.latency_at is None:
            self.steps -= 2 if args.no_bare else 3  # no ceiling phases, one floor
        if args.latency_at is None:
            self.steps += 3 * (args.txlog_off_too + args.unsealed_too)
            if args.unmirrored_ceiling_too and not args.cluster:
                self.steps += 1 if args.no_bare else 2
        log(
            f"laneledger append benchmark: {P} producer processes, {args.lanes} lanes, {E} event(s) per "
            f"append, window {args.window} appends/producer, warm-up {args.warmup:g} s, phases "
            f"{args.seconds:g} s, {os.cpu_count()} CPUs; store in {self.dir} "
            f"(nats-server {self.nats.url}, sequencer pid {self.sequencer.pid})"
        )  # type: ignore[union-attr]
        self.code = code_fingerprint()
        log(
            f"code: sequencer from {self.code['sequencer_from']}, laneledger from "
            f"{self.code['laneledger_from']}; "
            f"sources sha256 {self.code['code_sha256']} (git HEAD {self.code['git_head'] or '?'})"
        )
        self.actor = await self.client.ensure_actor(
            TENANT, "agent:bench/append@1", "agent", display_name="append benchmark"
        )
        self.lanes: list[Lane] = []
        for i in range(args.lanes):
            self.lanes.append(
                await self.client.create_lane(
                    TENANT, f"session-{i // 8}", f"run-{i // 8}", f"lane-{i}", actor_id=self.actor.id
                )
            )
        factory = EventFactory(self.lanes[0], self.actor.id)
        sizes = sorted(len(canonicalize(factory.next())) for _ in range(800))
        body = len(request_body(self.lanes[0], 0, new_id(), factory.batch(E)))
        log(
            f"events: canonical JSON {sizes[0]}-{sizes[-1]} bytes (mean {sum(sizes) / len(sizes):.0f}); "
            f"append request body ~{body} bytes"
        )

        if args.latency_at is None:
            result = await self._phase_max()
            result |= await self._phase_raw()
            result["ratio"] = ratio(result["committed_per_s"], result["raw_publish_per_s"])
            rate = max(args.load_fraction * result["committed_per_s"] / E, 1.0)  # appends/s
            result |= await self._phase_latency(rate, f"{100 * args.load_fraction:g} % load")
            result |= await self._phase_floor(rate)
            if not args.cluster:  # on R3 the append streams are fsynced too: one floor
                result |= await self._phase_floor(rate, synced=True)
            if args.txlog_off_too:  # the SQLite file alone, without the replicated log
                result |= await self._phases_with(["--txlog", "off"], "txlog_off", rate)
            if args.unsealed_too:  # events not sealed: what making them erasable costs
                result |= await self._phases_with(["--seal-content", "off"], "unsealed", rate)
            if not args.no_bare:
                result |= await self._phase_bare()
                result["bare_ratio"] = ratio(result["bare_committed_per_s"], result["raw_publish_per_s"])
            if not args.cluster:  # the stand-in connects to one server
                result |= await self._phase_ceiling(result["raw_publish_per_s"])
            if not args.no_bare and not args.cluster:
                result |= await self._phase_ceiling(result["raw_publish_per_s"], "bare")
            if args.unmirrored_ceiling_too and not args.cluster:
                result |= await self._phase_ceiling(result["raw_publish_per_s"], mirrored=False)
                if not args.no_bare:
                    result |= await self._phase_ceiling(result["raw_publish_per_s"], "bare", mirrored=False)
        else:
            result = await self._phase_latency(args.latency_at / E, "fixed load")
        ok = all(c[1] for c in self.checks)
        result |= {
            "cluster": args.cluster,
            "load_fraction": None if args.latency_at else args.load_fraction,
            "events_per_append": E,
            "producers": P,
            "lanes": args.lanes,
            "window": args.window,
            "seconds": args.seconds,
            "warmup_s": args.warmup,
            "cpu_count": os.cpu_count(),
            "mean_event_bytes": round(sum(sizes) / len(sizes), 1),
            "checks_ok": ok,
            "code_sha256": self.code["code_sha256"],
            "git_head": self.code["git_head"],
        }
        # The figures first, then the rest in the order measured.
        result = {k: result[k] for k in HEADLINE if k in result} | result
        p50, p99 = result["receipt_p50_ms_at_20pct"], result["receipt_p99_ms_at_20pct"]
        at = "the fixed load" if args.latency_at else f"{100 * args.load_fraction:g} %"
        throughput = (
            ""
            if args.latency_at
            else f"committed {result['committed_per_s']:,.0f} events/s vs raw publish "
            f"{result['raw_publish_per_s']:,.0f} events/s (ratio {result['ratio']}); "
        )
        log(
            f"\n{throughput}receipt p50 {p50:.2f} ms, p99 {p99:.2f} ms at {at}"
            f"{'' if ok else '  -- CONSISTENCY CHECKS FAILED'}"
        )
        print(json.dumps(result), flush=True)
        return 0 if ok else 1

    async def _phase_max(self) -> dict[str, Any]:
        """1. max load: committed events/s, checked against the sequencer and the database."""
        args, P = self.args, self.P
        log(
            f"\n{self.step()} max load: {P} producers, submit + receipts, {args.seconds:g} s after "
            f"{args.warmup:g} s warm-up"
        )
        out = await self._max_load("max", "ledger")
        return {
            "committed_per_s": out["committed_per_s"],
            "committed_per_s_metric": out["committed_per_s_metric"],
            "sequencer_mean_batch_requests_max": out["sequencer_mean_batch_requests"],
            "sequencer_mean_commit_ms_max": out["sequencer_mean_commit_ms"],
            "cpu_cores_max": out["cpu_cores"],
        }

    async def _phases_with(self, flags: list[str], prefix: str, rate: float) -> dict[str, Any]:
        """Phases 1 and 3 again with the sequencer run with ``flags``, the
        latency one at the same offered rate; keys ``<prefix>_…``."""
        shown = " ".join(flags)
        log(f"\n{self.step()} restarting the sequencer with {shown}")
        self.stop_sequencer()
        self.sequencer_flags = flags
        self.start_sequencer()
        out = await self._phase_max()
        out |= await self._phase_latency(rate, f"the same offered load, {shown}")
        # The phases after these (bare, ceiling) run as before, with the defaults.
        self.stop_sequencer()
        self.sequencer_flags = []
        self.start_sequencer()
        return {f"{prefix}_{key}": value for key, value in out.items()}

    async def _phase_bare(self) -> dict[str, Any]:
        """4. max load from producers that cost what raw ones do (no SDK)."""
        args, P = self.args, self.P
        log(
            f"\n{self.step()} bare max load: {P} producers publishing the same bodies as the raw phase, "
            f"its way (publish_async), to the ledger's subjects, counting receipts on one subscription; "
            f"window {args.window} appends/producer without a receipt"
        )
        return {f"bare_{k}": v for k, v in (await self._max_load("bare", "bare")).items()}

    async def _max_load(self, name: str, mode: str) -> dict[str, Any]:
        """Producers in ``mode`` offer all they can to the real sequencer: committed
        events/s, checked against the sequencer's metric and the database."""
        args, E = self.args, self.E
        db0 = await self.db_counts()
        mx = await self.run_phase(name, mode, args.seconds)
        r = mx.results
        ev_window = sum(x["events_committed_window"] for x in r)
        ev_total = sum(x["events_committed"] for x in r)
        rejected = sum(x["appends_rejected"] for x in r)
        timeouts = sum(x["receipt_timeouts"] for x in r)
        committed_per_s = ev_window / args.seconds
        metric_rate = mdiff(mx.m1, mx.m0, M + "events_committed_total") / (mx.m1_at - mx.m0_at)
        log(
            f"  committed {ev_window} events in the {args.seconds:g} s window (from receipts) = "
            f"{committed_per_s:,.0f} events/s = {committed_per_s / E:,.0f} appends/s"
        )
        log(
            f"  sequencer metric over the window: {metric_rate:,.0f} events/s; per second: "
            f"{', '.join(f'{v:,.0f}' for v in mx.per_second)}"
        )
        cpu = self.report_cpu(mx)
        seq = self.report_sequencer(mx)
        m_end = await self.settle(ev_total, mx.m_before)
        db1 = await self.db_counts()
        metric_total = mdiff(m_end, mx.m_before, M + "events_committed_total")
        metric_rejected = rejected_total(m_end) - rejected_total(mx.m_before)
        self.check(
            "receipts = sequencer metric = database",
            ev_total == metric_total == db1[0] - db0[0] == db1[1] - db0[1] == db1[2] - db0[2],
            f"receipts {ev_total}, events_committed_total +{metric_total:.0f}, DB rows +{db1[0] - db0[0]}, "
            f"DB max position +{db1[1] - db0[1]}, sum of lane heads +{db1[2] - db0[2]}",
        )
        self.check(
            "no rejected appends, no lost receipts",
            rejected == 0 and timeouts == 0 and metric_rejected == 0,
            f"rejected by receipt {rejected} {merge(x['rejected_codes'] for x in r)}, by metric "
            f"{metric_rejected:.0f}; receipt timeouts {timeouts}; submit errors "
            f"{merge(x['submit_errors'] for x in r)}",
        )
        self.check(
            "window count agrees with the sequencer's metric",
            abs(metric_rate - committed_per_s) <= 0.05 * committed_per_s,
            f"{committed_per_s:,.0f} vs {metric_rate:,.0f} events/s",
        )
        return {
            "committed_per_s": round(committed_per_s, 1),
            "committed_per_s_metric": round(metric_rate, 1),
            "sequencer_mean_batch_requests": round(seq["mean_batch_requests"], 1),
            "sequencer_mean_commit_ms": round(seq["mean_commit_ms"], 3),
            "cpu_cores": {k: round(v, 2) for k, v in cpu.items()},
        }

    async def _phase_raw(self) -> dict[str, Any]:
        """2. the raw baseline: the same bodies publish_async-ed to a stream like LEDGER_APPEND."""
        args, P, E = self.args, self.P, self.E
        log(
            f"\n{self.step()} raw JetStream baseline: {P} producers, publish_async of the same bodies to "
            f"{RAW_STREAM} (file storage, same settings as LEDGER_APPEND), window {args.window} acks/producer"
        )
        cfg = append_stream_config(RAW_STREAM, Subjects(RAW_PREFIX), self.replicas)
        cfg.description = "laneledger benchmark: raw publish baseline"
        await self.js.add_stream(cfg)
        raw = await self.run_phase("raw", "raw", args.seconds, monitor_ledger=False)
        raw_events = sum(x["events_window"] for x in raw.results)
        raw_acked = sum(x["acked"] for x in raw.results)
        raw_errors = merge(x["errors"] for x in raw.results)
        raw_per_s = raw_events / args.seconds
        log(
            f"  acked {raw_events} events in the {args.seconds:g} s window = {raw_per_s:,.0f} events/s "
            f"({raw_per_s / E:,.0f} messages/s)"
        )
        cpu_raw = self.report_cpu(raw)
        stored = await self.stream_msgs(RAW_STREAM)
        self.check(
            "raw: acks = messages stored, no errors",
            stored == raw_acked and not raw_errors,
            f"acked {raw_acked}, stream holds {stored}, errors {raw_errors}",
        )
        await self.js.delete_stream(RAW_STREAM)
        return {
            "raw_publish_per_s": round(raw_per_s, 1),
            "cpu_cores_raw": {k: round(v, 2) for k, v in cpu_raw.items()},
        }

    async def _phase_latency(self, rate: float, load: str) -> dict[str, Any]:
        """3. receipt latency under an open-loop load of ``rate`` appends/s."""
        args, P, E = self.args, self.P, self.E
        log(
            f"\n{self.step()} latency: open-loop {load} = {rate * E:,.0f} events/s "
            f"({rate:,.0f} appends/s, {rate / P:,.1f}/s per producer, steady inter-arrival), "
            f"{args.seconds:g} s after {args.warmup:g} s warm-up"
        )
        db2 = await self.db_counts()
        lat = await self.run_phase("paced", "paced", args.seconds, extra=self.paced(rate))
        r = lat.results
        lats = sorted(v for x in r for v in x["latencies_ms"])
        sched = sorted(v for x in r for v in x["latencies_sched_ms"])
        offered = sum(x["offered_window"] for x in r)
        ev_window = sum(x["events_committed_window"] for x in r)
        ev_total = sum(x["events_committed"] for x in r)
        rejected = sum(x["appends_rejected"] for x in r)
        timeouts = sum(x["receipt_timeouts"] for x in r)
        p50, p99 = percentile(lats, 50), percentile(lats, 99)
        log(
            f"  {len(lats)} appends offered in the window ({offered} scheduled), committed "
            f"{ev_window / args.seconds:,.0f} events/s"
        )
        log(
            f"  receipt latency submit->receipt: {spread(lats)}; "
            f"from the scheduled time: p50 {percentile(sched, 50):.2f}, p99 {percentile(sched, 99):.2f} ms; "
            f"worst pacer lag {max(x['max_pacer_lag_ms'] for x in r):.1f} ms"
        )
        cpu_lat = self.report_cpu(lat)
        seq_lat = self.report_sequencer(lat)
        m_end2 = await self.settle(ev_total, lat.m_before)
        db3 = await self.db_counts()
        metric_total = mdiff(m_end2, lat.m_before, M + "events_committed_total")
        self.check(
            "receipts = sequencer metric = database",
            ev_total == metric_total == db3[0] - db2[0] == db3[1] - db2[1],
            f"receipts {ev_total}, metric +{metric_total:.0f}, DB rows "
            f"+{db3[0] - db2[0]}, DB max position +{db3[1] - db2[1]}",
        )
        self.check(
            "no rejected appends, no lost receipts",
            rejected == 0 and timeouts == 0 and len(lats) == offered,
            f"rejected {rejected}, timeouts {timeouts}, latencies {len(lats)} of {offered} offered",
        )
        # The keys keep their "_at_20pct" names whatever the load; load_fraction says which.
        return {
            "receipt_p50_ms_at_20pct": round(p50, 3),
            "receipt_p99_ms_at_20pct": round(p99, 3),
            "offered_per_s_latency_phase": round(rate * E, 1),
            "sequencer_batch_requests_at_20pct": round(seq_lat["mean_batch_requests"], 1),
            "sequencer_mean_commit_ms_at_20pct": round(seq_lat["mean_commit_ms"], 3),
            "cpu_cores_20pct": {k: round(v, 2) for k, v in cpu_lat.items()},
        }

    async def _phase_floor(self, rate: float, *, synced: bool = False) -> dict[str, Any]:
        """3b. the floor under phase 3: the same open-loop load of the same
        bodies publish_async-ed to a stream like LEDGER_APPEND (``synced``:
        fsynced before each ack, as LEDGER_TXLOG and LEDGER_EVENTS are), each
        publish's latency to its JetStream ack."""
        args, E = self.args, self.E
        kind = "fsynced before each ack, as LEDGER_TXLOG is" if synced else "the settings of LEDGER_APPEND"
        log(
            f"\n{self.step()} floor: the same open-loop load ({rate * E:,.0f} events/s) publish_async-ed to "
            f"{RAW_STREAM} ({kind}); latency publish->ack"
        )
        cfg = append_stream_config(RAW_STREAM, Subjects(RAW_PREFIX), self.replicas)
        cfg.description = "laneledger benchmark: raw publish floor"
        if synced:
            cfg.persist_mode = None
        await self.js.add_stream(cfg)
        floor = await self.run_phase(
            "floor", "raw-paced", args.seconds, monitor_ledger=False, extra=self.paced(rate)
        )
        r = floor.results
        lats = sorted(v for x in r for v in x["latencies_ms"])
        offered = sum(x["offered_window"] for x in r)
        errors = merge(x["errors"] for x in r)
        p50, p99 = percentile(lats, 50), percentile(lats, 99)
        log(f"  publish->ack latency: {spread(lats)} ({len(lats)} of {offered} offered in the window)")
        self.report_cpu(floor)
        self.check(
            "floor: every publish acked, none refused",
            not errors and len(lats) == offered,
            f"errors {errors}, latencies {len(lats)} of {offered} offered",
        )
        await self.js.delete_stream(RAW_STREAM)
        key = "floor_synced" if synced else "floor"
        return {f"{key}_p50_ms_at_20pct": round(p50, 3), f"{key}_p99_ms_at_20pct": round(p99, 3)}

    def paced(self, rate: float) -> list[dict[str, float]]:
        """Each producer's part of an open-loop ``rate`` (appends/s), their
        sends staggered inside one inter-arrival."""
        return [{"rate": rate / self.P, "phase": i / self.P} for i in range(self.P)]

    async def _phase_ceiling(
        self, raw_per_s: float, mode: str = "ledger", mirrored: bool = True
    ) -> dict[str, Any]:
        """5. (and 6.) the same producers against a sequencer that does only its NATS traffic
        (``mirrored=False``: none to LEDGER_EVENTS)."""
        args, P = self.args, self.P
        who = "SDK" if mode == "ledger" else "bare"
        traffic = "publish each event" if mirrored else "no event published to LEDGER_EVENTS"
        log(
            f"\n{self.step()} ceiling, {who} producers: their max load against bench/null_sequencer.py in "
            f"the sequencer's place (its NATS traffic only: pull, ack, {traffic}, receipts; no "
            "ledger work)"
        )
        if not self.null_sequencer or self.null_mirrored != mirrored:
            await asyncio.to_thread(self.stop_sequencer)
            await asyncio.to_thread(self.start_sequencer, True, mirrored)
        ceil = await self.run_phase(
            f"ceiling-{mode}", mode, args.seconds, monitor_ledger=False, extra=[{"heads_known": True}] * P
        )
        r = ceil.results
        ceiling_per_s = sum(x["events_committed_window"] for x in r) / args.seconds
        log(
            f"  answered {sum(x['events_committed_window'] for x in r)} events in the {args.seconds:g} s "
            f"window = {ceiling_per_s:,.0f} events/s (ratio to raw {ceiling_per_s / raw_per_s:.2f})"
        )
        cpu_ceil = self.report_cpu(ceil)
        self.check(
            "ceiling: every append answered",
            sum(x["receipt_timeouts"] for x in r) == 0 and sum(x["appends_rejected"] for x in r) == 0,
            f"timeouts {sum(x['receipt_timeouts'] for x in r)}, "
            f"rejected {sum(x['appends_rejected'] for x in r)}",
        )
        prefix = ("" if mirrored else "unmirrored_") + ("" if mode == "ledger" else "bare_")
        return {
            f"{prefix}ceiling_per_s": round(ceiling_per_s, 1),
            f"{prefix}ceiling_ratio": ratio(ceiling_per_s, raw_per_s),
            f"cpu_cores_{prefix}ceiling": {k: round(v, 2) for k, v in cpu_ceil.items()},
        }


def spread(lats: list[float]) -> str:
    """A sorted latency sample's percentiles, as the phases print them."""
    return (
        f"p50 {percentile(lats, 50):.2f} ms, p90 {percentile(lats, 90):.2f}, p99 {percentile(lats, 99):.2f}, "
        f"p99.9 {percentile(lats, 99.9):.2f}, max {lats[-1] if lats else float('nan'):.2f} ms"
    )


def ratio(events_per_s: float, raw_per_s: float) -> float | None:
    """A phase's events/s as a fraction of the raw baseline's."""
    return round(events_per_s / raw_per_s, 4) if raw_per_s else None


def merge(dicts) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def rejected_total(m: dict[str, float]) -> float:
    """Append requests the sequencer rejected, whatever the code."""
    return sum(
        v for k, v in m.items() if k.startswith(M + "append_requests_total{") and "outcome=rejected" in k
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=None, help="length of each measured phase (default 10)")
    p.add_argument("--producers", type=int, default=3, help="producer processes (default 3)")
    p.add_argument("--lanes", type=int, default=64, help="lanes, shared out among the producers (default 64)")
    p.add_argument("--events-per-append", type=int, default=1, help="events per append request (default 1)")
    p.add_argument(
        "--window",
        type=int,
        default=1024,
        help="appends (or raw acks) outstanding per producer at most (default 1024)",
    )
    p.add_argument(
        "--warmup", type=float, default=None, help="warm-up before each phase (default 2 s; 1 s quick)"
    )
    p.add_argument(
        "--load-fraction", type=float, default=0.2, help="latency phase load, of max (default 0.2)"
    )
    p.add_argument(
        "--latency-at",
        type=float,
        default=None,
        metavar="EVENTS_PER_S",
        help="run only the latency phase, at this many events/s (skips every other phase)",
    )
    p.add_argument(
        "--no-bare",
        action="store_true",
        help="skip the two phases with bare producers (4: max load, 6: ceiling)",
    )
    p.add_argument(
        "--batch-size", type=int, default=None, help="the sequencer's --batch-size (default: its own)"
    )
    p.add_argument(
        "--cluster",
        action="store_true",
        help="a three-node loopback cluster with R3 streams in the place of one nats-server "
        "(without the ceiling phases)",
    )
    p.add_argument(
        "--unmirrored-ceiling-too",
        action="store_true",
        help="then the ceiling phases again with a stand-in that publishes nothing to LEDGER_EVENTS",
    )
    p.add_argument(
        "--txlog-off-too",
        action="store_true",
        help="then run phases 1 and 3 again with the sequencer's --txlog off, for comparison",
    )
    p.add_argument(
        "--unsealed-too",
        action="store_true",
        help="then run phases 1 and 3 again with the sequencer's --seal-content off: what sealing "
        "(spec/erasure.md) costs, in the same run",
    )
    p.add_argument("--dir", default=None, help="where to make the temporary store dir (default: system temp)")
    p.add_argument("--quick", action="store_true", help="smoke run: 3 s phases, 1 s warm-up")
    p.add_argument(
        "--wait-idle",
        type=float,
        default=30.0,
        help="first wait up to this many seconds for the machine to be idle (default 30)",
    )
    args = p.parse_args(argv)
    if args.seconds is None:
        args.seconds = 3.0 if args.quick else 10.0
    if args.warmup is None:
        args.warmup = 1.0 if args.quick else 2.0
    if args.producers < 1 or args.lanes < args.producers or not 1 <= args.events_per_append <= 1000:
        p.error("need producers >= 1, lanes >= producers, 1 <= events-per-append <= 1000")
    if args.latency_at is not None and args.latency_at <= 0:
        p.error("--latency-at takes a rate above 0 events/s")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget = int(args.wait_idle + 8 * (args.seconds + args.warmup) + 8 * 30 + 240)

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(f"stopped by signal {signum}" + (" (watchdog)" if signum == signal.SIGALRM else ""))

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(budget)
    bench = Bench(args)
    failed = True
    try:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        code = asyncio.run(bench.run())
        failed = False
        return code
    finally:
        signal.alarm(0)
        bench.cleanup(failed)


if __name__ == "__main__":
    sys.exit(main())
