"""Anchors: a checkpoint may name the last lane event its state applied. The
service checks it against the committed stream it consumes: the seq must hold
exactly that event id; an anchor ahead of what it consumed waits (bounded)."""

from __future__ import annotations

import asyncio

import pytest
from checkpoint_fixtures import (
    CHECKPOINTS_OVER_NATS_ONLY,
    checkpoints_of_checkpoints_under_test,
    client_of_checkpoints_under_test,
)
from polling import eventually

from laneledger.contract import errors
from laneledger.contract.ids import new_id
from laneledger.contract.model import Actor, Anchor
from laneledger.sdk.checkpoints import AnchorMismatch, AnchorNotCommitted, CheckpointClient, anchor_of
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event

# The checkpoint contract, run in-process and over NATS (checkpoint_fixtures.py).
client = pytest.fixture(client_of_checkpoints_under_test, name="client")
checkpoints = pytest.fixture(checkpoints_of_checkpoints_under_test, name="checkpoints")

FORMAT = "application/vnd.tests.state+json;version=1"


async def lane_with_events(client: LedgerClient, actor: Actor, n: int, name: str = "main") -> LaneRecorder:
    recorder = await LaneRecorder.open(client, "acme", "s1", "r1", name, actor_id=actor.id)
    await recorder.append(
        [recorder.event("stream.text_delta", actor_id=actor.id, payload={"i": i}) for i in range(n)]
    )
    return recorder


async def test_anchoring_a_committed_event(client, actor, checkpoints: CheckpointClient):
    recorder = await lane_with_events(client, actor, 2)
    receipt = await recorder.append([recorder.event("turn.started", actor_id=actor.id)])
    anchor = anchor_of(receipt)
    assert (anchor.seq, anchor.event_id) == (3, receipt.event_ids[0])
    saved = await checkpoints.save(
        "a1",
        expected_revision=0,
        format=FORMAT,
        state={"seen": 3},
        anchor=anchor,
        session_id="s1",
        run_id="r1",
    )
    assert saved.anchor == anchor
    # An anchor further back in the lane is just as good.
    page = await client.load_lane(recorder.lane.id)
    first = Anchor(lane_id=recorder.lane.id, seq=1, event_id=page.events[0].id)
    again = await checkpoints.save("a1", expected_revision=1, format=FORMAT, state={"seen": 1}, anchor=first)
    assert again.revision == 2 and again.anchor == first


async def test_a_wrong_event_id_is_refused(client, actor, checkpoints: CheckpointClient):
    recorder = await lane_with_events(client, actor, 3)
    page = await client.load_lane(recorder.lane.id)
    wrong = Anchor(lane_id=recorder.lane.id, seq=2, event_id=page.events[0].id)
    with pytest.raises(AnchorMismatch) as caught:
        await checkpoints.save("a2", expected_revision=0, format=FORMAT, state=1, anchor=wrong)
    err = caught.value
    assert isinstance(err, errors.EntityConflict) and err.code == "entity_conflict"
    assert err.details["committed_event_id"] == page.events[1].id
    assert err.details["event_id"] == page.events[0].id and err.details["fields"] == ["event_id"]
    assert await checkpoints.latest("a2") is None  # nothing was saved


async def test_an_anchor_in_another_run_than_the_checkpoint_names_is_refused(
    client, actor, checkpoints: CheckpointClient
):
    recorder = await lane_with_events(client, actor, 1)
    page = await client.load_lane(recorder.lane.id)
    anchor = Anchor(lane_id=recorder.lane.id, seq=1, event_id=page.events[0].id)
    with pytest.raises(AnchorMismatch) as caught:
        await checkpoints.save(
            "a3",
            expected_revision=0,
            format=FORMAT,
            state=1,
            anchor=anchor,
            session_id="s1",
            run_id="another-run",
        )
    assert caught.value.details["fields"] == ["run_id"]
    assert caught.value.details["committed"] == {"run_id": "r1"}


async def test_a_seq_never_committed_times_out_with_the_typed_error(client, actor, checkpoints):
    recorder = await lane_with_events(client, actor, 3)
    ahead = Anchor(lane_id=recorder.lane.id, seq=9, event_id=new_id())
    with pytest.raises(AnchorNotCommitted) as caught:
        await checkpoints.save(
            "a4", expected_revision=0, format=FORMAT, state=1, anchor=ahead, anchor_wait_s=0.3
        )
    err = caught.value
    assert isinstance(err, errors.EntityNotFound) and err.code == "entity_not_found"
    assert err.details["reason"] == "anchor_not_committed" and err.details["kind"] == "event"
    assert (err.details["lane_id"], err.details["seq"]) == (recorder.lane.id, 9)
    assert err.details["lane_last_seq"] == 3 and err.details["waited_s"] == 0.3
    assert await checkpoints.latest("a4") is None


