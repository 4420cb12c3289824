"""laneledger.tlog checkpoints (C2SP tlog-checkpoint), cosignatures (C2SP
tlog-cosignature/v1) and the witness that cosigns only a tree that grew."""

from __future__ import annotations

import base64

import pytest

from laneledger.contract.errors import (
    InternalError,
    InvalidRequest,
    MalformedMessage,
    NoteSignatureInvalid,
    NoteUnverified,
    ProofInvalid,
)
from laneledger.tlog import merkle
from laneledger.tlog.checkpoint import (
    TreeHead,
    open_checkpoint,
    open_cosigned,
    sign_checkpoint,
    verify_extension,
)
from laneledger.tlog.cosignature import CosignatureVerifier, Cosigner, signed_message
from laneledger.tlog.note import Ed25519Verifier, Signer, key_id, open_note, raw_public
from laneledger.tlog.witness import Witness

ORIGIN = "ledger.example/acme"
LOG = Signer.generate(ORIGIN)
LEAVES = [merkle.leaf_hash(bytes([i])) for i in range(20)]
SOURCE = merkle.LeafList(LEAVES)
T0 = 1_700_000_000


def checkpoint(size: int, *extensions: str) -> TreeHead:
    return TreeHead(ORIGIN, size, merkle.root(size, SOURCE), extensions)


def test_the_specs_example_body_parses_and_formats_back():
    text = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    parsed = TreeHead.parse(text)
    assert (parsed.origin, parsed.size, parsed.extensions) == ("example.com/behind-the-sofa", 20852163, ())
    assert parsed.root == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert parsed.body() == text


def test_extension_lines_round_trip():
    cp = checkpoint(7, "ext one", "ext two")
    assert TreeHead.parse(cp.body()) == cp
    assert cp.body().endswith("\next one\next two\n")


ROOT64 = base64.b64encode(bytes(32)).decode()


@pytest.mark.parametrize(
    ("text", "reason", "line"),
    [
        (f"o\n1\n{ROOT64}", "checkpoint_lines", 0),
        ("o\n1\n", "checkpoint_lines", 2),
        (f"\n1\n{ROOT64}\n", "checkpoint_origin", 1),
        (f"o\n01\n{ROOT64}\n", "checkpoint_size", 2),
        (f"o\n-1\n{ROOT64}\n", "checkpoint_size", 2),
        (f"o\n+1\n{ROOT64}\n", "checkpoint_size", 2),
        (f"o\n1.0\n{ROOT64}\n", "checkpoint_size", 2),
        (f"o\n\u0661\n{ROOT64}\n", "checkpoint_size", 2),  # an Arabic-Indic one is a digit, not ASCII
        (f"o\n{2**63}\n{ROOT64}\n", "checkpoint_size", 2),
        ("o\n1\nnot base64!\n", "checkpoint_root", 3),
        (f"o\n1\n{base64.b64encode(bytes(31)).decode()}\n", "checkpoint_root", 3),
        (f"o\n1\n{ROOT64.rstrip('=')}\n", "checkpoint_root", 3),
        (f"o\n1\n{ROOT64}\n\n", "checkpoint_extension", 4),
        (f"o\n1\n{ROOT64}\next\n\n", "checkpoint_extension", 5),
    ],
)
def test_a_body_that_is_not_exactly_a_checkpoint_is_malformed(text, reason, line):
    with pytest.raises(MalformedMessage) as caught:
        TreeHead.parse(text)
    assert caught.value.details == {"reason": reason, "line": line}


def test_sizes_zero_and_the_largest_parse():
    assert TreeHead.parse(f"o\n0\n{ROOT64}\n").size == 0
    assert TreeHead.parse(f"o\n{2**63 - 1}\n{ROOT64}\n").size == 2**63 - 1


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"origin": ""}, "origin"),
        ({"origin": "a\nb"}, "origin"),
        ({"size": -1}, "size"),
        ({"size": True}, "size"),
        ({"root": b"x"}, "root"),
        ({"extensions": ("",)}, "extensions[0]"),
    ],
)
def test_a_checkpoint_that_cannot_be_written_is_refused(kwargs, path):
    fields = {"origin": ORIGIN, "size": 1, "root": bytes(32), "extensions": (), **kwargs}
    with pytest.raises(InvalidRequest) as caught:
        TreeHead(**fields)
    assert caught.value.details["path"] == path


