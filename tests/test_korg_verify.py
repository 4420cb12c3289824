"""``laneledger verify --format korg-ledger-v1`` against what Korg's verifiers
check (issue 20, items 4, 9, 10): the causal DAG, JSON-array journals, float
values hashed as Korg's Python reference hashes them, and ``event_sig``.

The journals are written here by hand. Their hashes and signatures come from
``korg_hash`` (tests/korg_dogfood.py) and ``korg_sign`` below, and each verdict is
compared with ``korg_reference_verify`` (there too): Korg's reference algorithm spelled out
from its spec (``json.dumps(..., sort_keys=True, separators=(",", ":"))`` →
ASCII → SHA-256 / HMAC-SHA256 / Ed25519), not from laneledger's code.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from korg_dogfood import korg_hash, korg_preimage, korg_reference_verify

from laneledger.compat.korg import check_value, read_journal, verify_journal
from laneledger.contract.errors import ChainFault, IntegrityError, InvalidRequest, NotCanonicalizable
from laneledger.contract.signing import load_public_key

REPO = Path(__file__).resolve().parents[1]
ORIGINALS = REPO.parent / "shared" / "vectors" / "korg-ledger-v1"  # Korg's published vectors
VECTORS = ORIGINALS if ORIGINALS.is_dir() else REPO / "spec" / "vectors" / "korg-ledger-v1"  # or our copy
CONFORMANCE = json.loads((VECTORS / "conformance.json").read_text())["vectors"]
GENESIS = "0" * 64
SCRIPT = Path(sys.executable).with_name("laneledger")


# -- Korg's algorithm, independently -----------------------------------------------


def korg_sign(record: dict[str, Any], private: Ed25519PrivateKey) -> str:
    return private.sign(korg_preimage(record)).hex()


def chain(
    bodies: list[dict[str, Any]],
    *,
    key: bytes | None = None,
    signer: Ed25519PrivateKey | None = None,
    seqs: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Korg records: seq_id 1.. (or ``seqs``), linked and hashed (and signed) as Korg does."""
    records, prev = [], GENESIS
    for seq, body in zip(seqs or range(1, len(bodies) + 1), bodies, strict=True):
        record = {"schema_version": "1.0", "seq_id": seq, **body, "prev_hash": prev}
        record["entry_hash"] = prev = korg_hash(record, key)
        if signer is not None:
            record["event_sig"] = korg_sign(record, signer)
        records.append(record)
    return records


def call(tool: str, triggered_by: Any = None, **args: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "source_agent": "agent:claude-code/main@2.1.150",
        "tool_name": tool,
        "args": args,
        "result": {},
        "success": True,
        "duration_ms": 1,
    }
    if triggered_by is not None:
        body["triggered_by"] = triggered_by
    return body


def session(*parents: Any) -> list[dict[str, Any]]:
    """A root prompt, then one call per parent given (its ``triggered_by``)."""
    return [call("user_prompt", prompt="go")] + [call("Read", p, path=f"f{i}") for i, p in enumerate(parents)]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run(*args: Any) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, timeout=60)


def verify_cli(path: Path, *args: Any) -> subprocess.CompletedProcess:
    return run("verify", "--format", "korg-ledger-v1", *args, path)


def fault(records: list[dict[str, Any]], **kwargs: Any) -> IntegrityError:
    with pytest.raises(IntegrityError) as caught:
        verify_journal(records, **kwargs)
    return caught.value


# -- Korg's published vectors, as conformance.json says ------------------------------


@pytest.mark.parametrize("vector", CONFORMANCE, ids=lambda v: v["file"])
@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_every_vector_as_conformance_json_says(vector, shape, tmp_path):
    """Intact: verifies and reproduces tip_entry_hash (and a keyed vector fails
    without its key). Tampered: fails naming the seq. As JSONL, as published,
    and as one JSON array of the same records, through the library and the CLI."""
    path = VECTORS / vector["file"]
    if shape == "array":
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        path = tmp_path / "journal.json"
        path.write_text(json.dumps(records, indent=2))
    key = vector["key"].encode() if vector["key"] else None
    key_args = ("--hmac-key", vector["key"]) if vector["key"] else ()
    if vector["verify"] == "intact":
        assert verify_journal(read_journal(path), key=key) == vector["tip_entry_hash"]
        done = verify_cli(path, *key_args)
        assert (done.returncode, done.stdout.decode(), done.stderr) == (
            0,
            vector["tip_entry_hash"] + "\n",
            b"",
        )
        if key:
            with pytest.raises(ChainFault, match="seq 1: content_tampered"):
                verify_journal(read_journal(path))
            assert verify_cli(path).returncode == 1
    else:
        with pytest.raises(ChainFault) as caught:
            verify_journal(read_journal(path), key=key)
        assert vector["error_contains"] in caught.value.message
        done = verify_cli(path, *key_args)
        assert done.returncode == 1
        assert done.stdout.decode().startswith(f"FAIL {vector['error_contains']}: ")