async def test_an_unknown_lane_times_out_with_the_typed_error(client, actor, checkpoints):
    await lane_with_events(client, actor, 1)
    nowhere = Anchor(lane_id=new_id(), seq=1, event_id=new_id())
    with pytest.raises(AnchorNotCommitted) as caught:
        await checkpoints.save(
            "a5", expected_revision=0, format=FORMAT, state=1, anchor=nowhere, anchor_wait_s=0.2
        )
    assert caught.value.details["lane_last_seq"] == 0


async def test_an_anchor_ahead_succeeds_once_the_event_commits_within_the_wait(
    client, actor, checkpoints: CheckpointClient, checkpoints_under_test
):
    recorder = await lane_with_events(client, actor, 2)
    # Event ids are the producer's: the anchor can name the next event first.
    upcoming = make_event(recorder.lane.id, "turn.completed", actor_id=actor.id)
    anchor = Anchor(lane_id=recorder.lane.id, seq=3, event_id=upcoming["id"])
    saving = asyncio.create_task(
        checkpoints.save("a6", expected_revision=0, format=FORMAT, state={"turns": 1}, anchor=anchor)
    )
    try:
        await eventually(
            lambda: checkpoints_under_test.service.anchors.waiting == 1,
            what="the save to be waiting for its anchor",
        )
        assert not saving.done()
        receipt = await recorder.append([upcoming])
        assert receipt.first_seq == 3
        saved = await asyncio.wait_for(saving, 30)
    finally:
        saving.cancel()
    assert saved.revision == 1 and saved.anchor == anchor
    # A replay of the same save no longer waits: it returns the original.
    again = await checkpoints.save(
        "a6", expected_revision=0, format=FORMAT, state={"turns": 1}, anchor=anchor, checkpoint_id=saved.id
    )
    assert again == saved


async def test_an_anchor_ahead_that_commits_as_another_event_is_a_mismatch(
    client, actor, checkpoints: CheckpointClient, checkpoints_under_test
):
    recorder = await lane_with_events(client, actor, 1)
    anchor = Anchor(lane_id=recorder.lane.id, seq=2, event_id=new_id())
    saving = asyncio.create_task(
        checkpoints.save("a7", expected_revision=0, format=FORMAT, state=1, anchor=anchor)
    )
    try:
        await eventually(
            lambda: checkpoints_under_test.service.anchors.waiting == 1,
            what="the save to be waiting for its anchor",
        )
        receipt = await recorder.append([recorder.event("turn.started", actor_id=actor.id)])
        with pytest.raises(AnchorMismatch) as caught:
            await asyncio.wait_for(saving, 30)
    finally:
        saving.cancel()
    assert caught.value.details["committed_event_id"] == receipt.event_ids[0]


@CHECKPOINTS_OVER_NATS_ONLY
async def test_the_index_keeps_its_position_with_what_it_derived(client, actor, checkpoint_service, js):
    await lane_with_events(client, actor, 5)
    # The receipt comes before the sequencer publishes to the stream: wait for both.
    await eventually(
        lambda: checkpoint_service.anchors.applied,
        until=lambda applied: applied >= 5,
        what="the lane index at position 5",
    )
    store = checkpoint_service._store
    assert store.applied_position() == checkpoint_service.anchors.applied == 5
    assert (await js.stream_info("LEDGER_EVENTS")).state.last_seq == 5
    await eventually(lambda: checkpoint_service.ready, what="the service to be ready (/readyz's condition)")


async def test_a_seq_that_cannot_exist_is_refused_at_once(client, actor, checkpoints):
    recorder = await lane_with_events(client, actor, 1)
    impossible = Anchor(lane_id=recorder.lane.id, seq=0, event_id=new_id())  # seqs start at 1
    with pytest.raises(errors.InvalidRequest) as caught:
        await checkpoints.save("a8", expected_revision=0, format=FORMAT, state=1, anchor=impossible)
    assert caught.value.details["path"] == "$.checkpoint.anchor.seq"
