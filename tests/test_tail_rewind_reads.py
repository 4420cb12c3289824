"""Reads of rewinds and forks on the tail, over real HTTP against a real tail,
sequencer and nats-server: ``exclude_invalidated`` on a lane's events, one
event and the live tail without a session filter; a fork's full history
(``with_origin=true``) and the SDK's ``fork_history``."""

from __future__ import annotations

import pytest
import pytest_asyncio
from tail_fixtures import client_in_process, start_tail_in_process
from tail_support import decoded, wait_applied
from worked_example import TENANT, record_worked_example

from laneledger.history.branching import fork_history, fork_lane, rewind_session
from laneledger.sdk.client import LedgerClient
from laneledger.services.tail import rewinds
from laneledger.services.tail.answers.history import LaneEvents

# Route logic: the tail's app in-process over an in-process writer (tail_fixtures.py).
client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

EXCLUDE = {"exclude_invalidated": "true"}


async def _positions(api, path: str, **params: str) -> list[int]:
    """Every page of a lane read, following next_cursor."""
    out, cursor = [], None
    for _ in range(50):
        query = dict(params, **({} if cursor is None else {"cursor": str(cursor)}))
        answer = await api.get(path, params=query)
        assert answer.status == 200, answer.body
        page = answer.json()
        out += [e["position"] for e in page["events"]]
        if not page["has_more"]:
            return out
        cursor = page["next_cursor"]
    raise AssertionError("more than 50 pages")


async def test_lane_event_and_unfiltered_live_reads_exclude_invalidated(
    client: LedgerClient, start_tail
) -> None:
    tail = await start_tail()
    ex = await record_worked_example(client)
    other = await record_worked_example(client, session_id="other")
    pos, opos = ex.positions, other.positions
    rewinder = (await client.ensure_actor(TENANT, "human:dusk", "human")).id
    rewound = await rewind_session(client, ex.session_id, ex.ids[5], actor_id=rewinder)  # {6, 7}
    orewound = await rewind_session(client, "other", other.ids[3], actor_id=rewinder)  # {4..7}
    await wait_applied(tail.service, orewound.receipt.positions[0])

    main = f"/api/v1/lanes/{ex.lanes['main'].id}/events"
    assert await _positions(tail.api, main) == [pos[2], pos[6], pos[7]]
    assert await _positions(tail.api, main, limit="1", **EXCLUDE) == [pos[2]]
    assert await _positions(tail.api, main, direction="backward", **EXCLUDE) == [pos[2]]
    sub = f"/api/v1/lanes/{ex.lanes['sub'].id}/events"  # where the rewind is recorded
    assert await _positions(tail.api, sub, limit="2", **EXCLUDE) == [
        pos[3],
        pos[4],
        pos[5],
        rewound.receipt.positions[0],
    ]

    gone = await tail.api.get(f"/api/v1/events/{pos[6]}", params=EXCLUDE)
    assert gone.status == 404 and gone.error["details"]["invalidated"] is True
    assert (await tail.api.get(f"/api/v1/events/{pos[6]}")).json()["position"] == pos[6]
    assert (await tail.api.get(f"/api/v1/events/{pos[5]}", params=EXCLUDE)).status == 200
    bad = await tail.api.get(f"/api/v1/events/{pos[5]}", params={"exclude_invalidated": "1"})
    assert bad.status == 400 and bad.error["details"]["parameter"] == "exclude_invalidated"

    # The live tail without session_id: every session's own rewinds apply to it.
    kept = sorted(
        p
        for p in [*pos.values(), rewound.receipt.positions[0], *opos.values(), orewound.receipt.positions[0]]
        if p not in (pos[6], pos[7], opos[4], opos[5], opos[6], opos[7])
    )
    async with tail.api.stream({"tenant": TENANT, **EXCLUDE}) as s:
        frames = await s.collect(len(kept))
    assert [f.position for f in frames] == kept
    async with tail.api.stream({"event_type": "ext.", **EXCLUDE}) as s:
        frames = await s.collect(8)  # Korg calls only: 1-5 of one session, 1-3 of the other
    assert [f.position for f in frames] == [*(pos[i] for i in range(1, 6)), *(opos[i] for i in range(1, 4))]