def test_our_chain_helper_reproduces_the_vectors():
    """The hand-written Korg algorithm above is Korg's: it rebuilds the vectors."""
    for vector in (v for v in CONFORMANCE if v["verify"] == "intact"):
        records = [json.loads(line) for line in (VECTORS / vector["file"]).read_text().splitlines()]
        linked = ("schema_version", "seq_id", "prev_hash", "entry_hash")
        bodies = [{k: v for k, v in r.items() if k not in linked} for r in records]
        rebuilt = chain(bodies, key=vector["key"].encode() if vector["key"] else None)
        assert rebuilt == records
        assert rebuilt[-1]["entry_hash"] == vector["tip_entry_hash"]


# -- item 4: the causal DAG -------------------------------------------------------


def test_a_well_formed_dag_passes():
    records = chain(session(1, 2, 2, 1))
    assert verify_journal(records) == records[-1]["entry_hash"]


@pytest.mark.parametrize(
    ("parents", "seq", "kind", "named"),
    [
        ((1, 4, 2), 3, "causation_not_earlier", "triggered_by 4 names a later seq_id"),
        ((1, 3), 3, "causation_not_earlier", "triggered_by 3 names the record itself"),
        ((1, 9), 3, "causation_unknown", "triggered_by 9 names no seq_id of the journal)"),
        ((0,), 2, "causation_unknown", "triggered_by 0 names no seq_id"),
        ((-1,), 2, "causation_unknown", "triggered_by -1 names no seq_id"),
    ],
    ids=["later", "itself", "absent", "zero", "negative"],
)
def test_a_triggered_by_that_is_not_an_earlier_seq_id_fails(tmp_path, parents, seq, kind, named):
    records = chain(session(*parents))
    caught = fault(records)
    assert caught.code == "integrity_failure"
    assert caught.message.startswith(f"seq {seq}: {kind} ({named}")
    assert caught.details["kind"] == kind
    assert (caught.details["seq"], caught.details["position"]) == (seq, seq)
    assert (caught.details["field"], caught.details["triggered_by"]) == ("triggered_by", parents[seq - 2])
    done = verify_cli(write_jsonl(tmp_path / "j.jsonl", records))
    assert (done.returncode, done.stderr) == (1, b"")
    assert done.stdout.decode() == f"FAIL {caught.message}\n"


def test_a_nested_record_names_its_parent_in_metadata(tmp_path):
    """Korg's journal shape (§1.2.2) carries triggered_by in metadata (SPEC §9.3)."""
    bodies = [{"metadata": {"triggered_by": p}, "event": {"tool_name": "Read"}} for p in (None, 1, 3, 2)]
    records = chain(bodies)
    caught = fault(records)
    assert (caught.details["kind"], caught.details["seq"]) == ("causation_not_earlier", 3)
    assert caught.details["field"] == "metadata.triggered_by"
    intact = chain(bodies[:2])
    assert verify_journal(intact) == intact[-1]["entry_hash"]


@pytest.mark.parametrize("parent", [None, "1", 1.0, True], ids=["null", "string", "float", "bool"])
def test_a_triggered_by_that_is_not_an_integer_is_no_link(parent):
    """Korg's verifiers check integer triggered_by only; so does this one."""
    records = chain([call("user_prompt"), {**call("Read"), "triggered_by": parent}])
    assert verify_journal(records) == records[-1]["entry_hash"]


def test_a_chain_fault_is_reported_before_an_earlier_dag_fault():
    """Korg lists chain errors before DAG errors; the first of that list is ours."""
    records = chain(session(1, 5, 2, 2))  # seq 3 names a later seq ...
    records[4]["args"] = {"path": "edited"}  # ... and seq 5 is tampered
    with pytest.raises(ChainFault, match="seq 5: content_tampered"):
        verify_journal(records)


