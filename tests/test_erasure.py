"""Erasure (spec/erasure.md), specified once and run twice
(``ledger_under_test``): against the writer in-process and through the real
sequencer over NATS. What is left of an erased event is its envelope and its
hash: the chain, the receipts and ``laneledger verify`` still hold, and no
byte of the content is in the ledger file or its WAL."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import msgspec
import pytest
from inprocess_ledger import InProcessLedgerClient
from ledger_fixtures import OVER_NATS_ONLY, client_of_ledger_under_test
from polling import eventually

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import check_stream, stream_difference
from laneledger.contract import errors
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import erased_form, verify_chain
from laneledger.contract.erasure import ERASED_DIGEST, ERASURE_EVENT, LEDGER_SESSION
from laneledger.contract.ids import new_id
from laneledger.contract.model import Actor, AppendCommitted, AppendRejected, Erase, Lane
from laneledger.contract.signing import check_signature, generate_private_key, public_key_hex
from laneledger.sdk.blobstore import BlobBuckets
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event
from laneledger.store import LedgerWriter, erasure, open_ledger
from laneledger.store.append import prepare_append
from laneledger.store.txlog import MemoryTxLog
from laneledger.tlog import store as tree_store
from laneledger.tlog.bundle import make_bundle, verify_bundle
from laneledger.tlog.checkpoint import TreeHead, sign_checkpoint
from laneledger.tlog.cosignature import Cosigner
from laneledger.tlog.note import Signer
from laneledger.tlog.sessionbundle import make_session_bundle, verify_session_bundle
from laneledger.tlog.witness import Witness

client = pytest.fixture(client_of_ledger_under_test, name="client")

# Planted in every payload position: long and short, as the issue asks.
EMAIL, CODE, NOTE = "ada.lovelace@example.org", "481516", "a customer note nobody may keep"


def planted(i: int) -> dict:
    return {"email": EMAIL, "code": int(CODE), "nested": {"note": f"{NOTE} #{i}", "list": [CODE]}}


async def fill(client: LedgerClient, actor: Actor, session: str, run: str, n: int = 3) -> tuple[Lane, list]:
    lane = await client.create_lane("acme", session, run, "main", actor_id=actor.id)
    receipt = await client.append(
        lane,
        0,
        [
            make_event(
                lane.id, "stream.text_delta", actor_id=actor.id, payload=planted(i), extensions={"ext": EMAIL}
            )
            for i in range(n)
        ],
    )
    return lane, receipt


def path_of(writer: LedgerWriter) -> Path:
    return Path(writer._db.execute("PRAGMA database_list").fetchone()[2])


async def test_erasing_a_session_erases_its_content_and_keeps_every_hash(ledger_under_test, client, actor):
    lane, receipt = await fill(client, actor, "s1", "r1")
    other_run, _ = await fill(client, actor, "s1", "r2", 2)
    kept, _ = await fill(client, actor, "s2", "r1", 2)
    tree_before = audit_ledger(path_of(ledger_under_test.writer)).tree_root

    done = await client.erase("s1", actor_id=actor.id, reason="GDPR Art. 17 request 2026-12-05")

    assert (done.erased, done.already_erased, done.unsealed, done.has_more) == (5, 0, 0, False)
    assert done.erasure is not None and done.erasure.event_id == done.erasure_id
    for erased_lane in (lane, other_run):
        events = [msgspec.to_builtins(e) for e in (await client.load_lane(erased_lane.id)).events]
        assert all(e["payload"] == e["extensions"] == {} and "content_salt" not in e for e in events)
        assert all(e["erased"] == msgspec.to_builtins(done.erasure) for e in events)
        assert verify_chain(events) == (await client.get_lane(erased_lane.id)).head_hash
    first = (await client.load_lane(lane.id)).events
    assert [e.entry_hash for e in first] == receipt.entry_hashes  # every hash kept
    untouched = (await client.load_lane(kept.id)).events
    assert all(e.payload["email"] == EMAIL and e.erased is msgspec.UNSET for e in untouched)

    # The erasure is itself committed: who, what, why, when.
    ledger = await client.load_session(LEDGER_SESSION, tenant="acme")
    [event] = ledger.events
    assert (event.event_type, event.actor_id, event.id) == (ERASURE_EVENT, actor.id, done.erasure_id)
    assert event.payload == {"scope": {"session_id": "s1"}, "reason": "GDPR Art. 17 request 2026-12-05"}
    assert event.position == done.erasure.position > max(e.position for e in first)

    audit = audit_ledger(path_of(ledger_under_test.writer))
    assert (audit.erased_events, audit.erasures) == (5, 1)
    # The Merkle tree grew by the erasure event alone: every earlier leaf, so
    # every checkpoint and proof made before, is as it was.
    with closing(sqlite3.connect(path_of(ledger_under_test.writer))) as conn:
        assert tree_store.root(conn, event.position - 1) == bytes.fromhex(tree_before)


async def test_erasing_one_run_leaves_the_sessions_other_runs(client, actor):
    lane, _ = await fill(client, actor, "s1", "r1")
    other, _ = await fill(client, actor, "s1", "r2")
    done = await client.erase("s1", run_id="r1", actor_id=actor.id, reason="retention")
    assert done.erased == 3
    assert all(e.payload == {} for e in (await client.load_lane(lane.id)).events)
    assert all(e.payload["email"] == EMAIL for e in (await client.load_lane(other.id)).events)


async def test_an_erasure_goes_page_by_page_and_a_page_sent_again_erases_nothing_twice(client, actor):
    await fill(client, actor, "s1", "r1", 5)
    asked = dict(actor_id=actor.id, reason="r", erasure_id="erasure-1", limit=2)
    first = await client.erase_page("s1", **asked)
    assert (first.erased, first.has_more) == (2, True)
    again = await client.erase_page("s1", **asked)
    assert (again.erased, again.already_erased, again.erasure) == (0, 2, first.erasure)
    second = await client.erase_page("s1", **asked, after_position=first.next_after_position)
    third = await client.erase_page("s1", **asked, after_position=second.next_after_position)
    assert (second.erased, third.erased, third.has_more) == (2, 1, False)
    # Events committed after the erasure are not its to erase.
    later, _ = await fill(client, actor, "s1", "r9", 1)
    assert (await client.erase("s1", actor_id=actor.id, reason="r", erasure_id="erasure-1")).erased == 0
    assert (await client.load_lane(later.id)).events[0].payload["email"] == EMAIL


async def test_an_erasure_id_names_one_erasure(client, actor):
    await fill(client, actor, "s1", "r1")
    await fill(client, actor, "s2", "r1")
    await client.erase("s1", actor_id=actor.id, reason="r", erasure_id="erasure-2")
    with pytest.raises(errors.IdempotencyViolation) as caught:
        await client.erase("s2", actor_id=actor.id, reason="r", erasure_id="erasure-2")
    assert caught.value.details["erasure_id"] == "erasure-2"
    assert (await client.load_session("s2")).events[0].payload["email"] == EMAIL


async def test_a_dry_run_counts_and_changes_nothing(client, actor):
    lane, _ = await fill(client, actor, "s1", "r1")
    dry = await client.erase("s1", actor_id=actor.id, reason="r", dry_run=True)
    assert (dry.erased, dry.erasure, dry.dry_run) == (3, None, True)
    assert all(e.payload["email"] == EMAIL for e in (await client.load_lane(lane.id)).events)
    with pytest.raises(errors.EntityNotFound):
        await client.load_session(LEDGER_SESSION, tenant="acme")


async def test_what_cannot_be_erased_is_refused_by_name(client, actor):
    await fill(client, actor, "s1", "r1")
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.erase("nope", actor_id=actor.id, reason="r")
    assert caught.value.details == {"kind": "session", "id": "nope"}
    with pytest.raises(errors.EntityNotFound):  # another tenant's session is no session of globex's
        await client.erase("s1", actor_id=actor.id, reason="r", tenant="globex")
    other = await client.ensure_actor("globex", "agent:tests/other@1", "agent")
    with pytest.raises(errors.EntityNotFound) as caught:  # who asks must be the tenant's actor
        await client.erase("s1", actor_id=other.id, reason="r")
    assert caught.value.details["kind"] == "actor"
    await client.erase("s1", actor_id=actor.id, reason="r")
    with pytest.raises(errors.InvalidRequest) as refused:
        await client.erase(LEDGER_SESSION, actor_id=actor.id, reason="r", tenant="acme")
    assert refused.value.details["path"] == "$.session_id"


async def test_a_resent_append_of_erased_events_is_answered_with_its_receipt(client, actor):
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=planted(0))]
    original = await client.append(lane, 0, events, append_id="append-1")
    await client.erase("s1", actor_id=actor.id, reason="r")
    again = await client.append(lane, 0, events, append_id="append-1")
    assert again.replayed and again.digest == ERASED_DIGEST
    assert msgspec.structs.replace(again, replayed=False, digest=original.digest) == original


# -- the files ---------------------------------------------------------------------------


def encodings(value: str) -> list[bytes]:
    """``value`` as the project writes it anywhere: UTF-8 (also inside JSON
    and MessagePack strings), base64 and JSON-escaped."""
    raw = value.encode()
    return [raw, base64.b64encode(raw), json.dumps(value).encode()[1:-1], msgspec.msgpack.encode(value)[1:]]


def holding(paths: list[Path], values: list[str]) -> list[tuple[str, str]]:
    found = []
    for path in paths:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # not made, or gone since listed (nats-server's *.blk.tmp)
            continue
        found += [(path.name, v) for v in values for form in encodings(v) if form in data]
    return found


async def test_no_byte_of_erased_content_is_left_in_the_file_its_wal_or_a_rebuilt_file(tmp_path):
    """The writer on a transaction log, as the sequencer runs it; then a file
    rebuilt from that log, as a standby's or ``laneledger restore``'s is."""
    log = MemoryTxLog()
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    writer.use_txlog(log)
    client = InProcessLedgerClient(writer)
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    for n in range(40):  # pages enough for the WAL and the freed cells to matter
        event = make_event(
            lane.id, "stream.text_delta", actor_id=actor.id, payload=planted(n), extensions={"e": EMAIL}
        )
        await client.append(lane, n, [event])
    values = [EMAIL, CODE, NOTE]
    files = [tmp_path / "ledger.db", tmp_path / "ledger.db-wal"]
    assert holding(files, values)  # planted where the scan looks

    await client.erase("s1", actor_id=actor.id, reason="r")
    assert holding(files, values) == []
    assert audit_ledger(tmp_path / "ledger.db").erased_events == 40

    rebuilt = LedgerWriter(open_ledger(tmp_path / "rebuilt.db"))
    rebuilt.use_txlog(log, seed=False)
    assert rebuilt.catch_up() == len(log.records)
    assert holding([tmp_path / "rebuilt.db", tmp_path / "rebuilt.db-wal"], values) == []
    assert audit_ledger(tmp_path / "rebuilt.db").tree_root == audit_ledger(tmp_path / "ledger.db").tree_root


# -- verify --------------------------------------------------------------------------


@OVER_NATS_ONLY
async def test_the_committed_stream_still_verifies_against_the_erased_file(ledger_under_test, client, actor):
    """The stream keeps what was published; each erased event on it is one the
    file holds in erased form (``same_event``), so verify --nats and the
    mirror's own check find no difference."""
    await fill(client, actor, "s1", "r1")
    await client.erase("s1", actor_id=actor.id, reason="r")
    db = path_of(ledger_under_test.writer)
    checked = await check_stream(client.nc.jetstream(), db, wait_s=10)
    assert checked.messages == 4  # three events and the erasure
    assert await stream_difference(client.nc.jetstream(), db, "LEDGER_EVENTS", 1) is None


