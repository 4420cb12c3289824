"""``load_structure``: a session's lanes, turns, actions and attempts page by
page through the sequencer's single writer, for sessions whose structure does
not fit one NATS reply (``load_session`` answers ``request_too_large``)."""

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
    # ~1.1 MB of action names: the structure alone is over the 1 MiB max_payload.
    actions = await asyncio.gather(
        *(
            client.create_action(
                main.id,
                turns[0].id,
                "tool_call",
                f"{i:04d}" + "n" * 2500,
                effect="read",
                idempotency="inherent",
            )
            for i in range(450)
        )
    )
    attempts = await asyncio.gather(*(client.create_attempt(main.id, a.id, 1) for a in actions))
    await client.append(main, 0, [ev(main, actor)])
    with pytest.raises(errors.RequestTooLarge):
        await client.load_session("big")

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
