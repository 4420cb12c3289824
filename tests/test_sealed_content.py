"""Sealed content (spec/canonical.md §3): an event's content enters its entry
hash only through an HMAC keyed by the event's own salt, so the erased form
(spec/erasure.md) keeps the chain and confirms no guess. Pure logic."""

from __future__ import annotations

import copy
import hashlib
import json
import os

import msgspec
import pytest
from test_store_writer import append, fixed_clock, lane_records

from laneledger.contract import errors
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import (
    GENESIS_HASH,
    content_bytes,
    content_digest,
    entry_hash,
    erased_form,
    link,
    verify_chain,
)
from laneledger.contract.model import CommittedEvent, CreateLane, EnsureActor, decoder
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.entryhash import hashed_body
from laneledger.store.salts import SaltSource

MARK = {"position": 9, "event_id": "018f0c2a-0000-7000-8000-000000000199"}


def record(seq: int, **payload) -> dict:
    return {
        "schema_version": "1.0",
        "id": f"018f0c2a-0000-7000-8000-0000000001{seq:02d}",
        "lane_id": "L",
        "subject_id": "L",
        "event_type": "note.acme.step",
        "actor_id": "A",
        "occurred_at": "2026-01-02T03:04:05Z",
        "payload": payload or {"email": "ada@example.com", "code": 123456},
        "extensions": {"x": ["y"]},
        "tenant": "acme",
        "session_id": "s",
        "run_id": "r",
        "seq": seq,
        "position": seq,
        "append_id": "ap",
        "committed_at": "2026-01-02T03:04:06Z",
        "content_salt": hashlib.sha256(b"salt%d" % seq).hexdigest(),
    }


def sealed_chain(n: int = 3) -> list[dict]:
    prev, out = GENESIS_HASH, []
    for seq in range(1, n + 1):
        out.append(link(record(seq), prev))
        prev = out[-1]["entry_hash"]
    return out


def fault_of(records: list[dict]) -> dict:
    with pytest.raises(errors.ChainFault) as caught:
        verify_chain(records)
    return caught.value.details


@pytest.mark.parametrize(
    ("key", "data", "mac"),
    [
        # RFC 4231, test cases 2 and 6 (HMAC-SHA-256): a short key, and one
        # longer than SHA-256's block, which HMAC first hashes.
        (
            b"Jefe",
            b"what do ya want for nothing?",
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        ),
        (
            b"\xaa" * 131,
            b"Test Using Larger Than Block-Size Key - Hash Key First",
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        ),
    ],
)
def test_the_content_digest_is_hmac_sha256_keyed_by_the_salt(key, data, mac):
    assert content_digest(key.hex(), data) == mac


def test_the_content_enters_the_hash_only_through_its_salted_digest():
    chain = sealed_chain()
    one = chain[0]
    unsealed = {k: v for k, v in one.items() if k not in ("content_salt", "entry_hash")}
    assert entry_hash(one) != entry_hash(unsealed)  # another preimage than an unsealed event's
    digest = content_digest(one["content_salt"], content_bytes(one["payload"], one["extensions"]))
    preimage = {
        k: v for k, v in one.items() if k not in ("payload", "extensions", "content_salt", "entry_hash")
    }
    assert (
        one["entry_hash"] == hashlib.sha256(canonicalize({**preimage, "content_digest": digest})).hexdigest()
    )
    assert verify_chain(chain) == chain[-1]["entry_hash"]


