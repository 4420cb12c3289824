"""The tail applies an erasure (spec/erasure.md, *Readers*): once it folds
the erasure event, every route answers the scope's events in their erased
form, and no byte of their content is left in tail.db or its WAL; other
sessions keep theirs. The route logic, in-process; the live stream and the
real sequencer: test_tail_erasure_over_nats.py."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import msgspec
import pytest
import pytest_asyncio
from polling import eventually
from tail_fixtures import client_in_process, start_tail_in_process
from tail_support import wait_applied
from test_erasure import CODE, EMAIL, NOTE, fill, holding, planted
from worked_example import TENANT, record_worked_example

from laneledger.contract.canonical import canonicalize
from laneledger.contract.clock import format_timestamp
from laneledger.contract.erasure import LEDGER_SESSION
from laneledger.history.branching import rewind_session
from laneledger.history.causality import KORG_TOOL_CALL
from laneledger.sdk.client import make_event
from laneledger.services.tail.projections import erasure
from laneledger.services.tail.readmodel import ReadModel

client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

pytestmark = pytest.mark.timeout(90)

PLANTED = [EMAIL, CODE, NOTE]


async def erased_in_tail(tail, client, session_id: str, **asked):
    """Erase ``session_id`` (one run of it with ``run_id``) and wait until
    the tail has carried the erasure out; the last page's answer."""
    done = await client.erase(session_id, reason="GDPR Art. 17", **asked)
    await wait_applied(tail.service, done.erasure.position)
    await eventually(
        lambda: tail.service.erasures_pending,
        until=lambda pending: pending == 0,
        what="the tail to carry out the erasure",
    )
    return done


def files(tail) -> list:
    path = tail.service.model.path
    return [path, path.with_name(path.name + "-wal")]


async def test_every_route_answers_erased_events_erased_and_the_file_keeps_no_content(
    client, actor, start_tail, monkeypatch
):
    monkeypatch.setattr(erasure, "PAGE_ROWS", 2)  # several pages
    tail = await start_tail()
    lane, receipt = await fill(client, actor, "s1", "r1", 5)
    other_run, _ = await fill(client, actor, "s1", "r2", 2)
    kept, kept_receipt = await fill(client, actor, "s2", "r1", 2)
    await wait_applied(tail.service, kept_receipt.positions[-1])
    assert holding(files(tail), PLANTED)  # planted where the scan looks
    before = (await tail.api.get(f"/api/v1/events/{receipt.positions[0]}")).json()
    assert before["payload"]["email"] == EMAIL

    done = await erased_in_tail(tail, client, "s1", actor_id=actor.id)
    mark = msgspec.to_builtins(done.erasure)

    session = (await tail.api.get("/api/v1/sessions/s1")).json()
    assert len(session["events"]) == 7
    for event in session["events"]:
        assert event["payload"] == event["extensions"] == {} and event["erased"] == mark
        assert "content_salt" not in event and event["content_digest"]
    # The same bytes as the ledger file's erased events, with every hash kept.
    ledger = [msgspec.to_builtins(e) for e in (await client.load_lane(lane.id)).events]
    lane_page = (await tail.api.get(f"/api/v1/lanes/{lane.id}/events")).json()
    assert lane_page["events"] == ledger
    assert [e["entry_hash"] for e in lane_page["events"]] == receipt.entry_hashes
    one = (await tail.api.get(f"/api/v1/events/{receipt.positions[0]}")).json()
    assert one["erased"] == mark and one["payload"] == {}
    run = (await tail.api.get(f"/api/v1/sessions/s1/runs/{other_run.run_id}")).json()
    assert all(e["erased"] == mark for e in run["events"])
    verified = (await tail.api.get("/api/v1/verify", params={"session_id": "s1"})).json()
    assert (verified["intact"], verified["events"], verified["fault"]) == (True, 7, None), verified
    # The erasure itself is an event of the tenant's ledger lane, on the tail too.
    [erasure_event] = (await tail.api.get(f"/api/v1/sessions/{LEDGER_SESSION}")).json()["events"]
    assert erasure_event["payload"]["scope"] == {"session_id": "s1"}

    # Another session keeps its content.
    untouched = (await tail.api.get("/api/v1/sessions/s2")).json()["events"]
    assert [e["payload"]["email"] for e in untouched] == [EMAIL, EMAIL]
    assert all("erased" not in e for e in untouched)
    assert kept.session_id == "s2"

    # No byte of s1's content is left in the read model's file or its WAL
    # (s2's, which holds the same values, is erased too for the scan).
    await erased_in_tail(tail, client, "s2", actor_id=actor.id)
    assert holding(files(tail), PLANTED) == []


