"""The store contract (Agent Ledger's, restated in spec/object-model.md),
specified once and run twice (``ledger_under_test``): against the writer
in-process (no NATS) and through the real sequencer over a real nats-server,
each on a real SQLite file. What only NATS does is tested over NATS alone
(``OVER_NATS_ONLY``)."""

from __future__ import annotations

import msgspec
import pytest
from ledger_fixtures import OVER_NATS_ONLY, client_of_ledger_under_test

from laneledger.contract import errors
from laneledger.contract.chain import verify_chain
from laneledger.contract.model import Actor, AppendCommitted, AppendRejected, Lane
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event

# Every test here runs in-process and over NATS.
client = pytest.fixture(client_of_ledger_under_test, name="client")


async def new_lane(
    client: LedgerClient, actor: Actor, session: str = "s1", run: str = "r1", name: str = "main", **fields
) -> Lane:
    return await client.create_lane("acme", session, run, name, actor_id=actor.id, **fields)


def ev(lane: Lane, actor: Actor, event_type: str = "stream.text_delta", **fields) -> dict:
    fields.setdefault("payload", {"text": "hi"})
    return make_event(lane.id, event_type, actor_id=actor.id, **fields)


async def test_batch_is_atomic_with_dense_seqs(client, actor):
    lane = await new_lane(client, actor)
    first = await client.append(lane, 0, [ev(lane, actor) for _ in range(3)])
    second = await client.append(lane, 3, [ev(lane, actor), ev(lane, actor)])
    assert (first.first_seq, first.last_seq) == (1, 3)
    assert (second.first_seq, second.last_seq) == (4, 5)
    assert second.positions == [4, 5]
    page = await client.load_lane(lane.id)
    assert [e.seq for e in page.events] == [1, 2, 3, 4, 5]
    assert [e.id for e in page.events] == first.event_ids + second.event_ids
    assert verify_chain([msgspec.to_builtins(e) for e in page.events]) == second.entry_hashes[-1]
    assert page.lane.last_seq == 5 and page.lane.head_hash == second.entry_hashes[-1]


async def test_a_bad_event_rejects_the_whole_append(client, actor):
    lane = await new_lane(client, actor)
    events = [ev(lane, actor), ev(lane, actor), ev(lane, actor, "cost.refund")]
    with pytest.raises(errors.UnknownEventType) as caught:
        await client.append(lane, 0, events)
    assert caught.value.details["event_type"] == "cost.refund"
    assert (await client.get_lane(lane.id)).last_seq == 0
    assert (await client.load_lane(lane.id)).events == []


async def test_replay_returns_original_receipt_even_after_head_moved(client, actor):
    lane = await new_lane(client, actor)
    events = [ev(lane, actor)]
    original = await client.append(lane, 0, events, append_id="append-1")
    await client.append(lane, 1, [ev(lane, actor)])
    again = await client.append(lane, 0, events, append_id="append-1")
    assert again.replayed is True
    assert msgspec.structs.replace(again, replayed=False) == original
    assert (await client.get_lane(lane.id)).last_seq == 2


async def test_same_append_id_with_other_content_is_refused(client, actor):
    lane = await new_lane(client, actor)
    await client.append(lane, 0, [ev(lane, actor)], append_id="append-2")
    with pytest.raises(errors.IdempotencyViolation) as caught:
        await client.append(lane, 1, [ev(lane, actor)], append_id="append-2")
    assert caught.value.details["append_id"] == "append-2"
    assert caught.value.details["stored_digest"] != caught.value.details["digest"]


async def test_lane_conflict_names_expected_and_actual_head(client, actor):
    lane = await new_lane(client, actor)
    await client.append(lane, 0, [ev(lane, actor), ev(lane, actor)])
    with pytest.raises(errors.LaneConflict) as caught:
        await client.append(lane, 1, [ev(lane, actor)])
    assert caught.value.details == {"lane_id": lane.id, "expected_last_seq": 1, "actual_last_seq": 2}
    assert isinstance(caught.value.receipt, AppendRejected)


