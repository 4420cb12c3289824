"""Historical reads of the tail: lane, session and run pages in both
directions, run inspection, one event by position, blobs; and the errors
they answer (400 naming the parameter, 404 for unknown ids): the route
logic, in-process. Blobs, 503 without a sequencer and a session over one
NATS reply: test_tail_history_over_nats.py."""

from __future__ import annotations

import msgspec
import pytest
import pytest_asyncio
from tail_fixtures import client_in_process, start_tail_in_process
from tail_support import decoded, ev, fill, new_lane, wait_applied

from laneledger.services.tail.answers.history import Inspection, LaneEvents, Run, Session

# Route logic: the tail's app in-process over an in-process writer (tail_fixtures.py).
client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

pytestmark = pytest.mark.timeout(90)


async def _pages(api, path: str, **params) -> list[dict]:
    """Every page of a paginated endpoint, following next_cursor (bounded)."""
    pages = []
    for _ in range(50):
        answer = await api.get(path, params={k: str(v) for k, v in params.items()})
        assert answer.status == 200, answer.body
        page = answer.json()
        pages.append(page)
        if not page["has_more"]:
            return pages
        params["cursor"] = page["next_cursor"]
    raise AssertionError("more than 50 pages")


async def test_lane_events_page_forward_and_backward(client, actor, start_tail):
    tail = await start_tail()
    lane = await new_lane(client, actor)
    other = await new_lane(client, actor, name="other")
    await fill(client, other, actor, 3)
    positions = await fill(client, lane, actor, 25, per_append=7)
    await wait_applied(tail.service, positions[-1])
    committed = [msgspec.to_builtins(e) for e in (await client.load_lane(lane.id)).events]
    path = f"/api/v1/lanes/{lane.id}/events"

    forward = await _pages(tail.api, path, limit=10)
    assert [[e["seq"] for e in p["events"]] for p in forward] == [
        list(range(1, 11)),
        list(range(11, 21)),
        list(range(21, 26)),
    ]
    assert [p["next_cursor"] for p in forward] == [10, 20, 25]
    assert [e for p in forward for e in p["events"]] == committed
    assert all(p["direction"] == "forward" and p["lane_id"] == lane.id for p in forward)

    backward = await _pages(tail.api, path, limit=10, direction="backward")
    assert [[e["seq"] for e in p["events"]] for p in backward] == [
        list(range(25, 15, -1)),
        list(range(15, 5, -1)),
        list(range(5, 0, -1)),
    ]
    assert [p["next_cursor"] for p in backward] == [16, 6, 1]

    after_answer = await tail.api.get(path, params={"cursor": "20"})
    after = after_answer.json()
    assert [e["seq"] for e in after["events"]] == [21, 22, 23, 24, 25]
    streamed = decoded(after_answer.body, LaneEvents)  # the streamed page, as the document's Struct
    assert [e.seq for e in streamed.events] == [21, 22, 23, 24, 25] and streamed.lane_id == lane.id
    assert after["has_more"] is False and after["applied_position"] >= positions[-1]
    before = (await tail.api.get(path, params={"cursor": "4", "direction": "backward"})).json()
    assert [e["seq"] for e in before["events"]] == [3, 2, 1]
    past = (await tail.api.get(path, params={"cursor": "25"})).json()
    assert past["events"] == [] and past["next_cursor"] is None and past["has_more"] is False

    # A lane with no events yet is an empty page; an unknown lane is a 404.
    empty = await new_lane(client, actor, name="empty")
    assert (await tail.api.get(f"/api/v1/lanes/{empty.id}/events")).json()["events"] == []
    missing = await tail.api.get("/api/v1/lanes/no-such-lane/events")
    assert missing.status == 404
    assert missing.error["code"] == "entity_not_found"
    assert missing.error["details"] == {"kind": "lane", "id": "no-such-lane"}


