"""Recovery plans and inspections of a run too large for one NATS reply: the
checkpoint service reads its structure with ``load_structure`` and its
events with ``load_lane`` pages (shortened while a page would be over
max_payload), never the whole run at once (``load_run`` fails here)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

import pytest

from laneledger.contract import errors
from laneledger.contract.model import InspectRun
from laneledger.runtime.access import Scope
from laneledger.sdk.checkpoints import CheckpointClient, complete_run
from laneledger.sdk.client import LaneRecorder

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")

FORMAT = "application/vnd.tests.loop-state+json;version=1"
ACTIONS = 1100  # ~1.1 MB of action names (each at its 1024-character bound): over the 1 MiB max_payload
BULKY = 400  # events of ~3.5 kB: 1000 of them are far over one reply, 400 are ~1.4 MB


async def gather_some(commands: Iterable[Awaitable[T]], at_once: int = 25) -> list[T]:
    """The commands' answers in order, at most ``at_once`` in flight: this
    test is about a run too large for one reply, not a burst of 1100
    commands, whose last answers a loaded machine can keep past the
    client's timeout."""
    gate = asyncio.Semaphore(at_once)

    async def one(command: Awaitable[T]) -> T:
        async with gate:
            return await command

    return await asyncio.gather(*(one(c) for c in commands))


async def big_run(client, actor) -> tuple[LaneRecorder, list, list]:
    """Lane ``main`` of run r1: ACTIONS read attempts requested and all but
    the last three completed; the last three are a write, a keyed write
    without a key and a read. Lane ``side``: one write attempt requested."""
    main = await LaneRecorder.open(client, "acme", "big", "r1", "main", actor_id=actor.id)
    side = await LaneRecorder.open(client, "acme", "big", "r1", "side", actor_id=actor.id)
    turn = await client.create_turn(main.lane.id, 1)
    kinds = [("read", "inherent")] * (ACTIONS - 3) + [("write", "none"), ("write", "keyed"), ("read", "none")]
    actions = await gather_some(
        client.create_action(
            main.lane.id, turn.id, "tool_call", f"{i:04d}" + "n" * 1020, effect=effect, idempotency=idem
        )
        for i, (effect, idem) in enumerate(kinds)
    )
    attempts = await gather_some(client.create_attempt(main.lane.id, a.id, 1) for a in actions)
    side_turn = await client.create_turn(side.lane.id, 1)
    side_action = await client.create_action(
        side.lane.id, side_turn.id, "tool_call", "send_mail", effect="write", idempotency="none"
    )
    side_attempt = await client.create_attempt(side.lane.id, side_action.id, 1)
    # The structure alone, no event yet, is over one reply: load_session reads it in pages.
    assert len((await client.load_session("big")).actions) == len(actions) + 1

    await main.append([main.event("run.started", actor_id=actor.id, subject_id="r1")])
    for start in range(0, len(attempts), 500):  # at most 1000 events per append
        await main.append(
            [
                main.event("attempt.requested", actor_id=actor.id, subject_id=a.id)
                for a in attempts[start : start + 500]
            ]
        )
    for start in range(0, BULKY, 200):  # a path is never moved to a blob: the events stay big
        await main.append(
            [
                main.event("stream.text_delta", actor_id=actor.id, payload={"path": f"{i:04d}" + "p" * 3500})
                for i in range(start, start + 200)
            ]
        )
    completed = attempts[:-3]
    for start in range(0, len(completed), 500):
        await main.append(
            [
                main.event("attempt.completed", actor_id=actor.id, subject_id=a.id)
                for a in completed[start : start + 500]
            ]
        )
    await side.append([side.event("attempt.requested", actor_id=actor.id, subject_id=side_attempt.id)])
    return main, attempts, [side_attempt]


