"""Failover time: how long the ledger stops committing when the active
sequencer is SIGKILLed and a standby takes over (spec/replication.md).

    .venv/bin/python bench/failover.py [--kills 20] [--lease-ttl-s 2] [--cluster] [--lanes 4]

Everything runs on 127.0.0.1 in a temporary directory: a nats-server (or,
``--cluster``, a three-node cluster with R3 streams), two sequencer
processes (``python -m laneledger.services.sequencer``, each on its own
SQLite file, both with ``--lease-ttl-s``), and producers in this process
appending one event at a time to each of ``--lanes`` lanes, resending with
the same append id until a receipt comes.

Each round SIGKILLs whichever sequencer is active, waits for the other to
commit, restarts the killed one (it comes back as a standby and follows the
log) and waits until it is current. Per round:

* **expiry to commit**: from when the killed one's lease expired (its last
  renewal, ``renewed_at`` in the lease's value, plus the TTL) to the
  ``committed_at`` of the first event the successor commits;
* **producer gap**: the longest time any producer waited for a receipt
  across the kill (from its last receipt before it to its first after).

Printed: p50 and max of both over the rounds, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import aiohttp
import nats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "shared"))

from laneledger.devtools.natscluster import NatsCluster  # noqa: E402
from laneledger.devtools.natsserver import NatsServer  # noqa: E402
from laneledger.sdk.client import LedgerClient, make_event  # noqa: E402


class Sequencer:
    def __init__(self, name: str, nats_url: str, data: Path, args: list[str]) -> None:
        self.name, self.nats_url, self.data, self.args = name, nats_url, data, args
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        out = self.data / "sequencer.out"
        offset = out.stat().st_size if out.exists() else 0
        cmd = [sys.executable, "-m", "laneledger.services.sequencer", "--nats", self.nats_url]
        cmd += ["--db", str(self.data / "ledger.db"), "--http-port", "0", *self.args]
        with open(out, "ab") as o, open(self.data / "sequencer.err", "ab") as e:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                stdout=o,
                stderr=e,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, LANELEDGER_LOG_LEVEL="WARNING"),
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = out.read_bytes()[offset:].decode(errors="replace")
            if "laneledger-sequencer ready" in text:
                self.url = text.split("http=", 1)[1].split()[0]
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} did not start:\n{(self.data / 'sequencer.err').read_text()[-2000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def readyz(self, http: aiohttp.ClientSession) -> dict:
        try:
            async with http.get(f"{self.url}/readyz", timeout=aiohttp.ClientTimeout(total=1)) as resp:
                return {**(await resp.json()), "http_status": resp.status}
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return {}


class Producer:
    def __init__(self, client: LedgerClient, lane, actor_id: str, progress: asyncio.Condition) -> None:
        self.client, self.lane, self.actor_id = client, lane, actor_id
        self.progress = progress  # notified at every receipt
        self.seq = 0
        # (monotonic time received, committed_at, replayed): a replay carries
        # the committed_at of its original commit, by the sequencer killed.
        self.receipts: list[tuple[float, str, bool]] = []
        self.stopping = False

    async def run(self) -> None:
        while not self.stopping:
            payload = {"n": self.seq}
            event = make_event(self.lane.id, "stream.text_delta", actor_id=self.actor_id, payload=payload)
            append_id = f"{self.lane.id}-{self.seq}"
            while True:
                try:
                    receipt = await self.client.append(
                        self.lane, self.seq, [event], append_id=append_id, timeout=1.0
                    )
                    break
                except Exception:  # noqa: BLE001 - no sequencer right now: resend, same id
                    await asyncio.sleep(0.01)
            self.receipts.append((time.monotonic(), receipt.committed_at, receipt.replayed))
            self.seq += 1
            async with self.progress:
                self.progress.notify_all()


def first_commit_after(p: Producer, killed_at: float) -> int | None:
    """Index of p's first receipt for a commit made after ``killed_at``: by
    the successor (a replay keeps its original commit's time)."""
    for i, (_, committed, replayed) in enumerate(p.receipts):
        if not replayed and seconds(committed) > killed_at:
            return i
    return None


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def active_of(http: aiohttp.ClientSession, sequencers: list[Sequencer]) -> Sequencer:
    for _ in range(600):
        states = [await s.readyz(http) for s in sequencers]
        active = [s for s, st in zip(sequencers, states, strict=True) if st.get("role") == "active"]
        if len(active) == 1:
            return active[0]
        await asyncio.sleep(0.05)
    raise RuntimeError("no single active sequencer")


async def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="failover-bench-") as tmp:
        base = Path(tmp)
        cluster: NatsCluster | None = None
        server: NatsServer | None = None
        if args.cluster:
            cluster = NatsCluster(base / "cluster").start()
            url = ",".join(cluster.urls)
        else:
            server = NatsServer(base / "nats")
            server.start()
            url = server.url
        extra = ["--lease-ttl-s", str(args.lease_ttl_s), "--replicas", "3" if args.cluster else "1"]
        sequencers = [Sequencer(n, url, base / n, extra) for n in ("a", "b")]
        nc = await nats.connect(url.split(","))
        kv = None
        try:
            for s in sequencers:
                s.start()
            kv = await nc.jetstream().key_value("LEDGER_LEASE")
            async with (
                await LedgerClient.connect(url, timeout=5.0) as client,
                aiohttp.ClientSession() as http,
            ):
                actor = await client.ensure_actor("bench", "agent:failover@1", "agent")
                progress = asyncio.Condition()
                producers = []
                for i in range(args.lanes):
                    lane = await client.create_lane("bench", "s", "r", f"lane-{i}", actor_id=actor.id)
                    producers.append(Producer(client, lane, actor.id, progress))
                tasks = [asyncio.create_task(p.run()) for p in producers]
                await asyncio.sleep(1.0)
                expiry_to_commit, gaps = [], []
                for k in range(args.kills):
                    active = await active_of(http, sequencers)
                    received_before = [len(p.receipts) for p in producers]
                    active.kill()
                    killed_at = time.time()  # receipts carry wall-clock committed_at
                    # Its last renewal stays in the lease until the lease expires.
                    lease = json.loads((await kv.get("sequencer")).value or b"{}")
                    expires = float(lease["renewed_at"]) + args.lease_ttl_s

                    async with progress:
                        await progress.wait_for(
                            lambda killed_at=killed_at: all(
                                first_commit_after(p, killed_at) is not None for p in producers
                            )
                        )
                    firsts = [(p, first_commit_after(p, killed_at) or 0) for p in producers]
                    first_commit = min(seconds(p.receipts[i][1]) for p, i in firsts)
                    expiry_to_commit.append(first_commit - expires)
                    # The longest a producer waited for a receipt, from its last one
                    # before the kill to its first post-kill commit's.
                    gap = max(
                        p.receipts[j][0] - p.receipts[j - 1][0]
                        for (p, i), before in zip(firsts, received_before, strict=True)
                        for j in range(max(before, 1), i + 1)
                    )
                    gaps.append(gap)
                    print(
                        f"kill {k + 1}/{args.kills}: {active.name} killed; expiry to first commit "
                        f"{expiry_to_commit[-1] * 1000:.0f} ms, longest producer gap {gap * 1000:.0f} ms",
                        flush=True,
                    )
                    active.start()  # back as a standby
                    while (await active.readyz(http)).get("http_status") != 200:  # noqa: ASYNC110 - another process
                        await asyncio.sleep(0.05)
                for p in producers:
                    p.stopping = True
                await asyncio.gather(*tasks)
        finally:
            await nc.close()
            for s in sequencers:
                s.stop()
            if cluster is not None:
                cluster.stop()
            if server is not None:
                server.stop()
    result = {
        "kills": args.kills,
        "lease_ttl_s": args.lease_ttl_s,
        "cluster": args.cluster,
        "lanes": args.lanes,
        "expiry_to_first_commit_p50_ms": round(statistics.median(expiry_to_commit) * 1000, 1),
        "expiry_to_first_commit_max_ms": round(max(expiry_to_commit) * 1000, 1),
        "producer_gap_p50_ms": round(statistics.median(gaps) * 1000, 1),
        "producer_gap_max_ms": round(max(gaps) * 1000, 1),
        "cpu_count": os.cpu_count(),
    }
    where = " (3-node cluster, R3)" if args.cluster else ""
    print(
        f"\n{args.kills} kills, lease TTL {args.lease_ttl_s:g} s{where}: "
        f"lease expiry to the successor's first commit p50 {result['expiry_to_first_commit_p50_ms']:.0f} ms, "
        f"max {result['expiry_to_first_commit_max_ms']:.0f} ms; producer-observed gap p50 "
        f"{result['producer_gap_p50_ms']:.0f} ms, max {result['producer_gap_max_ms']:.0f} ms"
    )
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20, help="rounds (default 20)")
    p.add_argument("--lease-ttl-s", type=float, default=2.0, help="the sequencers' lease TTL (default 2)")
    p.add_argument("--lanes", type=int, default=4, help="lanes, one producer each (default 4)")
    p.add_argument("--cluster", action="store_true", help="a three-node cluster with R3 streams")
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(run(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