async def _session(client, actor):
    """Session s1: run r1 (main + branch lanes, a turn, actions, attempts), run r2."""
    main = await new_lane(client, actor, "s1", "r1", "main")
    branch = await new_lane(client, actor, "s1", "r1", "branch", kind="branch", parent_lane_id=main.id)
    r2 = await new_lane(client, actor, "s1", "r2", "main")
    turn = await client.create_turn(main.id, 1)
    write = await client.create_action(
        main.id, turn.id, "tool_call", "shell", effect="write", idempotency="none"
    )
    read = await client.create_action(
        main.id, turn.id, "tool_call", "read_file", effect="read", idempotency="inherent"
    )
    keyed = await client.create_action(
        main.id,
        turn.id,
        "tool_call",
        "charge",
        effect="write",
        idempotency="keyed",
        idempotency_key="order-7",
    )
    model = await client.create_action(
        main.id, turn.id, "model_call", "claude", effect="none", idempotency="not_applicable"
    )
    attempts = {
        name: await client.create_attempt(main.id, action.id, 1)
        for name, action in (("write", write), ("read", read), ("keyed", keyed), ("model", model))
    }
    retry = await client.create_attempt(main.id, model.id, 2)
    e = lambda t, subject, **kw: ev(main, actor, t, subject_id=subject, **kw)  # noqa: E731
    first = await client.append(
        main,
        0,
        [
            e("run.started", "r1"),
            e("turn.started", turn.id),
            e("attempt.requested", attempts["model"].id, payload={"attempt_no": 1}),
            e("attempt.failed", attempts["model"].id),
            e("attempt.requested", retry.id, payload={"attempt_no": 2}),
            e("attempt.completed", retry.id),
            e("attempt.requested", attempts["write"].id),
            e("attempt.requested", attempts["read"].id),
            e("attempt.requested", attempts["keyed"].id),
        ],
    )
    await client.append(branch, 0, [ev(branch, actor)])
    await client.append(r2, 0, [ev(r2, actor, "run.started", subject_id="r2")])
    # A safe terminal boundary: the checkpoint link and the run's end in one batch.
    last = await client.append(
        main,
        first.last_seq,
        [
            e(
                "lane.framework.checkpoint.linked",
                main.id,
                payload={"checkpoint_id": "cp-1", "key": "s1/r1/main", "revision": 3},
            ),
            e("run.completed", "r1"),
        ],
    )
    return {
        "main": main,
        "branch": branch,
        "r2": r2,
        "turn": turn,
        "attempts": attempts,
        "retry": retry,
        "actions": {"write": write, "read": read, "keyed": keyed, "model": model},
        "last": last,
    }


async def test_session_and_run_views(client, actor, start_tail):
    tail = await start_tail()
    s = await _session(client, actor)
    await wait_applied(tail.service, s["last"].positions[-1])
    view = await client.load_session("s1")
    all_events = [msgspec.to_builtins(e) for e in view.events]

    pages = await _pages(tail.api, "/api/v1/sessions/s1", limit=5)
    session = pages[0]
    assert session["tenant"] == "acme" and session["run_ids"] == ["r1", "r2"]
    assert session["structure_complete"] is True
    assert [lane["id"] for lane in session["lanes"]] == [s["main"].id, s["branch"].id, s["r2"].id]
    main_lane = session["lanes"][0]
    assert main_lane["last_seq"] == 11 and main_lane["head_hash"] == s["last"].entry_hashes[-1]
    assert session["lanes"][1]["parent_lane_id"] == s["main"].id
    assert [t["id"] for t in session["turns"]] == [s["turn"].id]
    assert {a["name"]: (a["effect"], a["idempotency"]) for a in session["actions"]} == {
        "shell": ("write", "none"),
        "read_file": ("read", "inherent"),
        "charge": ("write", "keyed"),
        "claude": ("none", "not_applicable"),
    }
    assert len(session["attempts"]) == 5
    assert [e for p in pages for e in p["events"]] == all_events
    assert [len(p["events"]) for p in pages] == [5, 5, 3]

    # Written a piece at a time (history.py), the page reads as the document's Struct.
    streamed = decoded((await tail.api.get("/api/v1/sessions/s1", params={"limit": "5"})).body, Session)
    assert streamed.run_ids == ["r1", "r2"] and [lane.id for lane in streamed.lanes] == [
        lane["id"] for lane in session["lanes"]
    ]
    assert len(streamed.attempts) == 5 and streamed.attempts[0].attempt_no == 1
    assert [msgspec.to_builtins(e) for e in streamed.events] == pages[0]["events"]
    assert (streamed.next_cursor, streamed.has_more) == (session["next_cursor"], True)

    backward = await _pages(tail.api, "/api/v1/sessions/s1", limit=4, direction="backward")
    assert [e for p in backward for e in p["events"]] == all_events[::-1]

    run = await _pages(tail.api, "/api/v1/sessions/s1/runs/r1", limit=100)
    assert len(run) == 1
    assert [e["run_id"] for e in run[0]["events"]] == ["r1"] * 12
    assert [lane["name"] for lane in run[0]["lanes"]] == ["main", "branch"]
    streamed_run = decoded((await tail.api.get("/api/v1/sessions/s1/runs/r1")).body, Run)
    assert streamed_run.run_id == "r1" and [lane.name for lane in streamed_run.lanes] == ["main", "branch"]
    assert [e.position for e in streamed_run.events] == [e["position"] for e in run[0]["events"]]
    run2 = (await tail.api.get("/api/v1/sessions/s1/runs/r2")).json()
    assert [e["event_type"] for e in run2["events"]] == ["run.started"]
    assert run2["turns"] == [] and run2["actions"] == []

    for path in (
        "/api/v1/sessions/nope",
        "/api/v1/sessions/s1/runs/nope",
        "/api/v1/sessions/nope/runs/r1/inspection",
    ):
        missing = await tail.api.get(path)
        assert missing.status == 404 and missing.error["code"] == "entity_not_found", path


