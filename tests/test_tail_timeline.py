"""The session timeline, ``GET /api/v1/sessions/{session_id}/timeline``, over
real HTTP against a real tail, sequencer and nats-server (every answer is
checked against the tail's OpenAPI document by ``TailAPI``): lanes with their
spawn links, turns and attempts as spans with outcome, times and retries,
pages that join up, tenant scoping, typed errors."""

from __future__ import annotations

import pytest
import pytest_asyncio
from tail_fixtures import client_in_process, start_tail_in_process
from tail_support import wait_applied
from test_console_browser import workload

from laneledger.history.branching import rewind_session
from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.client import make_event

# Route logic: the tail's app in-process over an in-process writer (tail_fixtures.py).
client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

TIMELINE = "/api/v1/sessions/{}/timeline"


async def test_the_timeline_of_a_session_with_sub_agents_retries_and_an_open_attempt(
    client, actor, start_tail
) -> None:
    tail = await start_tail()
    w = await workload(client, actor)
    await wait_applied(tail.service, w["last"])
    body = (await tail.api.get(TIMELINE.format("s1"))).json()
    assert body["session_id"] == "s1" and body["applied_position"] >= w["last"]
    assert body["origin_at"] == "2026-11-30T10:00:00.000Z" and body["end_ms"] == 6000
    assert not body["has_more"]

    lanes = {lane["lane_id"]: lane for lane in body["lanes"]}
    assert list(lanes) == [w[k].id for k in ("main", "sub1", "sub1a", "sub2", "r2")]  # first event order
    main, sub1, sub1a, sub2, r2 = (lanes[w[k].id] for k in ("main", "sub1", "sub1a", "sub2", "r2"))
    assert (main["name"], main["kind"], main["run_id"], main["events"]) == ("main", "main", "r1", 17)
    assert (main["first_ms"], main["last_ms"], main["spawned_from"]) == (0, 6000, None)
    assert (sub1["name"], sub1["kind"], sub1["parent_lane_id"]) == ("researcher", "subagent", w["main"].id)
    # The sub-agents hang off the spawning attempt.requested (position 4, at 0.1 s); the
    # fetcher off the researcher's first event.
    assert sub1["spawned_from"] == {
        "position": 4,
        "lane_id": w["main"].id,
        "at": "2026-11-30T10:00:00.100Z",
        "ms": 100,
    }
    assert sub2["spawned_from"]["position"] == 4
    assert sub1a["spawned_from"] == {
        "position": sub1["first_position"],
        "lane_id": w["sub1"].id,
        "at": sub1["first_at"],
        "ms": 1000,
    }
    assert r2["spawned_from"] is None and r2["run_id"] == "r2"

    a = w["attempts"]
    spans = body["spans"]
    assert [(s["kind"], s["id"]) for s in spans] == [
        ("turn", spans[0]["id"]),
        ("attempt", a["model"].id),
        ("attempt", a["edit"].id),
        ("attempt", a["read1"].id),
        ("attempt", a["read2"].id),
    ]
    turn, model, edit, read1, read2 = spans
    assert (turn["name"], turn["turn_no"], turn["outcome"], turn["start_ms"], turn["end_ms"]) == (
        "turn 1",
        1,
        None,  # never completed: open to the end
        0,
        None,
    )
    assert (model["name"], model["action_type"], model["outcome"]) == (
        "claude-sonnet",
        "model_call",
        "completed",
    )
    assert (model["start_ms"], model["end_ms"], model["started_position"], model["ended_position"]) == (
        100,
        2600,
        4,
        5,
    )
    assert (edit["name"], edit["outcome"], edit["ended_position"], edit["end_ms"]) == (
        "Edit",
        None,
        None,
        None,
    )
    assert (read1["outcome"], read1["attempt_no"], read1["retry_of"]) == ("failed", 1, None)
    assert (read1["start_ms"], read1["end_ms"]) == (3000, 3250)
    assert (read2["outcome"], read2["attempt_no"], read2["retry_of"]) == ("completed", 2, a["read1"].id)
    assert read2["action_id"] == read1["action_id"] == a["read1"].action_id
    assert not any(s["invalidated"] for s in spans)

    # Paged by the opening event's position: the pages join up to the whole.
    seen, cursor = [], 0
    while True:
        page = (
            await tail.api.get(TIMELINE.format("s1"), params={"limit": "2", "cursor": str(cursor)})
        ).json()
        assert page["lanes"] == body["lanes"] and page["origin_at"] == body["origin_at"]
        assert len(page["spans"]) <= 2
        seen += page["spans"]
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    assert seen == spans
    past = (await tail.api.get(TIMELINE.format("s1"), params={"cursor": str(w["last"])})).json()
    assert (past["spans"], past["next_cursor"], past["has_more"]) == ([], None, False)

    # Bad parameters are typed errors naming the parameter; an unknown session is a 404.
    for params, parameter in (
        ({"limit": "0"}, "limit"),
        ({"limit": "5001"}, "limit"),
        ({"cursor": "-1"}, "cursor"),
        ({"cursor": "x"}, "cursor"),
        ({"since": "1"}, "since"),
    ):
        answer = await tail.api.get(TIMELINE.format("s1"), params=params)
        assert (answer.status, answer.error["code"]) == (400, "invalid_request"), params
        assert answer.error["details"]["parameter"] == parameter
    answer = await tail.api.get(TIMELINE.format("no-such-session"))
    assert answer.status == 404 and answer.error["details"] == {"kind": "session", "id": "no-such-session"}


