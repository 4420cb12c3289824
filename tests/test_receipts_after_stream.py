"""Append step 7 (spec/object-model.md): a batch's requests are acked and its
receipts sent only once the committed stream holds its events, so a receipt
never reports an event that the replicated stream could still lose."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from ledger_fixtures import start_sequencer

from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.mirror import CommittedStreamMirror
from laneledger.services.sequencer.service import SequencerSettings

pytestmark = pytest.mark.nats


async def test_a_receipt_waits_for_its_event_on_the_committed_stream(
    nats_server, nc, js, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror's publish is held (as a slow or unreachable stream would
    hold it): the append commits in SQLite, but neither its inbound ack nor
    its receipt goes out until the stream has the event."""
    publishing, release = asyncio.Event(), asyncio.Event()
    publish = CommittedStreamMirror._publish

    async def held(self: CommittedStreamMirror, items: list) -> None:
        publishing.set()
        await release.wait()
        await publish(self, items)

    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings())
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=30.0) as client:
            actor = await client.ensure_actor("acme", "agent:a@1", "agent")
            lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
            monkeypatch.setattr(CommittedStreamMirror, "_publish", held)
            event = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "x"})
            handle = await client.submit(lane, 0, [event])
            await asyncio.wait_for(publishing.wait(), 30)
            assert (await client.get_lane(lane.id)).last_seq == 1  # committed in SQLite
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
    finally:
        release.set()
        await sequencer.stop()