def _rewrite(db: Path, position: int, change) -> None:
    conn = sqlite3.connect(db)
    try:
        (body,) = conn.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()
        event = change(json.loads(body))
        conn.execute("UPDATE events SET body = ? WHERE position = ?", (canonicalize(event), position))
        conn.commit()
    finally:
        conn.close()


def _fault(db: Path) -> tuple[str, int]:
    with pytest.raises(errors.IntegrityError) as caught:
        audit_ledger(db)
    return caught.value.details["kind"], caught.value.details["position"]


async def test_verify_finds_an_erasure_that_names_no_erasure_or_reaches_beyond_its_scope(tmp_path):
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    client = InProcessLedgerClient(writer)
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    await fill(client, actor, "s1", "r1", 2)  # positions 1, 2
    _, kept = await fill(client, actor, "s2", "r1", 1)  # position 3
    done = await client.erase("s1", actor_id=actor.id, reason="r")  # position 4
    await fill(client, actor, "s3", "r1", 1)  # position 5
    writer._db.close()
    db = tmp_path / "ledger.db"
    clean = db.read_bytes()
    assert audit_ledger(db).erased_events == 2
    mark = msgspec.to_builtins(done.erasure)

    # An erased event whose mark names an event that is no erasure.
    _rewrite(db, 1, lambda e: {**e, "erased": {**mark, "position": 5}})
    assert _fault(db) == ("erasure_unknown", 1)
    db.write_bytes(clean)
    # An event of another session erased "by" the s1 erasure (its receipt
    # made to match): out of that erasure's scope.
    _rewrite(db, 3, lambda e: erased_form(e, mark))
    conn = sqlite3.connect(db)
    conn.execute("UPDATE receipts SET digest = ? WHERE append_id = ?", (ERASED_DIGEST, kept.append_id))
    receipt = json.loads(
        conn.execute("SELECT body FROM receipts WHERE append_id = ?", (kept.append_id,)).fetchone()[0]
    )
    conn.execute(
        "UPDATE receipts SET body = ? WHERE append_id = ?",
        (json.dumps({**receipt, "digest": ERASED_DIGEST}), kept.append_id),
    )
    conn.commit()
    conn.close()
    assert _fault(db) == ("erasure_out_of_scope", 3)
    db.write_bytes(clean)
    # A receipt whose digest was zeroed with nothing erased.
    conn = sqlite3.connect(db)
    conn.execute("UPDATE receipts SET digest = ? WHERE append_id = ?", (ERASED_DIGEST, kept.append_id))
    conn.commit()
    conn.close()
    assert _fault(db) == ("receipt_mismatch", 3)


