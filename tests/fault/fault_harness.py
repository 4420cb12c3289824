"""What every fault scenario (tests/fault/test_*.py) runs on: the four
services and the producers as real OS processes on a real nats-server.

::

    async with FaultRig(nats_server.url, tmp_path, request) as rig:   # services up
        await rig.start_load()                 # lanes + 4 producer processes, appending
        ...hurt something: rig.sequencer.kill(), rig.tail.kill(), nats_server.restart()...
        await rig.wait_for_outcomes(more=20)   # the load got through again
        summary = await rig.finish(js)         # stop producers, check_invariants(...)

The sequencer (``SequencerProcess``), tail, metrics and checkpoint services
(``ServiceProcess``) and the producers (``producer_proc.py``) are the
existing test helpers; this module only puts them together and sizes the
run. ``LANELEDGER_FAULT_LONG=1`` (``make fault``) selects the long form of
every scenario (more kills, longer load); the default is the short form that
runs in ``make test``. ``LANELEDGER_FAULT_SEED=<n>`` replays a run's random
timing (when each kill and restart happens; the interleaving stays the OS's).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from checkpoint_support import CheckpointProcess
from failure_logs import show_log_on_failure
from ledger_invariants import Consumers, check_invariants
from metrics_support import metrics_process
from polling import eventually
from producer_proc import ProducerProcess, create_lanes, start_producers, wait_for_producers
from sequencer_process import SequencerProcess
from service_process import ServiceProcess

LONG = os.environ.get("LANELEDGER_FAULT_LONG") == "1"
N_PRODUCERS = 4
N_LANES = 60
N_HOT = 8  # lanes every producer writes to: contention, hence lane_conflict outcomes


def scaled(short: Any, long: Any) -> Any:
    """The short form's value, or the long form's under ``make fault``."""
    return long if LONG else short


# Requests a second each producer starts. The short form paces them: flat out,
# they took a core of the machine for as long as a scenario lasted, and a
# scenario lasts longer the busier the machine, so the suite's own load fed
# on itself. The long form (``make fault``) runs them unpaced.
PRODUCER_RATE = scaled(15.0, 0.0)


def seeded_rng() -> tuple[random.Random, int]:
    """A scenario's source of random timing, and its seed. The seed is printed
    first thing, so a failing run's captured output names it."""
    seed = int(os.environ.get("LANELEDGER_FAULT_SEED") or random.randrange(1 << 30))
    print(f"fault seed {seed} (LANELEDGER_FAULT_SEED={seed} replays this timing)")
    return random.Random(seed), seed


# The long form runs for minutes: lift pytest's per-test timeout (120 s) for it.
fault_timeout = pytest.mark.timeout(scaled(120, 1800))


def tail_process(nats_url: str, data_dir: Path, log_dir: Path) -> ServiceProcess:
    return ServiceProcess(
        "laneledger.services.tail",
        ["--nats", nats_url, "--data", str(data_dir), "--http-host", "127.0.0.1", "--http-port", "0"],
        log_dir,
    )