# -- seq_ids: Korg's rule (unique integers), not laneledger's (1, 2, 3 …) ---------------


def numbered(seqs: list[int], parents: list[int | None]) -> list[dict[str, Any]]:
    """A journal whose records carry ``seqs`` and, as ``triggered_by``, ``parents``."""
    bodies = [call("user_prompt" if p is None else "Read", p, path=f"f{i}") for i, p in enumerate(parents)]
    return chain(bodies, seqs=seqs)


# A session's journal from a shared ledger: seq_ids are ledger positions.
GAPPED = ([3, 4, 7, 12, 13], [None, 3, 4, 4, 12])


@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_seq_ids_with_gaps_verify(tmp_path, shape):
    records = numbered(*GAPPED)
    assert korg_reference_verify(records) == []
    assert verify_journal(records) == records[-1]["entry_hash"]
    path = tmp_path / "journal.json"
    path.write_text(
        json.dumps(records) if shape == "array" else "".join(json.dumps(r) + "\n" for r in records)
    )
    assert verify_journal(read_journal(path)) == records[-1]["entry_hash"]
    done = verify_cli(path)
    assert (done.returncode, done.stdout.decode(), done.stderr) == (0, records[-1]["entry_hash"] + "\n", b"")


def test_seq_ids_with_gaps_keyed_and_signed_verify(tmp_path):
    bodies = [call("user_prompt"), call("Read", 5, path="a"), call("Read", 9, path="b")]
    records = chain(bodies, seqs=[5, 9, 40], key=b"k", signer=SIGNER)
    path = write_jsonl(tmp_path / "j.jsonl", records)
    done = verify_cli(path, "--hmac-key", "k", "--public-key", PUBLIC_HEX)
    assert (done.returncode, done.stdout.decode()) == (0, records[-1]["entry_hash"] + "\n")
    assert verify_cli(path).stdout.startswith(b"FAIL seq 5: content_tampered")  # the key still counts
    swapped = with_sig(records, 2, records[0]["event_sig"])  # another record's signature
    caught = fault(swapped, key=b"k", public_key=PUBLIC)
    assert (caught.details["kind"], caught.details["seq"], caught.details["position"]) == (
        "signature_invalid",
        9,
        2,
    )


def test_seq_ids_in_any_order_verify_as_korgs_do():
    """Korg's verifiers require no order of seq_ids, nor that they be positive:
    only uniqueness, and a triggered_by smaller than the record's own seq_id
    that some record of the journal carries (here one read later)."""
    records = numbered([10, 0, -4, 11], [None, -4, None, 10])
    assert korg_reference_verify(records) == []
    assert verify_journal(records) == records[-1]["entry_hash"]


@pytest.mark.parametrize(
    ("seqs", "parents", "fault_at", "kind", "text"),
    [
        (
            [3, 5, 5, 8],
            [None, 3, 3, 5],
            (5, 3),
            "duplicate_seq_id",
            "the record at position 3 repeats the seq_id of position 2",
        ),
        (
            [3, 5, 8, 3],
            [None, 3, 5, None],
            (3, 4),
            "duplicate_seq_id",
            "the record at position 4 repeats the seq_id of position 1",
        ),
        (
            [3, 5, 8],
            [None, 3, 4],
            (8, 3),
            "causation_unknown",
            "triggered_by 4 names no seq_id of the journal)",
        ),
        ([3, 5, 8], [None, 8, 5], (5, 2), "causation_not_earlier", "triggered_by 8 names a later seq_id"),
        ([3, 5, 8], [None, 3, 8], (8, 3), "causation_not_earlier", "triggered_by 8 names the record itself"),
        ([9, 2], [None, 9], (2, 2), "causation_not_earlier", "triggered_by 9 names a later seq_id"),
    ],
    ids=[
        "duplicate",
        "duplicate-far",
        "names-a-gap",
        "names-a-later-one",
        "names-itself",
        "smaller-after-larger",
    ],
)
def test_what_korg_refuses_in_seq_ids_fails_naming_the_record(tmp_path, seqs, parents, fault_at, kind, text):
    records = numbered(seqs, parents)
    assert korg_reference_verify(records) != []  # Korg's verifier refuses it too
    caught = fault(records)
    assert caught.code == "integrity_failure" and caught.details["kind"] == kind
    assert (caught.details["seq"], caught.details["position"]) == fault_at
    assert caught.message.startswith(f"seq {fault_at[0]}: {kind} ({text}")
    if kind == "duplicate_seq_id":
        assert caught.details["field"] == "seq_id"
        assert caught.details["first_position"] == seqs.index(fault_at[0]) + 1
    done = verify_cli(write_jsonl(tmp_path / "j.jsonl", records))
    assert (done.returncode, done.stdout.decode(), done.stderr) == (1, f"FAIL {caught.message}\n", b"")


