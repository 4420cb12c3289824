"""``GET /api/v1/events/{position}/causation`` (services/tail/handlers/causation.py):
an event's cause and the events it caused, across lanes, in its tenant only,
paged by ``limit``; and a read model from before its ``causation_id`` column
gets it filled when opened. Answers are checked against the OpenAPI document
by ``TailAPI``."""

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


async def chain(client, actor) -> dict[str, int]:
    """root -> spawn -> (child_a on a sub-agent lane, child_b): their positions."""
    main = await new_lane(client, actor, "s1", "r1")
    sub = await new_lane(client, actor, "s1", "r1", "sub", kind="subagent", parent_lane_id=main.id)
    root = make_event(main.id, "stream.text_delta", actor_id=actor.id, payload={"text": "root"})
    spawn = make_event(main.id, "stream.text_delta", actor_id=actor.id, causation_id=root["id"])
    first = await client.append(main, 0, [root, spawn])
    child_a = make_event(sub.id, "stream.text_delta", actor_id=actor.id, causation_id=spawn["id"])
    a = await client.append(sub, 0, [child_a])
    child_b = make_event(main.id, "stream.text_delta", actor_id=actor.id, causation_id=spawn["id"])
    b = await client.append(main, 2, [child_b])
    return {
        "root": first.positions[0],
        "spawn": first.positions[1],
        "child_a": a.positions[0],
        "child_b": b.positions[0],
    }


async def test_an_events_cause_and_what_it_caused(client, actor, start_tail):
    tail = await start_tail()
    at = await chain(client, actor)
    await wait_applied(tail.service, at["child_b"])
    spawn = (await tail.api.get(f"/api/v1/events/{at['spawn']}/causation")).json()
    assert spawn["cause"]["position"] == at["root"]
    assert [c["position"] for c in spawn["caused"]] == [at["child_a"], at["child_b"]]
    assert spawn["caused"][0]["seq"] == 1 and spawn["more_caused"] is False
    root = (await tail.api.get(f"/api/v1/events/{at['root']}/causation")).json()
    assert root["cause"] is None and root["causation_id"] is None
    assert [c["position"] for c in root["caused"]] == [at["spawn"]]
    paged = (await tail.api.get(f"/api/v1/events/{at['spawn']}/causation", params={"limit": "1"})).json()
    assert [c["position"] for c in paged["caused"]] == [at["child_a"]] and paged["more_caused"] is True
    for bad in ({"limit": "0"}, {"limit": "x"}, {"cursor": "1"}):
        answer = await tail.api.get(f"/api/v1/events/{at['spawn']}/causation", params=bad)
        assert answer.status == 400 and answer.error["code"] == "invalid_request", bad


async def test_another_tenants_event_is_not_there(client, actor, start_tail):
    tokens = {"acme": "a" * 20, "beta": "b" * 20}
    tail = await start_tail(access=AccessPolicy.from_tokens(tokens))
    at = await chain(client, actor)
    await wait_applied(tail.service, at["child_b"])

    async def ask(tenant: str):
        headers = {"Authorization": f"Bearer {tokens[tenant]}"}
        return await tail.api.get(f"/api/v1/events/{at['spawn']}/causation", headers=headers)

    assert (await ask("acme")).status == 200
    hidden = await ask("beta")
    assert hidden.status == 404 and hidden.error["details"] == {"kind": "event", "position": at["spawn"]}


async def test_a_read_model_from_before_the_column_is_filled_when_opened(client, actor, start_tail):
    tail = await start_tail()
    at = await chain(client, actor)
    await wait_applied(tail.service, at["child_b"])
    expected = (await tail.api.get(f"/api/v1/events/{at['spawn']}/causation")).json()
    # as a file from before the column: every causation_id empty, nothing filled
    await rewrite_stopped_read_model(
        start_tail.stop,
        tail,
        "UPDATE events SET causation_id = ''; DELETE FROM meta WHERE key = 'causation_filled';",
    )
    again = await start_tail()
    assert (await again.api.get(f"/api/v1/events/{at['spawn']}/causation")).json() == expected
