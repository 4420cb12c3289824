"""The terminal pattern, run inspection and reconcile: a run's final
checkpoint is saved, then lane.framework.checkpoint.linked and run.completed
are appended in one atomic batch; inspection shows the terminal event and the
linked checkpoint; a terminal revision saved but never linked (a crash in
between) is reported by inspection and by reconcile."""

from __future__ import annotations

import pytest
from checkpoint_fixtures import (
    CHECKPOINTS_OVER_NATS_ONLY,
    checkpoints_of_checkpoints_under_test,
    client_of_checkpoints_under_test,
)

from laneledger.contract.model import Actor
from laneledger.sdk.checkpoints import (
    CheckpointClient,
    complete_run,
    link_checkpoint,
    reconcile,
)
from laneledger.sdk.client import LaneRecorder, LedgerClient

# The checkpoint contract, run in-process and over NATS (checkpoint_fixtures.py).
client = pytest.fixture(client_of_checkpoints_under_test, name="client")
checkpoints = pytest.fixture(checkpoints_of_checkpoints_under_test, name="checkpoints")

FORMAT = "application/vnd.tests.loop-state+json;version=1"


async def open_lane(client: LedgerClient, actor: Actor, run: str = "r1", name: str = "main") -> LaneRecorder:
    recorder = await LaneRecorder.open(client, "acme", "s1", run, name, actor_id=actor.id)
    await recorder.append(
        [
            recorder.event("run.started", actor_id=actor.id, subject_id=run),
            recorder.event("stream.text_delta", actor_id=actor.id, payload={"text": "working"}),
        ]
    )
    return recorder


async def test_link_and_run_completion_in_one_inspectable_append(
    client, actor, checkpoints: CheckpointClient
):
    recorder = await open_lane(client, actor)
    done = await complete_run(
        recorder,
        checkpoints,
        key="s1/r1/main",
        expected_revision=0,
        format=FORMAT,
        actor_id=actor.id,
        state={"answer": 42},
        run_payload={"outcome": "success"},
    )
    # One append, two events: the link, then run.completed caused by it.
    assert (done.receipt.first_seq, done.receipt.last_seq) == (3, 4)
    assert done.receipt.event_ids == [done.linked_event_id, done.completed_event_id]
    assert done.checkpoint.terminal and done.checkpoint.anchor.seq == 2
    assert (done.checkpoint.session_id, done.checkpoint.run_id) == ("s1", "r1")
    page = await client.load_lane(recorder.lane.id, 2)
    linked, completed = page.events
    assert {e.append_id for e in page.events} == {done.receipt.append_id}
    assert linked.event_type == "lane.framework.checkpoint.linked"
    assert linked.payload == {
        "checkpoint_id": done.checkpoint.id,
        "key": "s1/r1/main",
        "revision": 1,
        "digest": done.checkpoint.digest,
        "format": FORMAT,
    }
    assert completed.event_type == "run.completed" and completed.subject_id == "r1"
    assert completed.causation_id == linked.id and completed.payload == {"outcome": "success"}

    inspection = await checkpoints.inspect_run("s1", "r1")
    assert [e.id for e in inspection.terminal_events] == [completed.id]
    [link] = inspection.linked_checkpoints
    assert (link.event_id, link.seq, link.checkpoint_id, link.problem) == (
        linked.id,
        3,
        done.checkpoint.id,
        None,
    )
    assert link.checkpoint.id == done.checkpoint.id and link.checkpoint.revision == 1
    assert inspection.unlinked_revisions == [] and inspection.unresolved_attempts == []
    assert inspection.as_of_position == completed.position
    assert await reconcile(checkpoints, min_position=completed.position) == []


@CHECKPOINTS_OVER_NATS_ONLY  # reconcile() given a LedgerClient makes its own CheckpointClient: NATS
async def test_a_terminal_revision_saved_but_never_linked_is_reported(client, actor, checkpoints):
    recorder = await open_lane(client, actor)
    # The harness saved its terminal checkpoint and crashed before the link.
    saved = await checkpoints.save(
        "s1/r1/main",
        expected_revision=0,
        format=FORMAT,
        state={"final": True},
        session_id="s1",
        run_id="r1",
        terminal=True,
    )
    # Ordinary (non-terminal) snapshots are not expected to be linked.
    await checkpoints.save(
        "snapshots", expected_revision=0, format=FORMAT, state=1, session_id="s1", run_id="r1"
    )
    inspection = await checkpoints.inspect_run("s1", "r1")
    assert [c.id for c in inspection.unlinked_revisions] == [saved.id]
    assert inspection.terminal_events == [] and inspection.linked_checkpoints == []
    unlinked = await reconcile(client, session_id="s1", run_id="r1")
    assert [c.id for c in unlinked] == [saved.id] and unlinked[0].terminal
    report = await checkpoints.reconcile(key="s1/r1/main")
    assert report.caught_up and [c.id for c in report.unlinked] == [saved.id]
    assert (await checkpoints.reconcile(key="another-key")).unlinked == []

    # Reconciling: link the revision that was saved, and complete the run.
    receipt, linked_id, completed_id = await link_checkpoint(recorder, saved, actor_id=actor.id)
    assert receipt.event_ids == [linked_id, completed_id]
    # The receipt can arrive before the events reach the committed stream.
    assert await reconcile(checkpoints, min_position=receipt.positions[-1]) == []
    inspection = await checkpoints.inspect_run("s1", "r1")
    assert inspection.unlinked_revisions == []
    assert [link.checkpoint_id for link in inspection.linked_checkpoints] == [saved.id]