async def test_event_ids_are_globally_unique(client, actor):
    one = await new_lane(client, actor, name="one")
    two = await new_lane(client, actor, name="two")
    event = ev(one, actor)
    receipt = await client.append(one, 0, [event])
    clash = dict(ev(two, actor), id=event["id"])
    with pytest.raises(errors.DuplicateEvent) as caught:
        await client.append(two, 0, [clash])
    assert caught.value.details == {"event_id": event["id"], "position": receipt.positions[0]}
    twice = ev(two, actor)
    with pytest.raises(errors.DuplicateEvent):
        await client.append(two, 0, [twice, twice])


async def test_subjects_must_resolve_to_the_target_lane(client, actor):
    one = await new_lane(client, actor, name="one")
    two = await new_lane(client, actor, name="two")
    turn = await client.create_turn(one.id, 1)
    ok = await client.append(
        one,
        0,
        [
            ev(one, actor, "turn.started", subject_id=turn.id),
            ev(one, actor, "session.started", subject_id="s1"),
            ev(one, actor, "run.started", subject_id="r1"),
        ],
    )
    assert ok.last_seq == 3
    with pytest.raises(errors.SubjectMismatch) as caught:
        await client.append(two, 0, [ev(two, actor, "turn.started", subject_id=turn.id)])
    assert caught.value.details["reason"] == "other_lane"
    with pytest.raises(errors.SubjectMismatch) as caught:
        await client.append(two, 0, [ev(two, actor, subject_id="no-such-thing")])
    assert caught.value.details["reason"] == "unknown_subject"
    with pytest.raises(errors.SubjectMismatch):
        await client.append(two, 0, [dict(ev(two, actor), lane_id=one.id)])


async def test_causation_stays_in_session_and_points_earlier(client, actor):
    lane = await new_lane(client, actor, session="s1")
    other = await new_lane(client, actor, session="s2")
    root = ev(lane, actor)
    await client.append(lane, 0, [root])
    child = ev(lane, actor, causation_id=root["id"])
    first, second = ev(lane, actor), ev(lane, actor)
    first["causation_id"] = second["id"]  # points at a later event of the request
    with pytest.raises(errors.CausationViolation) as caught:
        await client.append(lane, 1, [first, second])
    assert caught.value.details["reason"] == "not_earlier"
    itself = ev(lane, actor)
    itself["causation_id"] = itself["id"]  # its own cause
    with pytest.raises(errors.CausationViolation) as caught:
        await client.append(lane, 1, [itself])
    assert caught.value.details["reason"] == "not_earlier"
    with pytest.raises(errors.CausationViolation) as caught:
        await client.append(other, 0, [ev(other, actor, causation_id=root["id"])])
    assert caught.value.details["reason"] == "other_session"
    with pytest.raises(errors.CausationViolation) as caught:
        await client.append(lane, 1, [ev(lane, actor, causation_id="nothing")])
    assert caught.value.details["reason"] == "unknown"
    sibling = ev(lane, actor)
    receipt = await client.append(lane, 1, [child, sibling, ev(lane, actor, causation_id=sibling["id"])])
    assert receipt.last_seq == 4


async def test_null_causation_is_refused_not_rendered(client, actor):
    lane = await new_lane(client, actor)
    with pytest.raises(errors.InvalidRequest) as caught:
        await client.append(lane, 0, [dict(ev(lane, actor), causation_id=None)])
    assert caught.value.details["path"] == "$.events[0].causation_id"


