"""Fairness between tenants: one floods appends, another's receipts stay quick.

    .venv/bin/python bench/fairness.py [--seconds 10] [--flood-window 10000]

Two runs, each on a fresh nats-server and a fresh sequencer process
(``python -m laneledger.services.sequencer``, as deployed), with the same load:

* **acme floods**: one ``bench/producer.py`` process in ``bare`` mode (raw
  JetStream publishes of append requests to 8 lanes, as fast as its acks
  come, up to ``--flood-window`` requests without a receipt);
* **globex appends at 100/s**: one producer in ``paced`` mode through the
  SDK over 4 lanes; every append's latency from ``submit`` to its receipt is
  recorded.

The first run is the alternative a user has without a tenants file: one
shared append stream, served in arrival order. The second gives acme and
globex the limits of ``deploy/tenants.toml`` (each its own append stream,
read in turns, acme taken at its append rate). The third lifts acme's rate
limit (1,000,000/s), so only the turns keep globex's requests from waiting
behind acme's. The next four flood with heavy requests instead (issue 34):
of about 0.9 MiB each (one event, its payload inline) and of 1000 events
each, with the file's limits and with acme's rate lifted, up to
``--heavy-window`` of them without a receipt. The figure that matters is
globex's receipt p99 with acme flooding (target: 30 ms, issue 34).
``--runs WORD`` keeps the runs whose name holds WORD.

Ends with one JSON line (``bench/report.py`` stores it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT / "shared"))

from append import _die_with_parent, percentile, terminate  # noqa: E402

from laneledger.devtools.natsserver import NatsServer  # noqa: E402
from laneledger.runtime.tenants import load_tenants  # noqa: E402
from laneledger.sdk.client import LedgerClient  # noqa: E402

TENANTS_FILE = ROOT / "deploy" / "tenants.toml"
GLOBEX_RATE = 100.0


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Run:
    def __init__(
        self, name: str, tenants_file: Path | None, flood: dict[str, Any], args: argparse.Namespace
    ) -> None:
        self.name, self.tenants_file, self.flood, self.args = name, tenants_file, flood, args
        self.tmp = tempfile.TemporaryDirectory(prefix="laneledger-fairness-")
        self.dir = Path(self.tmp.name)
        self.nats = NatsServer(self.dir / "nats")
        self.procs: list[subprocess.Popen[bytes]] = []

    def _spawn(self, cmd: list[str], err: Path, out: Path | None = None) -> subprocess.Popen[bytes]:
        """A child process, its stderr in ``err``; its stdout in ``out``, or a pipe."""
        env = dict(os.environ, LANELEDGER_LOG_LEVEL="WARNING")
        with open(err, "wb") as e, open(out or os.devnull, "wb") as o:
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=o if out is not None else subprocess.PIPE,
                stderr=e,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.procs.append(proc)
        return proc

    def start_sequencer(self) -> None:
        cmd = [sys.executable, "-m", "laneledger.services.sequencer", "--nats", self.nats.url]
        cmd += ["--db", str(self.dir / "ledger.db"), "--http-port", "0"]
        if self.tenants_file is not None:
            cmd += ["--tenants-file", str(self.tenants_file)]
        out, err = self.dir / "sequencer.out", self.dir / "sequencer.err"
        proc = self._spawn(cmd, err, out)
        deadline = time.monotonic() + 30
        while "laneledger-sequencer ready" not in out.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("sequencer did not start: " + err.read_text()[-2000:])
            time.sleep(0.05)

    async def producer(self, cfg: dict[str, Any]) -> subprocess.Popen[bytes]:
        proc = self._spawn([sys.executable, str(BENCH_DIR / "producer.py")], self.dir / f"{cfg['mode']}.err")
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(cfg) + "\n").encode())
        proc.stdin.flush()
        if (await asyncio.to_thread(proc.stdout.readline)).strip() != b"ready":
            raise RuntimeError(f"producer {cfg['mode']} did not start")
        return proc

    async def measure(self) -> dict[str, Any]:
        self.nats.start()
        self.start_sequencer()
        args = self.args
        async with await LedgerClient.connect(self.nats.url, timeout=30.0, tenant_inboxes=True) as client:
            cfgs = []
            for tenant, lanes, mode, extra in (
                ("acme", 8, "bare", {"window": args.flood_window, "events_per_append": 1, **self.flood}),
                ("globex", 4, "paced", {"window": 1, "rate": GLOBEX_RATE, "events_per_append": 1}),
            ):
                actor = await client.ensure_actor(tenant, f"agent:{tenant}", "agent")
                made = [
                    await client.create_lane(tenant, f"s-{tenant}", "r1", f"lane-{i}", actor_id=actor.id)
                    for i in range(lanes)
                ]
                cfgs.append(
                    {
                        "mode": mode,
                        "url": self.nats.url,
                        "actor_id": actor.id,
                        "lanes": [msgspec.to_builtins(lane) for lane in made],
                        "warmup_s": args.warmup,
                        "seconds": args.seconds,
                        "drain_s": 60.0,
                        **extra,
                    }
                )
        procs = [await self.producer(cfg) for cfg in cfgs]
        t0 = time.monotonic() + 0.3
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"go {t0!r}\n".encode())
            proc.stdin.flush()
        acme, globex = [
            json.loads(await asyncio.to_thread(proc.stdout.readline))  # type: ignore[union-attr]
            for proc in procs
        ]
        latencies = sorted(globex["latencies_ms"])
        return {
            "run": self.name,
            "globex_appends": len(latencies),
            "globex_receipt_p50_ms": percentile(latencies, 50),
            "globex_receipt_p99_ms": percentile(latencies, 99),
            "globex_receipt_max_ms": latencies[-1] if latencies else None,
            "globex_errors": {**globex["submit_errors"], **globex["rejected_codes"]},
            "acme_committed_per_s": acme["appends_committed_window"] / args.seconds,
            "acme_events_per_s": acme["events_committed_window"] / args.seconds,
            "acme_submitted": acme["appends_submitted"],
            "acme_errors": {**acme["submit_errors"], **acme["rejected_codes"]},
        }

    def close(self) -> None:
        for proc in reversed(self.procs):
            terminate(proc)
        self.nats.stop()
        self.tmp.cleanup()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--flood-window", type=int, default=10_000, help="acme's requests without a receipt")
    parser.add_argument("--heavy-window", type=int, default=64, help="the same, in the heavy floods")
    parser.add_argument("--runs", default="", help="only the runs whose name holds this")
    args = parser.parse_args()
    limits = load_tenants(str(TENANTS_FILE)).limits_of("acme")
    unlimited = Path(tempfile.mkdtemp(prefix="laneledger-fairness-")) / "tenants.toml"
    unlimited.write_text(
        TENANTS_FILE.read_text().replace("[tenants.acme]", "[tenants.acme]\nappend_rate = 1000000", 1)
    )
    assert load_tenants(str(unlimited)).limits_of("acme").append_rate == 1_000_000
    results = []
    bytes_flood = {"inline_bytes": 900_000, "window": args.heavy_window}
    events_flood = {"events_per_append": 1000, "window": args.heavy_window}
    runs: list[tuple[str, Path | None, dict[str, Any]]] = [
        ("one shared stream", None, {}),
        ("per-tenant streams", TENANTS_FILE, {}),
        ("per-tenant streams, acme's rate unlimited", unlimited, {}),
        ("0.9 MiB requests, per-tenant streams", TENANTS_FILE, bytes_flood),
        ("0.9 MiB requests, per-tenant streams, acme's rate unlimited", unlimited, bytes_flood),
        ("1000-event requests, per-tenant streams", TENANTS_FILE, events_flood),
        ("1000-event requests, per-tenant streams, acme's rate unlimited", unlimited, events_flood),
    ]
    for name, tenants_file, flood in runs:
        if args.runs not in name:
            continue
        run = Run(name, tenants_file, flood, args)
        try:
            log(f"{name}: acme floods, globex at {GLOBEX_RATE:g}/s for {args.seconds:g} s ...")
            result = await run.measure()
        finally:
            run.close()
        log(
            f"  globex receipt p50 {result['globex_receipt_p50_ms']:.1f} ms, "
            f"p99 {result['globex_receipt_p99_ms']:.1f} ms, max {result['globex_receipt_max_ms']:.1f} ms "
            f"({result['globex_appends']} appends); acme committed {result['acme_committed_per_s']:,.0f}/s, "
            f"{result['acme_events_per_s']:,.0f} events/s"
        )
        results.append(result)
    print(
        json.dumps(
            {
                "bench": "fairness",
                "seconds": args.seconds,
                "flood_window": args.flood_window,
                "globex_rate": GLOBEX_RATE,
                "acme_append_rate": limits.append_rate,
                "runs": results,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
