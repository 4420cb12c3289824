"""RFC 6962 / RFC 9162 Merkle trees: hashes, proofs and their verification.

Hashes are 32-byte SHA-256 digests. A leaf is hashed as ``SHA-256(0x00 ||
data)``, an inner node as ``SHA-256(0x01 || left || right)``; the root of the
empty tree is ``SHA-256("")`` (RFC 9162 §2.1.1).

Proofs are computed from a ``HashSource``: anything that can give the hash of
a *perfect, aligned* subtree, named ``(level, n)`` (the ``n``-th subtree of
``2**level`` leaves, covering leaves ``[n * 2**level, (n + 1) * 2**level)``).
The RFC's recursive definitions (MTH, PATH, SUBPROOF) only ever split a range
at a power of two aligned to it, so every perfect range they meet is such a
subtree; a stored tree (``laneledger.tlog.store``) keeps exactly those hashes.

Which subtrees a root or proof needs depends on the sizes alone, never on
hash values, so each computation runs twice: once recording the coordinates
it asks for, then over one batched read of them (one SQL query, not one per
node).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Protocol

from laneledger.contract.errors import InvalidRequest, ProofInvalid

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

Node = tuple[int, int]  # (level, n): a perfect, aligned subtree


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


class HashSource(Protocol):
    def subtree_hashes(self, nodes: Sequence[Node]) -> list[bytes]:
        """The hash of each perfect, aligned subtree named, in order."""
        ...


class LeafList:
    """An in-memory ``HashSource`` over a list of leaf hashes: the reference
    the stored tree is tested against."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self._leaves = list(leaves)

    def subtree_hashes(self, nodes: Sequence[Node]) -> list[bytes]:
        return [self._hash(level, n) for level, n in nodes]

    def _hash(self, level: int, n: int) -> bytes:
        if level == 0:
            return self._leaves[n]
        return node_hash(self._hash(level - 1, 2 * n), self._hash(level - 1, 2 * n + 1))


def _largest_power_below(n: int) -> int:
    """The largest power of two strictly less than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


Lookup = Callable[[int, int], bytes]  # (lo, hi) of a perfect aligned range -> its hash


def _mth(lo: int, hi: int, get: Lookup) -> bytes:
    """MTH(D[lo:hi]) (RFC 9162 §2.1.1), ``hi > lo``."""
    size = hi - lo
    if size & (size - 1) == 0:  # a power of two: one stored subtree
        return get(lo, hi)
    k = _largest_power_below(size)
    return node_hash(_mth(lo, lo + k, get), _mth(lo + k, hi, get))


def _path(m: int, lo: int, hi: int, get: Lookup) -> list[bytes]:
    """PATH(m, D[lo:hi]) (RFC 9162 §2.1.3.1): leaf ``lo + m``'s audit path."""
    if hi - lo == 1:
        return []
    k = _largest_power_below(hi - lo)
    if m < k:
        return [*_path(m, lo, lo + k, get), _mth(lo + k, hi, get)]
    return [*_path(m - k, lo + k, hi, get), _mth(lo, lo + k, get)]


def _subproof(m: int, lo: int, hi: int, complete: bool, get: Lookup) -> list[bytes]:
    """SUBPROOF(m, D[lo:hi], b) (RFC 9162 §2.1.4.1)."""
    n = hi - lo
    if m == n:
        return [] if complete else [_mth(lo, hi, get)]
    k = _largest_power_below(n)
    if m <= k:
        return [*_subproof(m, lo, lo + k, complete, get), _mth(lo + k, hi, get)]
    return [*_subproof(m - k, lo + k, hi, False, get), _mth(lo, lo + k, get)]


def _batched(source: HashSource, compute: Callable[[Lookup], list[bytes]]) -> list[bytes]:
    """Run ``compute`` once to learn the subtrees it needs, read them in one
    call, and run it again over what was read."""
    wanted: dict[Node, None] = {}

    def record(lo: int, hi: int) -> bytes:
        level = (hi - lo).bit_length() - 1
        wanted[(level, lo >> level)] = None
        return EMPTY_ROOT  # any 32 bytes: the plan does not depend on values

    compute(record)
    nodes = list(wanted)
    found = dict(zip(nodes, source.subtree_hashes(nodes), strict=True))

    def read(lo: int, hi: int) -> bytes:
        level = (hi - lo).bit_length() - 1
        return found[(level, lo >> level)]

    return compute(read)


