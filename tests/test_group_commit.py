"""Group commit (spec/replication.md, "Group commit"): the sequencer takes no
new batch while two are outstanding (committing, or committed and not yet
on the committed stream), so what arrives meanwhile is one batch, not a
batch per request. Their receipts do not wait for the stream (the log
took them)."""

from __future__ import annotations

import asyncio

import pytest
from polling import eventually

from laneledger.contract.model import AppendCommitted
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.service import Sequencer, SequencerSettings

pytestmark = pytest.mark.nats


def _hold_the_stream(sequencer: Sequencer) -> tuple[list[int], asyncio.Event]:
    """The events of each batch the sequencer commits, in order, and the
    event that opens the committed stream, which takes nothing until then."""
    mirror = sequencer.mirror
    stream_open = asyncio.Event()
    batches: list[int] = []
    submit, publish = mirror.submit, mirror._publish

    async def counted(records):  # called once per committed batch
        batches.append(len(records))
        await submit(records)

    async def held(items):
        await stream_open.wait()
        await publish(items)

    mirror.submit, mirror._publish = counted, held  # type: ignore[method-assign]
    return batches, stream_open


async def test_while_two_batches_wait_for_the_committed_stream_what_arrives_is_one_batch(
    nats_server, sequencer: Sequencer
) -> None:
    assert SequencerSettings().max_outstanding_batches == 2
    batches, stream_open = _hold_the_stream(sequencer)
    async with await LedgerClient.connect(nats_server.url, timeout=30.0) as client:
        agent = await client.ensure_actor("acme", "agent:acme", "agent")
        lanes = [
            await client.create_lane("acme", "s", "r", f"lane-{i}", actor_id=agent.id) for i in range(10)
        ]

        def append(i: int):
            event = make_event(lanes[i].id, "stream.text_delta", actor_id=agent.id, payload={"i": i})
            return client.submit(lanes[i], 0, [event])

        handles = [await append(0)]
        await eventually(lambda: len(batches), until=lambda n: n == 1, what="the first batch committed")
        handles.append(await append(1))
        await eventually(lambda: len(batches), until=lambda n: n == 2, what="the second batch committed")
        # Two batches unanswered: each later request arrives on its own, well
        # apart; taken as they come, each would be a batch of one.
        for i in range(2, 10):
            handles.append(await append(i))
            await asyncio.sleep(0.05)
        assert batches == [1, 1]
        for handle in handles[:2]:  # answered, though the stream has neither
            assert isinstance(await handle.receipt(timeout=10), AppendCommitted)
        assert batches == [1, 1]
        stream_open.set()
        receipts = [await handle.receipt() for handle in handles]
    assert all(isinstance(r, AppendCommitted) for r in receipts), receipts
    assert batches == [1, 1, 8]


async def test_a_batch_answered_frees_its_work_though_the_stream_has_not_taken_it(
    nats_server, sequencer: Sequencer
) -> None:
    """A batch's worth of events unanswered stops the pull loop
    (``unanswered_batches``); answered, it no longer does, though it is
    still outstanding until the committed stream has it: a request arriving
    behind a 1000-event batch waits for that batch's commit, not for its
    round on the stream too."""
    settings = SequencerSettings()
    assert (settings.unanswered_batches, settings.batch_events) == (1, 1000)
    mirror = sequencer.mirror
    batches, stream_open = _hold_the_stream(sequencer)
    async with await LedgerClient.connect(nats_server.url, timeout=30.0) as client:
        agent = await client.ensure_actor("acme", "agent:acme", "agent")
        heavy = await client.create_lane("acme", "s", "r", "heavy", actor_id=agent.id)
        light = await client.create_lane("acme", "s", "r", "light", actor_id=agent.id)
        events = [make_event(heavy.id, "stream.text_delta", actor_id=agent.id) for _ in range(1000)]
        first = await (await client.submit(heavy, 0, events)).receipt(timeout=30)
        assert isinstance(first, AppendCommitted) and batches == [1000]
        event = make_event(light.id, "stream.text_delta", actor_id=agent.id)
        second = await (await client.submit(light, 0, [event])).receipt(timeout=10)
        assert isinstance(second, AppendCommitted) and batches == [1000, 1]
        assert mirror.published < second.positions[0]  # neither is on the stream yet
        stream_open.set()
        await eventually(
            lambda: mirror.published, until=lambda p: p == second.positions[0], what="both published"
        )