async def test_a_tenant_sees_its_own_timelines_only(client, actor, start_tail) -> None:
    """Another tenant's session answers exactly like a missing one."""
    tail = await start_tail(
        access=AccessPolicy.from_tokens({"acme": "acme-token-0123456789", "beta": "beta-token-0123456789"})
    )
    w = await workload(client, actor)  # tenant acme
    await wait_applied(tail.service, w["last"])
    as_acme = {"Authorization": "Bearer acme-token-0123456789"}
    as_beta = {"Authorization": "Bearer beta-token-0123456789"}
    mine = await tail.api.get(TIMELINE.format("s1"), headers=as_acme)
    assert mine.status == 200 and len(mine.json()["spans"]) == 5
    theirs = await tail.api.get(TIMELINE.format("s1"), headers=as_beta)
    missing = await tail.api.get(TIMELINE.format("no-such-session"), headers=as_beta)
    assert theirs.status == missing.status == 404
    assert theirs.error["code"] == missing.error["code"] == "entity_not_found"
    assert theirs.error["message"] == missing.error["message"]
    assert (await tail.api.get(TIMELINE.format("s1"))).status == 401  # no token


async def rewound_session(client, actor) -> dict:
    """Session s-rw: a turn whose first attempt's request causes its
    completion, which causes a second action's attempt; rewound to the first
    request, which invalidates what its chain reaches (the completion, the
    second attempt and its end) but not the request itself or the turn."""
    lane = await client.create_lane("acme", "s-rw", "r1", "main", actor_id=actor.id)
    turn = await client.create_turn(lane.id, 1)
    first = await client.create_action(
        lane.id, turn.id, "tool_call", "Grep", effect="read", idempotency="inherent"
    )
    second = await client.create_action(
        lane.id, turn.id, "tool_call", "Edit", effect="write", idempotency="none"
    )
    a1 = await client.create_attempt(lane.id, first.id, 1)
    a2 = await client.create_attempt(lane.id, second.id, 1)

    def e(event_type, subject, when, cause=None, **payload):
        return make_event(
            lane.id,
            event_type,
            actor_id=actor.id,
            subject_id=subject,
            payload=payload,
            occurred_at=f"2026-11-30T10:00:0{when}.000Z",
            causation_id=cause,
        )

    started = e("turn.started", turn.id, 0)
    requested = e("attempt.requested", a1.id, 1, started["id"], attempt_no=1)
    completed = e("attempt.completed", a1.id, 2, requested["id"])
    second_requested = e("attempt.requested", a2.id, 3, completed["id"], attempt_no=1)
    second_failed = e("attempt.failed", a2.id, 4, second_requested["id"])
    receipt = await client.append(lane, 0, [started, requested, completed, second_requested, second_failed])
    rewound = await rewind_session(client, "s-rw", requested["id"], actor_id=actor.id)
    return {
        "a1": a1,
        "a2": a2,
        "turn": turn,
        "positions": receipt.positions,
        "last": rewound.receipt.positions[0],
    }


async def test_spans_a_rewind_invalidated_are_marked(client, actor, start_tail) -> None:
    tail = await start_tail()
    rw = await rewound_session(client, actor)
    await wait_applied(tail.service, rw["last"])
    spans = (await tail.api.get(TIMELINE.format("s-rw"))).json()["spans"]
    marked = {s["id"]: (s["outcome"], s["invalidated"]) for s in spans}
    assert marked == {
        rw["turn"].id: (None, False),
        rw["a1"].id: ("completed", False),  # its request is the rewind's target: kept
        rw["a2"].id: ("failed", True),  # requested after the target, by its chain
    }


async def test_a_subject_opened_twice_is_one_span_across_pages(client, actor, start_tail) -> None:
    tail = await start_tail()
    lane = await client.create_lane("acme", "s-twice", "r1", "main", actor_id=actor.id)
    turn = await client.create_turn(lane.id, 1)
    receipt = await client.append(
        lane,
        0,
        [
            make_event(lane.id, event_type, actor_id=actor.id, subject_id=turn.id)
            for event_type in ("turn.started", "turn.started", "turn.completed")
        ],
    )
    first, again, ended = receipt.positions
    await wait_applied(tail.service, ended)
    page = (await tail.api.get(TIMELINE.format("s-twice"), params={"limit": "1"})).json()
    assert [(s["started_position"], s["ended_position"], s["outcome"]) for s in page["spans"]] == [
        (first, ended, "completed")
    ]
    assert page["has_more"] and page["next_cursor"] == first
    rest = (
        await tail.api.get(TIMELINE.format("s-twice"), params={"limit": "1", "cursor": str(first)})
    ).json()
    assert (rest["spans"], rest["next_cursor"], rest["has_more"]) == ([], again, False)