def _check_size(name: str, value: int, limit: int | None = None) -> None:
    if type(value) is not int or value < 0 or (limit is not None and value > limit):
        bound = f"0..{limit}" if limit is not None else "0 or more"
        raise InvalidRequest(f"{name} must be an integer in {bound}", path=name, found=value)


def root(size: int, source: HashSource) -> bytes:
    """The root of the tree of the first ``size`` leaves."""
    _check_size("size", size)
    if size == 0:
        return EMPTY_ROOT
    return _batched(source, lambda get: [_mth(0, size, get)])[0]


def inclusion_proof(index: int, size: int, source: HashSource) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``size`` leaves."""
    _check_size("size", size)
    if type(index) is not int or not 0 <= index < size:
        raise InvalidRequest("index must name a leaf of the tree", path="index", found=index, size=size)
    return _batched(source, lambda get: _path(index, 0, size, get))


def consistency_proof(old_size: int, new_size: int, source: HashSource) -> list[bytes]:
    """The proof that the tree of ``old_size`` leaves is a prefix of the one
    of ``new_size`` leaves; empty when ``old_size`` is 0 or equal."""
    _check_size("new_size", new_size)
    _check_size("old_size", old_size, new_size)
    if old_size in (0, new_size):
        return []
    return _batched(source, lambda get: _subproof(old_size, 0, new_size, True, get))


def root_of(leaves: Sequence[bytes]) -> bytes:
    """The root over a list of leaf hashes."""
    return root(len(leaves), LeafList(leaves))


# -- verification (RFC 9162 §2.1.3.2 and §2.1.4.2) ----------------------------


def _check_hashes(proof: Sequence[bytes], *named: tuple[str, bytes]) -> None:
    for name, value in (*named, *((f"proof[{i}]", h) for i, h in enumerate(proof))):
        if not isinstance(value, bytes) or len(value) != HASH_SIZE:
            raise InvalidRequest(f"{name} is not a {HASH_SIZE}-byte hash", path=name)


def _failed(kind: str, why: str, **details: object) -> ProofInvalid:
    return ProofInvalid(
        f"{kind} proof does not verify: {why}", reason=ProofInvalid.reason, kind=kind, **details
    )


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root_hash: bytes) -> None:
    """Check that ``leaf`` (a leaf hash) is leaf ``index`` of the tree of
    ``size`` leaves with root ``root_hash``; ``ProofInvalid`` otherwise."""
    _check_size("size", size)
    _check_hashes(proof, ("leaf", leaf), ("root", root_hash))
    where = {"index": index, "size": size}
    if type(index) is not int or not 0 <= index < size:
        raise _failed("inclusion", "the index is not a leaf of the tree", **where)
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise _failed("inclusion", "the proof is longer than the tree is deep", **where)
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise _failed("inclusion", "the proof is shorter than the tree is deep", **where)
    if r != root_hash:
        raise _failed("inclusion", "the computed root differs", **where)


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``old_size`` leaves with ``old_root`` is a
    prefix of the tree of ``new_size`` leaves with ``new_root``;
    ``ProofInvalid`` otherwise."""
    _check_size("new_size", new_size)
    _check_size("old_size", old_size)
    _check_hashes(proof, ("old_root", old_root), ("new_root", new_root))
    where = {"old_size": old_size, "new_size": new_size}
    if old_size > new_size:
        raise _failed("consistency", "the old tree is larger than the new one", **where)
    if old_size == new_size:
        if proof:
            raise _failed("consistency", "equal sizes take an empty proof", **where)
        if old_root != new_root:
            raise _failed("consistency", "equal sizes with different roots", **where)
        return
    if old_size == 0:
        if proof:
            raise _failed("consistency", "an empty old tree takes an empty proof", **where)
        return
    if not proof:
        raise _failed("consistency", "the proof is empty", **where)
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root starts the path
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise _failed("consistency", "the proof is longer than the tree is deep", **where)
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise _failed("consistency", "the proof is shorter than the tree is deep", **where)
    if fr != old_root:
        raise _failed("consistency", "the computed old root differs", **where)
    if sr != new_root:
        raise _failed("consistency", "the computed new root differs", **where)
