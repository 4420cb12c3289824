"""The committed stream loses its last messages and gets them back
(spec/replication.md, "Durability"): with the transaction log on, one
nats-server keeps LEDGER_EVENTS in JetStream's ``async`` persist mode, so a
server that dies before flushing it comes back without the messages it last
acknowledged. Here that is made exact: the stream's files are put back as
they were a few commits earlier while nats-server is down. The running
sequencer, on a quiet ledger (no commit to find the hole), republishes them
from its file: the same bytes at the same positions, and what it commits
next lands after them."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from ledger_fixtures import PULL_EXPIRES_S, start_sequencer
from polling import eventually

from laneledger.audit.stream import compare_with_stream
from laneledger.contract.subjects import EVENTS_STREAM
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.service import Sequencer, SequencerSettings

pytestmark = pytest.mark.nats


async def _append(url: str, lane_name: str, count: int) -> None:
    async with await LedgerClient.connect(url, timeout=30.0) as client:
        actor = await client.ensure_actor("acme", "agent:refill", "agent")
        lane = await client.create_lane("acme", "s", "r", lane_name, actor_id=actor.id)
        events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id) for _ in range(count)]
        await client.append(lane, 0, events, timeout=30.0)


async def _mirrored(sequencer: Sequencer, js) -> int:
    """Once the stream holds every position the ledger has: that position."""
    last = sequencer._writer.last_position

    async def stream_last() -> int:
        return (await js.stream_info(EVENTS_STREAM)).state.last_seq

    await eventually(
        stream_last, until=lambda seq: seq == last, what=f"the stream at {last}", retry_on=Exception
    )
    return last


async def test_a_stream_that_lost_its_last_messages_is_refilled_with_the_same_bytes(
    nats_server, nc, js, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = SequencerSettings(pull_expires_s=PULL_EXPIRES_S, stream_recheck_s=0.2)
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    stream_dir = nats_server.store_dir / "jetstream" / "$G" / "streams" / EVENTS_STREAM
    try:
        await _append(nats_server.url, "first", 3)
        kept = await _mirrored(sequencer, js)
        await nats_server.astop()
        earlier = tmp_path / "earlier"
        shutil.copytree(stream_dir, earlier)
        await nats_server.astart()

        await _append(nats_server.url, "second", 4)
        last = await _mirrored(sequencer, js)
        assert last > kept
        acknowledged = {p: (await js.get_msg(EVENTS_STREAM, p)).data for p in range(kept + 1, last + 1)}

        # As a crash before the flush leaves it: the stream as it was at `kept`.
        await nats_server.astop()
        shutil.rmtree(stream_dir)
        shutil.copytree(earlier, stream_dir)
        with caplog.at_level(logging.WARNING, logger="laneledger.sequencer.mirror"):
            await nats_server.astart()
            await _mirrored(sequencer, js)  # no commit since: the mirror looked by itself
        assert any(f"ends at {kept}, before the {last}" in r.getMessage() for r in caplog.records)
        for position, data in acknowledged.items():
            assert (await js.get_msg(EVENTS_STREAM, position)).data == data, position

        await _append(nats_server.url, "third", 2)
        assert await _mirrored(sequencer, js) > last
    finally:
        await sequencer.stop()
    assert await compare_with_stream(js, tmp_path / "ledger.db") == sequencer._writer.last_position