async def test_an_erasure_of_one_run_leaves_the_others_and_the_indexes_lose_what_they_copied(
    client, actor, start_tail
):
    tail = await start_tail()
    erased_run, _ = await fill(client, actor, "s1", "r1", 2)
    kept_run, _ = await fill(client, actor, "s1", "r2", 2)
    lane = await client.create_lane("acme", "s1", "r1", "costs", actor_id=actor.id)
    cost = {"provider": "openai", "model": "gpt-x", "amount": "1.25", "currency": "USD"}
    pause = {"pause_id": "pause-1", "trigger": NOTE}
    korg = {"source_agent": EMAIL, "tool": "search", "args": {"q": NOTE}, "result": {}, "success": True}
    korg_call = await client.append(
        lane,
        0,
        [
            make_event(lane.id, "cost.recorded", actor_id=actor.id, payload=cost),
            make_event(lane.id, "hitl.paused", actor_id=actor.id, payload=pause),
            make_event(lane.id, KORG_TOOL_CALL, actor_id=actor.id, payload=korg),
        ],
    )
    other = await client.create_lane("acme", "s1", "r2", "costs", actor_id=actor.id)
    receipt = await client.append(
        other, 0, [make_event(other.id, "cost.recorded", actor_id=actor.id, payload={**cost, "amount": "2"})]
    )
    await wait_applied(tail.service, receipt.positions[-1])
    summary = (await tail.api.get("/api/v1/sessions", params={"q": "s1"})).json()["sessions"][0]
    assert (summary["cost"], summary["pauses_pending"]) == ([{"currency": "USD", "amount": "3.25"}], 1)

    done = await erased_in_tail(tail, client, "s1", run_id="r1", actor_id=actor.id)

    summary = (await tail.api.get("/api/v1/sessions", params={"q": "s1"})).json()["sessions"][0]
    [left] = summary["cost"]
    assert (left["currency"], Decimal(left["amount"]), summary["pauses_pending"]) == ("USD", 2, 0)
    # The reports that read payloads at read time: an erased cost adds nothing.
    costs = (await tail.api.get("/api/v1/costs", params={"session_id": "s1"})).json()
    assert [(t["currency"], Decimal(str(t["amount"])), t["events"]) for t in costs["totals"]] == [
        ("USD", 2, 1)
    ]
    activity = (await tail.api.get("/api/v1/sessions/s1/activity")).json()
    assert [(m["currency"], Decimal(m["amount"])) for m in activity["cost"]] == [("USD", 2)]
    assert activity["pauses"] == []
    for route in ("timeline", "causal-tree"):
        answer = await tail.api.get(f"/api/v1/sessions/s1/{route}")
        assert answer.status == 200 and NOTE.encode() not in answer.body, route
    korg_record = (await tail.api.get(f"/api/korg/acme/event/{korg_call.positions[-1]}")).json()
    assert korg_record["source_agent"] == actor.id and korg_record["args"] == {}
    assert korg_record["metadata"]["erased"] == msgspec.to_builtins(done.erasure)
    agents = tail.service.model.query("SELECT DISTINCT source_agent FROM korg_index")
    assert (EMAIL,) not in agents and (actor.id,) in agents
    kept = (await tail.api.get(f"/api/v1/lanes/{kept_run.id}/events")).json()["events"]
    assert all(e["payload"]["email"] == EMAIL for e in kept)
    gone = (await tail.api.get(f"/api/v1/lanes/{erased_run.id}/events")).json()["events"]
    assert all(e["payload"] == {} and "erased" in e for e in gone)