async def test_a_live_tail_over_too_many_rewinds_asks_for_a_session(
    client: LedgerClient, start_tail, monkeypatch
) -> None:
    tail = await start_tail()
    ex = await record_worked_example(client)
    rewinder = (await client.ensure_actor(TENANT, "human:dusk", "human")).id
    rewound = await rewind_session(client, ex.session_id, ex.ids[5], actor_id=rewinder)
    await wait_applied(tail.service, rewound.receipt.positions[0])
    monkeypatch.setattr(rewinds, "MAX_TRACKED_SPANS", 0)
    answer = await tail.api.get("/api/v1/events", params=EXCLUDE)
    assert answer.status == 400 and answer.error["details"]["parameter"] == "exclude_invalidated"
    assert answer.error["details"]["ranges"] == 1 and "session_id" in answer.error["message"]


async def test_a_forks_full_history_over_http_and_the_sdk(client: LedgerClient, start_tail) -> None:
    tail = await start_tail()
    ex = await record_worked_example(client)
    pos = ex.positions
    main = ex.lanes["main"]  # seq 1, 2, 3 = Korg 2, 6, 7
    actor = ex.actors["main"]
    early = await fork_lane(client, main.id, 1, "retry", actor_id=actor)
    deeper = await fork_lane(client, early.id, 1, "retry-2", actor_id=actor)
    late = await fork_lane(client, main.id, 3, "late", actor_id=actor)
    rewinder = (await client.ensure_actor(TENANT, "human:dusk", "human")).id
    rewound = await rewind_session(client, ex.session_id, ex.ids[5], actor_id=rewinder)  # {6, 7}
    await wait_applied(tail.service, rewound.receipt.positions[0])
    first = {lane.id: (await client.load_lane(lane.id)).events[0].position for lane in (early, deeper, late)}

    path = "/api/v1/lanes/{}/events"
    with_origin = {"with_origin": "true"}
    expected = [pos[2], first[early.id], first[deeper.id]]
    assert await _positions(tail.api, path.format(deeper.id), **with_origin) == expected
    assert await _positions(tail.api, path.format(deeper.id), limit="1", **with_origin) == expected
    assert (
        await _positions(tail.api, path.format(deeper.id), direction="backward", **with_origin)
        == expected[::-1]
    )
    answer = await tail.api.get(path.format(deeper.id), params=with_origin)
    page = answer.json()
    streamed = decoded(answer.body, LaneEvents)  # the streamed page, as the document's Struct
    assert streamed.with_origin is True and [o.lane_id for o in streamed.origins or []] == [early.id, main.id]
    assert [(o["lane_id"], o["seq"]) for o in page["origins"]] == [(early.id, 1), (main.id, 1)]
    assert page["with_origin"] is True and page["origins"][1]["position"] == pos[2]
    # Up to a later fork point, and without what a rewind invalidated.
    assert await _positions(tail.api, path.format(late.id), **with_origin) == [
        pos[2],
        pos[6],
        pos[7],
        first[late.id],
    ]
    # (the late fork's lane.created is caused by 7, so the rewind covers it too: rule 1)
    assert await _positions(tail.api, path.format(late.id), **with_origin, **EXCLUDE) == [pos[2]]
    assert await _positions(tail.api, path.format(deeper.id), limit="1", **with_origin, **EXCLUDE) == expected
    # A lane that is no fork: its own events, keyed by position.
    assert await _positions(tail.api, path.format(main.id), **with_origin) == [pos[2], pos[6], pos[7]]

    sdk = [e.position async for e in fork_history(client, deeper.id, page=1)]
    assert sdk == expected
    assert [e.position async for e in fork_history(client, late.id)] == [
        pos[2],
        pos[6],
        pos[7],
        first[late.id],
    ]

    bad = await tail.api.get(path.format(deeper.id), params={"with_origin": "yes"})
    assert bad.status == 400 and bad.error["details"]["parameter"] == "with_origin"
    missing = await tail.api.get(path.format("no-such-lane"), params=with_origin)
    assert missing.status == 404 and missing.error["code"] == "entity_not_found"