async def test_a_page_ends_early_at_its_byte_budgets_and_the_sdk_goes_on(tmp_path, monkeypatch):
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    client = InProcessLedgerClient(writer)
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    await fill(client, actor, "s1", "r1", 6)
    size = len(writer._db.execute("SELECT body FROM events WHERE position = 1").fetchone()[0])
    monkeypatch.setattr(erasure, "READ_BUDGET", 2 * size)  # two bodies a page
    page = await client.erase_page("s1", actor_id=actor.id, reason="r", erasure_id="e1")
    assert (page.erased, page.has_more, page.next_after_position) == (2, True, 2)
    monkeypatch.setattr(erasure, "READ_BUDGET", 10 * size)
    monkeypatch.setattr(erasure, "RECORD_BUDGET", 1)  # one erased body a page
    page = await client.erase_page("s1", actor_id=actor.id, reason="r", erasure_id="e1", after_position=2)
    assert (page.erased, page.has_more, page.next_after_position) == (1, True, 3)
    done = await client.erase("s1", actor_id=actor.id, reason="r", erasure_id="e1")
    assert (done.erased, done.already_erased, done.has_more) == (3, 3, False)


# -- by data subject -----------------------------------------------------------------


async def test_erasing_a_data_subject_erases_its_events_in_every_session_and_no_other(
    ledger_under_test, client, actor
):
    one = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    two = await client.create_lane("acme", "s2", "r1", "main", actor_id=actor.id)

    def event(lane: Lane, subject: str | None) -> dict:
        return make_event(
            lane.id, "stream.text_delta", actor_id=actor.id, payload=planted(0), data_subject=subject
        )

    await client.append(one, 0, [event(one, "customer-42"), event(one, None), event(one, "customer-7")])
    await client.append(two, 0, [event(two, "customer-42")])

    done = await client.erase(data_subject="customer-42", actor_id=actor.id, reason="Art. 17")

    assert done.erased == 2
    events = [*(await client.load_lane(one.id)).events, *(await client.load_lane(two.id)).events]
    erased = [e for e in events if e.erased is not msgspec.UNSET]
    assert [(e.lane_id, e.seq) for e in erased] == [(one.id, 1), (two.id, 1)]
    assert all(e.data_subject == "customer-42" and e.payload == {} for e in erased)
    assert [e.payload["email"] for e in events if e.erased is msgspec.UNSET] == [EMAIL, EMAIL]
    ledger = await client.load_session(LEDGER_SESSION, tenant="acme")
    assert ledger.events[0].payload["scope"] == {"data_subject": "customer-42"}
    assert audit_ledger(path_of(ledger_under_test.writer)).erased_events == 2

    # A subject with no event (yet) of the tenant: the request is recorded, nothing erased.
    none = await client.erase(data_subject="customer-0", actor_id=actor.id, reason="r", tenant="acme")
    assert (none.erased, none.erasure is not None) == (0, True)
    with pytest.raises(errors.EntityNotFound) as caught:  # whose it is cannot be told
        await client.erase(data_subject="customer-0", actor_id=actor.id, reason="r")
    assert caught.value.details["kind"] == "data_subject"