def test_a_signed_checkpoint_opens_for_its_log_only():
    signed = sign_checkpoint(checkpoint(5), LOG)
    opened, note = open_checkpoint(signed, [LOG.verifier()], origin=ORIGIN)
    assert opened == checkpoint(5) and note.text == checkpoint(5).body()
    with pytest.raises(InvalidRequest) as caught:
        open_checkpoint(signed, [LOG.verifier()], origin="ledger.example/other")
    assert caught.value.details["path"] == "origin"
    with pytest.raises(NoteUnverified):
        open_checkpoint(signed, [Signer.generate(ORIGIN).verifier()], origin=ORIGIN)


def test_the_log_signs_only_its_own_origin():
    with pytest.raises(InvalidRequest):
        sign_checkpoint(TreeHead("elsewhere.example/log", 1, bytes(32)), LOG)


# -- cosignatures -------------------------------------------------------------


def test_a_cosignature_is_the_timestamped_signature_the_spec_describes():
    witness = Cosigner.generate("witness.example/w1", clock=lambda: T0)
    body = checkpoint(5).body()
    raw = witness.sign(body.encode())
    assert len(raw) == 72 and int.from_bytes(raw[:8], "big") == T0
    message = b"cosignature/v1\ntime 1700000000\n" + body.encode()
    assert signed_message(T0, body) == message
    witness.private_key.public_key().verify(raw[8:], message)  # raises if not
    public = raw_public(witness.private_key.public_key())
    assert witness.key_id == key_id(witness.name, 0x04, public)
    assert witness.key_id != key_id(witness.name, 0x01, public)


def test_cosigner_keys_round_trip_as_type_4_key_texts():
    witness = Cosigner.generate("witness.example/w1")
    vkey = witness.verifier().to_text()
    assert base64.b64decode(vkey.split("+", 2)[2])[0] == 0x04
    assert CosignatureVerifier.from_text(vkey) == witness.verifier()
    assert Cosigner.from_text(witness.to_text()).to_text() == witness.to_text()
    with pytest.raises(InvalidRequest):
        Ed25519Verifier.from_text(vkey)  # not a log key
    with pytest.raises(InvalidRequest):
        CosignatureVerifier.from_text(LOG.verifier().to_text())


def test_a_witness_cosigns_a_growing_tree_and_refuses_a_fork():
    w1 = Cosigner.generate("witness.example/w1", clock=lambda: T0)
    witness = Witness(w1, LOG.verifier(), origin=ORIGIN)
    first = witness.cosign(sign_checkpoint(checkpoint(5), LOG))
    second = witness.cosign(sign_checkpoint(checkpoint(12), LOG), merkle.consistency_proof(5, 12, SOURCE))
    note = open_note(second, [LOG.verifier(), w1.verifier()])
    assert {s.name for s in note.verified} == {ORIGIN, w1.name}
    assert w1.verifier().timestamp(note) == T0
    assert w1.verifier().timestamp(open_note(first, [LOG.verifier()])) is None  # not trusted there

    fork = [bytes(32), *reversed(LEAVES)]  # another history of 13 leaves
    forked = TreeHead(ORIGIN, 13, merkle.root_of(fork[:13]))
    with pytest.raises(ProofInvalid):
        witness.cosign(sign_checkpoint(forked, LOG), merkle.consistency_proof(12, 13, SOURCE))
    with pytest.raises(ProofInvalid):  # a tree that shrank
        witness.cosign(sign_checkpoint(checkpoint(4), LOG), [])
    assert witness.latest == checkpoint(12)


def test_a_cosignature_covers_the_extension_lines_and_its_time():
    w1 = Cosigner.generate("witness.example/w1", clock=lambda: T0)
    witness = Witness(w1, LOG.verifier(), origin=ORIGIN)
    cosigned = witness.cosign(sign_checkpoint(checkpoint(3, "ext"), LOG))
    changed_ext = cosigned.replace("\next\n", "\nExt\n")
    with pytest.raises(NoteSignatureInvalid):
        open_note(changed_ext, [w1.verifier()])
    line = cosigned.rstrip("\n").split("\n")[-1]
    raw = bytearray(base64.b64decode(line.rsplit(" ", 1)[1]))
    raw[4 + 7] ^= 1  # the timestamp's last byte: one second later
    moved = cosigned.replace(line, line.rsplit(" ", 1)[0] + " " + base64.b64encode(bytes(raw)).decode())
    with pytest.raises(NoteSignatureInvalid):
        open_note(moved, [w1.verifier()])


def test_a_witness_refuses_a_checkpoint_the_log_did_not_sign():
    witness = Witness(Cosigner.generate("witness.example/w1"), LOG.verifier(), origin=ORIGIN)
    with pytest.raises(NoteUnverified):
        witness.cosign(sign_checkpoint(checkpoint(5), Signer.generate(ORIGIN)))
    assert witness.latest is None