def test_an_erased_event_keeps_its_hash_and_nothing_of_its_content():
    chain = sealed_chain()
    erased = [chain[0], erased_form(chain[1], MARK), chain[2]]
    assert verify_chain(erased) == chain[-1]["entry_hash"]
    gone = erased[1]
    assert gone["payload"] == gone["extensions"] == {} and "content_salt" not in gone
    assert gone["erased"] == MARK and gone["entry_hash"] == chain[1]["entry_hash"]
    text = json.dumps(gone)
    assert "ada@example.com" not in text and "123456" not in text
    # What is left confirms no guess: the digest is keyed by the erased salt,
    # so hashing the right content without it matches nothing that is kept.
    right = content_bytes(chain[1]["payload"], chain[1]["extensions"])
    assert hashlib.sha256(right).hexdigest() not in text
    assert content_digest("00" * 32, right) != gone["content_digest"]
    # The erased form decodes as a committed event.
    event = decoder(CommittedEvent).decode(msgspec.json.encode(gone))
    assert event.erased is not msgspec.UNSET and event.erased.position == 9


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["payload"].update(code=654321), "entry_hash"),
        (lambda r: r["extensions"].clear(), "entry_hash"),
        (lambda r: r.update(content_salt="ab" * 32), "entry_hash"),
        (lambda r: r.update(content_salt="not hex"), "content_salt"),
        (lambda r: r.pop("content_salt"), "entry_hash"),  # made to look unsealed
        (lambda r: r.update(content_digest="00" * 32), "content_digest"),
        (lambda r: r.update(erased=MARK), "erased"),
    ],
)
def test_any_change_to_a_whole_sealed_event_is_found(change, field):
    chain = sealed_chain()
    change(chain[1])
    details = fault_of(chain)
    assert (details["kind"], details["seq"], details["field"]) == ("content_tampered", 2, field)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r.update(payload={"email": "eve@example.com"}), "payload"),  # content put back
        (lambda r: r.update(extensions={"x": 1}), "extensions"),
        (lambda r: r.update(content_digest="00" * 32), "entry_hash"),
        (lambda r: r.update(content_salt="ab" * 32), "content_digest"),
        (lambda r: r.pop("erased"), "erased"),
        (lambda r: r.update(signature="ab" * 64), "signature"),
        (lambda r: r.update(event_type="note.acme.other"), "entry_hash"),
    ],
)
def test_any_change_to_an_erased_event_is_found(change, field):
    chain = sealed_chain()
    chain[1] = erased_form(chain[1], MARK)
    change(chain[1])
    details = fault_of(chain)
    assert (details["kind"], details["seq"], details["field"]) == ("content_tampered", 2, field)


def test_only_a_whole_sealed_event_can_be_erased():
    unsealed = {k: v for k, v in record(1).items() if k != "content_salt"}
    with pytest.raises(ValueError, match="content_salt"):
        erased_form(unsealed, MARK)
    with pytest.raises(ValueError, match="content_salt"):
        erased_form(erased_form(sealed_chain(1)[0], MARK), MARK)


@pytest.mark.parametrize("key", [None, b"secret"])
@pytest.mark.parametrize("signed", [False, True])
def test_the_writers_sealed_body_is_the_canonical_record(key, signed):
    whole = record(1, text='"content_digest":"x" ,"id": ,"position": ,"subject_id":', n=[1, 2.5])
    whole.update(append_id='x","event_type":', prev_hash=GENESIS_HASH, causation_id="c")
    if signed:
        whole["signature"] = "cd" * 64
    digest, body = hashed_body(copy.deepcopy(whole), key)
    stored = {**whole, "entry_hash": digest}
    assert body == canonicalize(stored)
    assert digest == entry_hash(stored, key=key)


def test_the_writer_seals_every_event_under_a_salt_of_its_own(tmp_path):
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"), clock=fixed_clock)
    actor = writer.ensure_actor(EnsureActor(tenant="acme", key="agent:w@1", kind="agent"))
    lane = writer.create_lane(CreateLane(tenant="acme", session_id="s", run_id="r", name="main"))
    writer.apply_batch([append(lane, actor, 0, 3, "a1", text="x")])
    records = lane_records(writer, lane.id)
    salts = [r["content_salt"] for r in records]
    assert len(set(salts)) == 3 and all(len(bytes.fromhex(s)) == 32 for s in salts)
    assert verify_chain(records) == records[-1]["entry_hash"]


def test_salts_are_drawn_in_bulk_and_never_repeat_across_draws():
    draws: list[int] = []

    def counted(n: int) -> bytes:
        draws.append(n)
        return os.urandom(n)

    source = SaltSource(counted)
    salts = [source.next() for _ in range(600)]  # beyond two draws
    assert len(set(salts)) == 600
    assert all(len(s) == 64 and bytes.fromhex(s).hex() == s for s in salts)
    assert draws == [32 * 256] * 3  # one OS call per 256 salts, not one per event


def test_a_writer_told_not_to_seal_commits_unsealed_events(tmp_path):
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"), clock=fixed_clock, seal=False)
    actor = writer.ensure_actor(EnsureActor(tenant="acme", key="agent:w@1", kind="agent"))
    lane = writer.create_lane(CreateLane(tenant="acme", session_id="s", run_id="r", name="main"))
    writer.apply_batch([append(lane, actor, 0, 2, "a1", text="x")])
    records = lane_records(writer, lane.id)
    assert all("content_salt" not in r for r in records)
    assert verify_chain(records) == records[-1]["entry_hash"]
