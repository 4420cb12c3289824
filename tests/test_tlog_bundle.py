"""Offline bundles (C2SP tlog-proof@v1): made from a real ledger file whose
writer appended the tree in its own transactions, checked with nothing but
the log's and the witnesses' public keys; every forged part is refused."""

from __future__ import annotations

import base64
import json

import pytest
from tlog_support import committed_ledger

from laneledger.contract.errors import InvalidRequest, MalformedMessage, NoteUnverified, ProofInvalid
from laneledger.tlog import store
from laneledger.tlog.bundle import Bundle, make_bundle, verify_bundle
from laneledger.tlog.checkpoint import TreeHead, sign_checkpoint
from laneledger.tlog.cosignature import Cosigner
from laneledger.tlog.note import Signer
from laneledger.tlog.witness import Witness

ORIGIN = "ledger.example/acme"
LOG = Signer.generate(ORIGIN)
W1, W2 = (Cosigner.generate(f"witness.example/w{i}", clock=lambda: 1_700_000_000) for i in (1, 2))
EVENTS = 23


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    conn = committed_ledger(tmp_path_factory.mktemp("ledger") / "ledger.db", EVENTS)
    yield conn
    conn.close()


def signed(conn, size=None) -> str:
    size = store.tree_size(conn) if size is None else size
    text = sign_checkpoint(TreeHead(ORIGIN, size, store.root(conn, size)), LOG)
    for cosigner in (W1, W2):
        text = Witness(cosigner, LOG.verifier(), origin=ORIGIN).cosign(text)
    return text


def body(conn, position: int) -> bytes:
    return conn.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()[0]


def test_the_tree_has_every_committed_position(ledger):
    assert (
        store.tree_size(ledger) == EVENTS == ledger.execute("SELECT max(position) FROM events").fetchone()[0]
    )


@pytest.mark.parametrize("position", [1, 2, 12, EVENTS])
def test_a_bundle_with_its_event_verifies_offline(ledger, position):
    text = make_bundle(ledger, position, signed(ledger), event=body(ledger, position)).format()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra ")
    verified = verify_bundle(
        text, LOG.verifier(), origin=ORIGIN, witnesses=[W1.verifier(), W2.verifier()], quorum=2
    )
    assert verified.event is not None and verified.event["position"] == position
    assert verified.checkpoint.size == EVENTS
    assert verified.witnesses == (W1.name, W2.name)
    assert Bundle.parse(text).format() == text


def test_a_bundle_for_an_older_checkpoint_and_without_the_event(ledger):
    old = signed(ledger, 9)
    bundle = make_bundle(ledger, 4, old)
    entry = json.loads(body(ledger, 4))["entry_hash"]
    assert "extra" not in bundle.format()
    assert (
        verify_bundle(bundle.format(), LOG.verifier(), origin=ORIGIN, entry_hash_hex=entry).checkpoint.size
        == 9
    )
    with pytest.raises(InvalidRequest):
        verify_bundle(bundle, LOG.verifier(), origin=ORIGIN)  # which entry hash would it prove?
    other = json.loads(body(ledger, 5))["entry_hash"]
    with pytest.raises(ProofInvalid):
        verify_bundle(bundle, LOG.verifier(), origin=ORIGIN, entry_hash_hex=other)
    with pytest.raises(InvalidRequest):
        make_bundle(ledger, 10, old)  # the old tree does not hold position 10


def test_a_changed_event_is_refused(ledger):
    event = body(ledger, 7)
    bundle = make_bundle(ledger, 7, signed(ledger), event=event.replace(b'"n":', b'"n" :'))
    verify_bundle(bundle, LOG.verifier(), origin=ORIGIN)  # the same JSON spelled differently: same hash
    changed = make_bundle(
        ledger, 7, signed(ledger), event=event.replace(b'"action.started"', b'"action.ended"')
    )
    with pytest.raises(ProofInvalid) as caught:
        verify_bundle(changed, LOG.verifier(), origin=ORIGIN)
    assert caught.value.details["field"] == "entry_hash"
    moved = Bundle(5, make_bundle(ledger, 7, signed(ledger)).proof, signed(ledger), event)  # position 6?
    with pytest.raises(ProofInvalid) as caught:
        verify_bundle(moved, LOG.verifier(), origin=ORIGIN)
    assert caught.value.details["field"] == "position"