async def test_run_inspection(client, actor, start_tail):
    tail = await start_tail()
    s = await _session(client, actor)
    await wait_applied(tail.service, s["last"].positions[-1])
    answer = await tail.api.get("/api/v1/sessions/s1/runs/r1/inspection")
    assert answer.status == 200
    got = answer.json()
    # Built by hand (raw events spliced in), the answer reads as the document's Struct.
    inspection = decoded(answer.body, Inspection)
    assert [e.event_type for e in inspection.terminal_events] == ["run.completed"]
    assert {u.attempt_id: u.reconcile_before_retry for u in inspection.unresolved_attempts} == {
        u["attempt_id"]: u["reconcile_before_retry"] for u in got["unresolved_attempts"]
    }
    assert [e["event_type"] for e in got["terminal_events"]] == ["run.completed"]
    assert got["terminal_events"][0]["position"] == s["last"].positions[1]
    (linked,) = got["linked_checkpoints"]
    assert linked["event_type"] == "lane.framework.checkpoint.linked"
    assert linked["payload"] == {"checkpoint_id": "cp-1", "key": "s1/r1/main", "revision": 3}
    unresolved = {u["attempt_id"]: u for u in got["unresolved_attempts"]}
    attempts = s["attempts"]
    # model: attempt 1 failed and attempt 2 completed; the three tool calls never ended.
    assert set(unresolved) == {attempts["write"].id, attempts["read"].id, attempts["keyed"].id}
    assert unresolved[attempts["write"].id]["reconcile_before_retry"] is True
    assert unresolved[attempts["read"].id]["reconcile_before_retry"] is False
    assert unresolved[attempts["keyed"].id]["reconcile_before_retry"] is False
    write = unresolved[attempts["write"].id]
    assert write["action"]["name"] == "shell" and write["attempt"]["attempt_no"] == 1
    assert write["requested_event"]["event_type"] == "attempt.requested"
    assert write["requested_event"]["position"] == write["requested_position"]

    other = (await tail.api.get("/api/v1/sessions/s1/runs/r2/inspection")).json()
    assert other["terminal_events"] == other["linked_checkpoints"] == []
    assert other["unresolved_attempts"] == []


async def test_one_event_by_position(client, actor, start_tail):
    tail = await start_tail()
    lane = await new_lane(client, actor)
    positions = await fill(client, lane, actor, 3)
    await wait_applied(tail.service, positions[-1])
    page = await client.load_lane(lane.id)
    answer = await tail.api.get(f"/api/v1/events/{positions[1]}")
    assert answer.status == 200 and answer.headers["Content-Type"].startswith("application/json")
    assert answer.json() == msgspec.to_builtins(page.events[1])
    missing = await tail.api.get("/api/v1/events/999")
    assert missing.status == 404
    assert missing.error["details"] == {"kind": "event", "position": 999}
    for bad in ("abc", "0", "-1", "1.5"):
        answer = await tail.api.get(f"/api/v1/events/{bad}")
        assert answer.status == 400 and answer.error["details"]["parameter"] == "position", bad


@pytest.mark.parametrize(
    ("path", "params", "parameter"),
    [
        ("/api/v1/events", {"from_position": "abc"}, "from_position"),
        ("/api/v1/events", {"from_position": "-1"}, "from_position"),
        ("/api/v1/events", {"session": "s1"}, "session"),
        ("/api/v1/events", {"lane_id": ""}, "lane_id"),
        ("/api/v1/lanes/x/events", {"limit": "0"}, "limit"),
        ("/api/v1/lanes/x/events", {"limit": "1001"}, "limit"),
        ("/api/v1/lanes/x/events", {"direction": "sideways"}, "direction"),
        ("/api/v1/lanes/x/events", {"cursor": "1e3"}, "cursor"),
        ("/api/v1/sessions/s1", {"cursor": "-5"}, "cursor"),
        ("/api/v1/sessions/s1/runs/r1", {"limit": "many"}, "limit"),
        ("/api/v1/sessions/s1/runs/r1/inspection", {"cursor": "1"}, "cursor"),
        ("/api/v1/verify", {"lane_id": "a", "session_id": "b"}, "lane_id"),
        ("/api/v1/verify", {"scope": "ledger"}, "scope"),
        ("/api/journal", {"cursor": "x"}, "cursor"),
        ("/api/journal", {"limit": "0"}, "limit"),
    ],
)
async def test_bad_query_parameters_are_named(client, start_tail, path, params, parameter):
    tail = await start_tail()
    answer = await tail.api.get(path, params=params)
    assert answer.status == 400
    assert answer.error["code"] == "invalid_request"
    assert answer.error["details"]["parameter"] == parameter
    assert answer.error["retryable"] is False


async def test_bad_resume_header_and_repeated_parameters(client, start_tail):
    tail = await start_tail()
    answer = await tail.api.get("/api/v1/events", headers={"Last-Event-ID": "twelve"})
    assert answer.status == 400 and answer.error["details"]["parameter"] == "Last-Event-ID"
    answer = await tail.api.get("/api/v1/events?tenant=a&tenant=b")
    assert answer.status == 400 and answer.error["details"]["parameter"] == "tenant"


async def test_unknown_routes_and_methods_are_typed_errors(client, start_tail):
    tail = await start_tail()
    answer = await tail.api.get("/api/v1/nothing-here")
    assert answer.status == 404 and answer.error["details"]["kind"] == "route"
    answer = await tail.api.post("/api/v1/events")
    assert answer.status == 405 and answer.error["code"] == "invalid_request"