@pytest.mark.parametrize(
    ("scope", "path"),
    [
        ({}, "$.session_id"),
        ({"session_id": "s1", "data_subject": "c"}, "$.session_id"),
        ({"run_id": "r1", "data_subject": "c"}, "$.run_id"),
    ],
)
async def test_an_erasure_names_one_scope(client, actor, scope, path):
    with pytest.raises(errors.InvalidRequest) as caught:
        await client.erase(**scope, actor_id=actor.id, reason="r", tenant="acme")
    assert caught.value.details["path"] == path


async def test_a_recorder_names_its_data_subject_on_every_event_even_signed(client):
    key = generate_private_key()
    signer = await client.ensure_actor(
        "acme", "agent:tests/signer@1", "agent", public_key=public_key_hex(key)
    )
    recorder = await LaneRecorder.open(
        client, "acme", "s1", "r1", "main", signers={signer.id: key}, data_subject="customer-42"
    )
    await recorder.append([recorder.event("stream.text_delta", actor_id=signer.id, payload={"t": 1})])
    plain = make_event(recorder.lane.id, "stream.text_delta", actor_id=signer.id, payload={"t": 2})
    await recorder.append([plain])
    events = (await client.load_lane(recorder.lane.id)).events
    assert [e.data_subject for e in events] == ["customer-42", "customer-42"]
    assert all(check_signature(msgspec.to_builtins(e), key.public_key()) for e in events)
    assert (await client.erase(data_subject="customer-42", actor_id=signer.id, reason="r")).erased == 2


