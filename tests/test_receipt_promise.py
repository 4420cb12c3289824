"""Append step 7 (spec/object-model.md): a batch's requests are acked and its
receipts sent only once what they report survives a machine. With the
transaction log (the default) that is the log's acknowledgement, so neither
waits for the committed stream, which the mirror fills after; with
``txlog`` off the committed stream is the replicated copy, and both wait
for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest
from failure_logs import show_log_on_failure
from ledger_fixtures import start_sequencer
from polling import eventually
from sequencer_process import SequencerProcess
from service_process import REPO, ServiceProcess

from laneledger.audit.stream import compare_with_stream
from laneledger.sdk.client import AppendHandle, LedgerClient, make_event
from laneledger.services.sequencer.mirror import CommittedStreamMirror
from laneledger.services.sequencer.service import SequencerSettings
from laneledger.store.txlog import decode_record

pytestmark = pytest.mark.nats

LOOPBACK_HTTP = ("--http-host", "127.0.0.1", "--http-port", "0")


@asynccontextmanager
async def _mirror_held(
    nats_server, nc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: SequencerSettings
) -> AsyncIterator[tuple[AppendHandle, asyncio.Event]]:
    """One append submitted while the mirror's publish is held (as a slow or
    unreachable committed stream would hold it), once it has committed in
    SQLite: its handle, and the event that releases the mirror."""
    publishing, release = asyncio.Event(), asyncio.Event()
    publish = CommittedStreamMirror._publish

    async def held(self: CommittedStreamMirror, items: list) -> None:
        publishing.set()
        await release.wait()
        await publish(self, items)

    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=30.0) as client:
            actor = await client.ensure_actor("acme", "agent:a@1", "agent")
            lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
            monkeypatch.setattr(CommittedStreamMirror, "_publish", held)
            event = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "x"})
            handle = await client.submit(lane, 0, [event])
            await asyncio.wait_for(publishing.wait(), 30)
            assert (await client.get_lane(lane.id)).last_seq == 1  # committed in SQLite
            yield handle, release
    finally:
        release.set()
        await sequencer.stop()


async def test_with_the_log_a_receipt_does_not_wait_for_the_committed_stream(
    nats_server, nc, js, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = SequencerSettings()
    async with _mirror_held(nats_server, nc, tmp_path, monkeypatch, settings) as (handle, release):
        receipt = await handle.receipt(timeout=30)
        assert receipt.positions == [1]
        # What the receipt reports is on the log, and not yet on the stream.
        last = (await js.stream_info("LEDGER_TXLOG")).state.last_seq
        record = decode_record((await js.get_msg("LEDGER_TXLOG", last)).data, seq=last)
        assert (record.position_before, record.position) == (0, 1)
        assert (await js.stream_info("LEDGER_EVENTS")).state.last_seq == 0
        consumer = await js.consumer_info("LEDGER_APPEND", "sequencer")
        assert consumer.num_ack_pending == 0  # the request was acked too
        release.set()
        for _ in range(300):  # the mirror, released, fills the stream
            if (await js.stream_info("LEDGER_EVENTS")).state.last_seq == 1:
                break
            await asyncio.sleep(0.02)
        stored = await js.get_msg("LEDGER_EVENTS", 1)
        assert stored.headers and stored.data


async def test_without_the_log_a_receipt_waits_for_its_event_on_the_committed_stream(
    nats_server, nc, js, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = SequencerSettings(txlog=False)
    async with _mirror_held(nats_server, nc, tmp_path, monkeypatch, settings) as (handle, release):
        waiting = asyncio.ensure_future(handle.receipt(timeout=30))
        await asyncio.sleep(0.5)  # room for a receipt sent too early to arrive
        assert not waiting.done(), "the receipt went out before the stream had its event"
        assert (await js.stream_info("LEDGER_EVENTS")).state.last_seq == 0
        consumer = await js.consumer_info("LEDGER_APPEND", "sequencer")
        assert consumer.num_ack_pending == 1  # nor was the request acked
        release.set()
        receipt = await waiting
        assert receipt.positions == [1]
        stored = await js.get_msg("LEDGER_EVENTS", 1)
        assert stored.headers and stored.data


async def test_a_receipt_outlives_a_sequencer_that_died_before_publishing_its_events(
    nats_server, js, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The active sequencer dies (as SIGKILL would) after sending a receipt
    and before its mirror published a single event: the log alone holds
    them. A successor on a new disk, rebuilt from the log, publishes them on
    the committed stream at the receipt's positions."""
    crashing = ServiceProcess(
        "mirror_crash_sequencer",
        ["--nats", nats_server.url, "--db", str(tmp_path / "crashing.db"), *LOOPBACK_HTTP],
        tmp_path,
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    show_log_on_failure(request, crashing)
    crashing.start()
    async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
        actor = await client.ensure_actor("acme", "agent:crash", "agent")
        lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
        events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id) for _ in range(3)]
        receipt = await client.append(lane, 0, events, retries=0, timeout=10.0)
        assert receipt.positions == [1, 2, 3]
        await eventually(lambda: crashing.running, until=lambda running: not running, what="the crash")
        assert (await js.stream_info("LEDGER_EVENTS")).state.last_seq == 0

    successor_db = tmp_path / "successor.db"
    successor = SequencerProcess(nats_server.url, successor_db, log_dir=tmp_path / "successor")
    show_log_on_failure(request, successor)
    successor.start()
    try:
        await eventually(
            lambda: js.stream_info("LEDGER_EVENTS"),
            until=lambda info: info.state.last_seq == 3,
            what="the receipt's events on the committed stream",
        )
    finally:
        successor.stop()
    assert await compare_with_stream(js, successor_db) == 3
    stored = [msgspec.json.decode((await js.get_msg("LEDGER_EVENTS", p)).data) for p in receipt.positions]
    assert [e["id"] for e in stored] == [e["id"] for e in events]
