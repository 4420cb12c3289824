"""``GET /api/v1/sessions``, the sessions index (services/tail/handlers/sessions.py;
the index: services/tail/projections/session_index.py): one summary per
session — runs, lanes, first and last event, status, open attempts, pending
pauses, events, cost — newest first, filtered and paged,
tenant-scoped, and kept by the read model as events are applied (also for a
read model written before the index existed). Every answer is checked against
the OpenAPI document by ``TailAPI``."""

from __future__ import annotations

import pytest
import pytest_asyncio
from tail_fixtures import client_in_process, start_tail_in_process
from tail_support import new_lane, rewrite_stopped_read_model, wait_applied

from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.client import make_event

# Route logic: the tail's app in-process over an in-process writer (tail_fixtures.py).
client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

pytestmark = pytest.mark.timeout(90)


def event(lane, actor, event_type: str, subject: str = "", **payload):
    return make_event(
        lane.id, event_type, actor_id=actor.id, subject_id=subject or lane.run_id, payload=payload
    )


async def sessions_of_three_kinds(client, actor) -> int:
    """acme: "s-done" (its run completed, with a cost), "s-failed" (a run
    failed), "s-open" (running: an attempt requested, a pause pending, on two
    lanes); beta: "b-1". The last position."""
    done = await new_lane(client, actor, "s-done", "r1")
    await client.append(
        done,
        0,
        [
            event(done, actor, "run.started"),
            event(done, actor, "cost.recorded", provider="p", model="m", amount="0.25", currency="USD"),
            event(done, actor, "cost.recorded", provider="p", model="m", amount="0.5", currency="USD"),
            event(done, actor, "run.completed"),
        ],
    )
    failed = await new_lane(client, actor, "s-failed", "r1")
    await client.append(failed, 0, [event(failed, actor, "run.started"), event(failed, actor, "run.failed")])
    main = await new_lane(client, actor, "s-open", "r1")
    side = await new_lane(client, actor, "s-open", "r1", "side")
    turn = await client.create_turn(main.id, 1)
    action = await client.create_action(
        main.id, turn.id, "tool_call", "Edit", effect="write", idempotency="none"
    )
    first, second = [await client.create_attempt(main.id, action.id, n) for n in (1, 2)]
    await client.append(
        main,
        0,
        [
            event(main, actor, "run.started"),
            event(main, actor, "attempt.requested", first.id),
            event(main, actor, "attempt.requested", second.id),
            event(main, actor, "attempt.completed", first.id),
            event(main, actor, "hitl.paused", main.id, pause_id="p1", trigger="approval"),
            event(main, actor, "hitl.paused", main.id, pause_id="p2", trigger="approval"),
            event(main, actor, "hitl.responded", main.id, pause_id="p1", decision="approved"),
        ],
    )
    beta_actor = await client.ensure_actor("beta", "agent:tests/beta@1", "agent")
    beta = await new_lane(client, beta_actor, "b-1", "r1", tenant="beta")
    await client.append(beta, 0, [event(beta, beta_actor, "run.started")])
    receipt = await client.append(side, 0, [event(side, actor, "stream.text_delta", text="last")])
    return receipt.positions[-1]


def by_id(page: dict) -> dict[str, dict]:
    return {s["session_id"]: s for s in page["sessions"]}


async def test_the_index_summarises_each_session_newest_first(client, actor, start_tail):
    tail = await start_tail()
    last = await sessions_of_three_kinds(client, actor)
    await wait_applied(tail.service, last)
    page = (await tail.api.get("/api/v1/sessions")).json()
    assert [s["session_id"] for s in page["sessions"]] == ["s-open", "b-1", "s-failed", "s-done"]
    assert page["next_before"] is None and page["applied_position"] >= last
    found = by_id(page)
    assert found["s-done"]["status"] == "completed"
    assert found["s-done"]["cost"] == [{"currency": "USD", "amount": "0.75"}]
    assert found["s-done"]["events"] == 4 and found["s-done"]["runs"] == 1
    assert found["s-failed"]["status"] == "failed"
    open_ = found["s-open"]
    assert (open_["status"], open_["attempts_open"], open_["pauses_pending"]) == ("running", 1, 1)
    assert (open_["lanes"], open_["events"], open_["last_position"]) == (2, 8, last)
    assert open_["first_event_at"] <= open_["last_event_at"]
    assert found["b-1"]["tenant"] == "beta" and found["b-1"]["status"] == "running"