async def test_attempt_numbers_are_unique_per_action(client, actor):
    lane = await new_lane(client, actor)
    turn = await client.create_turn(lane.id, 1)
    action = await client.create_action(
        lane.id, turn.id, "tool_call", "Write", effect="write", idempotency="none"
    )
    attempt = await client.create_attempt(lane.id, action.id, 1)
    assert await client.create_attempt(lane.id, action.id, 1, attempt_id=attempt.id) == attempt
    with pytest.raises(errors.EntityConflict) as caught:
        await client.create_attempt(lane.id, action.id, 1)
    assert caught.value.details["kind"] == "attempt"
    second = await client.create_attempt(lane.id, action.id, 2)
    assert second.attempt_no == 2 and second.id != attempt.id


async def test_structure_is_idempotent_and_checked(client, actor):
    again = await client.ensure_actor("acme", "agent:tests/main@1", "agent")
    assert again == actor
    with pytest.raises(errors.EntityConflict):
        await client.ensure_actor("acme", "agent:tests/main@1", "human")
    lane = await new_lane(client, actor)
    assert await new_lane(client, actor) == lane
    with pytest.raises(errors.EntityConflict):
        await new_lane(client, actor, kind="branch")
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.create_turn("no-such-lane", 1)
    assert caught.value.details == {"kind": "lane", "id": "no-such-lane"}
    elsewhere = await new_lane(client, actor, session="s9")
    with pytest.raises(errors.EntityConflict):
        await new_lane(client, actor, name="child", parent_lane_id=elsewhere.id)
    child = await new_lane(client, actor, name="child", kind="subagent", parent_lane_id=lane.id)
    assert child.parent_lane_id == lane.id
    with pytest.raises(errors.InvalidRequest):
        await client.create_action(
            lane.id,
            (await client.create_turn(lane.id, 1)).id,
            "tool_call",
            "x",
            effect="maybe",
            idempotency="none",
        )


async def test_tenants_stay_apart(client, actor):
    # Another tenant's actor or lane is answered exactly as one that does not
    # exist: nothing in the rejection tells that it does (spec/object-model.md).
    lane = await new_lane(client, actor)
    stranger = await client.ensure_actor("globex", "agent:tests/main@1", "agent")
    assert stranger.id != actor.id
    with pytest.raises(errors.EntityNotFound) as foreign:
        await client.append(lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=stranger.id)])
    with pytest.raises(errors.EntityNotFound) as unknown:
        await client.append(lane, 0, [make_event(lane.id, "stream.text_delta", actor_id="nobody")])
    assert foreign.value.message == unknown.value.message
    assert foreign.value.details == {"kind": "actor", "id": stranger.id}
    disguised = msgspec.structs.replace(lane, tenant="globex")  # published under globex's subject
    with pytest.raises(errors.EntityNotFound) as foreign:
        await client.append(disguised, 0, [ev(lane, actor)])
    ghost = msgspec.structs.replace(lane, id="01900000-0000-7000-8000-000000000000")
    with pytest.raises(errors.EntityNotFound) as unknown:
        await client.append(ghost, 0, [ev(ghost, actor)])
    assert foreign.value.message == unknown.value.message
    assert foreign.value.details == {"kind": "lane", "id": lane.id}