def test_another_events_proof_under_the_same_checkpoint_fails(ledger):
    checkpoint = signed(ledger)
    proof_of_8 = make_bundle(ledger, 8, checkpoint).proof
    wrong_proof = Bundle(8, proof_of_8, checkpoint, body(ledger, 9))  # event 9 (index 8), position 8's path
    with pytest.raises(ProofInvalid) as caught:
        verify_bundle(wrong_proof, LOG.verifier(), origin=ORIGIN)
    assert caught.value.details["kind"] == "inclusion"


def test_signatures_and_quorum(ledger):
    bundle = make_bundle(ledger, 3, signed(ledger))
    entry = json.loads(body(ledger, 3))["entry_hash"]
    stranger = Signer.generate(
        ORIGIN
    ).verifier()  # the witnesses' signatures verify, the log's key is not there
    with pytest.raises(NoteUnverified) as caught:
        verify_bundle(
            bundle, stranger, origin=ORIGIN, entry_hash_hex=entry, witnesses=[W1.verifier(), W2.verifier()]
        )
    assert caught.value.message == "the log did not sign the checkpoint"
    with pytest.raises(NoteUnverified) as caught:
        verify_bundle(
            bundle, LOG.verifier(), origin=ORIGIN, entry_hash_hex=entry, witnesses=[W1.verifier()], quorum=2
        )
    assert caught.value.details["quorum"] == 2
    with pytest.raises(InvalidRequest):
        verify_bundle(bundle, LOG.verifier(), origin="ledger.example/other", entry_hash_hex=entry)


def test_a_checkpoint_of_another_tree_is_refused_when_making(ledger):
    forged = sign_checkpoint(TreeHead(ORIGIN, EVENTS, bytes(32)), LOG)
    with pytest.raises(ProofInvalid):
        make_bundle(ledger, 1, forged)


HASH = base64.b64encode(bytes(32)).decode()


@pytest.mark.parametrize(
    ("head", "line"),
    [
        ("c2sp.org/tlog-proof@v2\nindex 0\n", 1),
        ("c2sp.org/tlog-proof@v1\n", 2),
        ("c2sp.org/tlog-proof@v1\nindex 01\n", 2),
        ("c2sp.org/tlog-proof@v1\nextra !!\nindex 0\n", 2),
        ("c2sp.org/tlog-proof@v1\nextra AA==\nindex -1\n", 3),
        (f"c2sp.org/tlog-proof@v1\nindex 0\n{HASH[:-4]}\n", 3),
        (f"c2sp.org/tlog-proof@v1\nindex 0\n{HASH}\nextra AA==\n", 4),
    ],
)
def test_a_malformed_bundle_names_its_line(ledger, head, line):
    with pytest.raises(MalformedMessage) as caught:
        Bundle.parse(head + "\n" + signed(ledger))
    assert caught.value.details == {"reason": "tlog_proof", "line": line}


def test_a_bundle_without_a_checkpoint_is_malformed():
    with pytest.raises(MalformedMessage):
        Bundle.parse("c2sp.org/tlog-proof@v1\nindex 0\n")


def test_a_keyed_ledgers_event_checks_with_its_hmac_key_only(tmp_path):
    key = b"tlog-bundle-key"
    conn = committed_ledger(tmp_path / "keyed.db", 5, hmac_key=key)
    try:
        bundle = make_bundle(conn, 5, signed(conn), event=body(conn, 5))
        assert verify_bundle(bundle, LOG.verifier(), origin=ORIGIN, hmac_key=key).event is not None
        with pytest.raises(ProofInvalid) as caught:
            verify_bundle(bundle, LOG.verifier(), origin=ORIGIN)
        assert caught.value.details["field"] == "entry_hash"
    finally:
        conn.close()
