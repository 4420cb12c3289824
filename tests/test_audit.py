"""Whole-ledger audit (laneledger.audit.ledger) over a ledger the real sequencer wrote,
and over copies of it tampered with through sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
from prometheus_client import CollectorRegistry
from sequencer_process import wait_for_stream

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import compare_with_stream
from laneledger.contract import errors
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import GENESIS_HASH, entry_hash
from laneledger.contract.model import Actor, Lane
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger


async def build_ledger(client: LedgerClient, actor: Actor) -> tuple[list[Lane], list]:
    """Three lanes with interleaved appends of 1-3 events, and one empty lane."""
    lanes = [
        await client.create_lane("acme", "s1", "r1", name, actor_id=actor.id)
        for name in ("a", "b", "c", "empty")
    ]
    heads = {lane.id: 0 for lane in lanes}
    receipts = []
    for round_no in range(4):
        for index, lane in enumerate(lanes[:3]):
            events = [
                make_event(
                    lane.id,
                    "stream.text_delta",
                    actor_id=actor.id,
                    payload={"text": f"r{round_no} l{index} e{k}"},
                )
                for k in range(1 + (round_no + index) % 3)
            ]
            receipt = await client.append(lane, heads[lane.id], events)
            heads[lane.id] = receipt.last_seq
            receipts.append(receipt)
    return lanes, receipts


def copy_db(src: Path, dst: Path) -> Path:
    """A consistent copy of a live ledger (WAL included), via the backup API."""
    with sqlite3.connect(src) as source, sqlite3.connect(dst) as target:
        source.backup(target)
    source.close()
    target.close()
    return dst


def tamper(db: Path, sql: str, params: tuple = ()) -> None:
    conn = sqlite3.connect(db)
    try:
        with conn:
            changed = conn.execute(sql, params).rowcount
        assert changed == 1
    finally:
        conn.close()


def event_at(db: Path, position: int) -> tuple[str, int, dict]:
    conn = sqlite3.connect(db)
    try:
        lane_id, seq, body = conn.execute(
            "SELECT lane_id, seq, body FROM events WHERE position = ?", (position,)
        ).fetchone()
    finally:
        conn.close()
    return lane_id, seq, msgspec.json.decode(body)


@pytest.fixture
async def ledger(client, actor, js, tmp_path):
    lanes, receipts = await build_ledger(client, actor)
    last = receipts[-1].positions[-1]
    await wait_for_stream(js, last)
    return tmp_path / "ledger.db", lanes, receipts, last


async def test_clean_ledger_audits_and_matches_stream(ledger, client, js):
    db, lanes, receipts, last = ledger
    audit = audit_ledger(db)
    assert audit.events == audit.last_position == last == sum(len(r.positions) for r in receipts)
    assert audit.lanes == 4
    for lane in lanes:
        head = await client.get_lane(lane.id)
        assert audit.lane_tips[(lane.tenant, lane.id)] == head.head_hash
    assert audit.lane_tips[(lanes[3].tenant, lanes[3].id)] == GENESIS_HASH
    assert await compare_with_stream(js, db) == last


async def test_changed_payload_is_content_tampered(ledger, js, tmp_path):
    db, _, _, last = ledger
    copy = copy_db(db, tmp_path / "copy.db")
    position = last // 2
    lane_id, seq, record = event_at(copy, position)
    record["payload"] = {"text": "something else"}
    tamper(copy, "UPDATE events SET body = ? WHERE position = ?", (canonicalize(record), position))

    with pytest.raises(errors.ChainFault) as caught:
        audit_ledger(copy)
    details = caught.value.details
    assert (details["kind"], details["position"]) == ("content_tampered", position)
    assert (details["lane_id"], details["seq"]) == (lane_id, seq)
    assert f"position {position}" in caught.value.message
    # The stream still has the original bytes: the comparison names the same position.
    with pytest.raises(errors.IntegrityError) as differs:
        await compare_with_stream(js, copy)
    assert differs.value.details["position"] == position
    assert differs.value.details["kind"] == "data_mismatch"


async def test_deleted_event_is_a_broken_link_at_its_position(ledger, js, tmp_path):
    db, _, _, last = ledger
    copy = copy_db(db, tmp_path / "copy.db")
    position = last // 2
    tamper(copy, "DELETE FROM events WHERE position = ?", (position,))

    with pytest.raises(errors.ChainFault) as caught:
        audit_ledger(copy)
    details = caught.value.details
    assert (details["kind"], details["field"]) == ("broken_link", "position")
    assert (details["position"], details["found"]) == (position, position + 1)
    assert f"position {position}" in caught.value.message
    with pytest.raises(errors.IntegrityError) as differs:
        await compare_with_stream(js, copy)
    assert differs.value.details["position"] == position


async def test_deleted_last_event_is_caught_by_its_receipt(ledger, tmp_path):
    db, _, receipts, last = ledger
    copy = copy_db(db, tmp_path / "copy.db")
    tamper(copy, "DELETE FROM events WHERE position = ?", (last,))
    with pytest.raises(errors.IntegrityError) as caught:
        audit_ledger(copy)
    assert not isinstance(caught.value, errors.ChainFault)
    assert caught.value.details["position"] == last
    expected_kind = "receipt_without_events" if len(receipts[-1].positions) == 1 else "receipt_mismatch"
    assert caught.value.details["kind"] == expected_kind


async def test_changed_lane_head_is_an_integrity_error(ledger, tmp_path):
    db, lanes, receipts, _ = ledger
    copy = copy_db(db, tmp_path / "copy.db")
    lane = lanes[1]
    tamper(copy, "UPDATE lanes SET head_hash = ? WHERE id = ?", ("f" * 64, lane.id))
    last_of_lane = max(p for r in receipts if r.lane_id == lane.id for p in r.positions)

    with pytest.raises(errors.IntegrityError) as caught:
        audit_ledger(copy)
    assert not isinstance(caught.value, errors.ChainFault)
    details = caught.value.details
    assert (details["kind"], details["field"]) == ("lane_head_mismatch", "head_hash")
    assert (details["lane_id"], details["position"]) == (lane.id, last_of_lane)
    assert f"position {last_of_lane}" in caught.value.message


async def test_changed_lane_last_seq_is_an_integrity_error(ledger, tmp_path):
    db, lanes, _, _ = ledger
    copy = copy_db(db, tmp_path / "copy.db")
    tamper(copy, "UPDATE lanes SET last_seq = last_seq + 1 WHERE id = ?", (lanes[3].id,))
    with pytest.raises(errors.IntegrityError) as caught:
        audit_ledger(copy)
    details = caught.value.details
    assert (details["kind"], details["field"], details["lane_id"]) == (
        "lane_head_mismatch",
        "last_seq",
        lanes[3].id,
    )
    assert details["position"] is None  # the lane has no events


async def test_rehashed_last_event_is_caught_by_its_receipt(ledger, tmp_path):
    """A forger who recomputes the entry hash of a lane's last event (and the
    lane head) keeps the chain intact; the stored receipt still disagrees."""
    db, lanes, receipts, _ = ledger
    copy = copy_db(db, tmp_path / "copy.db")
    lane = lanes[0]
    position = max(p for r in receipts if r.lane_id == lane.id for p in r.positions)
    _, _, record = event_at(copy, position)
    record["payload"] = {"text": "forged"}
    record["entry_hash"] = entry_hash(record)
    tamper(copy, "UPDATE events SET body = ? WHERE position = ?", (canonicalize(record), position))
    tamper(copy, "UPDATE lanes SET head_hash = ? WHERE id = ?", (record["entry_hash"], lane.id))

    with pytest.raises(errors.IntegrityError) as caught:
        audit_ledger(copy)
    details = caught.value.details
    assert (details["kind"], details["position"]) == ("receipt_mismatch", position)
    assert details["field"] == "entry hash"


async def test_changed_receipt_is_an_integrity_error(ledger, tmp_path):
    db, _, receipts, _ = ledger
    copy = copy_db(db, tmp_path / "copy.db")
    target = receipts[3]
    forged = msgspec.structs.replace(target, event_ids=[*target.event_ids[:-1], "someone-else"])
    tamper(
        copy,
        "UPDATE receipts SET body = ? WHERE append_id = ?",
        (msgspec.json.encode(forged), target.append_id),
    )
    with pytest.raises(errors.IntegrityError) as caught:
        audit_ledger(copy)
    details = caught.value.details
    assert (details["kind"], details["field"]) == ("receipt_mismatch", "event id")
    assert details["position"] == target.positions[-1]


async def test_not_json_body_is_not_chained(ledger, tmp_path):
    db, _, _, _ = ledger
    copy = copy_db(db, tmp_path / "copy.db")
    tamper(copy, "UPDATE events SET body = ? WHERE position = 2", (b"{not json",))
    with pytest.raises(errors.ChainFault) as caught:
        audit_ledger(copy)
    assert (caught.value.details["kind"], caught.value.details["position"]) == ("not_chained", 2)


async def test_hmac_ledger_needs_its_key(nats_server, nc, js, tmp_path):
    key = b"audit-test-key"
    db = tmp_path / "hmac.db"
    writer = LedgerWriter(open_ledger(db), hmac_key=key)
    service = Sequencer(nc, writer, SequencerMetrics(CollectorRegistry()))
    await service.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:audit/hmac@1", "agent")
            lanes, receipts = await build_ledger(client, actor)
        last = receipts[-1].positions[-1]
        await wait_for_stream(js, last)
    finally:
        await service.stop()
    audit = audit_ledger(db, hmac_key=key)
    assert audit.last_position == last
    assert audit.lane_tips[(lanes[0].tenant, lanes[0].id)] == receipts[-3].entry_hashes[-1]
    with pytest.raises(errors.ChainFault) as caught:
        audit_ledger(db)
    assert (caught.value.details["kind"], caught.value.details["position"]) == ("content_tampered", 1)
    assert await compare_with_stream(js, db) == last


async def test_audit_is_read_only_and_missing_file_fails(tmp_path):
    with pytest.raises(errors.LedgerError):
        audit_ledger(tmp_path / "does-not-exist.db")
    assert not (tmp_path / "does-not-exist.db").exists()
