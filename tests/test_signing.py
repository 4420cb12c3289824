"""Signed producers: ed25519 over the proposed event's canonical bytes, checked
by the real sequencer (typed refusals) and stored outside the entry hash."""

from __future__ import annotations

import sqlite3

import msgspec
import pytest
from cryptography.hazmat.primitives import serialization
from ledger_fixtures import client_of_ledger_under_test

from laneledger.contract import errors
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import entry_hash
from laneledger.contract.ids import new_id
from laneledger.contract.model import AppendCommitted, AppendRejected, CreateLane, EnsureActor, encode
from laneledger.contract.signing import (
    check_signature,
    generate_private_key,
    load_private_key,
    load_public_key,
    public_key_hex,
    sign_event,
    signed_bytes,
)
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event
from laneledger.sdk.content import default_redactor
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append
from laneledger.store.entryhash import hashed_body

# The tests that take a client run in-process and over NATS.
client = pytest.fixture(client_of_ledger_under_test, name="client")

KEY = generate_private_key()
OTHER = generate_private_key()


def test_signed_bytes_leave_out_the_signature_and_the_ledger_fields() -> None:
    event = make_event(
        "lane-1", "run.started", actor_id="a", occurred_at="2026-01-01T00:00:00Z", event_id="e1"
    )
    signed = sign_event(event, KEY)
    assert set(signed) - set(event) == {"signature"} and len(signed["signature"]) == 128
    assert signed_bytes(signed) == signed_bytes(event) == canonicalize(event)
    committed = {**signed, "seq": 1, "position": 9, "prev_hash": "0" * 64, "tenant": "t"}
    assert signed_bytes(committed) == canonicalize(event)
    assert check_signature(committed, KEY.public_key())
    assert sign_event(event, KEY) == signed  # ed25519 is deterministic: digests stay stable
    assert not check_signature(signed, OTHER.public_key())
    assert not check_signature({**signed, "payload": {"x": 1}}, KEY.public_key())
    assert not check_signature(event, KEY.public_key())
    assert not check_signature({**signed, "signature": "zz" * 64}, KEY.public_key())


def test_keys_load_from_pem_and_hex_and_bad_ones_are_named() -> None:
    pem = KEY.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    raw = KEY.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    for source in (pem, raw.hex(), raw.hex().encode()):
        assert public_key_hex(load_private_key(source)) == public_key_hex(KEY)
    assert public_key_hex(load_public_key(public_key_hex(KEY))) == public_key_hex(KEY)
    with pytest.raises(errors.InvalidRequest, match="private key"):
        load_private_key("00" * 5)
    with pytest.raises(errors.InvalidRequest) as caught:
        load_public_key("ab" * 31)
    assert caught.value.details["path"] == "$.public_key"


def test_the_stored_body_holds_the_signature_outside_the_entry_hash() -> None:
    event = sign_event(
        make_event(
            "lane-1", "run.started", actor_id="a", payload={"nested": {"subject_id": "x", "signature": "y"}}
        ),
        KEY,
    )
    record = {
        **event,
        "tenant": "t",
        "session_id": "s",
        "run_id": "r",
        "seq": 1,
        "position": 1,
        "append_id": "ap",
        "committed_at": "2026-01-01T00:00:00Z",
        "prev_hash": "0" * 64,
    }
    for key in (None, b"k"):
        digest, body = hashed_body(record, key)
        assert body == canonicalize({**record, "entry_hash": digest})
        assert digest == entry_hash({**record, "entry_hash": digest}, key=key)
        assert digest == hashed_body({k: v for k, v in record.items() if k != "signature"}, key)[0]


def writer_with_keyed_actor(tmp_path) -> tuple[LedgerWriter, str, str]:
    writer = LedgerWriter(open_ledger(tmp_path / "w.db"))
    actor = writer.ensure_actor(
        EnsureActor(tenant="acme", key="agent:signer/main@1", kind="agent", public_key=public_key_hex(KEY))
    )
    lane = writer.create_lane(CreateLane(tenant="acme", session_id="s", run_id="r", name="main"))
    return writer, actor.id, lane.id


def request(lane_id: str, events: list[dict], last_seq: int = 0) -> bytes:
    return encode(
        {"lane_id": lane_id, "expected_last_seq": last_seq, "append_id": new_id(), "events": events}
    )


def test_the_writer_checks_what_the_prepare_stage_did_not(tmp_path) -> None:
    """Without ``actor_keys`` (a key not cached before the batch) the writer
    verifies itself; with them it trusts the prepare stage's verdicts."""
    writer, actor_id, lane_id = writer_with_keyed_actor(tmp_path)
    for head, keys in ((0, None), (1, writer.actor_keys)):
        good = make_event(lane_id, "run.started", actor_id=actor_id, private_key=KEY)
        forged = make_event(lane_id, "run.started", actor_id=actor_id, private_key=OTHER)
        prepared = [prepare_append(request(lane_id, [e], head), actor_keys=keys) for e in (forged, good)]
        assert [p.signatures for p in prepared] == ([(False,), (True,)] if keys else [(), ()])
        rejected, committed = writer.apply_batch(prepared).receipts
        assert isinstance(rejected, AppendRejected)
        assert rejected.error.code == "invalid_signature"
        assert rejected.error.details == {
            "event_id": forged["id"],
            "actor_id": actor_id,
            "path": "$.events[0].signature",
            "reason": "forged",
        }
        assert isinstance(committed, AppendCommitted) and committed.last_seq == head + 1