class FaultRig:
    """The sequencer, tail, metrics and checkpoint services as processes on
    ``nats_url``, each with its data under ``tmp_path``; producers on demand.

    ``db_path`` puts the ledger somewhere else (a small filesystem, say);
    ``replicas`` is what the sequencer and the checkpoint service create
    their streams with (3 on a cluster); ``standby``: a second sequencer on
    its own file (``standby_db``), both with a lease of ``lease_ttl_s``
    (spec/replication.md, "The lease"); ``sequencer_urls``: the NATS URL
    each sequencer (the first, then the standby) connects to instead of
    ``nats_url`` (one of them through a ``tcp_link.TcpLink``, say)."""

    def __init__(
        self,
        nats_url: str,
        tmp_path: Path,
        request: pytest.FixtureRequest,
        *,
        db_path: Path | None = None,
        replicas: int = 1,
        standby: bool = False,
        lease_ttl_s: float = 1.0,
        sequencer_urls: tuple[str, str] | None = None,
    ) -> None:
        self.nats_url = nats_url
        first_url, standby_url = sequencer_urls or (nats_url, nats_url)
        self.dir = Path(tmp_path)
        self.db = Path(db_path) if db_path is not None else self.dir / "ledger.db"
        self.consumers = Consumers(
            tail=self.dir / "tail", metrics=self.dir / "metrics", checkpoint=self.dir / "checkpoint"
        )
        sequencer_args = ("--replicas", str(replicas), "--lease-ttl-s", str(lease_ttl_s))
        self.sequencer = SequencerProcess(first_url, self.db, log_dir=self.dir, extra_args=sequencer_args)
        self.sequencers = [self.sequencer]
        if standby:
            self.standby_db = self.dir / "standby" / "ledger.db"
            self.sequencers.append(
                SequencerProcess(
                    standby_url, self.standby_db, log_dir=self.dir / "standby", extra_args=sequencer_args
                )
            )
        self.tail = tail_process(nats_url, self.consumers.tail, self.dir)
        self.metrics = metrics_process(nats_url, self.consumers.metrics, self.dir)
        self.checkpoint = CheckpointProcess(
            nats_url, self.consumers.checkpoint, extra_args=("--replicas", str(replicas))
        )
        self.services: list[ServiceProcess] = [*self.sequencers, self.tail, self.metrics, self.checkpoint]
        for service in self.services:
            show_log_on_failure(request, service)  # duck-typed: log_path + log_text()
        self.request = request
        self.stop_file = self.dir / "stop-producers"
        self.producers: list[ProducerProcess] = []
        self.actor_id = ""
        self.started = time.monotonic()

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> FaultRig:
        try:
            for service in self.services:  # the sequencer first: it creates the streams
                await asyncio.to_thread(service.start, 30.0)
        except BaseException:
            self.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Leave nothing running (producers first, then the services)."""
        self.stop_file.touch()
        for producer in self.producers:
            producer.kill()
        for service in reversed(self.services):
            service.stop()

    # -- load ----------------------------------------------------------------------------

    async def start_load(
        self,
        *,
        producers: int = N_PRODUCERS,
        lanes: int = N_LANES,
        hot: int = N_HOT,
        urls: list[str] | None = None,
        **options: Any,
    ) -> list[ProducerProcess]:
        """Create ``lanes`` lanes and start ``producers`` producer processes that
        append to them until :meth:`finish` (1–5 events per append, a fifth of
        them cost events, 4 requests in flight each, ``PRODUCER_RATE`` started
        a second); ``urls``: the NATS servers the producers connect to, in
        turn (default: the services')."""
        self.actor_id, created = await create_lanes(self.nats_url, lanes)
        options = {
            "concurrency": 4,
            "hot_share": 0.5,
            "receipt_timeout": 1.0,
            "cost_share": 0.2,
            "rate": PRODUCER_RATE,
            "duration": 3600,
            "time_limit": 3600,
            "stop_file": self.stop_file,
            **options,
        }
        self.producers = start_producers(
            urls or self.nats_url,
            self.dir,
            self.actor_id,
            created,
            producers=producers,
            hot=hot,
            requests=10_000_000,
            seed=int(self.started),
            **options,
        )
        for producer in self.producers:
            show_log_on_failure(self.request, producer)
        for producer in self.producers:  # each one connected and appending
            await self.wait_for_outcomes(more=1, producers=[producer])
        await self.wait_for_outcomes(more=20)
        return self.producers

    def outcomes(self) -> int:
        return sum(len(p.lines()) for p in self.producers)

    async def wait_for_outcomes(
        self, *, more: int, timeout: float = 60.0, producers: Iterable[ProducerProcess] | None = None
    ) -> int:
        """Wait (bounded) until the producers have recorded ``more`` outcomes
        than now: proof the whole write path works again. Returns the count."""
        watched = list(producers if producers is not None else self.producers)
        target = sum(len(p.lines()) for p in watched) + more

        def outcomes() -> int:
            found = sum(len(p.lines()) for p in watched)
            if found < target:  # still waiting: pointless if a producer is gone
                for p in watched:
                    assert p.returncode is None, f"{p.name} exited early:\n{p.log_text()[-2000:]}"
            return found

        return await eventually(
            outcomes,
            until=lambda found: found >= target,
            what=f"{more} new outcomes from {', '.join(p.name for p in watched)} (to {target})",
            timeout=timeout,
        )

    async def finish(self, js, *, timeout: float = 120.0) -> dict[str, int]:
        """Stop starting requests, let every one in flight get its outcome, and
        check every invariant (``ledger_invariants.check_invariants``)."""
        self.stop_file.touch()
        await wait_for_producers(self.producers, timeout=timeout)
        lines = [line for p in self.producers for line in p.lines()]
        summary = await check_invariants(lines, self.db, js, self.consumers)
        summary["seconds"] = round(time.monotonic() - self.started, 1)
        return summary