def test_a_deleted_record_among_gapped_seq_ids_is_a_broken_link():
    records = numbered(*GAPPED)
    del records[2]  # seq 7
    assert korg_reference_verify(records)[0] == "seq 12: prev_hash breaks the chain"
    with pytest.raises(ChainFault) as caught:
        verify_journal(records)
    assert caught.value.details == {
        "kind": "broken_link",
        "seq": 12,
        "position": 3,
        "field": "prev_hash",
        "expected": records[1]["entry_hash"],
        "found": records[2]["prev_hash"],
    }
    expected, found = records[1]["entry_hash"], records[2]["prev_hash"]
    assert caught.value.message == f"seq 12: broken_link (prev_hash expected {expected}, found {found})"


def test_a_duplicate_is_reported_after_a_chain_fault_and_before_a_dag_fault():
    """Korg lists chain errors, then "duplicate seq_id present", then each bad
    triggered_by; the first of that list is the fault reported."""
    records = numbered([1, 2, 6, 2], [None, 9, 1, 1])  # seq 2 names no seq_id; seq 2 repeats
    assert korg_reference_verify(records) == [
        "duplicate seq_id present",
        "seq 2: triggered_by 9 does not exist",
    ]
    assert fault(records).details["kind"] == "duplicate_seq_id"
    records[3]["args"] = {"path": "edited"}
    with pytest.raises(ChainFault) as caught:
        verify_journal(records)
    assert (caught.value.details["kind"], caught.value.details["position"]) == ("content_tampered", 4)


@pytest.mark.parametrize("seq", ["2", None, True, 2.0], ids=["string", "null", "bool", "float"])
def test_a_seq_id_that_is_not_an_integer_is_not_chained(seq):
    """Reading refuses such a record (exit 2); handed one directly, the
    verifier names it by position."""
    records = chain(session(1, 1))
    records[1] = {**records[1], "seq_id": seq}
    with pytest.raises(ChainFault) as caught:
        verify_journal(records)
    assert caught.value.details["kind"] == "not_chained"
    assert (caught.value.details["seq"], caught.value.details["position"], caught.value.details["field"]) == (
        None,
        2,
        "seq_id",
    )
    assert caught.value.message.startswith("position 2: not_chained (seq_id expected an integer, found ")


# -- item 9: JSON arrays and floats -------------------------------------------------


def test_a_json_array_journal_passes(tmp_path):
    records = chain(session(1, 2, 2))
    path = tmp_path / ".korg" / "journal.json"  # Korg CI's default path
    path.parent.mkdir()
    path.write_text("\n  " + json.dumps(records, indent=2) + "\n")
    assert list(read_journal(path)) == records
    done = verify_cli(path)
    assert (done.returncode, done.stdout.decode()) == (0, records[-1]["entry_hash"] + "\n")
    (tmp_path / "empty.json").write_text("[]")
    assert (
        run("verify", "--format", "korg-ledger-v1", tmp_path / "empty.json").stdout
        == GENESIS.encode() + b"\n"
    )


def test_a_json_array_with_a_dag_fault_fails(tmp_path):
    path = tmp_path / "journal.json"
    path.write_text(json.dumps(chain(session(1, 7))))
    done = verify_cli(path)
    assert (done.returncode, done.stdout.decode()) == (
        1,
        "FAIL seq 3: causation_unknown (triggered_by 7 names no seq_id of the journal)\n",
    )