def test_a_scope_the_tail_does_not_know_is_left_alone(tmp_path):
    """Scope kinds may come that this tail does not know yet: such an erasure
    is skipped (erasurescope.scope_of), and the tail goes on."""
    model = ReadModel(tmp_path / "tail.db")
    try:
        routing = {"tenant": "acme", "lane_id": "l", "subject_id": "l", "seq": 1, "actor_id": "a"}
        held = {**routing, "id": "e1", "session_id": "s1", "run_id": "r1", "event_type": "stream.text_delta"}
        held |= {"payload": {"email": EMAIL}, "content_salt": "0" * 64}
        unknown = {
            **routing,
            "id": "erasure-1",
            "session_id": LEDGER_SESSION,
            "run_id": "erasures",
            "event_type": "ext.laneledger.erased",
            "payload": {"scope": {"customer_segment": "x"}, "reason": "r"},
        }
        model.apply([(1, canonicalize(held)), (2, canonicalize(unknown))])
        assert model.erasures_pending == 1
        page = model.erase_page()
        assert (page.erased, page.more, model.erasures_pending) == ([], False, 0)
        assert EMAIL.encode() in model.query("SELECT body FROM events WHERE position = 1")[0][0]
    finally:
        model.close()


def test_an_erasure_goes_page_by_page_and_a_stop_resumes_it(tmp_path, monkeypatch):
    """Each page is its own transaction, bounded in events and in bytes, and
    where the erasure got to is kept with it: a read model closed in the
    middle goes on where it stopped."""
    monkeypatch.setattr(erasure, "PAGE_ROWS", 2)
    routing = {"tenant": "acme", "lane_id": "l", "subject_id": "l", "actor_id": "a", "run_id": "r1"}
    sealed = {"event_type": "stream.text_delta", "content_salt": "ab" * 32, "extensions": {}}
    held = [
        canonicalize(
            {**routing, **sealed, "id": f"e{n}", "seq": n, "session_id": "s1", "payload": {"n": EMAIL}}
        )
        for n in range(1, 6)
    ]
    scope = {"scope": {"session_id": "s1"}, "reason": "r"}
    erasure_event = {**routing, "id": "erasure-1", "seq": 1, "session_id": LEDGER_SESSION, "payload": scope}
    erasure_event |= {"run_id": "erasures", "event_type": "ext.laneledger.erased"}
    model = ReadModel(tmp_path / "tail.db")
    model.apply([*enumerate(held, start=1), (6, canonicalize(erasure_event))])
    first = model.erase_page()
    assert (first.erased, first.finished, first.more) == ([1, 2], False, True)
    model.close()

    model = ReadModel(tmp_path / "tail.db")
    try:
        assert model.erasures_pending == 1
        monkeypatch.setattr(erasure, "PAGE_BYTES", 1)  # and one body a page at most
        pages = [model.erase_page() for _ in range(3)]
        assert [(p.erased, p.finished, p.more) for p in pages] == [
            ([3], False, True),
            ([4], False, True),
            ([5], True, False),
        ]
        bodies = [msgspec.json.decode(b) for (b,) in model.query("SELECT body FROM events ORDER BY position")]
        assert all(b["erased"] == {"position": 6, "event_id": "erasure-1"} for b in bodies[:5])
        assert bodies[5]["payload"] == scope and model.erasures_pending == 0 and model.wal_shredded
    finally:
        model.close()


async def test_an_erased_rewind_no_longer_says_what_it_invalidated(client, start_tail):
    """Its payload named the invalidated events; erased, it names none, so
    ``exclude_invalidated`` reads leave nothing out (spec/tail.md, Erasure)."""
    tail = await start_tail()
    ex = await record_worked_example(client)
    rewinder = (await client.ensure_actor(TENANT, "human:dusk", "human")).id
    rewound = await rewind_session(client, ex.session_id, ex.ids[5], actor_id=rewinder)  # invalidates 6, 7
    await wait_applied(tail.service, rewound.receipt.positions[0])
    gone = ex.positions[6]
    answer = await tail.api.get(f"/api/v1/events/{gone}", params={"exclude_invalidated": "true"})
    assert answer.status == 404 and answer.error["details"]["invalidated"] is True

    await erased_in_tail(tail, client, ex.session_id, actor_id=rewinder, tenant=TENANT)

    answer = await tail.api.get(f"/api/v1/events/{gone}", params={"exclude_invalidated": "true"})
    assert answer.status == 200 and "erased" in answer.json()


SESSIONS = ("s1", "s2", "s3")