async def test_a_link_to_an_unknown_or_misdescribed_checkpoint_is_flagged(client, actor, checkpoints):
    recorder = await open_lane(client, actor)
    saved = await checkpoints.save("k", expected_revision=0, format=FORMAT, state=1)
    await recorder.append(
        [
            recorder.event(
                "lane.framework.checkpoint.linked",
                actor_id=actor.id,
                payload={"checkpoint_id": "nothing-like-it"},
            ),
            recorder.event(
                "lane.framework.checkpoint.linked",
                actor_id=actor.id,
                payload={"checkpoint_id": saved.id, "revision": 7},
            ),
            recorder.event("lane.framework.checkpoint.linked", actor_id=actor.id, payload={}),
        ]
    )
    inspection = await checkpoints.inspect_run("s1", "r1")
    assert [(link.checkpoint_id, link.problem) for link in inspection.linked_checkpoints] == [
        ("nothing-like-it", "unknown_checkpoint"),
        (saved.id, "mismatch"),
        (None, "unknown_checkpoint"),
    ]


async def test_inspection_of_an_unknown_run_is_not_found(checkpoints):
    from laneledger.contract import errors

    with pytest.raises(errors.EntityNotFound) as caught:
        await checkpoints.inspect_run("s1", "no-such-run")
    assert caught.value.details["kind"] == "run"


# -- unresolved attempts and retry safety ----------------------------------------------------

SAFETY = [
    # effect, idempotency, idempotency_key, retry_safe, reason
    ("none", "not_applicable", None, True, "effect_none"),
    ("read", "none", None, True, "effect_read"),
    ("write", "none", None, False, "side_effect_not_idempotent"),
    ("write", "unknown", None, False, "side_effect_not_idempotent"),
    ("unknown", "unknown", None, False, "side_effect_not_idempotent"),
    ("unknown", "none", None, False, "side_effect_not_idempotent"),
    ("write", "keyed", "order-17", True, "idempotent_keyed"),
    ("write", "keyed", None, False, "keyed_without_key"),
    ("unknown", "keyed", "k-1", True, "idempotent_keyed"),
    ("write", "inherent", None, True, "idempotent_inherent"),
]


async def test_unresolved_attempts_are_reported_with_retry_safety(client, actor, checkpoints):
    recorder = await open_lane(client, actor)
    turn = await client.create_turn(recorder.lane.id, 1)
    expected = {}
    for i, (effect, idempotency, key, safe, reason) in enumerate(SAFETY):
        action = await client.create_action(
            recorder.lane.id,
            turn.id,
            "tool_call",
            f"tool-{i}",
            effect=effect,
            idempotency=idempotency,
            idempotency_key=key,
        )
        attempt = await client.create_attempt(recorder.lane.id, action.id, 1)
        await recorder.append(
            [
                recorder.event(
                    "attempt.requested", actor_id=actor.id, subject_id=attempt.id, payload={"attempt_no": 1}
                )
            ]
        )
        expected[attempt.id] = (action.id, f"tool-{i}", effect, idempotency, key, safe, reason)
    # Resolved, or never requested: not unresolved.
    done_action = await client.create_action(
        recorder.lane.id, turn.id, "tool_call", "done", effect="write", idempotency="none"
    )
    done = await client.create_attempt(recorder.lane.id, done_action.id, 1)
    failed = await client.create_attempt(recorder.lane.id, done_action.id, 2)
    await client.create_attempt(recorder.lane.id, done_action.id, 3)
    await recorder.append(
        [
            recorder.event("attempt.requested", actor_id=actor.id, subject_id=done.id),
            recorder.event("attempt.completed", actor_id=actor.id, subject_id=done.id),
            recorder.event("attempt.requested", actor_id=actor.id, subject_id=failed.id),
            recorder.event("attempt.failed", actor_id=actor.id, subject_id=failed.id),
        ]
    )

    inspection = await checkpoints.inspect_run("s1", "r1")
    found = {u.attempt_id: u for u in inspection.unresolved_attempts}
    assert list(found) == list(expected)  # in the order they were requested
    for attempt_id, (action_id, name, effect, idempotency, key, safe, reason) in expected.items():
        u = found[attempt_id]
        assert (u.action_id, u.name, u.effect, u.idempotency, u.idempotency_key) == (
            action_id,
            name,
            effect,
            idempotency,
            key,
        )
        assert (u.retry_safe, u.reason) == (safe, reason), name
        assert u.turn_id == turn.id and u.lane_id == recorder.lane.id and u.attempt_no == 1
    # Nothing that writes without a key the callee deduplicates on is ever safe.
    for u in found.values():
        if u.effect in ("write", "unknown") and u.idempotency not in ("keyed", "inherent"):
            assert not u.retry_safe