@pytest.mark.parametrize(
    ("element", "error", "text"),
    [
        ("[1]", InvalidRequest, "$[1]: expected a JSON object"),
        ('{"seq_id": 2, "prev_hash": "x"}', InvalidRequest, "field $[1].entry_hash: missing"),
        ('{"seq_id": 2, "prev_hash": "x", "entry_hash": "y", "c": 1e999}', NotCanonicalizable, "inf"),
    ],
)
def test_a_bad_record_in_an_array_is_named_by_its_index(tmp_path, element, error, text):
    first = json.dumps(chain(session())[0])
    path = tmp_path / "journal.json"
    path.write_text(f"[{first},\n{element}]")
    with pytest.raises(error) as caught:
        list(read_journal(path))
    assert caught.value.details["index"] == 1 and caught.value.details["file"] == str(path)
    assert text in caught.value.message
    if error is NotCanonicalizable:
        assert caught.value.details["path"] == "$[1].c"
    done = verify_cli(path)
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode().startswith(f"laneledger: {path}: ")


# A result line with floats as a producer may spell them; the preimage below is
# written out by hand as Korg's Python reference (json.dumps → float repr) makes it.
FLOAT_LINE = (
    '{"schema_version": "1.0", "seq_id": 1, "source_agent": "agent:claude-code/main@2.1.150", '
    '"tool_name": "result", "args": {}, "result": {"total_cost_usd": 0.0123450, "ratio": 1.0E-5, '
    '"big": 1.5e16, "whole": 3.0, "neg": -0.25}, "success": true, "duration_ms": 1500, '
    '"prev_hash": "' + GENESIS + '"'
)
FLOAT_PREIMAGE = (
    b'{"args":{},"duration_ms":1500,"prev_hash":"' + GENESIS.encode() + b'",'
    b'"result":{"big":1.5e+16,"neg":-0.25,"ratio":1e-05,"total_cost_usd":0.012345,"whole":3.0},'
    b'"schema_version":"1.0","seq_id":1,"source_agent":"agent:claude-code/main@2.1.150",'
    b'"success":true,"tool_name":"result"}'
)


def test_float_costs_hash_as_korgs_python_reference(tmp_path):
    expected = hashlib.sha256(FLOAT_PREIMAGE).hexdigest()
    path = tmp_path / "floats.jsonl"
    path.write_text(FLOAT_LINE + f', "entry_hash": "{expected}"}}\n')
    assert verify_journal(read_journal(path)) == expected
    done = verify_cli(path)
    assert (done.returncode, done.stdout.decode(), done.stderr) == (0, expected + "\n", b"")
    # Keyed, too.
    keyed = hmac.new(b"k", FLOAT_PREIMAGE, hashlib.sha256).hexdigest()
    path.write_text(FLOAT_LINE + f', "entry_hash": "{keyed}"}}\n')
    assert verify_cli(path, "--hmac-key", "k").returncode == 0


def test_float_costs_hashed_another_way_fail(tmp_path):
    """RFC 8785 spells 1e-05 as 0.00001 and 1.5e16 as 15000000000000000: a
    journal hashed that way is not what Korg's reference computes."""
    jcs = (
        FLOAT_PREIMAGE.replace(b"1e-05", b"0.00001")
        .replace(b"1.5e+16", b"15000000000000000")
        .replace(b"3.0", b"3")
    )
    path = tmp_path / "floats.jsonl"
    path.write_text(FLOAT_LINE + f', "entry_hash": "{hashlib.sha256(jcs).hexdigest()}"}}\n')
    done = verify_cli(path)
    assert done.returncode == 1 and done.stdout.startswith(b"FAIL seq 1: content_tampered")


def test_the_export_subset_still_refuses_floats():
    """check_value's default is what every Korg verifier hashes alike (its JS one
    refuses floats): the export keeps refusing them."""
    with pytest.raises(NotCanonicalizable) as caught:
        check_value({"result": {"total_cost_usd": 0.5}})
    assert caught.value.details == {"path": "$.result.total_cost_usd", "reason": "float_not_allowed"}
    check_value({"result": {"total_cost_usd": 0.5}}, floats=True)


# -- item 10: event_sig --------------------------------------------------------------

SIGNER = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUBLIC_HEX = SIGNER.public_key().public_bytes_raw().hex()
PUBLIC = load_public_key(PUBLIC_HEX)