# -- the transparency log ------------------------------------------------------------


async def test_checkpoints_proofs_bundles_and_witnesses_made_before_an_erasure_still_hold(tmp_path):
    """spec/erasure.md, "What every proof still proves": the tree is over
    entry hashes, which an erasure keeps."""
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    client = InProcessLedgerClient(writer)
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    await fill(client, actor, "s1", "r1", 4)
    await fill(client, actor, "s2", "r1", 2)
    log = Signer.generate("ledger.example/acme")
    witness = Witness(
        Cosigner.generate("witness.example/w", clock=lambda: 1_700_000_000), log.verifier(), origin=log.name
    )
    conn = writer._db

    def checkpoint() -> tuple[int, str]:
        size = tree_store.tree_size(conn)
        return size, sign_checkpoint(TreeHead(log.name, size, tree_store.root(conn, size)), log)

    old_size, old = checkpoint()
    old = witness.cosign(old)
    session_before = make_session_bundle(conn, "acme", "s1", old).format()
    event_before = make_bundle(
        conn, 2, old, event=conn.execute("SELECT body FROM events WHERE position = 2").fetchone()[0]
    )

    await client.erase("s1", actor_id=actor.id, reason="r")

    keys = dict(origin=log.name, witnesses=[witness.cosigner.verifier()], quorum=1)
    assert verify_session_bundle(session_before, log.verifier(), **keys).events == 4
    assert verify_bundle(event_before.format(), log.verifier(), **keys).event["payload"]["email"] == EMAIL
    # The tree after the erasure extends the one before: the witness cosigns
    # the new checkpoint on the consistency proof, and a bundle made now holds
    # the erased events and verifies under it.
    new_size, new = checkpoint()
    new = witness.cosign(new, tree_store.consistency_proof(conn, old_size, new_size))
    after = verify_session_bundle(
        make_session_bundle(conn, "acme", "s1", new).format(), log.verifier(), **keys
    )
    assert after.events == 4
    erased = make_bundle(
        conn, 2, new, event=conn.execute("SELECT body FROM events WHERE position = 2").fetchone()[0]
    )
    assert verify_bundle(erased.format(), log.verifier(), **keys).event["payload"] == {}