def test_a_witness_with_a_state_file_remembers_across_restarts(tmp_path):
    state = tmp_path / "witness" / "acme.checkpoint"
    state.parent.mkdir()
    w1 = Cosigner.generate("witness.example/w1", clock=lambda: T0)
    Witness(w1, LOG.verifier(), origin=ORIGIN, state=state).cosign(sign_checkpoint(checkpoint(12), LOG))
    assert open_checkpoint(state.read_text(), [LOG.verifier()], origin=ORIGIN)[0] == checkpoint(12)

    restarted = Witness(w1, LOG.verifier(), origin=ORIGIN, state=state)
    assert restarted.latest == checkpoint(12)
    truncated = sign_checkpoint(checkpoint(4), LOG)
    with pytest.raises(ProofInvalid):  # without the state it would have cosigned this first one
        restarted.cosign(truncated, [])
    rewritten = TreeHead(ORIGIN, 13, merkle.root_of([bytes(32), *reversed(LEAVES)][:13]))
    with pytest.raises(ProofInvalid):
        restarted.cosign(sign_checkpoint(rewritten, LOG), merkle.consistency_proof(12, 13, SOURCE))
    assert Witness(w1, LOG.verifier(), origin=ORIGIN, state=state).latest == checkpoint(12)
    restarted.cosign(sign_checkpoint(checkpoint(13), LOG), merkle.consistency_proof(12, 13, SOURCE))
    assert Witness(w1, LOG.verifier(), origin=ORIGIN, state=state).latest == checkpoint(13)
    assert sorted(p.name for p in state.parent.iterdir()) == ["acme.checkpoint"]  # no temporary left


def test_a_witness_refuses_a_state_file_the_log_did_not_sign(tmp_path):
    state = tmp_path / "acme.checkpoint"
    state.write_text(sign_checkpoint(checkpoint(3), Signer.generate(ORIGIN)))
    with pytest.raises(InternalError) as caught:
        Witness(Cosigner.generate("witness.example/w1"), LOG.verifier(), origin=ORIGIN, state=state)
    assert caught.value.details == {"path": str(state)}


def test_verify_extension_accepts_a_grown_tree_and_refuses_a_shrunk_or_forked_one():
    old, new = sign_checkpoint(checkpoint(7), LOG), sign_checkpoint(checkpoint(13), LOG)
    proof = merkle.consistency_proof(7, 13, SOURCE)
    a, b, cosigned = verify_extension(old, new, proof, LOG.verifier(), origin=ORIGIN)
    assert (a.size, b.size, cosigned) == (7, 13, ())
    with pytest.raises(ProofInvalid):
        verify_extension(new, old, [], LOG.verifier(), origin=ORIGIN)  # shrank
    forked = merkle.LeafList([*LEAVES[:5], merkle.leaf_hash(b"other"), *LEAVES[6:]])
    fork = sign_checkpoint(TreeHead(ORIGIN, 13, merkle.root(13, forked)), LOG)
    with pytest.raises(ProofInvalid):
        verify_extension(old, fork, merkle.consistency_proof(7, 13, forked), LOG.verifier(), origin=ORIGIN)
    with pytest.raises(NoteUnverified):  # another key with the log's name signed the newer one
        verify_extension(
            old,
            sign_checkpoint(checkpoint(13), Signer.generate(ORIGIN)),
            proof,
            LOG.verifier(),
            origin=ORIGIN,
        )


def test_open_cosigned_counts_only_the_named_witnesses_that_cosigned():
    alice, bob = Cosigner.generate("w/alice", clock=lambda: T0), Cosigner.generate("w/bob", clock=lambda: T0)
    signed = Witness(alice, LOG.verifier(), origin=ORIGIN).cosign(sign_checkpoint(checkpoint(9), LOG))
    witnesses = [alice.verifier(), bob.verifier()]
    parsed, cosigned = open_cosigned(signed, LOG.verifier(), origin=ORIGIN, witnesses=witnesses, quorum=1)
    assert (parsed.size, cosigned) == (9, ("w/alice",))
    with pytest.raises(NoteUnverified) as short:
        open_cosigned(signed, LOG.verifier(), origin=ORIGIN, witnesses=witnesses, quorum=2)
    assert short.value.details["quorum"] == 2
    alone = Witness(alice, LOG.verifier(), origin=ORIGIN).cosign(sign_checkpoint(checkpoint(9), LOG))
    only_witness = alone[: alone.index("\n\n") + 2] + alone.splitlines(keepends=True)[-1]
    with pytest.raises(NoteUnverified, match="the log did not sign"):
        open_cosigned(only_witness, LOG.verifier(), origin=ORIGIN, witnesses=witnesses)
