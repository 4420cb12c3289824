"""Standby sequencers and failover (spec/replication.md, "The lease"): real
sequencer processes on one nats-server, each with its own file. The one
holding the lease commits; the other follows LEDGER_TXLOG and takes over
when the active one is killed, or paused past its lease. A deposed one that
wakes up stands down, and no request is lost or doubled. Each one's
/metrics says so: its role, the lease's holder, its failovers and lost
leases, a current standby's lag of 0 (spec/metrics.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import msgspec
import pytest
from failure_logs import show_log_on_failure
from metrics_support import Samples, parse, scrape, value
from polling import eventually
from receipt_check import check_receipts_held
from sequencer_process import SequencerProcess
from service_process import REPO
from test_txlog import dump

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import compare_with_stream
from laneledger.sdk.client import LedgerClient, make_event

LEASE = ("--lease-ttl-s", "1")
ACTIVE = "laneledger_sequencer_active"
HOLDER = "laneledger_sequencer_lease_holder"
FAILOVERS = "laneledger_sequencer_failovers_total"
LEASE_LOST = "laneledger_sequencer_lease_lost_total"
LAG = "laneledger_sequencer_txlog_lag_records"


async def readyz(seq: SequencerProcess) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(f"{seq.http_url}/readyz") as resp:
        return resp.status, await resp.json()


async def role(seq: SequencerProcess) -> str:
    return (await readyz(seq))[1]["role"]


async def metrics(seq: SequencerProcess) -> Samples:
    return parse(await scrape(seq.http_url))


def file_id(seq: SequencerProcess) -> str:
    """Who the lease names for this sequencer: its file's ``meta.file_id``."""
    conn = sqlite3.connect(f"file:{seq.db_path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT value FROM meta WHERE key = 'file_id'").fetchone()[0]
    finally:
        conn.close()


def holders(samples: Samples) -> set[str]:
    return {dict(labels)["holder"] for (name, labels), v in samples.items() if name == HOLDER and v == 1}


async def shows(
    seq: SequencerProcess, *, active: int, holder: SequencerProcess, **counters: float
) -> Samples:
    """Until its /metrics say it is active (1) or a standby (0), that
    ``holder`` holds the lease (and nobody else), and each of ``counters``
    (failovers, lease_lost, lag) has the value given."""
    names = {"failovers": FAILOVERS, "lease_lost": LEASE_LOST, "lag": LAG}
    want = {ACTIVE: active, **{names[k]: v for k, v in counters.items()}}
    holder_id = file_id(holder)

    def agrees(samples: Samples) -> bool:
        return holders(samples) == {holder_id} and all(value(samples, n) == v for n, v in want.items())

    return await eventually(
        lambda: metrics(seq),
        until=agrees,
        what=f"{seq.db_path.parent.name}'s /metrics: {want}, holder {holder.db_path.parent.name}",
    )


def sequencer(
    nats_url: str,
    tmp_path: Path,
    name: str,
    request: pytest.FixtureRequest,
    *extra_args: str,
    module: str | None = None,
    env: dict[str, str] | None = None,
) -> SequencerProcess:
    """A sequencer process on its own file; ``module`` (with ``env``) runs a
    test's wrapper of the real one (tests/ is then on PYTHONPATH)."""
    seq = SequencerProcess(
        nats_url, tmp_path / name / "ledger.db", log_dir=tmp_path / name, extra_args=(*LEASE, *extra_args)
    )
    if module is not None:
        seq.module = module
        seq.env = {"PYTHONPATH": str(REPO / "tests"), **(env or {})}
    show_log_on_failure(request, seq)
    return seq


async def new_lane_producer(client: LedgerClient, actor_key: str) -> Producer:
    """A ``Producer`` on a new lane of a new actor of tenant acme."""
    actor = await client.ensure_actor("acme", actor_key, "agent")
    lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
    return Producer(client, lane, actor.id)


@asynccontextmanager
async def active_and_standby(
    first: SequencerProcess, second: SequencerProcess, actor_key: str, appends: int
) -> AsyncIterator[Producer]:
    """``first`` started (active), then ``second`` (standby); a producer that
    made ``appends`` appends through ``first``, which /metrics show active
    and the holder. Both stopped after."""
    first.start()
    second.start()
    try:
        async with await LedgerClient.connect(first.nats_url, timeout=5.0) as client:
            producer = await new_lane_producer(client, actor_key)
            await producer.run(appends)
            await shows(first, active=1, holder=first, failovers=0, lease_lost=0)
            yield producer
    finally:
        first.stop()
        second.stop()


