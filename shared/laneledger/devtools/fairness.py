"""The fairness scenario (issue 34): tenant acme floods appends while tenant
globex appends at a steady rate, and each of globex's receipts is timed.

``bench/fairness.py`` runs it on a nats-server and a sequencer of its own,
once per configuration it compares; ``tests/test_adversarial.py`` runs it
on the deployment as rendered. Either way the load is two producer
processes (``bench/producer.py``):

* acme: ``bare`` mode, raw JetStream publishes of append requests to
  ``acme_lanes`` lanes as fast as their acks come, up to ``flood["window"]``
  requests without a receipt (``flood`` may make them heavy:
  ``events_per_append``, ``inline_bytes``);
* globex: ``paced`` mode, ``globex_rate`` appends/s through the SDK over
  ``globex_lanes`` lanes; the latency of each from ``submit`` to its
  receipt is recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from laneledger.sdk.client import LedgerClient

from .benchkit import die_with_parent, percentile, terminate


@dataclass(frozen=True)
class Load:
    seconds: float = 10.0  # the measured window
    warmup_s: float = 2.0
    drain_s: float = 60.0  # for the receipts still in flight after the window
    flood: dict[str, Any] = field(default_factory=lambda: {"window": 10_000})
    globex_rate: float = 100.0
    acme_lanes: int = 8
    globex_lanes: int = 4


@dataclass(frozen=True)
class Ledger:
    """Where the scenario runs: ``url_of(tenant)`` is the NATS URL a tenant's
    producer connects with; ``tenant_users``: each tenant's producer is a user
    of its own (``laneledger nats-config``), which sends on its tenant's
    subjects, else one trusted user sends for both."""

    url_of: Callable[[str], str]
    tenant_users: bool = False


async def connect(ledger: Ledger, tenant: str) -> LedgerClient:
    if ledger.tenant_users:
        return await LedgerClient.connect(ledger.url_of(tenant), timeout=30.0, tenant=tenant)
    return await LedgerClient.connect(ledger.url_of(tenant), timeout=30.0, tenant_inboxes=True)


async def run(ledger: Ledger, load: Load, producer: Path, workdir: Path) -> dict[str, Any]:
    """One run of the scenario: its figures, and each producer's own counts
    (``acme``, ``globex``: ``bench/producer.py``'s result)."""
    cfgs = []
    for tenant, lanes, mode, extra in (
        ("acme", load.acme_lanes, "bare", {"events_per_append": 1, **load.flood}),
        (
            "globex",
            load.globex_lanes,
            "paced",
            {"window": 1, "rate": load.globex_rate, "events_per_append": 1},
        ),
    ):
        async with await connect(ledger, tenant) as client:
            actor = await client.ensure_actor(tenant, f"agent:{tenant}", "agent")
            made = [
                await client.create_lane(tenant, f"s-{tenant}", "r1", f"lane-{i}", actor_id=actor.id)
                for i in range(lanes)
            ]
        cfgs.append(
            {
                "mode": mode,
                "url": ledger.url_of(tenant),
                "tenant": tenant if ledger.tenant_users else None,
                "actor_id": actor.id,
                "lanes": [msgspec.to_builtins(lane) for lane in made],
                "warmup_s": load.warmup_s,
                "seconds": load.seconds,
                "drain_s": load.drain_s,
                **extra,
            }
        )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for cfg in cfgs:
            procs.append(await _start(producer, cfg, workdir / f"{cfg['mode']}.err"))
        t0 = time.monotonic() + 0.3  # system-wide: the producers' clock too
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"go {t0!r}\n".encode())
            proc.stdin.flush()
        acme, globex = [await _result(proc) for proc in procs]
    finally:
        for proc in reversed(procs):
            terminate(proc)
    latencies = sorted(globex["latencies_ms"])
    return {
        "globex_appends": len(latencies),
        "globex_receipt_p50_ms": percentile(latencies, 50),
        "globex_receipt_p99_ms": percentile(latencies, 99),
        "globex_receipt_max_ms": latencies[-1] if latencies else None,
        "globex_errors": {**globex["submit_errors"], **globex["rejected_codes"]},
        "acme_committed_per_s": acme["appends_committed_window"] / load.seconds,
        "acme_events_per_s": acme["events_committed_window"] / load.seconds,
        "acme_submitted": acme["appends_submitted"],
        "acme_errors": {**acme["submit_errors"], **acme["rejected_codes"]},
        "acme": acme,
        "globex": globex,
    }


def _spawn(producer: Path, cfg: dict[str, Any], err: Path) -> subprocess.Popen[bytes]:
    """A producer process, its configuration sent, its stderr in ``err``."""
    env = dict(os.environ, LANELEDGER_LOG_LEVEL="WARNING")
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(producer)],
            cwd=producer.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(cfg) + "\n").encode())
    proc.stdin.flush()
    return proc


async def _start(producer: Path, cfg: dict[str, Any], err: Path) -> subprocess.Popen[bytes]:
    proc = await asyncio.to_thread(_spawn, producer, cfg, err)
    if (await _line(proc)).strip() != b"ready":
        terminate(proc)
        stderr = await asyncio.to_thread(err.read_text)
        raise RuntimeError(f"producer {cfg['mode']} did not start: {stderr[-2000:]}")
    return proc


async def _line(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdout is not None
    return await asyncio.to_thread(proc.stdout.readline)


async def _result(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    line = await _line(proc)
    if not line:
        raise RuntimeError(f"a producer ended without its result (exit {proc.wait()})")
    result: dict[str, Any] = json.loads(line)
    return result
