"""Conformance vectors (spec/vectors) and the hash-chain verifier."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laneledger.compat.korg import KORG_LEDGER_V1, korg_canonical, read_jsonl
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import GENESIS_HASH, LANELEDGER, append_digest, entry_hash, link, verify_chain
from laneledger.contract.errors import ChainFault, InvalidRequest, MalformedMessage, NotCanonicalizable

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO / "spec" / "vectors"
ORIGINALS = REPO.parent / "shared" / "vectors"
KORG = VECTORS / "korg-ledger-v1"
CONFORMANCE = json.loads((KORG / "conformance.json").read_text())["vectors"]
APPEND = json.loads((VECTORS / "agent-ledger" / "append.json").read_text())

# conformance.json names the seq; the kind follows from what was done to the file.
TAMPER_KIND = {"tampered-content.jsonl": "content_tampered", "tampered-deletion.jsonl": "broken_link"}


def fault_of(records, **kwargs) -> ChainFault:
    with pytest.raises(ChainFault) as caught:
        verify_chain(records, **kwargs)
    return caught.value


# -- agent-ledger append vector ---------------------------------------------------


def test_append_vector_canonical_bytes():
    assert canonicalize(APPEND["events"]) == APPEND["canonical"].encode("utf-8")


def test_append_vector_digest():
    assert append_digest(APPEND["events"]) == APPEND["sha256"]
    assert hashlib.sha256(APPEND["canonical"].encode()).hexdigest() == APPEND["sha256"]


# -- korg-ledger-v1 vectors -------------------------------------------------------


@pytest.mark.parametrize("vector", CONFORMANCE, ids=lambda v: v["file"])
def test_korg_conformance(vector):
    key = vector["key"].encode() if vector["key"] else None
    records = read_jsonl(KORG / vector["file"])
    if vector["verify"] == "intact":
        assert verify_chain(records, profile=KORG_LEDGER_V1, key=key) == vector["tip_entry_hash"]
    else:
        fault = fault_of(records, profile=KORG_LEDGER_V1, key=key)
        assert vector["error_contains"] in fault.message
        assert fault.details["kind"] == TAMPER_KIND[vector["file"]]
        assert f"seq {fault.details['seq']}" == vector["error_contains"]


def test_korg_hmac_vector_without_key_fails_at_seq_1():
    fault = fault_of(read_jsonl(KORG / "hmac-intact.jsonl"), profile=KORG_LEDGER_V1)
    assert (fault.details["kind"], fault.details["seq"]) == ("content_tampered", 1)
    assert "seq 1" in fault.message


def test_korg_plain_vector_with_a_key_fails():
    fault = fault_of(
        read_jsonl(KORG / "basic-intact.jsonl"), profile=KORG_LEDGER_V1, key=b"korg-conformance-key"
    )
    assert (fault.details["kind"], fault.details["seq"]) == ("content_tampered", 1)


def test_korg_event_sig_is_not_hashed():
    records = list(read_jsonl(KORG / "basic-intact.jsonl"))
    records[1]["event_sig"] = "anything"
    assert verify_chain(records, profile=KORG_LEDGER_V1) == CONFORMANCE[0]["tip_entry_hash"]


def test_korg_canonical_form():
    assert korg_canonical({"b": 1, "a": ["é", None, True]}) == b'{"a":["\\u00e9",null,true],"b":1}'
    assert korg_canonical(-(2**53 - 1)) == b"-9007199254740991"
    # Floats as Korg's Python reference (json.dumps, i.e. repr) writes them.
    assert korg_canonical([0.5, 5.0, 1e-05, 1.5e16, -0.0]) == b"[0.5,5.0,1e-05,1.5e+16,-0.0]"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"args": {"t": float("inf")}}, "$.args.t"),
        ({"args": [1, 2**53]}, "$.args[1]"),
        ({"n": -(2**53)}, "$.n"),
        ({"odd key": float("nan")}, '$["odd key"]'),
        ({"x": {1: "a"}}, "$.x"),
        ({"x": (1, 2)}, "$.x"),
    ],
)
def test_korg_refuses_what_it_cannot_hash(value, path):
    with pytest.raises(NotCanonicalizable) as caught:
        korg_canonical(value)
    assert caught.value.details["path"] == path


# -- korg JSONL reader ------------------------------------------------------------

GOOD_LINE = f'{{"seq_id": 1, "prev_hash": "{GENESIS_HASH}", "entry_hash": "{GENESIS_HASH}"}}'


@pytest.mark.parametrize(
    ("line", "error", "field", "text"),
    [
        ('{"seq_id": 1,', MalformedMessage, None, "bad JSON"),
        ("[1, 2]", InvalidRequest, None, "expected a JSON object"),
        ('{"prev_hash": "", "entry_hash": ""}', InvalidRequest, "seq_id", "field seq_id: missing"),
        (
            '{"seq_id": "3", "prev_hash": "", "entry_hash": ""}',
            InvalidRequest,
            "seq_id",
            "field seq_id: expected an integer",
        ),
        (
            '{"seq_id": true, "prev_hash": "", "entry_hash": ""}',
            InvalidRequest,
            "seq_id",
            "expected an integer",
        ),
        (
            '{"seq_id": 3, "prev_hash": null, "entry_hash": ""}',
            InvalidRequest,
            "prev_hash",
            "field prev_hash: expected a string",
        ),
        (
            '{"seq_id": 3, "prev_hash": "", "entry_hash": 7}',
            InvalidRequest,
            "entry_hash",
            "field entry_hash: expected a string",
        ),
        (
            '{"seq_id": 3, "prev_hash": "", "entry_hash": "", "a": 1e400}',
            NotCanonicalizable,
            None,
            "inf has no JSON form",
        ),
        (
            '{"seq_id": 3, "seq_id": 3, "prev_hash": "", "entry_hash": ""}',
            MalformedMessage,
            None,
            'duplicate object key "seq_id"',
        ),
        ('{"seq_id": 3, "prev_hash": "", "entry_hash": "", "a": NaN}', MalformedMessage, None, "NaN"),
    ],
)
def test_korg_reader_names_file_line_and_problem(tmp_path, line, error, field, text):
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD_LINE}\n\n{line}\n{GOOD_LINE}\n")  # the blank line counts as line 2
    with pytest.raises(error) as caught:
        list(read_jsonl(path))
    details = caught.value.details
    assert (details["file"], details["line"]) == (str(path), 3)
    assert details.get("field") == field
    assert text in caught.value.message


def test_korg_reader_not_utf8(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(GOOD_LINE.encode() + b'\n{"a": "\xff"}\n')
    with pytest.raises(MalformedMessage) as caught:
        list(read_jsonl(path))
    assert caught.value.details["line"] == 2


# -- laneledger profile round trip -------------------------------------------------


def build_chain(n: int, *, key: bytes | None = None) -> list[dict]:
    records, prev = [], GENESIS_HASH
    for seq in range(1, n + 1):
        record = link(
            {
                "seq": seq,
                "event_type": "attempt.requested",
                "payload": {"n": seq, "temperature": 0.25, "who": "é"},
            },
            prev,
            key=key,
        )
        records.append(record)
        prev = record["entry_hash"]
    return records


def test_round_trip_intact():
    chain = build_chain(5)
    assert chain[0]["prev_hash"] == GENESIS_HASH
    assert verify_chain(chain) == chain[-1]["entry_hash"]
    assert verify_chain(chain, profile=LANELEDGER) == chain[-1]["entry_hash"]


def test_empty_chain_is_genesis():
    assert verify_chain([]) == GENESIS_HASH
    assert verify_chain(iter(())) == GENESIS_HASH


def test_entry_hash_is_sha256_of_rfc8785_without_hash_and_signature():
    record = build_chain(1)[0]
    preimage = canonicalize({k: v for k, v in record.items() if k != "entry_hash"})
    assert record["entry_hash"] == hashlib.sha256(preimage).hexdigest()
    assert entry_hash({**record, "signature": "sig"}) == record["entry_hash"]


def test_link_does_not_mutate_and_replaces_a_stale_hash():
    record = {"seq": 1, "entry_hash": "stale"}
    linked = link(record, GENESIS_HASH)
    assert record == {"seq": 1, "entry_hash": "stale"}
    assert linked["entry_hash"] == entry_hash(linked) != "stale"


def check(chain, kind: str, seq: int | None, **kwargs) -> ChainFault:
    fault = fault_of(chain, **kwargs)
    assert (fault.details["kind"], fault.details["seq"]) == (kind, seq)
    if seq is not None:
        assert fault.message.startswith(f"seq {seq}: {kind} (")
    return fault


def test_tampered_content():
    chain = build_chain(5)
    chain[2]["payload"]["n"] = 99
    fault = check(chain, "content_tampered", 3)
    assert fault.details["found"] == chain[2]["entry_hash"]


def test_deleted_record():
    chain = build_chain(5)
    del chain[2]
    fault = check(chain, "broken_link", 4)
    assert (fault.details["field"], fault.details["expected"], fault.details["found"]) == ("seq", 3, 4)


def test_deleted_and_renumbered_record_breaks_the_link():
    chain = build_chain(5)
    del chain[2]
    chain[2]["seq"] = 3  # renumbering hides the gap but not the hash link
    fault = check(chain, "broken_link", 3)
    assert fault.details["field"] == "prev_hash"


def test_stripped_prev_hash():
    chain = build_chain(5)
    del chain[1]["prev_hash"]
    fault = check(chain, "not_chained", 2)
    assert fault.details["found"] is None
    assert "prev_hash expected 64 lowercase hex, found nothing" in fault.message


@pytest.mark.parametrize("bad", [None, "ABC", "A" * 64, 7])
def test_malformed_entry_hash_is_not_chained(bad):
    chain = build_chain(3)
    chain[2]["entry_hash"] = bad
    check(chain, "not_chained", 3)


@pytest.mark.parametrize("bad", [None, "1", True, 1.0])
def test_non_integer_order_field_is_not_chained(bad):
    chain = build_chain(3)
    chain[1]["seq"] = bad
    fault = check(chain, "not_chained", None)
    assert fault.details["position"] == 2
    assert fault.message.startswith("position 2: not_chained (seq expected an integer")


def test_reordered_records():
    chain = build_chain(5)
    chain[1], chain[2] = chain[2], chain[1]
    fault = check(chain, "broken_link", 3)
    assert fault.details["position"] == 2


def test_chain_must_start_at_seq_1():
    check(build_chain(5)[1:], "broken_link", 2)


def test_rewritten_link_is_reported_as_broken_link():
    chain = build_chain(3)
    chain[1]["prev_hash"] = "f" * 64
    check(chain, "broken_link", 2)


def test_hmac_chain_needs_the_right_key():
    chain = build_chain(4, key=b"secret")
    assert verify_chain(chain, key=b"secret") == chain[-1]["entry_hash"]
    check(chain, "content_tampered", 1)
    check(chain, "content_tampered", 1, key=b"wrong")
    check(build_chain(4), "content_tampered", 1, key=b"secret")


def test_fault_is_reported_at_the_first_bad_record_only():
    chain = build_chain(5)
    chain[3]["payload"]["n"] = 0
    del chain[1]
    check(chain, "broken_link", 3)


json_scalars = st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(payloads=st.lists(json_values, min_size=1, max_size=6), data=st.data())
def test_any_changed_payload_is_caught_where_it_was_changed(payloads, data):
    chain, prev = [], GENESIS_HASH
    for seq, payload in enumerate(payloads, start=1):
        chain.append(link({"seq": seq, "payload": payload}, prev))
        prev = chain[-1]["entry_hash"]
    assert verify_chain(chain) == prev
    victim = data.draw(st.integers(0, len(chain) - 1))
    replacement = data.draw(
        json_values.filter(lambda v: canonicalize(v) != canonicalize(chain[victim]["payload"]))
    )
    chain[victim]["payload"] = replacement
    check(chain, "content_tampered", victim + 1)


# -- the copies are the originals ------------------------------------------------


def test_vector_copies_equal_the_originals():
    if not ORIGINALS.is_dir():
        pytest.skip(f"originals not found at {ORIGINALS}")
    originals = sorted(p.relative_to(ORIGINALS) for p in ORIGINALS.rglob("*") if p.is_file())
    assert originals
    for relative in originals:  # every original copied unchanged (more files may be added)
        copy = VECTORS / relative
        assert copy.is_file(), f"{relative} is not copied into spec/vectors"
        assert copy.read_bytes() == (ORIGINALS / relative).read_bytes(), f"{relative} differs"
