"""The live tail (GET /api/v1/events) against the real sequencer and a real
tail service: backfill then live, exact resume, filters, clean end,
heartbeats."""

from __future__ import annotations

import msgspec
import pytest
from tail_support import ev, fill, new_lane, wait_applied

from laneledger.sdk.client import LedgerClient

pytestmark = pytest.mark.timeout(90)


async def test_backfills_then_goes_live_in_order(client: LedgerClient, actor, start_tail):
    tail = await start_tail()
    lane = await new_lane(client, actor)
    before = await fill(client, lane, actor, 30)
    await wait_applied(tail.service, before[-1])
    async with tail.api.stream({"session_id": "s1"}) as stream:
        backfill = await stream.collect(30)
        after = await fill(client, lane, actor, 20, start_seq=30)
        live = await stream.collect(20)
    assert [f.position for f in backfill] == before
    assert [f.position for f in live] == after
    page = await client.load_lane(lane.id)  # the data: the committed events, as the ledger has them
    assert [f.json() for f in backfill + live] == [msgspec.to_builtins(e) for e in page.events]


@pytest.mark.parametrize("ring_size", [4096, 0])
async def test_resume_delivers_exactly_the_remainder(client, actor, start_tail, ring_size):
    tail = await start_tail(ring_size=ring_size)
    lane = await new_lane(client, actor)
    positions = await fill(client, lane, actor, 60)
    await wait_applied(tail.service, positions[-1])
    async with tail.api.stream() as stream:
        first = await stream.collect(25)
    last_seen = first[-1].id
    assert [f.position for f in first] == positions[:25]

    async with tail.api.stream(headers={"Last-Event-ID": last_seen}) as stream:
        by_header = await stream.collect(35)
    async with tail.api.stream({"from_position": last_seen}) as stream:
        by_query = await stream.collect(35)
    # The header wins over the query (an EventSource reconnect repeats the URL).
    async with tail.api.stream({"from_position": "0"}, {"Last-Event-ID": last_seen}) as stream:
        both = await stream.collect(35)
    for resumed in (by_header, by_query, both):
        assert [f.position for f in resumed] == positions[25:]

    # And the remainder goes on live, with no gap and no duplicate.
    async with tail.api.stream({"from_position": str(positions[-1])}) as stream:
        more = await fill(client, lane, actor, 10, start_seq=60)
        assert [f.position for f in await stream.collect(10)] == more


async def _dataset(client: LedgerClient, actor):
    """Two tenants, sessions, runs, lanes, actors and several event types."""
    human = await client.ensure_actor("acme", "human:dusk", "human")
    other_actor = await client.ensure_actor("other", "agent:other/main@1", "agent")
    main = await new_lane(client, actor, "s1", "r1", "main")
    side = await new_lane(client, actor, "s1", "r1", "side")
    r2 = await new_lane(client, actor, "s1", "r2", "main")
    s2 = await new_lane(client, actor, "s2", "r1", "main")
    foreign = await new_lane(client, other_actor, "s9", "r1", "main", tenant="other")
    cost = {"provider": "p", "model": "m", "amount": "0.01", "currency": "USD"}
    heads: dict[str, int] = {}
    plan = [
        (main, actor, "run.started", {}),
        (main, actor, "stream.text_delta", {"text": "a"}),
        (side, human, "hitl.paused", {"pause_id": "p1", "trigger": "t"}),
        (main, actor, "cost.recorded", cost),
        (r2, actor, "ext.acme.note", {"n": 1}),
        (s2, actor, "stream.text_delta", {"text": "b"}),
        (foreign, other_actor, "stream.text_delta", {"text": "c"}),
        (side, human, "hitl.responded", {"pause_id": "p1", "decision": "approved"}),
        (r2, actor, "cost.recorded", cost),
        (main, actor, "stream.thinking_delta", {"text": "d"}),
    ] * 3
    events = []
    for lane, who, event_type, payload in plan:
        receipt = await client.append(
            lane, heads.get(lane.id, 0), [ev(lane, who, event_type, payload=payload)]
        )
        heads[lane.id] = receipt.last_seq
        events.append(
            {
                "position": receipt.positions[0],
                "tenant": lane.tenant,
                "session_id": lane.session_id,
                "run_id": lane.run_id,
                "lane_id": lane.id,
                "actor_id": who.id,
                "event_type": event_type,
                "lane": lane,
                "who": who,
            }
        )
    lanes = {"main": main, "side": side, "r2": r2, "s2": s2, "foreign": foreign}
    return events, lanes, {"actor": actor, "human": human, "other": other_actor}, heads


