"""Recovery plans: the latest checkpoint, the lane events after its anchor,
and the lane's unresolved attempts with their retry-safety verdict."""

from __future__ import annotations

import pytest
from checkpoint_fixtures import (
    checkpoints_of_checkpoints_under_test,
    client_of_checkpoints_under_test,
)

from laneledger.contract import errors
from laneledger.sdk.checkpoints import CheckpointClient, anchor_of
from laneledger.sdk.client import LaneRecorder

# The checkpoint contract, run in-process and over NATS (checkpoint_fixtures.py).
client = pytest.fixture(client_of_checkpoints_under_test, name="client")
checkpoints = pytest.fixture(checkpoints_of_checkpoints_under_test, name="checkpoints")

FORMAT = "application/vnd.tests.loop-state+json;version=1"


async def recorded_lane(client, actor, name: str = "main", run: str = "r1") -> tuple[LaneRecorder, list]:
    """Six events; an attempt of a write tool requested and never finished."""
    recorder = await LaneRecorder.open(client, "acme", "s1", run, name, actor_id=actor.id)
    turn = await client.create_turn(recorder.lane.id, 1)
    write = await client.create_action(
        recorder.lane.id, turn.id, "tool_call", "send_mail", effect="write", idempotency="none"
    )
    attempt = await client.create_attempt(recorder.lane.id, write.id, 1)
    receipts = [
        await recorder.append([recorder.event("stream.text_delta", actor_id=actor.id, payload={"i": i})])
        for i in range(3)
    ]
    receipts.append(
        await recorder.append(
            [
                recorder.event("turn.started", actor_id=actor.id, subject_id=turn.id),
                recorder.event("attempt.requested", actor_id=actor.id, subject_id=attempt.id),
                recorder.event("stream.text_delta", actor_id=actor.id, payload={"i": 3}),
            ]
        )
    )
    return recorder, [attempt, receipts]


async def test_plan_by_key_replays_the_events_after_the_anchor(client, actor, checkpoints: CheckpointClient):
    recorder, (attempt, receipts) = await recorded_lane(client, actor)
    anchor = anchor_of(receipts[2])  # seq 3
    saved = await checkpoints.save(
        "loop", expected_revision=0, format=FORMAT, state={"seen": 3}, anchor=anchor
    )
    plan = await checkpoints.recovery_plan("loop")
    assert plan.checkpoint == saved and plan.key == "loop"
    assert (plan.lane_id, plan.session_id, plan.run_id) == (recorder.lane.id, "s1", "r1")
    assert (plan.after_seq, plan.head_seq, plan.has_more) == (3, 6, False)
    assert [e.seq for e in plan.events] == [4, 5, 6]
    [unresolved] = plan.unresolved_attempts
    assert unresolved.attempt_id == attempt.id and unresolved.name == "send_mail"
    assert not unresolved.retry_safe and unresolved.requested_seq == 5
    # By lane: the latest checkpoint anchored there, the same plan.
    by_lane = await checkpoints.recovery_plan(session_id="s1", run_id="r1", lane_id=recorder.lane.id)
    assert by_lane == plan


async def test_plan_without_a_checkpoint_replays_the_whole_lane(client, actor, checkpoints):
    recorder, _ = await recorded_lane(client, actor)
    plan = await checkpoints.recovery_plan("never-saved", lane_id=recorder.lane.id)
    assert plan.checkpoint is None and plan.after_seq == 0
    assert [e.seq for e in plan.events] == [1, 2, 3, 4, 5, 6]
    assert len(plan.unresolved_attempts) == 1
    empty = await checkpoints.recovery_plan("never-saved")
    assert empty.checkpoint is None and empty.events == [] and empty.lane_id is None


async def test_long_tails_are_paged(client, actor, checkpoints):
    recorder, _ = await recorded_lane(client, actor)
    page = await checkpoints.recovery_plan(lane_id=recorder.lane.id, max_events=2, all_events=False)
    assert [e.seq for e in page.events] == [1, 2] and page.has_more
    whole = await checkpoints.recovery_plan(lane_id=recorder.lane.id, max_events=2)
    assert [e.seq for e in whole.events] == [1, 2, 3, 4, 5, 6] and not whole.has_more


async def test_plan_requests_are_checked(client, actor, checkpoints):
    recorder, (_, receipts) = await recorded_lane(client, actor)
    other, _ = await recorded_lane(client, actor, name="other")
    await checkpoints.save("loop", expected_revision=0, format=FORMAT, state=1, anchor=anchor_of(receipts[0]))
    with pytest.raises(errors.InvalidRequest) as caught:
        await checkpoints.recovery_plan("loop", lane_id=other.lane.id)
    assert caught.value.details["path"] == "$.lane_id"
    with pytest.raises(errors.InvalidRequest) as caught:
        await checkpoints.recovery_plan(lane_id=recorder.lane.id, run_id="r2")
    assert caught.value.details["path"] == "$.run_id"
    with pytest.raises(errors.InvalidRequest):
        await checkpoints.recovery_plan()
    with pytest.raises(errors.EntityNotFound) as caught:
        await checkpoints.recovery_plan(lane_id="no-such-lane")
    assert caught.value.details["kind"] == "lane"


async def test_a_key_without_an_anchor_still_reports_its_runs_attempts(client, actor, checkpoints):
    await recorded_lane(client, actor)
    await checkpoints.save("plain", expected_revision=0, format=FORMAT, state=1, session_id="s1", run_id="r1")
    plan = await checkpoints.recovery_plan("plain")
    assert plan.checkpoint.key == "plain" and plan.lane_id is None and plan.events == []
    assert [u.name for u in plan.unresolved_attempts] == ["send_mail"]