async def test_every_id_is_its_tenants_own(client, actor):
    # globex uses acme's session, lane, turn and event ids for things of its
    # own: each commits, neither tenant's lookups see the other's, and a
    # lookup naming no tenant is told to name one (spec/object-model.md, "Identity").
    ours = await new_lane(client, actor)
    turn = await client.create_turn(ours.id, 1)
    [event_id] = (
        await client.append(ours, 0, [ev(ours, actor, "turn.started", subject_id=turn.id)])
    ).event_ids
    stranger = await client.ensure_actor("globex", "agent:tests/main@1", "agent")
    theirs = await client.create_lane("globex", "s1", "r1", "main", actor_id=stranger.id, lane_id=ours.id)
    assert (theirs.id, theirs.tenant, theirs.last_seq) == (ours.id, "globex", 0)
    their_turn = await client.create_turn(ours.id, 1, turn_id=turn.id, tenant="globex")
    assert their_turn.id == turn.id
    event = make_event(
        ours.id,
        "turn.started",
        actor_id=stranger.id,
        subject_id=turn.id,
        event_id=event_id,
        payload={"text": "hi"},
    )
    receipt = await client.append(theirs, 0, [event])
    assert receipt.event_ids == [event_id] and receipt.positions == [2] and receipt.last_seq == 1

    for kind, lookup in (
        ("lane", client.get_lane(ours.id)),
        ("session", client.load_session("s1")),
        ("turn", client.create_turn(ours.id, 1)),
    ):
        with pytest.raises(errors.InvalidRequest) as ambiguous:
            await lookup
        assert ambiguous.value.details["path"] == "$.tenant", kind
        assert ambiguous.value.details["tenants"] == ["acme", "globex"], kind
    for tenant, who in (("acme", actor), ("globex", stranger)):
        session = await client.load_session("s1", tenant=tenant)
        assert session.tenant == tenant
        assert [e.actor_id for e in session.events] == [who.id]
        assert [lane.tenant for lane in session.lanes] == [tenant] and len(session.turns) == 1
        assert (await client.get_lane(ours.id, tenant=tenant)).last_seq == 1
    with pytest.raises(errors.DuplicateEvent) as again:  # a repeat is still found, in the tenant's own
        await client.append(ours, 1, [ev(ours, actor, event_id=event_id)])
    assert again.value.details["position"] == 1


async def test_unknown_lane_and_actor(client, actor):
    lane = await new_lane(client, actor)
    ghost = msgspec.structs.replace(lane, id="01900000-0000-7000-8000-000000000000")
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.append(ghost, 0, [ev(ghost, actor)])
    assert caught.value.details["kind"] == "lane"
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.append(lane, 0, [make_event(lane.id, "stream.text_delta", actor_id="nobody")])
    assert caught.value.details == {"kind": "actor", "id": "nobody"}


async def test_load_session_and_run(client, actor):
    main_lane = await new_lane(client, actor, session="s1", run="r1")
    other_run = await new_lane(client, actor, session="s1", run="r2")
    turn = await client.create_turn(main_lane.id, 1)
    await client.append(main_lane, 0, [ev(main_lane, actor, "turn.started", subject_id=turn.id)])
    await client.append(other_run, 0, [ev(other_run, actor)])
    session = await client.load_session("s1")
    assert session.tenant == "acme" and session.run_ids == ["r1", "r2"]
    assert {lane.id for lane in session.lanes} == {main_lane.id, other_run.id}
    assert [t.id for t in session.turns] == [turn.id]
    assert [e.position for e in session.events] == [1, 2]
    run = await client.load_run("s1", "r2")
    assert [lane.id for lane in run.lanes] == [other_run.id]
    assert [e.lane_id for e in run.events] == [other_run.id] and run.turns == []
    with pytest.raises(errors.EntityNotFound):
        await client.load_run("s1", "r3")


async def test_committed_content_never_changes(client, actor, ledger_under_test):
    lane = await new_lane(client, actor)
    events = [ev(lane, actor), ev(lane, actor)]
    receipt = await client.append(lane, 0, events, append_id="fixed")
    before = ledger_under_test.writer.reader.events_after(0)
    with pytest.raises(errors.IdempotencyViolation):
        await client.append(lane, 2, [ev(lane, actor)], append_id="fixed")
    await client.append(lane, 0, events, append_id="fixed")  # a replay writes nothing
    assert ledger_under_test.writer.reader.events_after(0) == before
    stored = await client.get_receipt("fixed")
    assert stored == receipt
    page = await client.load_lane(lane.id)
    for sent, committed in zip(events, page.events, strict=True):
        as_dict = msgspec.to_builtins(committed)
        assert {k: as_dict[k] for k in sent} == sent  # the producer's fields, as sent