def test_a_signed_journal_verifies_under_its_key(tmp_path):
    records = chain(session(1, 2), signer=SIGNER)
    assert verify_journal(records, public_key=PUBLIC) == records[-1]["entry_hash"]
    path = write_jsonl(tmp_path / "signed.jsonl", records)
    done = verify_cli(path, "--public-key", PUBLIC_HEX)
    assert (done.returncode, done.stdout.decode()) == (0, records[-1]["entry_hash"] + "\n")
    assert verify_cli(path).returncode == 0  # event_sig is not hashed: verifies without a key too
    keyed = chain(session(1), key=b"k", signer=SIGNER)  # HMAC and signatures together
    keyed_path = write_jsonl(tmp_path / "keyed.jsonl", keyed)
    assert verify_cli(keyed_path, "--hmac-key", "k", "--public-key", PUBLIC_HEX).returncode == 0


def forged(records: list[dict[str, Any]], seq: int) -> list[dict[str, Any]]:
    """Edit record ``seq`` and re-hash the chain from there, as anyone can
    (plain SHA-256), keeping the signatures: only those give it away."""
    records = [dict(r) for r in records]
    records[seq - 1]["args"] = {"path": "/etc/passwd"}
    for i in range(seq - 1, len(records)):
        if i:
            records[i]["prev_hash"] = records[i - 1]["entry_hash"]
        records[i]["entry_hash"] = korg_hash(records[i])
    return records


DROP = object()


def with_sig(records: list[dict[str, Any]], seq: int, signature: Any) -> list[dict[str, Any]]:
    """A copy with record ``seq``'s event_sig set to ``signature`` (``DROP``: none)."""
    changed = {k: v for k, v in records[seq - 1].items() if k != "event_sig"}
    if signature is not DROP:
        changed["event_sig"] = signature
    return [*records[: seq - 1], changed, *records[seq:]]


@pytest.mark.parametrize(
    ("tamper", "seq", "kind"),
    [
        (lambda rs: forged(rs, 2), 2, "signature_invalid"),
        (lambda rs: with_sig(rs, 3, korg_sign(rs[2], Ed25519PrivateKey.generate())), 3, "signature_invalid"),
        (lambda rs: with_sig(rs, 2, "zz"), 2, "signature_invalid"),
        (lambda rs: with_sig(rs, 2, None), 2, "signature_invalid"),
        (lambda rs: with_sig(rs, 3, DROP), 3, "signature_missing"),
    ],
    ids=["forged-and-rehashed", "another-key", "not-hex", "null", "missing"],
)
def test_a_bad_or_missing_event_sig_fails_naming_the_record(tmp_path, tamper, seq, kind):
    records = tamper(chain(session(1, 2), signer=SIGNER))
    assert verify_journal(records) == records[-1]["entry_hash"]  # the chain alone holds
    caught = fault(records, public_key=PUBLIC)
    assert caught.code == "integrity_failure"
    assert (caught.details["kind"], caught.details["seq"], caught.details["field"]) == (
        kind,
        seq,
        "event_sig",
    )
    assert caught.message.startswith(f"seq {seq}: {kind} (")
    done = verify_cli(write_jsonl(tmp_path / "j.jsonl", records), "--public-key", PUBLIC_HEX)
    assert (done.returncode, done.stdout.decode()) == (1, f"FAIL {caught.message}\n")


def test_an_unsigned_journal_with_a_key_is_refused():
    """As Korg's verifier with a pinned signer: every record must be signed."""
    path = VECTORS / "basic-intact.jsonl"
    done = verify_cli(path, "--public-key", PUBLIC_HEX)
    assert (done.returncode, done.stdout.decode()) == (
        1,
        "FAIL seq 1: signature_missing (no event_sig, and a public key requires every record to be signed)\n",
    )


def test_a_dag_fault_is_reported_before_a_signature_fault():
    records = chain(session(1, 9), signer=SIGNER)
    assert fault(with_sig(records, 2, "00" * 64), public_key=PUBLIC).details["kind"] == "causation_unknown"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("--format", "korg-ledger-v1", "--public-key", "abc"), "not an ed25519 public key in hex"),
        (("--public-key", PUBLIC_HEX), "--public-key is for a --format korg-ledger-v1 file"),
    ],
)
def test_a_public_key_option_misused_is_a_usage_error(args, text):
    done = run("verify", *args, VECTORS / "basic-intact.jsonl")
    assert done.returncode == 2 and done.stdout == b""
    assert text in done.stderr.decode()