def test_a_signature_over_a_secret_fails_after_the_sequencer_redacts(tmp_path) -> None:
    """A producer that bypasses the SDK and signs an event with a secret in it:
    the sequencer redacts first, so the signature no longer covers the event."""
    writer, actor_id, lane_id = writer_with_keyed_actor(tmp_path)
    raw = make_event(lane_id, "run.started", actor_id=actor_id)
    raw["payload"] = {"api_key": "sk-live-0123456789abcdefghijklmnop"}
    signed = sign_event(raw, KEY)  # signed over the secret, not via make_event
    prepared = prepare_append(
        request(lane_id, [signed]), actor_keys=writer.actor_keys, redactor=default_redactor()
    )
    assert prepared.redactions and prepared.signatures == (False,)
    (rejected,) = writer.apply_batch([prepared]).receipts
    assert isinstance(rejected, AppendRejected)
    assert (rejected.error.code, rejected.error.details["reason"], rejected.error.details["redacted"]) == (
        "invalid_signature",
        "forged",
        True,
    )


async def test_the_sequencer_refuses_unsigned_and_forged_events(client: LedgerClient, tmp_path):
    signer = await client.ensure_actor("acme", "agent:signer/main@1", "agent", public_key=KEY)
    assert signer.public_key == public_key_hex(KEY)
    plain = await client.ensure_actor("acme", "agent:plain/main@1", "agent")
    assert plain.public_key is None
    lane = await LaneRecorder.open(client, "acme", "s1", "r1", "main", signers={signer.id: KEY})

    # Through the recorder: signed on append, committed, stored with the signature.
    receipt = await lane.append(
        [
            lane.event("run.started", actor_id=signer.id),
            make_event(lane.lane.id, "stream.text_delta", actor_id=signer.id, payload={"text": "hi"}),
            lane.event("stream.text_delta", actor_id=plain.id, payload={"text": "unsigned, unkeyed"}),
        ]
    )
    assert receipt.last_seq == 3
    conn = sqlite3.connect(tmp_path / "ledger.db")
    bodies = [msgspec.json.decode(b) for (b,) in conn.execute("SELECT body FROM events ORDER BY position")]
    conn.close()
    assert [("signature" in b) for b in bodies] == [True, True, False]
    assert all(check_signature(b, KEY.public_key()) for b in bodies[:2])

    head = receipt.last_seq
    cases = [
        (make_event(lane.lane.id, "run.started", actor_id=signer.id), errors.SignatureRequired, None),
        (
            make_event(lane.lane.id, "run.started", actor_id=signer.id, private_key=OTHER),
            errors.InvalidSignature,
            "forged",
        ),
        (
            {
                **make_event(
                    lane.lane.id,
                    "stream.text_delta",
                    actor_id=signer.id,
                    private_key=KEY,
                    payload={"text": "signed"},
                ),
                "payload": {"text": "changed after"},
            },
            errors.InvalidSignature,
            "forged",
        ),
        (
            make_event(lane.lane.id, "run.started", actor_id=plain.id, private_key=KEY),
            errors.InvalidSignature,
            "unregistered_key",
        ),
    ]
    for event, error, reason in cases:
        with pytest.raises(error) as caught:
            await client.append(lane.lane, head, [event])
        assert caught.value.details["event_id"] == event["id"]
        assert caught.value.details["path"] == "$.events[0].signature"
        assert caught.value.details.get("reason") == reason
    assert (await client.get_lane(lane.lane.id)).last_seq == head  # nothing of them was written

    # A malformed signature is a schema error naming the field.
    with pytest.raises(errors.InvalidRequest) as caught:
        await client.append(
            lane.lane,
            head,
            [{**make_event(lane.lane.id, "run.started", actor_id=signer.id), "signature": "abc"}],
        )
    assert caught.value.details["path"] == "$.events[0].signature"


async def test_the_key_is_part_of_the_actor(client: LedgerClient):
    first = await client.ensure_actor(
        "acme", "agent:rotating/main@1", "agent", public_key=public_key_hex(KEY)
    )
    again = await client.ensure_actor("acme", "agent:rotating/main@1", "agent", public_key=KEY)
    assert again.id == first.id
    with pytest.raises(errors.EntityConflict) as caught:
        await client.ensure_actor("acme", "agent:rotating/main@1", "agent", public_key=OTHER)
    assert set(caught.value.details["differing"]) == {"public_key"}
    with pytest.raises(errors.EntityConflict):
        await client.ensure_actor("acme", "agent:rotating/main@1", "agent")  # dropping it, too
    rotated = await client.ensure_actor("acme", "agent:rotating/main@2", "agent", public_key=OTHER)
    assert rotated.id != first.id
    with pytest.raises(errors.InvalidRequest) as caught:
        await client.ensure_actor("acme", "agent:bad-key@1", "agent", public_key="XY" * 32)
    assert caught.value.details["path"] == "$.public_key"