@OVER_NATS_ONLY  # wait="accept": JetStream's ack
async def test_recorder_serializes_and_tracks_head(client, actor):
    import asyncio

    recorder = await LaneRecorder.open(client, "acme", "s1", "r1", "rec", actor_id=actor.id)
    receipts = await asyncio.gather(
        *(
            recorder.append([recorder.event("stream.text_delta", actor_id=actor.id, payload={"i": i})])
            for i in range(20)
        )
    )
    assert sorted(r.last_seq for r in receipts) == list(range(1, 21))
    assert recorder.head == 20
    resumed = await LaneRecorder.open(client, "acme", "s1", "r1", "rec", actor_id=actor.id)
    assert resumed.head == 20
    handles = [
        await resumed.append([resumed.event("stream.text_delta", actor_id=actor.id)], wait="accept")
        for _ in range(5)
    ]
    assert all(h.accepted.stream == "LEDGER_APPEND" for h in handles)
    flushed = await resumed.flush()
    assert [r.last_seq for r in flushed] == [21, 22, 23, 24, 25]
    # A stale recorder gets a conflict, and its head stays until reloaded.
    with pytest.raises(errors.LaneConflict):
        await recorder.append([recorder.event("stream.text_delta", actor_id=actor.id)])
    assert recorder.head == 20
    assert await recorder.reload() == 25


async def test_receipt_by_append_id_and_unknown(client, actor):
    lane = await new_lane(client, actor)
    receipt = await client.append(lane, 0, [ev(lane, actor)])
    assert isinstance(await client.get_receipt(receipt.append_id), AppendCommitted)
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.get_receipt("never")
    assert caught.value.details == {"kind": "receipt", "id": "never"}


@OVER_NATS_ONLY
async def test_two_ledgers_share_one_nats_account(nc, client, actor, tmp_path):
    """A second sequencer under another prefix has its own streams and lanes."""
    from prometheus_client import CollectorRegistry

    from laneledger.contract.subjects import Subjects
    from laneledger.services.sequencer.metrics import SequencerMetrics
    from laneledger.services.sequencer.service import Sequencer, SequencerSettings
    from laneledger.store import LedgerWriter, open_ledger

    other = Sequencer(
        nc,
        LedgerWriter(open_ledger(tmp_path / "other.db")),
        SequencerMetrics(CollectorRegistry()),
        SequencerSettings(subjects=Subjects("staging.ledger")),
    )
    await other.start()
    try:
        staging = LedgerClient(nc, subjects=Subjects("staging.ledger"))
        staging_actor = await staging.ensure_actor("acme", "agent:tests/main@1", "agent")
        lane = await staging.create_lane("acme", "s1", "r1", "main", actor_id=staging_actor.id)
        receipt = await staging.append(lane, 0, [ev(lane, staging_actor)])
        assert receipt.positions == [1]
        main_lane = await new_lane(client, actor)
        assert (await client.append(main_lane, 0, [ev(main_lane, actor)])).positions == [1]
        names = {info.config.name for info in await nc.jetstream().streams_info()}
        assert {"LEDGER_APPEND", "LEDGER_EVENTS", "STAGING_LEDGER_APPEND", "STAGING_LEDGER_EVENTS"} <= names
    finally:
        await other.stop()


@OVER_NATS_ONLY
async def test_a_session_larger_than_one_reply_loads_in_pages(client, actor):
    """load_session's events come a page per reply (each within max_payload),
    so a session over the 1 MiB limit loads whole, in order."""
    lane = await new_lane(client, actor)
    text = "x" * 900
    for batch in range(45):  # ~1.3 MB of events, over the 1 MiB max_payload
        events = [ev(lane, actor, payload={"text": text}) for _ in range(30)]
        await client.append(lane, batch * 30, events)
    view = await client.load_session("s1")
    assert [e.seq for e in view.events] == list(range(1, 45 * 30 + 1))
    page = await client.load_lane(lane.id, after_seq=0, limit=500)
    assert len(page.events) == 500 and page.has_more
