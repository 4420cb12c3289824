"""laneledger.tlog.merkle: proofs for every leaf and size of small trees,
checked against the RFC 6962 definitions written out over list slices, and
the typed errors for arguments outside the tree."""

from __future__ import annotations

import hashlib

import pytest

from laneledger.contract.errors import InvalidRequest, ProofInvalid
from laneledger.tlog import merkle

LEAVES = [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(40)]


def mth(d: list[bytes]) -> bytes:
    """RFC 6962 §2.1, over a list of leaf hashes."""
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return d[0]
    k = 1
    while k * 2 < len(d):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(d[:k]) + mth(d[k:])).digest()


def path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = 1
    while k * 2 < len(d):
        k *= 2
    return [*path(m, d[:k]), mth(d[k:])] if m < k else [*path(m - k, d[k:]), mth(d[:k])]


def subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    if m == len(d):
        return [] if b else [mth(d)]
    k = 1
    while k * 2 < len(d):
        k *= 2
    if m <= k:
        return [*subproof(m, d[:k], b), mth(d[k:])]
    return [*subproof(m - k, d[k:], False), mth(d[:k])]


SOURCE = merkle.LeafList(LEAVES)


@pytest.mark.parametrize("size", range(len(LEAVES) + 1))
def test_roots_and_every_inclusion_proof(size):
    assert merkle.root(size, SOURCE) == mth(LEAVES[:size])
    root = mth(LEAVES[:size])
    for index in range(size):
        proof = merkle.inclusion_proof(index, size, SOURCE)
        assert proof == path(index, LEAVES[:size])
        merkle.verify_inclusion(index, size, LEAVES[index], proof, root)
        if size > 1:  # the wrong leaf never verifies
            with pytest.raises(ProofInvalid):
                merkle.verify_inclusion(index, size, LEAVES[(index + 1) % size], proof, root)


@pytest.mark.parametrize("new", range(1, 26))
def test_every_consistency_proof(new):
    new_root = mth(LEAVES[:new])
    for old in range(new + 1):
        proof = merkle.consistency_proof(old, new, SOURCE)
        assert proof == ([] if old in (0, new) else subproof(old, LEAVES[:new], True))
        merkle.verify_consistency(old, new, mth(LEAVES[:old]), new_root, proof)
        if 0 < old < new:  # another old root never verifies
            with pytest.raises(ProofInvalid):
                merkle.verify_consistency(old, new, LEAVES[0] if old > 1 else LEAVES[1], new_root, proof)


def test_a_proof_is_one_batched_read():
    class Counting(merkle.LeafList):
        calls = 0

        def subtree_hashes(self, nodes):
            Counting.calls += 1
            return super().subtree_hashes(nodes)

    source = Counting(LEAVES)
    merkle.inclusion_proof(21, 39, source)
    merkle.consistency_proof(13, 39, source)
    merkle.root(39, source)
    assert Counting.calls == 3


@pytest.mark.parametrize(
    ("call", "path"),
    [
        (lambda: merkle.inclusion_proof(5, 5, SOURCE), "index"),
        (lambda: merkle.inclusion_proof(-1, 5, SOURCE), "index"),
        (lambda: merkle.inclusion_proof(0, -1, SOURCE), "size"),
        (lambda: merkle.consistency_proof(6, 5, SOURCE), "old_size"),
        (lambda: merkle.root(True, SOURCE), "size"),
        (lambda: merkle.verify_inclusion(0, 1, b"short", [], LEAVES[0]), "leaf"),
        (lambda: merkle.verify_consistency(1, 2, LEAVES[0], LEAVES[1], [b""]), "proof[0]"),
    ],
)
def test_arguments_outside_the_tree_are_typed_errors(call, path):
    with pytest.raises(InvalidRequest) as caught:
        call()
    assert caught.value.details["path"] == path


def test_a_failed_proof_names_its_kind_and_sizes():
    proof = merkle.inclusion_proof(3, 10, SOURCE)
    with pytest.raises(ProofInvalid) as caught:
        merkle.verify_inclusion(3, 10, LEAVES[3], proof, LEAVES[0])
    err = caught.value
    assert err.code == "integrity_failure"
    assert err.details == {"reason": "proof_invalid", "kind": "inclusion", "index": 3, "size": 10}