@pytest.mark.slow
async def test_a_run_larger_than_one_reply_is_planned_and_inspected(
    client, actor, checkpoints: CheckpointClient
):
    main, attempts, [side_attempt] = await big_run(client, actor)
    # What the service used to read, now in pages (structure, then events).
    assert len((await client.load_run("big", "r1")).events) == 2 + BULKY + 2 * len(attempts) - 3
    with pytest.raises(errors.RequestTooLarge):
        # one page of 1000 from the bulky events on (run.started and the
        # requested attempts come first) is too large too
        await client.load_lane(main.lane.id, 1 + len(attempts), limit=1000)
    head = main.head

    # The whole lane, no checkpoint: the service sends what fits one reply,
    # the SDK pages on; the unresolved attempts are the lane's three.
    first = await checkpoints.recovery_plan("never-saved", lane_id=main.lane.id, all_events=False)
    assert first.has_more and 0 < len(first.events) < head and first.head_seq == head
    plan = await checkpoints.recovery_plan("never-saved", lane_id=main.lane.id)
    assert not plan.has_more and [e.seq for e in plan.events] == list(range(1, head + 1))
    unresolved = plan.unresolved_attempts
    assert [u.attempt_id for u in unresolved] == [a.id for a in attempts[-3:]]
    assert [(u.retry_safe, u.reason) for u in unresolved] == [
        (False, "side_effect_not_idempotent"),
        (False, "keyed_without_key"),
        (True, "effect_read"),
    ]

    # A checkpoint naming the run but anchored nowhere: the run's attempts, both lanes'.
    await checkpoints.save(
        "unanchored", expected_revision=0, format=FORMAT, state={"n": 1}, session_id="big", run_id="r1"
    )
    loose = await checkpoints.recovery_plan("unanchored")
    assert loose.lane_id is None and loose.events == []
    assert [u.attempt_id for u in loose.unresolved_attempts] == [
        *(a.id for a in attempts[-3:]),
        side_attempt.id,
    ]

    # The terminal pattern at the head, then inspection of the whole run.
    done = await complete_run(
        main,
        checkpoints,
        key="big/r1",
        expected_revision=0,
        format=FORMAT,
        actor_id=actor.id,
        state={"answer": 42},
    )
    inspection = await checkpoints.inspect_run("big", "r1")
    assert inspection.as_of_position == done.receipt.positions[-1]
    assert [e.id for e in inspection.terminal_events] == [done.completed_event_id]
    [linked] = inspection.linked_checkpoints
    assert (linked.event_id, linked.checkpoint_id, linked.problem) == (
        done.linked_event_id,
        done.checkpoint.id,
        None,
    )
    assert [u.attempt_id for u in inspection.unresolved_attempts] == [
        *(a.id for a in attempts[-3:]),
        side_attempt.id,
    ]
    assert inspection.unlinked_revisions == []

    # By key: the events after the head anchor are the link and run.completed.
    after = await checkpoints.recovery_plan("big/r1")
    assert (after.after_seq, [e.id for e in after.events]) == (
        head,
        [done.linked_event_id, done.completed_event_id],
    )
    assert len(after.unresolved_attempts) == 3


async def test_a_run_of_another_tenant_or_none_at_all_is_not_found(client, actor, checkpoint_service):
    recorder = await LaneRecorder.open(client, "acme", "big", "r1", "main", actor_id=actor.id)
    await recorder.append([recorder.event("run.started", actor_id=actor.id, subject_id="r1")])
    with pytest.raises(errors.EntityNotFound) as caught:
        await checkpoint_service.execute(InspectRun(session_id="big", run_id="r1"), Scope("other"))
    assert caught.value.details == {"kind": "run", "id": "r1", "session_id": "big"}
    for session, run in (("big", "no-such-run"), ("no-such-session", "r1")):
        with pytest.raises(errors.EntityNotFound) as caught:
            await checkpoint_service.execute(InspectRun(session_id=session, run_id=run))
        assert caught.value.details["kind"] == "run" and caught.value.details["id"] == run