@pytest.mark.parametrize("ring_size", [4096, 0])
async def test_filters(client, actor, start_tail, ring_size):
    tail = await start_tail(ring_size=ring_size)
    events, lanes, actors, heads = await _dataset(client, actor)
    await wait_applied(tail.service, events[-1]["position"])
    cases = [
        ({"tenant": "other"}, lanes["foreign"], actors["other"], "stream.text_delta"),
        ({"tenant": "acme", "session_id": "s2"}, lanes["s2"], actor, "stream.text_delta"),
        ({"session_id": "s1", "run_id": "r2"}, lanes["r2"], actor, "ext.acme.note"),
        ({"lane_id": lanes["side"].id}, lanes["side"], actors["human"], "ext.acme.note"),
        ({"actor_id": actors["human"].id}, lanes["side"], actors["human"], "ext.acme.note"),
        ({"event_type": "cost."}, lanes["main"], actor, "cost.recorded"),
        ({"event_type": "stream"}, lanes["s2"], actor, "stream.text_delta"),
        (
            {"event_type": "hitl.responded", "session_id": "s1"},
            lanes["side"],
            actors["human"],
            "hitl.responded",
        ),
        (
            {"session_id": "s1", "lane_id": lanes["main"].id, "actor_id": actor.id, "event_type": "stream.t"},
            lanes["main"],
            actor,
            "stream.text_delta",
        ),
        ({"tenant": "nobody"}, None, None, None),
    ]
    cost = {"provider": "p", "model": "m", "amount": "0.01", "currency": "USD"}
    for params, lane, who, sentinel_type in cases:
        expected = [
            e["position"]
            for e in events
            if all((e[k].startswith(v) if k == "event_type" else e[k] == v) for k, v in params.items())
        ]
        async with tail.api.stream(params) as stream:
            got = await stream.collect(len(expected)) if expected else []
            assert [f.position for f in got] == expected, params
            if lane is None:
                continue
            # Exactly these: the next frame is a new matching event, nothing in between.
            payload = (
                cost
                if sentinel_type == "cost.recorded"
                else {"pause_id": "p1", "decision": "approved"}
                if sentinel_type == "hitl.responded"
                else {}
            )
            receipt = await client.append(
                lane, heads[lane.id], [ev(lane, who, sentinel_type, payload=payload)]
            )
            heads[lane.id] = receipt.last_seq
            events.append(
                {
                    "position": receipt.positions[0],
                    "tenant": lane.tenant,
                    "session_id": lane.session_id,
                    "run_id": lane.run_id,
                    "lane_id": lane.id,
                    "actor_id": who.id,
                    "event_type": sentinel_type,
                }
            )
            (sentinel,) = await stream.collect(1)
            assert sentinel.position == receipt.positions[0], params


