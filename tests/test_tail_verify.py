"""GET /api/v1/verify: the tail recomputes the hash chains of its own copy of
the ledger (what it serves) and names the first bad position and the kind of
fault. Tampering is done to the tail's read model file. In-process: the
tail's app over an in-process writer (tail_fixtures.py)."""

from __future__ import annotations

import contextlib
import sqlite3

import msgspec
import pytest
import pytest_asyncio
from inprocess_ledger import InProcessLedgerClient
from tail_fixtures import client_in_process, in_process_tails, start_tail_in_process
from tail_support import fill, new_lane, wait_applied

from laneledger.sdk.client import LedgerClient
from laneledger.store import LedgerWriter, open_ledger

# Route logic: the tail's app in-process over an in-process writer (tail_fixtures.py).
client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

pytestmark = pytest.mark.timeout(90)


async def _ledger(client, actor, tail):
    a = await new_lane(client, actor, "s1", "r1", "a")
    b = await new_lane(client, actor, "s1", "r1", "b")
    c = await new_lane(client, actor, "s2", "r1", "c")
    pa = await fill(client, a, actor, 6, per_append=2)
    pb = await fill(client, b, actor, 4, per_append=3)
    pc = await fill(client, c, actor, 5)
    pa += await fill(client, a, actor, 2, start_seq=6)
    await wait_applied(tail.service, max(pa + pb + pc))
    return {"a": (a, pa), "b": (b, pb), "c": (c, pc)}


async def _verify(tail, **params) -> dict:
    answer = await tail.api.get("/api/v1/verify", params=params)
    assert answer.status == 200, answer.body
    return answer.json()


def _tamper(tail, sql: str, params: tuple) -> None:
    db = sqlite3.connect(tail.service.model.path)
    try:
        assert db.execute(sql, params).rowcount == 1
        db.commit()
    finally:
        db.close()


def _body(tail, position: int) -> dict:
    db = sqlite3.connect(tail.service.model.path)
    try:
        (body,) = db.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()
    finally:
        db.close()
    return msgspec.json.decode(body)


async def test_intact_ledger_session_and_lane(client: LedgerClient, actor, start_tail):
    tail = await start_tail()
    lanes = await _ledger(client, actor, tail)
    whole = await _verify(tail)
    assert whole["intact"] is True and whole["fault"] is None
    assert whole["scope"] == "ledger" and whole["events"] == 17 and whole["lanes"] == 3
    assert whole["last_position"] == whole["applied_position"] == 17
    session = await _verify(tail, session_id="s1")
    assert session["intact"] and session["events"] == 12 and session["lanes"] == 2
    for lane, _ in lanes.values():
        head = await client.get_lane(lane.id)
        report = await _verify(tail, lane_id=lane.id)
        assert report["intact"] and report["events"] == head.last_seq
        assert report["lane_tips"] == {lane.id: head.head_hash}
    assert session["lane_tips"] == {
        lanes[n][0].id: (await client.get_lane(lanes[n][0].id)).head_hash for n in ("a", "b")
    }

    empty = await new_lane(client, actor, "s1", "r1", "empty")
    report = await _verify(tail, lane_id=empty.id)
    assert report["intact"] and report["events"] == 0
    await new_lane(client, actor, "s-empty", "r1", "main")  # a session with no events yet
    report = await _verify(tail, session_id="s-empty")
    assert report["intact"] and report["events"] == 0 and report["session_id"] == "s-empty"
    for params in ({"lane_id": "no-such-lane"}, {"session_id": "no-such-session"}):
        missing = await tail.api.get("/api/v1/verify", params=params)
        assert missing.status == 404 and missing.error["code"] == "entity_not_found"