# -- blobs ---------------------------------------------------------------------------


async def stream_copies_removed(db: Path) -> None:
    """Until the sequencer's background round has removed the erased events'
    copies from the streams (spec/erasure.md, "The streams")."""

    def listed() -> int:
        with closing(sqlite3.connect(db)) as conn:
            return int(conn.execute("SELECT count(*) FROM stream_copies_to_erase").fetchone()[0])

    await eventually(listed, until=lambda n: n == 0, what="the erased events' stream copies removed")


def _bucket_files(store_dir: Path) -> list[Path]:
    """Every file of the nats-server's JetStream store, the streams' included
    (test_erasure_streams.py has the streams' own cases)."""
    return [path for path in store_dir.rglob("*") if path.is_file()]


@OVER_NATS_ONLY
async def test_an_erasure_deletes_the_blobs_only_its_events_referenced(
    ledger_under_test, client, actor, nats_server
):
    """Values over 1 KiB are blobs (spec/content.md). Erased, a blob no event
    that is not erased references is gone from the buckets' files: its bytes
    and its name (the SHA-256 of the content). A blob shared with an event
    that is not erased stays, readable."""
    gone_email, kept_email = "erased.person@example.org", "kept.person@example.org"
    gone_text, kept_text = f"mail {gone_email} " + "x" * 2000, f"mail {kept_email} " + "y" * 2000
    gone_sha, kept_sha = (hashlib.sha256(t.encode()).hexdigest() for t in (gone_text, kept_text))
    erased = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    kept = await client.create_lane("acme", "s2", "r1", "main", actor_id=actor.id)

    def event(lane: Lane, *texts: str) -> dict:
        payload = {f"t{i}": text for i, text in enumerate(texts)}
        return make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=payload)

    # Trusted producers store in the shared bucket, tenant producers in their own:
    # both are the tenant's (objects named by its token), both are erased from.
    await client.append(erased, 0, [event(erased, gone_text, kept_text), event(erased, gone_text)])
    await client.append(kept, 0, [event(kept, kept_text)])
    scoped = await LedgerClient.connect(nats_server.url, tenant="acme", timeout=5.0)
    try:
        own_text = f"mail {gone_email} own " + "z" * 2000
        own_sha = hashlib.sha256(own_text.encode()).hexdigest()
        await scoped.append(erased, 2, [event(erased, own_text)])
    finally:
        await scoped.close()
    store_dir = nats_server.store_dir
    assert {(n, v) for n, v in holding(_bucket_files(store_dir), [gone_email, gone_sha, own_sha])}  # planted
    buckets = BlobBuckets(client.js)
    assert (await buckets.get("acme", f"sha256:{own_sha}")).decode() == own_text

    done = await client.erase("s1", actor_id=actor.id, reason="r")

    assert done.erased == 3
    await stream_copies_removed(path_of(ledger_under_test.writer))
    assert holding(_bucket_files(store_dir), [gone_email, gone_sha, own_sha]) == []
    for sha in (gone_sha, own_sha):
        with pytest.raises(errors.EntityNotFound):
            await buckets.get("acme", f"sha256:{sha}")
    assert (await buckets.get("acme", f"sha256:{kept_sha}")).decode() == kept_text  # s2 still names it
    assert holding(_bucket_files(store_dir), [kept_email, kept_sha])
    # Nothing left in the ledger file names an erased event's blob.
    db = sqlite3.connect(path_of(ledger_under_test.writer))
    assert db.execute("SELECT tenant, sha256 FROM event_refs ORDER BY position").fetchall() == [
        ("acme", kept_sha)
    ]
    db.close()

    # The sequencer forgot it as present: naming it again, unstored, is refused.
    again = await client.create_lane("acme", "s3", "r1", "main", actor_id=actor.id)
    with pytest.raises(errors.BlobMissing):  # this client took it as stored, so sent no copy
        await client.append(again, 0, [event(again, gone_text)])

    # Erasing s2 too leaves the last one unreferenced; a page sent again finds it gone.
    await client.erase("s2", actor_id=actor.id, reason="r", erasure_id="e2")
    assert (await client.erase("s2", actor_id=actor.id, reason="r", erasure_id="e2")).already_erased == 1
    await stream_copies_removed(path_of(ledger_under_test.writer))
    assert holding(_bucket_files(store_dir), [kept_email, kept_sha]) == []


