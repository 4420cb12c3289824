"""The single writer on its own (no NATS): hashing, HMAC chains, and a commit
that fails part-way leaving nothing behind."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3

import msgspec
import pytest

from laneledger.contract import errors
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import verify_chain
from laneledger.contract.model import AppendCommitted, CreateLane, EnsureActor, encode
from laneledger.contract.redaction import DEFAULT_REDACTOR
from laneledger.sdk.client import make_event
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append
from laneledger.store.entryhash import hashed_body


def fixed_clock() -> str:
    return "2026-11-30T08:00:00.000000Z"


@pytest.fixture
def ledger(tmp_path):
    def make(key: bytes | None = None):
        writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"), clock=fixed_clock, hmac_key=key)
        actor = writer.ensure_actor(EnsureActor(tenant="acme", key="agent:w@1", kind="agent"))
        lane = writer.create_lane(CreateLane(tenant="acme", session_id="s", run_id="r", name="main"))
        return writer, actor, lane

    return make


def append(lane, actor, expected: int, n: int, append_id: str, **payload):
    events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=payload) for _ in range(n)]
    body = encode(
        {"lane_id": lane.id, "expected_last_seq": expected, "append_id": append_id, "events": events}
    )
    return prepare_append(body)


def lane_records(writer, lane_id):
    return [
        msgspec.json.decode(body)
        for _, body in writer.reader.events_after(0)
        if msgspec.json.decode(body)["lane_id"] == lane_id
    ]


@pytest.mark.parametrize("key", [None, b"secret"])
def test_hashed_body_equals_canonical_record(key):
    record = {
        "actor_id": "a",
        "append_id": 'x","event_type":',
        "committed_at": "t",
        "event_type": "e",
        "id": "i",
        "payload": {"event_type": 1},
        "seq": 1,
    }
    digest, body = hashed_body(record, key)
    assert body == canonicalize({**record, "entry_hash": digest})
    preimage = canonicalize(record)
    expected = hashlib.sha256(preimage) if key is None else hmac.new(key, preimage, hashlib.sha256)
    assert digest == expected.hexdigest()


def test_hmac_chain_verifies_only_with_its_key(ledger):
    writer, actor, lane = ledger(b"k1")
    result = writer.apply_batch([append(lane, actor, 0, 3, "a1", text="x")])
    assert isinstance(result.receipts[0], AppendCommitted)
    records = lane_records(writer, lane.id)
    assert verify_chain(records, key=b"k1") == result.receipts[0].entry_hashes[-1]
    for wrong in (None, b"k2"):
        with pytest.raises(errors.ChainFault) as caught:
            verify_chain(records, key=wrong)
        assert caught.value.details["kind"] == "content_tampered" and caught.value.details["seq"] == 1


def test_failed_commit_writes_nothing_and_keeps_heads(ledger):
    writer, actor, lane = ledger()
    writer.apply_batch([append(lane, actor, 0, 2, "a1")])
    writer._db.execute("ALTER TABLE receipts RENAME TO receipts_gone")  # the next commit fails
    with pytest.raises(errors.InternalError):
        writer.apply_batch([append(lane, actor, 2, 2, "a2"), append(lane, actor, 4, 1, "a3")])
    writer._db.execute("ALTER TABLE receipts_gone RENAME TO receipts")
    assert writer.last_position == 2
    assert [seq for seq in (msgspec.json.decode(b)["seq"] for _, b in writer.reader.events_after(0))] == [
        1,
        2,
    ]
    # The same requests, delivered again, commit with the seqs they would have had.
    result = writer.apply_batch([append(lane, actor, 2, 2, "a2"), append(lane, actor, 4, 1, "a3")])
    assert [r.last_seq for r in result.receipts] == [4, 5]
    assert verify_chain(lane_records(writer, lane.id)) == result.receipts[1].entry_hashes[-1]


class CommitRefused:
    """The writer's connection, except that COMMIT fails as a dying disk's would."""

    def __init__(self, conn) -> None:
        self._conn = conn

    def execute(self, sql, *args):
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_staged_batch_whose_commit_fails_leaves_nothing(ledger):
    """The sequencer stages a large batch on its loop and commits it on its
    thread (services/sequencer/service.py): a COMMIT refused after staging
    rolls the batch back and moves no head."""
    writer, actor, lane = ledger()
    writer.apply_batch([append(lane, actor, 0, 2, "a1")])
    batch = [append(lane, actor, 2, 2, "a2"), append(lane, actor, 4, 1, "a3")]
    staged = writer.stage_batch(batch)
    assert writer._db.in_transaction and writer.last_position == 2
    # the connection the commit goes through (store/txlogsync.py)
    conn, writer._log._db = writer._log._db, CommitRefused(writer._log._db)
    with pytest.raises(errors.InternalError, match="disk I/O error"):
        writer.commit_staged(staged)
    writer._log._db = conn
    assert not conn.in_transaction and writer.last_position == 2
    assert [msgspec.json.decode(b)["seq"] for _, b in writer.reader.events_after(0)] == [1, 2]
    result = writer.commit_staged(writer.stage_batch(batch))
    assert [r.last_seq for r in result.receipts] == [4, 5]
    assert verify_chain(lane_records(writer, lane.id)) == result.receipts[1].entry_hashes[-1]


def test_appends_in_one_batch_see_each_other(ledger):
    writer, actor, lane = ledger()
    first = append(lane, actor, 0, 2, "a1")
    result = writer.apply_batch(
        [first, append(lane, actor, 2, 1, "a2"), first, append(lane, actor, 2, 1, "a3")]
    )
    committed, second, replay, conflict = result.receipts
    assert (committed.last_seq, second.last_seq) == (2, 3)
    assert replay.replayed and replay.positions == committed.positions
    assert conflict.error.code == "lane_conflict"
    assert conflict.error.details["actual_last_seq"] == 3
    assert [r.position for r in result.committed] == [1, 2, 3]


STRIPE = "sk_live_51HfakeStripeKeyForTests0042"  # secret_corpus: stripe_key


def _request(lane, actor, *events: dict) -> bytes:
    return encode({"lane_id": lane.id, "expected_last_seq": 0, "append_id": "r1", "events": list(events)})


@pytest.mark.parametrize("field", ["payload", "extensions"])
def test_step0_redacts_a_secret_in_either_free_form_field(ledger, field):
    """Step 0 tests a request's free-form fields and identifiers in one fast
    path; a secret in any one of them still takes the per-event path."""
    _, actor, lane = ledger()
    clean = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "hello"})
    leaky = {**make_event(lane.id, "stream.text_delta", actor_id=actor.id), field: {"note": STRIPE}}
    prepared = prepare_append(_request(lane, actor, clean, leaky), redactor=DEFAULT_REDACTOR)
    assert prepared.redactions == {"stripe_key": 1}
    assert STRIPE.encode() not in encode(prepared.sent) and STRIPE not in repr(prepared.request)
    assert prepared.sent[0] == clean


@pytest.mark.parametrize("name", ["subject_id", "actor_id"])
def test_step0_refuses_a_secret_shaped_identifier(ledger, name):
    _, actor, lane = ledger()
    clean = make_event(lane.id, "stream.text_delta", actor_id=actor.id)
    leaky = {**make_event(lane.id, "stream.text_delta", actor_id=actor.id), name: STRIPE}
    with pytest.raises(errors.InvalidRequest, match="secret-shaped") as refused:
        prepare_append(_request(lane, actor, clean, leaky), redactor=DEFAULT_REDACTOR)
    assert refused.value.details["path"] == f"$.events[1].{name}"


def test_step0_leaves_a_clean_request_as_sent(ledger):
    _, actor, lane = ledger()
    events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"n": i}) for i in range(3)]
    prepared = prepare_append(_request(lane, actor, *events), redactor=DEFAULT_REDACTOR)
    assert prepared.redactions == {} and prepared.sent == events