@pytest.mark.parametrize("ring_size", [4096, 0])
async def test_a_session_tail_ends_after_session_completed(client, actor, start_tail, ring_size):
    tail = await start_tail(ring_size=ring_size)
    lane = await new_lane(client, actor, "s1")
    other = await new_lane(client, actor, "s2")
    early = await fill(client, lane, actor, 5)
    async with tail.api.stream({"session_id": "s1"}) as stream:
        assert [f.position for f in await stream.collect(5)] == early
        await fill(client, other, actor, 3)  # another session: not delivered
        mid = await fill(client, lane, actor, 3, start_seq=5)
        done = await client.append(lane, 8, [ev(lane, actor, "session.completed", subject_id="s1")])
        frames = await stream.collect(10)
        assert [f.position for f in frames[:-1]] == mid + done.positions
        end = frames[-1]
        assert end.event == "end" and end.position == done.positions[0]
        assert end.json() == {"reason": "session_ended", "position": done.positions[0], "session_id": "s1"}
        assert await stream.next() is None  # the response is over

    # A late subscriber backfills and ends; a reconnect after the end ends at once.
    async with tail.api.stream({"session_id": "s1"}) as stream:
        frames = await stream.collect(20)
        assert [f.position for f in frames] == early + mid + done.positions * 2
        assert frames[-1].event == "end" and await stream.next() is None
    async with tail.api.stream({"session_id": "s1"}, {"Last-Event-ID": end.id}) as stream:
        frame = await stream.next()
        assert frame is not None and frame.event == "end" and frame.id == end.id
        assert await stream.next() is None


async def test_a_run_tail_ends_after_its_terminal_event_even_when_filtered_out(client, actor, start_tail):
    tail = await start_tail()
    r1 = await new_lane(client, actor, "s1", "r1")
    r2 = await new_lane(client, actor, "s1", "r2")
    async with tail.api.stream({"session_id": "s1", "run_id": "r1", "event_type": "stream."}) as stream:
        deltas = await fill(client, r1, actor, 4)
        await client.append(r2, 0, [ev(r2, actor, "run.failed", subject_id="r2")])  # another run
        await client.append(r1, 4, [ev(r1, actor, "run.started", subject_id="r1")])  # filtered out
        more = await fill(client, r1, actor, 2, start_seq=5)
        cancelled = await client.append(r1, 7, [ev(r1, actor, "run.cancelled", subject_id="r1")])
        frames = await stream.collect(10)
        assert [f.position for f in frames[:-1]] == deltas + more
        assert frames[-1].event == "end" and frames[-1].position == cancelled.positions[0]
        assert frames[-1].json()["run_id"] == "r1"
        assert await stream.next() is None


async def test_idle_connections_get_heartbeats(client, actor, start_tail):
    tail = await start_tail(heartbeat_s=0.2)
    lane = await new_lane(client, actor)
    async with tail.api.stream({"lane_id": lane.id}) as stream:
        comments = [await stream.next(comments=True) for _ in range(3)]
        assert all(f is not None and f.event == "comment" and f.data == "keepalive" for f in comments)
        positions = await fill(client, lane, actor, 1)
        frame = await stream.next()  # events still flow between heartbeats
        assert frame is not None and frame.position == positions[0]


async def test_large_events_are_delivered_in_order_among_small_ones(client, actor, start_tail):
    # Events above the ring's size bound are read from SQLite, the rest from the ring.
    tail = await start_tail()
    lane = await new_lane(client, actor)
    # 40 KB inline: no single value over 1 KiB, so none becomes a content reference.
    big = {f"text{i}": "y" * 1000 for i in range(40)}
    async with tail.api.stream({"lane_id": lane.id}) as stream:
        expected = []
        head = 0
        for sizes in (["s", "b", "s"], ["b", "b"], ["s", "s", "b", "s"]):
            events = [ev(lane, actor, payload=big if k == "b" else {"text": "z"}) for k in sizes]
            receipt = await client.append(lane, head, events)
            head = receipt.last_seq
            expected += receipt.positions
        frames = await stream.collect(len(expected))
    assert [f.position for f in frames] == expected
    assert [len(f.data) > 40_000 for f in frames] == [
        k == "b" for k in ["s", "b", "s", "b", "b", "s", "s", "b", "s"]
    ]