class Producer:
    """Appends one event at a time to one lane, resending after a failure
    with the same append id, and notes how long the longest wait was."""

    def __init__(self, client: LedgerClient, lane, actor_id: str) -> None:
        self.client, self.lane, self.actor_id = client, lane, actor_id
        self.seq = 0
        self.receipts = []
        self.longest_gap_s = 0.0

    def check_held_by(self, *dbs: Path) -> None:
        """Every receipt it got is for events each file holds, byte for byte,
        and is the receipt each stored (``receipt_check``)."""
        got = [msgspec.to_builtins(r) for r in self.receipts]
        for db in dbs:
            assert check_receipts_held(got, db) == len(got)

    async def append(self) -> None:
        event = make_event(self.lane.id, "stream.text_delta", actor_id=self.actor_id, payload={"n": self.seq})
        append_id = f"{self.lane.id}-{self.seq}"
        started = time.monotonic()
        while True:
            try:
                receipt = await self.client.append(
                    self.lane, self.seq, [event], append_id=append_id, timeout=2.0
                )
                break
            except Exception:  # noqa: BLE001 - the active sequencer is gone: resend, same id
                await asyncio.sleep(0.05)
        self.longest_gap_s = max(self.longest_gap_s, time.monotonic() - started)
        assert receipt.last_seq == self.seq + 1
        self.receipts.append(receipt)
        self.seq += 1

    async def run(self, n: int) -> None:
        for _ in range(n):
            await self.append()


async def test_the_standby_follows_and_takes_over_from_a_killed_active_sequencer(
    nats_server, js, tmp_path: Path, request: pytest.FixtureRequest
):
    first = sequencer(nats_server.url, tmp_path, "first", request)
    second = sequencer(nats_server.url, tmp_path, "second", request)
    first.start()
    assert "role=active" in first.ready_line
    second.start()
    assert "role=standby" in second.ready_line
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            producer = await new_lane_producer(client, "agent:standby@1")
            await producer.run(10)
            # The standby's file follows the log, and /readyz says it is a current standby.
            await eventually(
                lambda: dump(second.db_path)["events"] == dump(first.db_path)["events"],
                what="the standby's file holding the active one's events",
            )
            assert await readyz(second) == (200, {"status": "ready", "role": "standby"})
            await shows(first, active=1, holder=first, failovers=0, lease_lost=0, lag=0)
            await shows(second, active=0, holder=first, failovers=0, lease_lost=0, lag=0)

            first.kill()
            await producer.run(10)  # resent until the standby, now active, answers
            assert await role(second) == "active"
            assert producer.longest_gap_s < 6.0, f"no commit for {producer.longest_gap_s:.1f} s"
            await shows(second, active=1, holder=second, failovers=1, lease_lost=0, lag=0)

            # The first comes back on its file: a standby now, and it catches up.
            first.restart()
            assert "role=standby" in first.ready_line
            await producer.run(5)
            await eventually(
                lambda: dump(first.db_path) == dump(second.db_path),
                what="the restarted sequencer's file equal to the active one's",
            )
            await shows(first, active=0, holder=second, failovers=0, lease_lost=0, lag=0)
            await shows(second, active=1, holder=second, failovers=1)
    finally:
        first.stop()
        second.stop()
    positions = [p for r in producer.receipts for p in r.positions]
    assert positions == list(range(1, 26))  # every append once, in order
    assert audit_ledger(second.db_path).events == 25
    assert await compare_with_stream(js, second.db_path) == 25
    producer.check_held_by(first.db_path, second.db_path)


@pytest.mark.slow
async def test_a_paused_active_sequencer_is_deposed_and_stands_down_when_it_wakes(
    nats_server, js, tmp_path: Path, request: pytest.FixtureRequest
):
    first = sequencer(nats_server.url, tmp_path, "first", request)
    second = sequencer(nats_server.url, tmp_path, "second", request)
    async with active_and_standby(first, second, "agent:paused@1", 5) as producer:
        assert first.pid is not None
        os.kill(first.pid, signal.SIGSTOP)  # past its lease: the standby takes over
        await producer.run(5)
        assert await role(second) == "active"
        await shows(second, active=1, holder=second, failovers=1, lease_lost=0)
        os.kill(first.pid, signal.SIGCONT)
        await eventually(
            lambda: "standing down" in first.log_text(),
            what="the woken sequencer standing down",
        )
        await eventually(lambda: role(first), until=lambda r: r == "standby", what="its role: standby")
        await shows(first, active=0, holder=second, failovers=0, lease_lost=1, lag=0)
        await producer.run(5)  # the new active one goes on
        await eventually(
            lambda: dump(first.db_path) == dump(second.db_path),
            what="the deposed sequencer's file following the active one's",
        )
    positions = [p for r in producer.receipts for p in r.positions]
    assert positions == list(range(1, 16))
    assert await compare_with_stream(js, second.db_path) == 15
    producer.check_held_by(first.db_path, second.db_path)