async def test_filters_and_pages(client, actor, start_tail):
    tail = await start_tail()
    last = await sessions_of_three_kinds(client, actor)
    await wait_applied(tail.service, last)

    async def ids(**params) -> list[str]:
        answer = await tail.api.get("/api/v1/sessions", params=params)
        assert answer.status == 200, answer.body
        return [s["session_id"] for s in answer.json()["sessions"]]

    assert await ids(status="completed") == ["s-done"]
    assert await ids(status="failed") == ["s-failed"]
    assert await ids(status="running") == ["s-open", "b-1"]
    assert await ids(status="unresolved") == ["s-open"]
    assert await ids(status="paused") == ["s-open"]
    assert await ids(tenant="beta") == ["b-1"]
    assert await ids(tenant="paused") == []  # a tenant's name, not a status
    assert await ids(q="s-") == ["s-open", "s-failed", "s-done"]
    assert await ids(actor_id=actor.id) == ["s-open", "s-failed", "s-done"]
    assert await ids(since="2999-01-01T00:00:00Z") == []
    assert await ids(until="2000-01-01T00:00:00Z") == []
    first = (await tail.api.get("/api/v1/sessions", params={"limit": "2"})).json()
    assert [s["session_id"] for s in first["sessions"]] == ["s-open", "b-1"]
    rest = await ids(limit="2", before=str(first["next_before"]))
    assert rest == ["s-failed", "s-done"]
    for bad in ({"status": "asleep"}, {"limit": "0"}, {"before": "x"}, {"colour": "red"}):
        answer = await tail.api.get("/api/v1/sessions", params=bad)
        assert answer.status == 400 and answer.error["code"] == "invalid_request", bad


async def test_a_tenant_token_lists_its_own_sessions_only(client, actor, start_tail):
    tokens = {"acme": "a" * 20, "beta": "b" * 20}
    tail = await start_tail(access=AccessPolicy.from_tokens(tokens))
    last = await sessions_of_three_kinds(client, actor)
    await wait_applied(tail.service, last)

    async def ids(as_tenant: str, **params) -> tuple[int, list[str]]:
        answer = await tail.api.get(
            "/api/v1/sessions", params=params, headers={"Authorization": f"Bearer {tokens[as_tenant]}"}
        )
        return answer.status, [s["session_id"] for s in answer.json().get("sessions", [])]

    assert await ids("beta") == (200, ["b-1"])
    assert await ids("acme") == (200, ["s-open", "s-failed", "s-done"])
    status, _ = await ids("beta", tenant="acme")  # another tenant's, asked by name
    assert status == 403


async def test_a_read_model_written_before_the_index_is_folded_when_opened(client, actor, start_tail):
    tail = await start_tail()
    last = await sessions_of_three_kinds(client, actor)
    await wait_applied(tail.service, last)
    expected = by_id((await tail.api.get("/api/v1/sessions")).json())
    # as a file from before the index: its tables empty, nothing folded
    await rewrite_stopped_read_model(
        start_tail.stop,
        tail,
        "DELETE FROM session_index; DELETE FROM session_members; DELETE FROM session_costs;"
        " DELETE FROM meta WHERE key = 'sessions_folded_position';",
    )
    again = await start_tail()
    page = (await again.api.get("/api/v1/sessions")).json()
    assert by_id(page) == expected
