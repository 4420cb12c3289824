"""The transparency log checked by an independent implementation: a Go
program (tests/fixtures/tlog/tlogcheck.go), built here against Debian's
golang.org/x/mod v0.7.0, opens our signed checkpoints with note.Open and
note.NewVerifier(our verifier key), checks our inclusion and consistency
proofs with tlog.CheckRecord and tlog.CheckTree, computes roots and proofs
with tlog.TreeHash, ProveRecord and ProveTree from our stored rows (our
layout is Go's StoredHashIndex order), checks a witness's
cosignature by hand with crypto/ed25519, and signs a note with note.Sign
that our code opens. Each check is also shown to fail on a changed input."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
from external_programs import GO, GO_PATH, GO_X_MOD

from laneledger.contract.errors import NoteSignatureInvalid
from laneledger.sqlite import Durability, open_database, transaction
from laneledger.tlog import merkle, store
from laneledger.tlog.checkpoint import TreeHead, open_checkpoint, sign_checkpoint
from laneledger.tlog.cosignature import Cosigner
from laneledger.tlog.note import Ed25519Verifier, Signer, open_note, raw_public
from laneledger.tlog.witness import Witness

SOURCE_FILE = Path(__file__).parent / "fixtures" / "tlog" / "tlogcheck.go"
ORIGIN = "ledger.example/acme"
LOG = Signer.generate(ORIGIN)
VKEY = LOG.verifier().to_text()
LEAVES = [merkle.leaf_hash(i.to_bytes(32, "big")) for i in range(41)]
TREE = merkle.LeafList(LEAVES)


def b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


@pytest.fixture(scope="module")
def tlogcheck(tmp_path_factory) -> Path:
    for program in (GO, GO_X_MOD):
        if not program.found:
            pytest.skip(program.missing)
    work = tmp_path_factory.mktemp("go")
    binary = work / "tlogcheck"
    env = {
        **os.environ,
        "GO111MODULE": "off",  # x/mod from GOPATH, as Debian installs it; no module download
        "GOPATH": GO_PATH,
        "GOCACHE": str(work / "cache"),
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
    }
    built = subprocess.run(
        [GO.path or "go", "build", "-o", str(binary), str(SOURCE_FILE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return binary


def run(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60, check=False)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def signed_checkpoint(size: int) -> str:
    return sign_checkpoint(TreeHead(ORIGIN, size, merkle.root(size, TREE)), LOG)


def test_go_opens_our_checkpoint_with_our_verifier_key(tlogcheck, tmp_path):
    note = write(tmp_path, "cp", signed_checkpoint(41))
    done = run(tlogcheck, "open", VKEY, ORIGIN, note)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"41 {b64(merkle.root(41, TREE))}\n"
    forged = write(tmp_path, "forged", signed_checkpoint(41).replace("\n41\n", "\n40\n"))
    refused = run(tlogcheck, "open", VKEY, ORIGIN, forged)
    assert refused.returncode == 1 and "invalid signature" in refused.stderr
    stranger = Signer.generate(ORIGIN).verifier().to_text()
    assert run(tlogcheck, "open", stranger, ORIGIN, note).returncode == 1


@pytest.mark.parametrize(("index", "size"), [(0, 1), (0, 2), (5, 8), (12, 13), (16, 41), (40, 41), (21, 33)])
def test_go_checks_our_inclusion_proofs(tlogcheck, tmp_path, index, size):
    note = write(tmp_path, "cp", signed_checkpoint(size))
    proof = [b64(h) for h in merkle.inclusion_proof(index, size, TREE)]
    done = run(tlogcheck, "record", VKEY, ORIGIN, note, str(index), b64(LEAVES[index]), *proof)
    assert done.returncode == 0, done.stderr
    other = (index + 1) % size
    if other != index:  # the same proof does not hold for another leaf
        wrong = run(tlogcheck, "record", VKEY, ORIGIN, note, str(index), b64(LEAVES[other]), *proof)
        assert wrong.returncode == 1 and "CheckRecord" in wrong.stderr


@pytest.mark.parametrize(("old", "new"), [(1, 2), (3, 7), (4, 8), (6, 41), (16, 33), (40, 41), (9, 9)])
def test_go_checks_our_consistency_proofs(tlogcheck, tmp_path, old, new):
    old_note = write(tmp_path, "old", signed_checkpoint(old))
    new_note = write(tmp_path, "new", signed_checkpoint(new))
    proof = [b64(h) for h in merkle.consistency_proof(old, new, TREE)]
    done = run(tlogcheck, "tree", VKEY, ORIGIN, old_note, new_note, *proof)
    assert done.returncode == 0, done.stderr
    if proof:
        flipped = [b64(bytes([merkle.consistency_proof(old, new, TREE)[0][0] ^ 1]) + bytes(31)), *proof[1:]]
        wrong = run(tlogcheck, "tree", VKEY, ORIGIN, old_note, new_note, *flipped)
        assert wrong.returncode == 1 and "CheckTree" in wrong.stderr


def test_go_checks_a_witness_cosignature_by_the_c2sp_layout(tlogcheck, tmp_path):
    w1 = Cosigner.generate("witness.example/w1", clock=lambda: 1_700_000_123)
    cosigned = Witness(w1, LOG.verifier(), origin=ORIGIN).cosign(signed_checkpoint(17))
    public = b64(raw_public(w1.private_key.public_key()))
    done = run(tlogcheck, "cosig", w1.name, public, write(tmp_path, "cosigned", cosigned))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1700000123\n"
    assert run(tlogcheck, "open", VKEY, ORIGIN, write(tmp_path, "again", cosigned)).returncode == 0
    changed = write(tmp_path, "changed", cosigned.replace("\n17\n", "\n18\n"))
    assert run(tlogcheck, "cosig", w1.name, public, changed).returncode == 1


def test_our_stored_rows_are_gos_stored_hash_layout(tlogcheck, tmp_path):
    """Our rows, concatenated in leaf order, are the hashes Go's tlog stores
    at StoredHashIndex; Go's TreeHash, ProveRecord and ProveTree over them
    give our roots and proofs."""
    size = len(LEAVES)
    conn = open_database(tmp_path / "ledger.db", durability=Durability.NORMAL, ddl=store.DDL, what="tlog")
    with transaction(conn, "append"):
        store.append_leaves(conn, LEAVES[:17])
    with transaction(conn, "append"):
        store.append_leaves(conn, LEAVES[17:])
    rows = b"".join(h for (h,) in conn.execute("SELECT hashes FROM tlog_hashes ORDER BY leaf"))
    conn.close()
    hashes = tmp_path / "hashes"
    hashes.write_bytes(rows)
    done = run(tlogcheck, "layout", str(hashes), str(size))
    assert done.returncode == 0, done.stderr
    expected = [f"root {t} {b64(merkle.root(t, TREE))}" for t in range(1, size + 1)]
    expected += [
        " ".join([f"record {i}", *map(b64, merkle.inclusion_proof(i, size, TREE))]) for i in range(size)
    ]
    expected += [
        " ".join([f"tree {m}", *map(b64, merkle.consistency_proof(m, size, TREE))]) for m in range(1, size)
    ]
    assert done.stdout.splitlines() == expected
    truncated = tmp_path / "truncated"
    truncated.write_bytes(rows[:-32])
    assert run(tlogcheck, "layout", str(truncated), str(size)).returncode == 1


def test_we_open_a_note_go_signed(tlogcheck, tmp_path):
    body = TreeHead(ORIGIN, 41, merkle.root(41, TREE)).body()
    done = run(tlogcheck, "sign", LOG.to_text(), write(tmp_path, "body", body))
    assert done.returncode == 0, done.stderr
    assert done.stdout == signed_checkpoint(41)  # Ed25519 is deterministic: the same bytes
    checkpoint, _ = open_checkpoint(done.stdout, [Ed25519Verifier.from_text(VKEY)], origin=ORIGIN)
    assert checkpoint.size == 41 and checkpoint.root == merkle.root(41, TREE)
    with pytest.raises(NoteSignatureInvalid):
        open_note(done.stdout.replace("\n41\n", "\n42\n"), [LOG.verifier()])