async def test_the_writer_indexes_the_blobs_events_reference_and_an_erasure_reports_the_unreferenced(
    tmp_path,
):
    """``event_refs``, filled at commit (and by the migration from version 4),
    emptied of an erased event's rows: the writer tells which blobs no event
    that is not erased references any more."""
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    client = InProcessLedgerClient(writer)
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    one, two, three = ("1" * 64, "2" * 64, "3" * 64)

    def ref(sha: str) -> dict:
        return {"_ref": f"sha256:{sha}", "size_bytes": 2000}

    s1 = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    s2 = await client.create_lane("acme", "s2", "r1", "main", actor_id=actor.id)
    described = {
        "payload_refs": [{"sha256": three, "size_bytes": 9, "label": "x", "media_type": "text/plain"}]
    }

    def request(lane: Lane, last_seq: int, payloads: list[dict]) -> bytes:
        # Straight to the writer: the SDK would look the made-up blobs up first.
        events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=p) for p in payloads]
        return msgspec.json.encode(
            {"lane_id": lane.id, "expected_last_seq": last_seq, "append_id": new_id(), "events": events}
        )

    def append(lane: Lane, payloads: list[dict]) -> None:
        [receipt] = writer.apply_batch([prepare_append(request(lane, 0, payloads))]).receipts
        assert isinstance(receipt, AppendCommitted)

    append(s1, [{"a": ref(one), "b": [ref(two), ref(one)]}, described])
    append(s2, [{"a": ref(two)}, {"plain": EMAIL}])
    indexed = "SELECT sha256, position FROM event_refs ORDER BY position, sha256"
    rows = writer._db.execute(indexed).fetchall()
    assert rows == [(one, 1), (two, 1), (three, 2), (two, 3)]

    # A version-4 file gets the same rows from its events.
    writer._db.execute("DELETE FROM event_refs")
    writer._db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    writer._db.commit()
    writer._db.close()
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    assert writer._db.execute(indexed).fetchall() == rows

    cmd = Erase(actor_id=actor.id, reason="r", erasure_id="e1", session_id="s1", tenant="acme")
    assert writer.erase(msgspec.structs.replace(cmd, dry_run=True))[2] == erasure.ErasedBlobs("acme", [], [])
    page, _, blobs = writer.erase(cmd)
    assert page.erased == 2
    assert blobs == erasure.ErasedBlobs("acme", [one, two, three], [one, three])  # s2 still names two
    assert writer._db.execute(indexed).fetchall() == [(two, 3)]
    _, _, again = writer.erase(cmd)  # a page sent again erases nothing, names no blob
    assert again == erasure.ErasedBlobs("acme", [], [])

    # Listed with the erasure, until the sequencer has deleted them: an
    # append naming one meanwhile is refused.
    assert writer.blobs_to_erase() == [("acme", one), ("acme", three)]
    [refused] = writer.apply_batch([prepare_append(request(s2, 2, [{"a": ref(one)}]))]).receipts
    assert isinstance(refused, AppendRejected) and refused.error.details["reason"] == "blob_erased"
    writer.blobs_deleted("acme", blobs.unreferenced)
    assert writer.blobs_to_erase() == []
    [committed] = writer.apply_batch([prepare_append(request(s2, 2, [{"a": ref(one)}]))]).receipts
    assert isinstance(committed, AppendCommitted)