async def test_a_data_subjects_erasure_and_a_retention_erasure_reach_every_session(
    client, actor, start_tail, monkeypatch
):
    """Scopes that are no session: the tail looks through windows of
    positions and checks each event (a data subject's, older than a time)."""
    monkeypatch.setattr(erasure, "WINDOW", 3)
    monkeypatch.setattr(erasure, "PAGE_ROWS", 2)
    tail = await start_tail()
    lanes = {
        s: await client.create_lane("acme", s, "r1", "main", actor_id=actor.id) for s in ("s1", "s2", "s3")
    }

    async def append(session: str, seq: int, who: str | None) -> list[int]:
        lane = lanes[session]
        events = [
            make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=planted(n), data_subject=who)
            for n in range(2)
        ]
        return (await client.append(lane, seq, events)).positions

    subjects = await append("s1", 0, "cust-7") + await append("s3", 0, "cust-7")
    others = await append("s2", 0, None) + await append("s3", 2, "cust-8")
    await wait_applied(tail.service, max(others))

    await erased_in_tail(tail, client, None, data_subject="cust-7", tenant="acme", actor_id=actor.id)
    bodies = {e["position"]: e for e in await _events(tail, SESSIONS)}
    assert [p for p, e in sorted(bodies.items()) if "erased" in e] == sorted(subjects)
    assert all(bodies[p]["payload"]["email"] == EMAIL for p in others)

    before = format_timestamp(datetime.now(UTC))
    later = await append("s2", 2, None)
    await wait_applied(tail.service, later[-1])
    await erased_in_tail(tail, client, None, committed_before=before, tenant="acme", actor_id=actor.id)
    bodies = {e["position"]: e for e in await _events(tail, SESSIONS)}
    assert all("erased" in bodies[p] for p in others) and all("erased" not in bodies[p] for p in later)
    ledger_lane = (await tail.api.get(f"/api/v1/sessions/{LEDGER_SESSION}")).json()["events"]
    assert [e["payload"]["scope"] for e in ledger_lane] == [
        {"data_subject": "cust-7"},
        {"committed_before": before},
    ]


async def _events(tail, sessions) -> list[dict]:
    return [e for s in sessions for e in (await tail.api.get(f"/api/v1/sessions/{s}")).json()["events"]]


def test_a_data_subjects_erasure_reads_its_events_off_an_index_an_older_read_model_builds(
    tmp_path, monkeypatch
):
    """The tail finds a data subject's events by its index (``event_subjects``),
    not by windows of every event of the tenant: with windows of 2 positions
    the erasure still takes one page. A read model folded before the index
    existed builds it when opened."""
    monkeypatch.setattr(erasure, "WINDOW", 2)
    routing = {"tenant": "acme", "lane_id": "l", "subject_id": "l", "actor_id": "a", "run_id": "r1"}
    sealed = {"event_type": "stream.text_delta", "content_salt": "ab" * 32, "extensions": {}}
    held = []
    for n in range(1, 11):
        event = {**routing, **sealed, "id": f"e{n}", "seq": n, "session_id": f"s{n}", "payload": {"n": EMAIL}}
        if n in (2, 9):
            event["data_subject"] = "cust-7"
        held.append(canonicalize(event))
    scope = {"scope": {"data_subject": "cust-7"}, "reason": "r"}
    erasure_event = {**routing, "id": "erasure-1", "seq": 1, "session_id": LEDGER_SESSION, "payload": scope}
    erasure_event |= {"run_id": "erasures", "event_type": "ext.laneledger.erased"}
    model = ReadModel(tmp_path / "tail.db")
    model.apply(list(enumerate(held, start=1)))
    assert model.query("SELECT position FROM event_subjects ORDER BY position") == [(2,), (9,)]
    model._db.execute("DELETE FROM event_subjects")  # as a read model from before the index
    model._db.execute("DELETE FROM meta WHERE key = ?", (erasure.SUBJECTS_FOLDED,))
    model._db.commit()
    model.close()

    model = ReadModel(tmp_path / "tail.db")
    try:
        assert model.query("SELECT position FROM event_subjects ORDER BY position") == [(2,), (9,)]
        model.apply([(11, canonicalize(erasure_event))])
        page = model.erase_page()
        assert (page.erased, page.finished, page.more) == ([2, 9], True, False)
        bodies = {p: msgspec.json.decode(b) for p, b in model.query("SELECT position, body FROM events")}
        assert (
            bodies[2]["payload"] == {} and bodies[9]["payload"] == {} and bodies[3]["payload"] == {"n": EMAIL}
        )
    finally:
        model.close()
