"""The tail applies an erasure off the real committed stream (the route
logic is in test_tail_erasure.py, in-process): a live tail already open
receives the erasure event itself, and once the tail has carried it out its
routes answer erased and its files hold none of the content."""

from __future__ import annotations

import msgspec
import pytest
from polling import eventually
from tail_support import wait_applied
from test_erasure import CODE, EMAIL, NOTE, fill, holding

from laneledger.contract.erasure import ERASURE_EVENT, LEDGER_SESSION
from laneledger.sqlite import remove_database

pytestmark = pytest.mark.timeout(90)


async def test_a_live_tail_receives_the_erasure_and_the_tail_erases_its_copy(client, actor, start_tail):
    tail = await start_tail()
    lane, receipt = await fill(client, actor, "s1", "r1", 3)
    kept, kept_receipt = await fill(client, actor, "s2", "r1", 1)
    await wait_applied(tail.service, kept_receipt.positions[-1])
    path = tail.service.model.path
    files = [path, path.with_name(path.name + "-wal")]
    assert holding(files, [EMAIL, CODE, NOTE])

    async with tail.api.stream({"tenant": "acme", "from_position": str(kept_receipt.positions[-1])}) as live:
        done = await client.erase("s1", actor_id=actor.id, reason="GDPR Art. 17")
        frame = await live.next()
    assert frame is not None and frame.position == done.erasure.position
    event = frame.json()
    assert (event["event_type"], event["session_id"], event["id"]) == (
        ERASURE_EVENT,
        LEDGER_SESSION,
        done.erasure_id,
    )
    assert event["payload"]["scope"] == {"session_id": "s1"}

    await eventually(
        lambda: tail.service.erasures_pending,
        until=lambda pending: pending == 0,
        what="the tail to carry out the erasure",
    )
    mark = msgspec.to_builtins(done.erasure)
    # A live tail from the start replays the erased events erased.
    async with tail.api.stream({"session_id": "s1", "from_position": "0"}) as replay:
        frames = await replay.collect(3)
    assert [f.position for f in frames] == receipt.positions
    assert all(f.json()["erased"] == mark and f.json()["payload"] == {} for f in frames)
    ledger = [msgspec.to_builtins(e) for e in (await client.load_lane(lane.id)).events]
    assert (await tail.api.get(f"/api/v1/lanes/{lane.id}/events")).json()["events"] == ledger
    assert (await tail.api.get(f"/api/v1/lanes/{kept.id}/events")).json()["events"][0]["payload"][
        "email"
    ] == EMAIL

    # s2 holds the same values: erased too, nothing of them is left in the files.
    second = await client.erase("s2", actor_id=actor.id, reason="GDPR Art. 17")
    await wait_applied(tail.service, second.erasure.position)
    await eventually(
        lambda: tail.service.erasures_pending == 0 and tail.service.model.wal_shredded,
        what="the tail to carry out the second erasure",
    )
    assert holding(files, [EMAIL, CODE, NOTE]) == []


async def test_a_tail_rebuilt_from_the_stream_erases_again(client, actor, start_tail):
    """The stream still carries the events whole, then the erasure: a read
    model built from nothing folds both, and erases again."""
    tail = await start_tail()
    _, receipt = await fill(client, actor, "s1", "r1", 3)
    done = await client.erase("s1", actor_id=actor.id, reason="GDPR Art. 17")
    await wait_applied(tail.service, done.erasure.position)
    path = tail.service.model.path
    await start_tail.stop(tail)
    remove_database(path)

    rebuilt = await start_tail()
    await wait_applied(rebuilt.service, done.erasure.position)
    await eventually(
        lambda: rebuilt.service.erasures_pending == 0 and rebuilt.service.model.wal_shredded,
        what="the rebuilt tail to carry out the erasure",
    )
    session = (await rebuilt.api.get("/api/v1/sessions/s1")).json()["events"]
    assert [e["position"] for e in session] == receipt.positions
    assert all(e["erased"] == msgspec.to_builtins(done.erasure) for e in session)
    assert holding([path, path.with_name(path.name + "-wal")], [EMAIL, CODE, NOTE]) == []