async def test_tampered_content_is_found_at_its_position(client, actor, start_tail):
    tail = await start_tail()
    lanes = await _ledger(client, actor, tail)
    lane, positions = lanes["b"]
    target = positions[1]  # lane b, seq 2
    body = _body(tail, target)
    body["payload"] = {"text": "edited afterwards"}
    _tamper(tail, "UPDATE events SET body = ? WHERE position = ?", (msgspec.json.encode(body), target))
    for params in ({}, {"session_id": "s1"}, {"lane_id": lane.id}):
        report = await _verify(tail, **params)
        assert report["intact"] is False
        fault = report["fault"]
        assert fault["code"] == "chain_fault"
        assert fault["details"]["kind"] == "content_tampered"
        assert fault["details"]["position"] == target
        assert fault["details"]["seq"] == 2 and fault["details"]["lane_id"] == lane.id
    assert (await _verify(tail, session_id="s2"))["intact"] is True  # other chains are fine


async def test_rewritten_link_is_a_broken_link(client, actor, start_tail):
    tail = await start_tail()
    lanes = await _ledger(client, actor, tail)
    lane, positions = lanes["a"]
    body = _body(tail, positions[3])
    body["prev_hash"] = "f" * 64
    _tamper(tail, "UPDATE events SET body = ? WHERE position = ?", (msgspec.json.encode(body), positions[3]))
    fault = (await _verify(tail, lane_id=lane.id))["fault"]
    assert fault["details"]["kind"] == "broken_link" and fault["details"]["field"] == "prev_hash"
    assert fault["details"]["position"] == positions[3] and fault["details"]["seq"] == 4


async def test_a_deleted_event_is_a_broken_link(client, actor, start_tail):
    tail = await start_tail()
    lanes = await _ledger(client, actor, tail)
    lane, positions = lanes["c"]
    _tamper(tail, "DELETE FROM events WHERE position = ?", (positions[2],))
    whole = (await _verify(tail))["fault"]
    assert whole["details"]["kind"] == "broken_link" and whole["details"]["field"] == "position"
    assert whole["details"]["position"] == positions[2]
    in_lane = (await _verify(tail, lane_id=lane.id))["fault"]
    assert in_lane["details"]["kind"] == "broken_link" and in_lane["details"]["field"] == "seq"
    assert in_lane["details"]["position"] == positions[3]  # where seq 4 stands in for seq 3
    assert in_lane["details"]["expected"] == 3 and in_lane["details"]["found"] == 4


async def test_a_row_that_disagrees_with_its_event_and_an_unreadable_body(client, actor, start_tail):
    tail = await start_tail()
    lanes = await _ledger(client, actor, tail)
    _, positions = lanes["a"]
    _tamper(tail, "UPDATE events SET session_id = 's9' WHERE position = ?", (positions[0],))
    fault = (await _verify(tail))["fault"]
    assert fault["code"] == "integrity_failure"
    assert fault["details"]["kind"] == "row_mismatch" and fault["details"]["field"] == "session_id"
    assert fault["details"]["position"] == positions[0]

    _tamper(
        tail, "UPDATE events SET session_id = 's1', body = ? WHERE position = ?", (b"not json", positions[0])
    )
    fault = (await _verify(tail))["fault"]
    assert fault["details"]["kind"] == "not_chained" and fault["details"]["field"] == "body"
    assert fault["details"]["position"] == positions[0]


async def test_hmac_keyed_chains(tmp_path):
    key = b"tail-test-key"
    conn = open_ledger(tmp_path / "keyed.db")
    writer = LedgerWriter(conn, hmac_key=key)
    client = InProcessLedgerClient(writer)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(conn.close)
        start_tail = await stack.enter_async_context(in_process_tails(writer, tmp_path / "tail"))
        actor = await client.ensure_actor("acme", "agent:tests/main@1", "agent")
        lane = await new_lane(client, actor)
        positions = await fill(client, lane, actor, 5)
        keyed = await start_tail(hmac_key=key, data_dir=tmp_path / "keyed-tail")
        unkeyed = await start_tail(data_dir=tmp_path / "plain-tail")
        for tail in (keyed, unkeyed):
            await wait_applied(tail.service, positions[-1])
        good = await _verify(keyed)
        assert good["intact"] is True and good["keyed"] is True
        # Without the key (or with a wrong one), the first record fails.
        bad = await _verify(unkeyed)
        assert bad["intact"] is False and bad["keyed"] is False
        assert bad["fault"]["details"]["kind"] == "content_tampered"
        assert bad["fault"]["details"]["position"] == positions[0]
