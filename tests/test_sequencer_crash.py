"""SIGKILL the sequencer process again and again while producer processes keep
appending: no accepted append is lost, none commits twice, and after each
restart SQLite and LEDGER_EVENTS agree again (the restarted sequencer
republishes what SQLite has beyond the stream's last sequence)."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from conftest import show_log_on_failure
from laneledger.audit import audit_ledger, compare_with_stream
from laneledger.client import LedgerClient, make_event
from laneledger.natsserver import NatsServer
from laneledger.store import LedgerWriter, open_ledger
from producer_proc import check_against_ledger, create_lanes, start_producers, wait_for_producers
from sequencer_process import SequencerProcess, wait_for_stream
from services.sequencer.metrics import SequencerMetrics
from services.sequencer.mirror import CommittedStreamMirror
from services.sequencer.service import Sequencer

N_LANES = 100
N_HOT = 10
N_PRODUCERS = 4
KILLS = 6
SEED = 20261130


@pytest.fixture
def sequencer_proc(nats_server: NatsServer, tmp_path: Path,
                   request: pytest.FixtureRequest) -> Iterator[SequencerProcess]:
    seq = SequencerProcess(nats_server.url, tmp_path / "ledger.db", log_dir=tmp_path)
    show_log_on_failure(request, seq)  # duck-typed: log_path + log_text()
    try:
        yield seq.start()
    finally:
        seq.stop()


async def wait_for_lines(producers, at_least: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(p.lines()) for p in producers) < at_least:
        assert time.monotonic() < deadline, f"fewer than {at_least} outcomes in {timeout:g}s"
        assert all(p.returncode is None for p in producers), "a producer exited early"
        await asyncio.sleep(0.05)


def ledger_last_position(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
    finally:
        conn.close()


async def test_sigkilled_sequencer_loses_no_accepted_append(
    nats_server, sequencer_proc, js, tmp_path: Path
):
    started = time.monotonic()
    rng = random.Random(SEED)
    db = tmp_path / "ledger.db"
    actor_id, lanes = await create_lanes(nats_server.url, N_LANES)
    stop_file = tmp_path / "stop-producers"
    producers = start_producers(
        nats_server.url, tmp_path, actor_id, lanes, producers=N_PRODUCERS, hot=N_HOT,
        requests=100_000, seed=SEED,
        concurrency=4, hot_share=0.5, receipt_timeout=1.0, duration=45, time_limit=50,
        stop_file=stop_file,
    )
    stream_behind_at_kill = 0
    try:
        await wait_for_lines(producers, at_least=20, timeout=15)
        for _ in range(KILLS):
            await asyncio.sleep(rng.uniform(0.2, 1.0))  # up
            sequencer_proc.kill()
            db_last = ledger_last_position(db)
            stream_last = (await js.stream_info("LEDGER_EVENTS")).state.last_seq
            assert stream_last <= db_last, "the stream got ahead of SQLite"
            stream_behind_at_kill += stream_last < db_last
            await asyncio.sleep(rng.uniform(0.2, 1.0))  # down; producers keep publishing
            await asyncio.to_thread(sequencer_proc.start)
            assert sequencer_proc.position >= db_last  # nothing committed was lost
            # Ready means caught up: it republished what SQLite had beyond the stream.
            assert (await js.stream_info("LEDGER_EVENTS")).state.last_seq >= db_last
        # Let the last incarnation work through the resends, then stop producing.
        await wait_for_lines(producers, sum(len(p.lines()) for p in producers) + 20, timeout=15)
        stop_file.touch()
        await wait_for_producers(producers, timeout=20)
    finally:
        stop_file.touch()
        for producer in producers:
            producer.kill()

    assert sequencer_proc.starts == KILLS + 1
    lines = [line for producer in producers for line in producer.lines()]
    # Every request got one final outcome, after a PubAck (and resends as needed).
    assert all(line["accepted"] for line in lines)
    summary = check_against_ledger(lines, db)
    assert summary["resent"] > 0, "no request was ever resent: the kills missed the traffic"

    audit = audit_ledger(db)
    assert audit.events == audit.last_position == summary["events"]
    await wait_for_stream(js, audit.last_position)
    assert await compare_with_stream(js, db) == summary["events"]
    # Restarting once more on the same database changes nothing.
    await asyncio.to_thread(sequencer_proc.restart)
    assert sequencer_proc.position == audit.last_position
    assert await compare_with_stream(js, db) == summary["events"]
    print(f"sequencer crash: {KILLS} kills (stream behind SQLite at {stream_behind_at_kill}), "
          f"{summary}, {time.monotonic() - started:.1f}s")


# -- stopping cleanly under load ------------------------------------------------------


async def test_sigterm_while_the_mirror_publishes_stops_promptly_and_flushes(
    nats_server, sequencer_proc, js, tmp_path: Path
):
    """SIGTERM with a backlog of appends, while the mirror is publishing: the
    sequencer exits 0 within the timeout, and the stream equals SQLite. (It
    used to hang forever about one time in four: a cancel of the mirror task
    swallowed by ``wait_for`` left ``Sequencer.stop()`` waiting on it.)"""
    rounds, events_per_append = 10, 5
    actor_id, lanes = await create_lanes(nats_server.url, N_LANES)
    assert sequencer_proc.terminate() == 0
    async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
        for n in range(rounds):
            for lane in lanes:
                events = [make_event(lane.id, "stream.text_delta", actor_id=actor_id,
                                     payload={"text": f"backlog {n}"})
                          for _ in range(events_per_append)]
                await client.submit(lane, n * events_per_append, events)  # PubAck only

    await asyncio.to_thread(sequencer_proc.start)
    deadline = time.monotonic() + 10
    while (await js.stream_info("LEDGER_EVENTS")).state.last_seq == 0:
        assert time.monotonic() < deadline, "the sequencer published nothing in 10 s"
        await asyncio.sleep(0.005)
    assert await asyncio.to_thread(sequencer_proc.terminate, 15.0) == 0

    db = tmp_path / "ledger.db"
    audit = audit_ledger(db)
    assert 0 < audit.last_position
    assert await compare_with_stream(js, db) == audit.events  # flushed before exiting

    # The rest of the backlog commits after a restart, nothing twice.
    await asyncio.to_thread(sequencer_proc.start)
    total = rounds * len(lanes) * events_per_append
    # Requests the stopped sequencer had received but not taken were naked;
    # any delivered to it as it left come back after the ack wait (10 s).
    deadline = time.monotonic() + 45
    while ledger_last_position(db) < total:
        assert time.monotonic() < deadline, "the backlog did not drain in 45 s"
        await asyncio.sleep(0.05)
    await wait_for_stream(js, total)
    audit = audit_ledger(db)
    assert audit.events == audit.last_position == total
    assert await compare_with_stream(js, db) == total


async def test_stop_ends_even_when_the_mirror_swallows_its_cancel(
    nats_server, nc, tmp_path: Path, monkeypatch
):
    """Deterministic form of the hang above. ``Sequencer.stop()`` cancels the
    mirror task while it may be publishing, and the cancel can be swallowed
    there: Python 3.11's ``wait_for`` returns the result instead of raising
    when what it awaits completes in the same loop iteration as the cancel,
    and nats-py turns a cancelled ``publish_async`` into another error. The
    mirror must still end instead of going back to wait on its queue."""
    entered = asyncio.Event()

    async def publish_swallowing_the_cancel(self, records):
        entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.published = records[-1].position  # "the ack came at the same moment"

    monkeypatch.setattr(CommittedStreamMirror, "_publish_new", publish_swallowing_the_cancel)
    service = Sequencer(nc, LedgerWriter(open_ledger(tmp_path / "swallow.db")),
                        SequencerMetrics(CollectorRegistry()))
    await service.start()
    stopped = False
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:tests/swallow@1", "agent")
            lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
            await client.append(lane, 0, [make_event(lane.id, "stream.text_delta",
                                                     actor_id=actor.id, payload={"text": "x"})])
        await asyncio.wait_for(entered.wait(), 5)
        # Bounded: on a hang, wait_for cancels stop(), whose gather then cancels
        # the mirror a second time (now idle on its queue), which ends it.
        try:
            await asyncio.wait_for(service.stop(), 15)
            stopped = True
        except asyncio.TimeoutError:
            pass
        assert stopped, "Sequencer.stop() hung on a mirror task that swallowed its cancel"
    finally:
        if not stopped:  # the first stop() was cancelled part way: finish it, bounded
            try:
                await asyncio.wait_for(service.stop(), 15)
            except Exception:  # noqa: BLE001 - already failing; leave nothing running
                pass
