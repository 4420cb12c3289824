"""A deposed sequencer stands down, within its drain time, quietly.

Standing down ends within its drain time even when the committed stream
never takes what was committed (spec/replication.md, "The lease"): a deposed
sequencer's successor has written the stream past it, so its committed
batches, outstanding until the stream holds them (group commit), would wait
forever. Here the stream, real, refuses every message (``max_msgs``
reached, ``discard: new``), so the committed batches pile up waiting for it
until the pull loop itself waits to hand one on; standing down must still
end, and the stand-down's cancel must reach the batches' finisher, not leave
it waiting for the stream.

And its mirror, finding the stream past its ledger (the successor's
messages), reports no fault: that is expected of a deposed sequencer, and an
integrity fault only for the active one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledger_fixtures import PULL_EXPIRES_S, start_sequencer
from nats.js.api import DiscardPolicy
from polling import eventually
from test_mirror_rounds import record

from laneledger.audit.stream import compare_with_stream
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.mirror import CommittedStreamMirror, StreamFault
from laneledger.services.sequencer.service import SequencerSettings
from laneledger.services.sequencer.streams import ensure_stream, events_stream_config

# One request a batch: the pull loop takes no more once this many batches
# are committed and waiting for the stream (group commit, spec/replication.md).
BLOCKED_AFTER = SequencerSettings().max_outstanding_batches
DRAIN_S = 0.5


async def test_standing_down_ends_while_committed_batches_wait_for_a_stream_that_refuses_them(
    nats_server, nc, js, tmp_path: Path
):
    settings = SequencerSettings(batch_size=1, pull_expires_s=PULL_EXPIRES_S)
    seq = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    appending: list[asyncio.Task[object]] = []
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:stand-down@1", "agent")
            lanes = [
                await client.create_lane("acme", "s", "r", f"l{i}", actor_id=actor.id)
                for i in range(BLOCKED_AFTER + 5)
            ]
            first = lanes.pop()
            await client.append(first, 0, [make_event(first.id, "stream.text_delta", actor_id=actor.id)])
            stream = settings.subjects.events_stream
            config = (await js.stream_info(stream)).config
            config.max_msgs = 1  # what it holds (0 would be no limit)
            config.discard = DiscardPolicy.NEW
            await js.update_stream(config)
            before = seq._writer.last_position

            appending = [
                asyncio.create_task(
                    client.append(
                        lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=actor.id)], retries=0
                    )
                )
                for lane in lanes
            ]
            # Committed, and not on the stream: the pull loop stops once the pipeline is full.
            await eventually(
                lambda: seq._writer.last_position - before,
                until=lambda n: n == BLOCKED_AFTER,
                what="the pipeline full of committed batches",
            )
            await asyncio.sleep(0.5)
            assert seq._writer.last_position - before == BLOCKED_AFTER  # and no more taken
            assert seq.mirror.published == before

            async with asyncio.timeout(4 * DRAIN_S + 5):
                await seq.stand_down(drain_timeout_s=DRAIN_S)
            assert not seq.active
            assert seq.active_tasks() == []

            # Nothing was lost: active again on a stream that takes messages,
            # the mirror publishes every committed event, in order, and the
            # requests not taken yet are committed after them.
            config.max_msgs = -1
            await js.update_stream(config)
            await seq.activate()
            await eventually(
                lambda: (seq.mirror.published, seq._writer.last_position),
                until=lambda p: p == (before + len(lanes),) * 2,
                what="every request committed and every committed event on the stream",
            )
            assert await compare_with_stream(js, tmp_path / "ledger.db") == before + len(lanes)
    finally:
        for task in appending:
            task.cancel()
        await asyncio.gather(*appending, return_exceptions=True)
        await seq.stop(drain_timeout_s=DRAIN_S)


def ledger_mirror(nc, subjects: Subjects, ledger: list[int], **kwargs) -> CommittedStreamMirror:
    """A mirror of a ledger holding positions 1..``ledger[0]`` (``record``'s bodies)."""

    async def read_after(position: int, n: int) -> list[tuple[int, bytes]]:
        return [(p, record(p).body) for p in range(position + 1, min(position + n, ledger[0]) + 1)]

    return CommittedStreamMirror(
        nc,
        subjects,
        subjects.events_stream,
        read_after=read_after,
        ledger_last_position=lambda: ledger[0],
        **kwargs,
    )


async def test_a_deposed_mirror_finding_its_successors_messages_reports_no_fault(nc, js):
    subjects = Subjects()
    await ensure_stream(js, events_stream_config(subjects.events_stream, subjects, 1))
    for position in (1, 2, 3):  # the successor's
        await js.publish(subjects.events("acme", "s", "r", "lane"), record(position).body)
    faults: list[StreamFault | None] = []
    deposed = True
    ledger = [1]
    behind = ledger_mirror(nc, subjects, ledger, on_fault=faults.append, deposed=lambda: deposed)

    await behind.check_at_start()
    assert behind.fault is not None and behind.fault.details["kind"] == "stream_ahead"  # publishes nothing
    assert faults == []  # and is not an integrity fault

    # Stood down (the fault forgotten), then active on the same ledger: the
    # stream ahead of it is a fault now, reported; and over, reported too,
    # once its ledger holds what the stream does.
    behind.forget_fault()
    deposed = False
    await behind.check_at_start()
    assert [f.details["kind"] if f else None for f in faults] == ["stream_ahead"]
    ledger[0] = 3
    await behind.check_at_start()
    assert faults[1:] == [None]
    assert behind.fault is None and behind.published == 3
