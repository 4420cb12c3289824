"""Stopping the sequencer process under load: SIGTERM while the mirror
publishes stops promptly and leaves the stream equal to SQLite, and a mirror
that swallows its cancel cannot hang ``Sequencer.stop()``. (SIGKILLing it
under load is the fault suite's: tests/fault/test_sequencer_kills.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from polling import eventually
from producer_proc import create_lanes
from prometheus_client import CollectorRegistry
from sequencer_process import wait_for_ledger, wait_for_stream

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import compare_with_stream
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.mirror import CommittedStreamMirror
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger

N_LANES = 100


# -- stopping cleanly under load ------------------------------------------------------


@pytest.mark.slow
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
                events = [
                    make_event(
                        lane.id, "stream.text_delta", actor_id=actor_id, payload={"text": f"backlog {n}"}
                    )
                    for _ in range(events_per_append)
                ]
                await client.submit(lane, n * events_per_append, events)  # PubAck only

    await asyncio.to_thread(sequencer_proc.start)
    await eventually(  # then stop it at once, mid-backlog
        lambda: js.stream_info("LEDGER_EVENTS"),
        until=lambda info: info.state.last_seq > 0,
        what="the sequencer to publish its first events",
        timeout=10,
        interval=0.005,
    )
    assert await asyncio.to_thread(sequencer_proc.terminate, 15.0) == 0

    db = tmp_path / "ledger.db"
    audit = audit_ledger(db)
    assert audit.last_position > 0
    assert await compare_with_stream(js, db) == audit.events  # flushed before exiting

    # The rest of the backlog commits after a restart, nothing twice.
    await asyncio.to_thread(sequencer_proc.start)
    total = rounds * len(lanes) * events_per_append
    # Requests the stopped sequencer had received but not taken were naked;
    # any delivered to it as it left come back after the ack wait (10 s).
    await wait_for_ledger(db, total, timeout=45)
    await wait_for_stream(js, total)
    audit = audit_ledger(db)
    assert audit.events == audit.last_position == total
    assert await compare_with_stream(js, db) == total


@pytest.mark.slow
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
            await asyncio.sleep(30)  # a publish that hangs until stop() cancels it
        except asyncio.CancelledError:
            self.published = records[-1].position  # "the ack came at the same moment"

    monkeypatch.setattr(CommittedStreamMirror, "_publish_new", publish_swallowing_the_cancel)
    service = Sequencer(
        nc, LedgerWriter(open_ledger(tmp_path / "swallow.db")), SequencerMetrics(CollectorRegistry())
    )
    await service.start()
    stopped = False
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:tests/swallow@1", "agent")
            lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
            await client.append(
                lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "x"})]
            )
        await asyncio.wait_for(entered.wait(), 5)
        # Bounded: on a hang, wait_for cancels stop(), whose gather then cancels
        # the mirror a second time (now idle on its queue), which ends it.
        try:
            # The batch waits on the hung mirror: the drain gives up after 1 s
            # (not the default 10), then the mirror is cancelled.
            await asyncio.wait_for(service.stop(drain_timeout_s=1.0), 15)
            stopped = True
        except TimeoutError:
            pass
        assert stopped, "Sequencer.stop() hung on a mirror task that swallowed its cancel"
    finally:
        if not stopped:  # the first stop() was cancelled part way: finish it, bounded
            try:
                await asyncio.wait_for(service.stop(), 15)
            except Exception:  # noqa: BLE001 - already failing; leave nothing running
                pass