@OVER_NATS_ONLY
async def test_a_blob_deletion_that_failed_is_done_later_from_the_ledgers_list(
    ledger_under_test, client, actor, sequencer, nats_server
):
    """The blobs an erasure leaves unreferenced are listed in the ledger with
    the erasure itself, so a deletion that fails (or a crash before it) is
    done later: the active sequencer tries the list again."""
    text = "mail gone.person@example.org " + "x" * 2000
    sha = hashlib.sha256(text.encode()).hexdigest()
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    await client.append(
        lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"t": text})]
    )
    failing = sequencer._blob_check.erase

    async def unavailable(tenant_token: str, hexes: list[str]) -> list[str]:
        raise errors.LedgerUnavailable("the object store is away", reason="test")

    sequencer._blob_check.erase = unavailable
    with pytest.raises(errors.LedgerError):
        await client.erase("s1", actor_id=actor.id, reason="r")
    assert ledger_under_test.writer.blobs_to_erase() == [("acme", sha)]
    assert (await client.load_lane(lane.id)).events[0].payload == {}  # the erasure itself committed
    assert holding(_bucket_files(nats_server.store_dir), [sha])  # the blob is still there

    sequencer._blob_check.erase = failing
    await sequencer.erase_listed()  # what the active sequencer does every erasure_retry_s
    assert ledger_under_test.writer.blobs_to_erase() == []
    assert holding(_bucket_files(nats_server.store_dir), [sha, "gone.person@example.org"]) == []


async def test_a_reader_holding_an_old_snapshot_delays_the_wal_truncate_not_the_writer(tmp_path):
    """``shred_wal`` does not wait for readers (the writer must not stall
    behind a long read): the WAL keeps the erased bytes while one holds a
    snapshot from before, and the next commit after it lets go empties it."""
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    client = InProcessLedgerClient(writer)
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    await fill(client, actor, "s1", "r1")
    reader = sqlite3.connect(tmp_path / "ledger.db")
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM events").fetchone()  # a snapshot from before the erasure
    started = time.monotonic()
    await client.erase("s1", actor_id=actor.id, reason="r")
    assert time.monotonic() - started < 2.0  # not the 5 s busy timeout
    wal = [tmp_path / "ledger.db-wal"]
    assert holding(wal, [EMAIL])  # the reader's frames stay while it reads
    reader.execute("COMMIT")
    reader.close()
    other = await client.create_lane("acme", "s2", "r1", "main", actor_id=actor.id)
    await client.append(other, 0, [make_event(other.id, "stream.text_delta", actor_id=actor.id)])
    # That commit tried again, and the WAL is empty: nothing erased is left.
    assert holding([*wal, tmp_path / "ledger.db"], [EMAIL, CODE, NOTE]) == []


@OVER_NATS_ONLY
async def test_erased_events_are_counted_by_their_tenant_also_for_a_trusted_caller(
    ledger_under_test, client, actor, sequencer
):
    await fill(client, actor, "s1", "r1")
    await client.erase("s1", actor_id=actor.id, reason="r")  # a trusted client, naming no tenant
    sample = sequencer._metrics.registry.get_sample_value
    assert sample("laneledger_sequencer_erased_events_total", {"tenant": "acme", "trigger": "request"}) == 3
