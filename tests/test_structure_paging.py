"""``load_structure``: a session's lanes, turns, actions and attempts page by
page through the sequencer's single writer, for sessions whose structure does
not fit one NATS reply; and ``load_session`` / ``load_run``, which read it so
and their events page by page (``events_page``), each reply bounded."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from tail_support import ev, new_lane

from laneledger.contract import errors
from laneledger.contract.model import LoadStructure

pytestmark = pytest.mark.timeout(90)


async def test_a_structure_larger_than_one_reply_reads_in_pages(client, actor):
    main = await new_lane(client, actor, "big", "r1", "main")
    side = await new_lane(client, actor, "big", "r2", "side")
    other = await new_lane(client, actor, "elsewhere", "r1", "main")
    await client.create_turn(other.id, 1)  # another session's rows are never in the pages
    turns = [await client.create_turn(lane.id, 1) for lane in (main, side)]
    # ~1.1 MB of action names and idempotency keys (each at its 1024-character
    # bound): the structure alone is over the 1 MiB max_payload.
    actions = await asyncio.gather(
        *(
            client.create_action(
                main.id,
                turns[0].id,
                "tool_call",
                f"{i:04d}" + "n" * 1020,
                effect="read",
                idempotency="keyed",
                idempotency_key=f"{i:04d}" + "k" * 1020,
            )
            for i in range(550)
        )
    )
    attempts = await asyncio.gather(*(client.create_attempt(main.id, a.id, 1) for a in actions))
    await client.append(main, 0, [ev(main, actor)])
    view = await client.load_session("big")  # over one reply: read in pages
    assert [a.id for a in view.actions] == [a.id for a in actions] and len(view.events) == 1

    first = await client.load_structure_page("big")
    assert first.has_more and first.tenant == "acme"
    assert 0 < len(first.actions) < len(actions)  # cut by bytes, not by the row limit
    whole = await client.load_structure("big")
    assert not whole.has_more
    assert [lane.id for lane in whole.lanes] == [main.id, side.id]
    assert whole.lanes[0].last_seq == 1  # with the lane's head
    assert [t.id for t in whole.turns] == [t.id for t in turns]
    assert [a.id for a in whole.actions] == [a.id for a in actions]  # creation order, once each
    assert [a.id for a in whole.attempts] == [a.id for a in attempts]

    # One run only, by a small row limit; the cursor moves per kind.
    page = await client.load_structure_page("big", "r2", limit=1)
    assert ([lane.id for lane in page.lanes], [t.id for t in page.turns]) == ([side.id], [turns[1].id])
    assert page.actions == page.attempts == [] and page.has_more is False
    one = await client.load_structure_page("big", "r1", limit=1)
    assert [a.id for a in one.actions] == [actions[0].id] and one.has_more
    two = await client.load_structure_page("big", "r1", one.next, limit=1)
    assert [a.id for a in two.actions] == [actions[1].id] and two.lanes == two.turns == []
    assert [a.id for a in two.attempts] == [attempts[1].id]


async def test_unknown_and_malformed_structure_reads_are_typed_errors(client, actor, nc):
    await new_lane(client, actor, "s1", "r1")
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.load_structure("nope")
    assert caught.value.details["kind"] == "session"
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.load_structure("s1", "no-such-run")
    assert caught.value.details["kind"] == "run"
    bad = msgspec.json.encode(msgspec.to_builtins(LoadStructure(session_id="s1")) | {"limit": 0})
    reply = await nc.request("ledger.cmd.load_structure", bad, timeout=5)
    body = msgspec.json.decode(reply.data)
    assert body["status"] == "error" and body["error"]["code"] == "invalid_request"
    assert "limit" in body["error"]["message"] + str(body["error"].get("details"))


async def test_a_session_whose_events_do_not_fit_one_reply_loads_page_by_page(client, actor, nc):
    main = await new_lane(client, actor, "bulky", "r1", "main")
    side = await new_lane(client, actor, "bulky", "r2", "side")
    head = 0
    for start in range(0, 600, 100):  # ~2.1 MB of events: twice the 1 MiB max_payload
        events = [
            ev(
                main,
                actor,
                payload={
                    "text": f"{i:04d}" + "t" * 900,
                    "more": "m" * 900,
                    "rest": "r" * 900,
                    "last": "l" * 800,
                },
            )
            for i in range(start, start + 100)
        ]
        head = (await client.append(main, head, events)).last_seq
    await client.append(side, 0, [ev(side, actor)])

    first = await client.events_page("bulky")
    assert first.has_more and 0 < len(first.events) < 601  # cut by bytes: one reply's work is bounded
    assert len(msgspec.json.encode(first)) < nc.max_payload
    second = await client.events_page("bulky", after_position=first.next_position, limit=2)
    assert [e.seq for e in second.events] == [len(first.events) + 1, len(first.events) + 2]

    view = await client.load_session("bulky")  # the SDK loops the pages
    positions = [e.position for e in view.events]
    assert len(positions) == 601 and positions == sorted(positions)
    assert view.run_ids == ["r1", "r2"] and [lane.id for lane in view.lanes] == [main.id, side.id]
    run = await client.load_run("bulky", "r2")
    assert [e.lane_id for e in run.events] == [side.id] and [lane.id for lane in run.lanes] == [side.id]
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.events_page("bulky", "no-such-run")
    assert caught.value.details["kind"] == "run"
