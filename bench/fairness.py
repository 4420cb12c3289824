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

With each run's latency, the CPU seconds (utime + stime, /proc) spent over
the run by the sequencer's event loop thread (``loop_cpu_s``: what every
tenant's batches, receipts and lease wait behind), by the whole sequencer
process (its writer thread too) and by its step 0 worker process
(``prep_worker_cpu_s``, services/sequencer/prepworker.py), and the run's wall
seconds: figures a loaded machine moves less than it moves the latency.

The scenario itself (the two producers, the figures) is
``laneledger.devtools.fairness``, which ``tests/test_adversarial.py`` also
runs on the deployment as rendered. Ends with one JSON line
(``bench/report.py`` stores it).
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

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT / "shared"))

from append import cpu_seconds, thread_cpu_seconds  # noqa: E402

from laneledger.devtools import fairness  # noqa: E402
from laneledger.devtools.benchkit import die_with_parent, terminate  # noqa: E402
from laneledger.devtools.natsserver import NatsServer  # noqa: E402
from laneledger.runtime.tenants import load_tenants  # noqa: E402

TENANTS_FILE = ROOT / "deploy" / "tenants.toml"
GLOBEX_RATE = fairness.Load.globex_rate


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Run:
    """A fresh nats-server and sequencer process (as deployed) for one run."""

    def __init__(
        self, name: str, tenants_file: Path | None, flood: dict[str, Any], args: argparse.Namespace
    ) -> None:
        self.name, self.tenants_file, self.flood, self.args = name, tenants_file, flood, args
        self.tmp = tempfile.TemporaryDirectory(prefix="laneledger-fairness-")
        self.dir = Path(self.tmp.name)
        self.nats = NatsServer(self.dir / "nats")
        self.sequencer: subprocess.Popen[bytes] | None = None

    def start_sequencer(self) -> None:
        cmd = [sys.executable, "-m", "laneledger.services.sequencer", "--nats", self.nats.url]
        cmd += ["--db", str(self.dir / "ledger.db"), "--http-port", "0"]
        if self.tenants_file is not None:
            cmd += ["--tenants-file", str(self.tenants_file)]
        out, err = self.dir / "sequencer.out", self.dir / "sequencer.err"
        env = dict(os.environ, LANELEDGER_LOG_LEVEL="WARNING")
        with open(err, "wb") as e, open(out, "wb") as o:
            self.sequencer = proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=o, stderr=e, env=env, start_new_session=True, preexec_fn=die_with_parent
            )
        deadline = time.monotonic() + 30
        while "laneledger-sequencer ready" not in out.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("sequencer did not start: " + err.read_text()[-2000:])
            time.sleep(0.05)

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far: the sequencer's loop thread, the process, its worker."""
        assert self.sequencer is not None
        pid = self.sequencer.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        return {
            "loop_cpu_s": thread_cpu_seconds(pid).get(pid, 0.0),
            "sequencer_cpu_s": cpu_seconds(pid),
            "prep_worker_cpu_s": sum(cpu_seconds(int(child)) for child in children),
        }

    async def measure(self) -> dict[str, Any]:
        self.nats.start()
        self.start_sequencer()
        cpu_before, started = self.cpu(), time.monotonic()
        args = self.args
        load = fairness.Load(
            seconds=args.seconds, warmup_s=args.warmup, flood={"window": args.flood_window, **self.flood}
        )
        ledger = fairness.Ledger(url_of=lambda tenant: self.nats.url)
        result = await fairness.run(ledger, load, BENCH_DIR / "producer.py", self.dir)
        cpu = {k: round(v - cpu_before[k], 2) for k, v in self.cpu().items()}
        del result["acme"], result["globex"]  # the producers' own counts: not reported
        return {"run": self.name, **result, **cpu, "wall_s": round(time.monotonic() - started, 2)}

    def close(self) -> None:
        if self.sequencer is not None:
            terminate(self.sequencer)
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
        log(
            f"  CPU over {result['wall_s']:g} s: sequencer loop {result['loop_cpu_s']:.2f} s, "
            f"process {result['sequencer_cpu_s']:.2f} s, step 0 worker {result['prep_worker_cpu_s']:.2f} s"
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
