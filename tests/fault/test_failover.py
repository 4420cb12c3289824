"""Failover on the three-node cluster (spec/replication.md): two sequencer
processes, each with its own file, on R3 streams, under load from four
producer processes spread over the nodes. The one holding the lease commits;
the other follows LEDGER_TXLOG. Each scenario hurts the active one and ends
with every invariant (``ledger_invariants``: every request one outcome, dense
lanes, chains verify, the stream equals the file, every consumer equals a
fold of the ledger) checked against *both* files, which must also be equal
row for row:

* SIGKILL the active sequencer again and again (3 times; 10 in the long form);
* kill it and delete its file (the disk is lost): restarted, it rebuilds the
  ledger from the log, then takes over when the other is killed;
* SIGSTOP it past its lease, then SIGCONT: it stands down;
* kill the NATS node both sequencers are connected to;
* cut the active one alone off from NATS (its only link to its node, a
  ``tcp_link.TcpLink``, severed on a cluster whose nodes do not advertise
  each other): the standby, on the other nodes, takes over; the cut-off one
  stands down (``lease_lost``), and once the link is back it follows as a
  current standby;
* and, after each, a file restored from the streams alone (``laneledger
  restore``) equals them and ``laneledger verify`` passes against the stream.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from failure_logs import show_log_on_failure
from fault_harness import FaultRig, fault_timeout, scaled
from ledger_invariants import check_invariants
from metrics_support import parse, scrape, value
from polling import eventually
from producer_proc import wait_for_producers
from sequencer_process import SequencerProcess
from tcp_link import LOOPBACK, TcpLink
from test_txlog import dump

from laneledger.devtools.natscluster import NatsCluster

KILLS = scaled(3, 10)
LEASE_TTL_S = 1.0


async def readiness(seq: SequencerProcess) -> tuple[int, str | None] | None:
    """(/readyz status, the role it says), or None when it does not answer."""
    if not seq.running or seq.http_url is None:
        return None
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http,
            http.get(f"{seq.http_url}/readyz") as resp,
        ):
            return resp.status, (await resp.json()).get("role")
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def role_of(seq: SequencerProcess) -> str | None:
    found = await readiness(seq)
    return found[1] if found else None


async def the_active_one(rig: FaultRig) -> SequencerProcess:
    """The one sequencer that says it is active (exactly one)."""

    async def actives() -> list[SequencerProcess]:
        roles = await asyncio.gather(*(role_of(s) for s in rig.sequencers))
        return [s for s, r in zip(rig.sequencers, roles, strict=True) if r == "active"]

    found = await eventually(actives, until=lambda a: len(a) == 1, what="exactly one active sequencer")
    return found[0]


async def other_takes_over(rig: FaultRig, gone: SequencerProcess) -> SequencerProcess:
    other = next(s for s in rig.sequencers if s is not gone)
    await eventually(lambda: role_of(other), until=lambda r: r == "active", what=f"{other} taking over")
    return other


def delete_ledger_file(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def txlog_seq(db: Path) -> int:
    rows = dump(db)["meta"]
    return int(rows[0][0]) if rows else 0


async def finish(rig: FaultRig, js, tmp_path: Path) -> dict[str, int]:
    """Stop the load, wait for both files to hold the whole log, check every
    invariant against each, compare them, and restore a third from the
    streams alone."""
    rig.stop_file.touch()
    await wait_for_producers(rig.producers, timeout=120)
    last = (await js.stream_info("LEDGER_TXLOG")).state.last_seq
    for seq in rig.sequencers:
        await eventually(
            lambda seq=seq: txlog_seq(seq.db_path),
            until=lambda applied: applied == last,
            what=f"{seq.db_path} to hold the whole log ({last})",
            timeout=60,
        )
    lines = [line for p in rig.producers for line in p.lines()]
    summaries = [await check_invariants(lines, seq.db_path, js, rig.consumers) for seq in rig.sequencers]
    assert summaries[0] == summaries[1]
    assert dump(rig.sequencers[0].db_path) == dump(rig.sequencers[1].db_path)

    restored = tmp_path / "restored.db"
    for command in ("restore", "verify"):
        await laneledger(command, "--db", str(restored), "--nats", rig.nats_url)
    assert dump(restored) == dump(rig.sequencers[0].db_path)
    return summaries[0]


async def laneledger(*args: str) -> None:
    """The command line, as a user runs it; it must succeed."""
    done = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "laneledger.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await done.communicate()
    assert done.returncode == 0, f"laneledger {' '.join(args)}: {out.decode()} {err.decode()}"


@asynccontextmanager
async def loaded_rig(cluster, tmp_path: Path, request) -> AsyncIterator[tuple[FaultRig, Any]]:
    """The rig with a standby on the cluster (both sequencers start on the
    first node; the client learns the others), under load from producers
    spread over the nodes; and a JetStream context of the test's own."""
    nc = await nats.connect(cluster.urls, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
    try:
        rig = FaultRig(cluster.urls[0], tmp_path, request, replicas=3, standby=True, lease_ttl_s=LEASE_TTL_S)
        async with rig:
            await rig.start_load(urls=cluster.urls)
            yield rig, nc.jetstream()
    finally:
        await nc.close()


@fault_timeout
async def test_killing_the_active_sequencer_again_and_again_loses_nothing(cluster, tmp_path, request):
    async with loaded_rig(cluster, tmp_path, request) as (rig, js):
        for _ in range(KILLS):
            active = await the_active_one(rig)
            active.kill()
            await other_takes_over(rig, active)
            await rig.wait_for_outcomes(more=30)
            await asyncio.to_thread(active.restart, 60.0)  # back as a standby
        summary = await finish(rig, js, tmp_path)
    print(f"failover: {KILLS} kills of the active sequencer, {summary}")


@fault_timeout
async def test_a_lost_disk_is_rebuilt_from_the_log_and_takes_over(cluster, tmp_path, request):
    async with loaded_rig(cluster, tmp_path, request) as (rig, js):
        lost = await the_active_one(rig)
        lost.kill()
        await asyncio.to_thread(delete_ledger_file, lost.db_path)
        survivor = await other_takes_over(rig, lost)
        await rig.wait_for_outcomes(more=30)
        await asyncio.to_thread(lost.restart, 60.0)  # an empty file: the ledger comes from the log
        survivor.kill()
        await other_takes_over(rig, survivor)
        await rig.wait_for_outcomes(more=30)
        await asyncio.to_thread(survivor.restart, 60.0)
        summary = await finish(rig, js, tmp_path)
    print(f"failover: a lost disk rebuilt from the log, {summary}")


@fault_timeout
async def test_a_paused_active_sequencer_is_deposed_and_commits_nothing(cluster, tmp_path, request):
    async with loaded_rig(cluster, tmp_path, request) as (rig, js):
        paused = await the_active_one(rig)
        assert paused.pid is not None
        os.kill(paused.pid, signal.SIGSTOP)
        try:
            await other_takes_over(rig, paused)
            await rig.wait_for_outcomes(more=30)
        finally:
            os.kill(paused.pid, signal.SIGCONT)
        await eventually(
            lambda: role_of(paused), until=lambda r: r == "standby", what="the woken one standing down"
        )
        await rig.wait_for_outcomes(more=30)
        summary = await finish(rig, js, tmp_path)
    print(f"failover: the active sequencer paused past its lease, {summary}")


@fault_timeout
async def test_killing_the_nats_node_the_sequencers_use_loses_nothing(cluster, tmp_path, request):
    async with loaded_rig(cluster, tmp_path, request) as (rig, js):
        cluster.kill(0)  # the node both sequencers (and the services) connected to
        await rig.wait_for_outcomes(more=40, timeout=90)
        await the_active_one(rig)
        await asyncio.to_thread(cluster.start_node, 0)
        await rig.wait_for_outcomes(more=20)
        summary = await finish(rig, js, tmp_path)
    print(f"failover: the sequencers' NATS node killed, {summary}")


@asynccontextmanager
async def cut_off_rig(tmp_path: Path, request) -> AsyncIterator[tuple[FaultRig, Any, TcpLink]]:
    """The rig on a three-node cluster whose nodes do not advertise each
    other to clients, so each process reaches only the servers it is given:
    the first sequencer node 0 through a ``TcpLink`` and nothing else; the
    standby nodes 1 and 2; the services all three; the producers one each."""
    cluster = NatsCluster(tmp_path / "cluster", size=3, no_advertise=True)
    await asyncio.to_thread(cluster.start)
    for node in cluster.nodes:
        show_log_on_failure(request, node)
    try:
        assert cluster.nodes[0].port is not None
        with TcpLink(LOOPBACK, cluster.nodes[0].port) as link:
            nc = await nats.connect(cluster.urls, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
            try:
                rig = FaultRig(
                    ",".join(cluster.urls),
                    tmp_path,
                    request,
                    replicas=3,
                    standby=True,
                    lease_ttl_s=LEASE_TTL_S,
                    sequencer_urls=(link.url, ",".join(cluster.urls[1:])),
                )
                async with rig:
                    await rig.start_load(urls=cluster.urls)
                    yield rig, nc.jetstream(), link
            finally:
                await nc.close()
    finally:
        await asyncio.to_thread(cluster.stop)


async def role_metrics(seq: SequencerProcess) -> tuple[float | None, float | None]:
    """(laneledger_sequencer_lease_lost_total, laneledger_sequencer_active) on its /metrics."""
    samples = parse(await scrape(seq.http_url or ""))
    return value(samples, "laneledger_sequencer_lease_lost_total"), value(
        samples, "laneledger_sequencer_active"
    )


@pytest.mark.nats  # a cluster of its own (cut_off_rig), not the fixture
@fault_timeout
async def test_an_active_sequencer_cut_off_from_nats_stands_down_and_catches_up(tmp_path, request):
    async with cut_off_rig(tmp_path, request) as (rig, js, link):
        cut = await the_active_one(rig)
        assert cut is rig.sequencer, "the sequencer behind the link starts first, so active"
        assert await role_metrics(cut) == (0, 1)
        link.sever()
        successor = await other_takes_over(rig, cut)
        await eventually(
            lambda: "lease not renewed for a whole TTL" in cut.log_text(),
            what="the cut-off sequencer standing down",
        )
        await eventually(
            lambda: role_metrics(cut), until=lambda found: found == (1, 0), what="lease_lost 1, active 0"
        )
        await rig.wait_for_outcomes(more=30)  # the load goes on through the successor
        link.restore()
        await eventually(
            lambda: readiness(cut),
            until=lambda r: r == (200, "standby"),
            what="the cut-off one a current standby",
        )
        await rig.wait_for_outcomes(more=30)
        assert await role_of(successor) == "active"
        assert link.connections > 1, "the cut-off sequencer came back through the link"
        summary = await finish(rig, js, tmp_path)
    print(f"failover: the active sequencer cut off from NATS, {summary}")
