"""laneledger.tlog against published vectors (spec/vectors/tlog): RFC 6962
hashes, roots, audit paths and consistency proofs from transparency-dev/merkle,
and a signed note with its keys from golang.org/x/mod's sumdb/note."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from tlog_support import corrupt_consistency, corrupt_inclusion

from laneledger.contract.errors import LedgerError, ProofInvalid
from laneledger.tlog import merkle
from laneledger.tlog.note import Ed25519Verifier, Signer, open_note, sign_note

VECTORS = Path(__file__).resolve().parents[1] / "spec" / "vectors" / "tlog"
MERKLE = json.loads((VECTORS / "merkle.json").read_text())
NOTE = json.loads((VECTORS / "note.json").read_text(encoding="utf-8"))

LEAVES = [merkle.leaf_hash(bytes.fromhex(d)) for d in MERKLE["leaves"]]
ROOTS = [bytes.fromhex(r) for r in MERKLE["roots"]]
SOURCE = merkle.LeafList(LEAVES)


def verifies(check, args) -> bool:
    """Whether ``check(*args)`` accepts the proof; ``ProofInvalid`` is the
    only refusal counted (any other error fails the test)."""
    try:
        check(*args)
    except ProofInvalid:
        return False
    return True


def _proof(vector: dict) -> list[bytes]:
    return [bytes.fromhex(h) for h in vector["proof"]]


@pytest.mark.parametrize("vector", MERKLE["hasher"], ids=lambda v: v["desc"])
def test_hasher(vector):
    if vector["op"] == "empty_root":
        got = merkle.EMPTY_ROOT
    elif vector["op"] == "leaf":
        got = merkle.leaf_hash(bytes.fromhex(vector["data"]))
    else:
        got = merkle.node_hash(bytes.fromhex(vector["left"]), bytes.fromhex(vector["right"]))
    assert got.hex() == vector["want"]


@pytest.mark.parametrize("size", range(1, 9))
def test_root_of_every_prefix(size):
    assert merkle.root(size, SOURCE) == ROOTS[size - 1]
    assert merkle.root_of(LEAVES[:size]) == ROOTS[size - 1]


@pytest.mark.parametrize("vector", MERKLE["inclusion"], ids=lambda v: f"{v['leaf']}-of-{v['size']}")
def test_inclusion_vectors_generated_and_verified(vector):
    index, size, proof = vector["leaf"] - 1, vector["size"], _proof(vector)
    assert merkle.inclusion_proof(index, size, SOURCE) == proof
    merkle.verify_inclusion(index, size, LEAVES[index], proof, ROOTS[size - 1])


@pytest.mark.parametrize("vector", MERKLE["inclusion"], ids=lambda v: f"{v['leaf']}-of-{v['size']}")
def test_every_corrupted_inclusion_proof_fails(vector):
    index, size, proof = vector["leaf"] - 1, vector["size"], _proof(vector)
    probes = list(corrupt_inclusion(index, size, proof, ROOTS[size - 1], LEAVES[index]))
    assert len(probes) >= 10
    assert [desc for desc, args in probes if verifies(merkle.verify_inclusion, args)] == []


@pytest.mark.parametrize("vector", MERKLE["consistency"], ids=lambda v: f"{v['size1']}-to-{v['size2']}")
def test_consistency_vectors_generated_and_verified(vector):
    size1, size2, proof = vector["size1"], vector["size2"], _proof(vector)
    assert merkle.consistency_proof(size1, size2, SOURCE) == proof
    merkle.verify_consistency(size1, size2, ROOTS[size1 - 1], ROOTS[size2 - 1], proof)


@pytest.mark.parametrize(
    "vector", [v for v in MERKLE["consistency"] if v["proof"]], ids=lambda v: f"{v['size1']}-to-{v['size2']}"
)
def test_every_corrupted_consistency_proof_fails(vector):
    size1, size2, proof = vector["size1"], vector["size2"], _proof(vector)
    probes = list(corrupt_consistency(size1, size2, ROOTS[size1 - 1], ROOTS[size2 - 1], proof))
    assert len(probes) >= 16
    assert [desc for desc, args in probes if verifies(merkle.verify_consistency, args)] == []


# The Go test's cases for trivial sizes (TestVerifyConsistency): which verify.
DONT_CARE_1, DONT_CARE_2 = b"1" * 32, b"2" * 32
TRIVIAL = [
    (0, 0, DONT_CARE_1, DONT_CARE_2, [], False),
    (1, 1, DONT_CARE_1, DONT_CARE_2, [], False),
    (0, 0, DONT_CARE_1, DONT_CARE_1, [], True),
    (0, 1, DONT_CARE_1, DONT_CARE_2, [], True),
    (1, 1, DONT_CARE_2, DONT_CARE_2, [], True),
    (1, 0, DONT_CARE_1, DONT_CARE_2, [], False),
    (2, 1, DONT_CARE_1, DONT_CARE_2, [], False),
    (1, 2, DONT_CARE_1, DONT_CARE_2, [], False),
    (0, 0, merkle.EMPTY_ROOT, merkle.EMPTY_ROOT, [merkle.EMPTY_ROOT], False),
    (0, 1, merkle.EMPTY_ROOT, merkle.EMPTY_ROOT, [merkle.EMPTY_ROOT], False),
    (1, 1, merkle.EMPTY_ROOT, merkle.EMPTY_ROOT, [merkle.EMPTY_ROOT], False),
]


@pytest.mark.parametrize(("size1", "size2", "root1", "root2", "proof", "ok"), TRIVIAL)
def test_trivial_consistency_cases(size1, size2, root1, root2, proof, ok):
    if ok:
        merkle.verify_consistency(size1, size2, root1, root2, proof)
    else:
        with pytest.raises(ProofInvalid):
            merkle.verify_consistency(size1, size2, root1, root2, proof)


@pytest.mark.parametrize(("index", "size"), [(0, 0), (0, 1), (1, 0), (2, 1)])
def test_inclusion_with_no_proof_and_wrong_hashes_fails(index, size):
    for leaf, root in ((merkle.EMPTY_ROOT, DONT_CARE_1), (DONT_CARE_1, merkle.EMPTY_ROOT)):
        with pytest.raises(LedgerError):
            merkle.verify_inclusion(index, size, leaf, [], root)


# -- golang.org/x/mod sumdb/note ------------------------------------------------


def test_the_published_keys_parse_to_one_pair():
    signer = Signer.from_text(NOTE["skey"])
    verifier = Ed25519Verifier.from_text(NOTE["vkey"])
    assert signer.verifier().to_text() == NOTE["vkey"]
    assert signer.to_text() == NOTE["skey"]
    assert (signer.name, signer.key_id) == (verifier.name, verifier.key_id) == ("PeterNeumann", 0xC74F20A3)


def test_signing_reproduces_the_published_note_byte_for_byte():
    signer = Signer.from_text(NOTE["skey"])
    assert sign_note(NOTE["text"], [signer]) == NOTE["signed"]


def test_the_published_note_opens_with_the_published_verifier():
    note = open_note(NOTE["signed"], [Ed25519Verifier.from_text(NOTE["vkey"])])
    assert note.text == NOTE["text"]
    assert [(s.name, s.key_id) for s in note.verified] == [("PeterNeumann", 0xC74F20A3)]


@pytest.mark.parametrize("bad", NOTE["bad_vkeys"], ids=lambda b: b["why"])
def test_the_published_bad_verifier_keys_are_refused(bad):
    with pytest.raises(LedgerError):
        Ed25519Verifier.from_text(bad["vkey"])


def test_every_mangling_of_the_published_verifier_key_is_refused():
    """TestNewVerifier's manglings: every proper substring, every character
    bumped by one."""
    vkey = NOTE["vkey"]
    refused = 0
    for i in range(len(vkey) + 1):
        for j in range(i + 1, len(vkey) + 1):
            if (i, j) != (0, len(vkey)):
                with pytest.raises(LedgerError):
                    Ed25519Verifier.from_text(vkey[i:j])
                refused += 1
    for i in range(len(vkey)):
        with pytest.raises(LedgerError):
            Ed25519Verifier.from_text(vkey[:i] + chr(ord(vkey[i]) + 1) + vkey[i + 1 :])
        refused += 1
    assert refused > len(vkey) ** 2 // 2


# -- transparency-dev/merkle testdata/*.json, byte for byte -----------------------

TESTDATA = VECTORS / "testdata"
TESTDATA_FILES = sorted(p.relative_to(TESTDATA).as_posix() for p in TESTDATA.rglob("*/*/*.json"))


def _hashes(values) -> list[bytes]:
    return [base64.b64decode(v) for v in values or []]


def test_every_testdata_file_names_its_commit():
    assert TESTDATA_FILES and set(json.loads((TESTDATA / "COMMITS.json").read_text())) == set(TESTDATA_FILES)


@pytest.mark.parametrize("name", TESTDATA_FILES)
def test_transparency_dev_testdata(name):
    case = json.loads((TESTDATA / name).read_text())
    if name.startswith("inclusion/"):
        args = (
            case["leafIdx"],
            case["treeSize"],
            base64.b64decode(case["leafHash"]),
            _hashes(case["proof"]),
            base64.b64decode(case["root"]),
        )
        check = merkle.verify_inclusion
    else:
        args = (
            case["size1"],
            case["size2"],
            base64.b64decode(case["root1"]),
            base64.b64decode(case["root2"]),
            _hashes(case["proof"]),
        )
        check = merkle.verify_consistency
    if case["wantErr"]:
        with pytest.raises(LedgerError):  # ProofInvalid, or InvalidRequest for a hash of the wrong length
            check(*args)
    else:
        check(*args)
        if name.startswith("inclusion/"):  # and our generator gives the same path
            index, size = case["leafIdx"], case["treeSize"]
            assert merkle.inclusion_proof(index, size, SOURCE) == _hashes(case["proof"])
        elif case["size1"] != case["size2"]:
            proof = merkle.consistency_proof(case["size1"], case["size2"], SOURCE)
            assert proof == _hashes(case["proof"])
