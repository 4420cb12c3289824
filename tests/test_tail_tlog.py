"""The tail serves the transparency log (spec/tlog.md, "Served by the tail"):
a real sequencer signs checkpoints onto LEDGER_TLOG (at its start and on
request here, so each test knows which sizes exist), a real tail keeps the
tree of what it applied, keeps the checkpoints that match it, and serves
them, proofs, session bundles and witnesses' cosignatures over HTTP."""

from __future__ import annotations

import asyncio
import base64
import secrets
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from polling import eventually
from prometheus_client import CollectorRegistry
from tail_support import decoded
from tlog_support import file_root, size_of, start_signing_sequencer

from laneledger.cli.tlog import request_checkpoint
from laneledger.contract.subjects import Subjects
from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.tail.answers.tlog import SessionBundle
from laneledger.services.tail.projections import tlog
from laneledger.services.tail.readmodel import ReadModel
from laneledger.tlog import merkle
from laneledger.tlog import store as tree_store
from laneledger.tlog.bundle import verify_bundle
from laneledger.tlog.checkpoint import TreeHead, sign_checkpoint
from laneledger.tlog.cosignature import Cosigner
from laneledger.tlog.note import Signature, Signer, sign_note, split_note
from laneledger.tlog.sessionbundle import verify_session_bundle

pytestmark = pytest.mark.timeout(120)

SUBJECTS = Subjects()
ORIGIN = "ledger.example/acme"
WITNESS = "witness.example/w1"


@dataclass
class Log:
    db: Path
    signer: Signer
    client: LedgerClient

    async def sign(self) -> str:
        """A checkpoint of the ledger's tree now, from the sequencer."""
        return await request_checkpoint(self.client, SUBJECTS)


@pytest_asyncio.fixture
async def log(nats_server, nc, tmp_path) -> AsyncIterator[Log]:
    """A real sequencer that signs checkpoints at its start (size 0) and on
    request only (its interval is an hour)."""
    signer = Signer.generate(ORIGIN)
    db = tmp_path / "ledger.db"
    service = await start_signing_sequencer(nc, db, signer, interval_s=3600)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            yield Log(db, signer, client)
    finally:
        await service.stop()


async def record(client: LedgerClient, tenant: str, session: str, lanes: int, events: int) -> None:
    actor = await client.ensure_actor(tenant, f"agent:{tenant}-tlog@1", "agent")
    for n in range(lanes):
        lane = await LaneRecorder.open(client, tenant, session, "r1", f"lane{n}", actor_id=actor.id)
        for k in range(events):
            await lane.append([lane.event("stream.text_delta", actor_id=actor.id, payload={"k": k})])


def tail_root(tail_dir: Path, size: int) -> bytes:
    conn = sqlite3.connect(f"file:{tail_dir / 'tail.db'}?mode=ro", uri=True)
    try:
        return tree_store.root(conn, size)
    finally:
        conn.close()


async def served(tail, size: int, headers: dict | None = None) -> str:
    """The tail's checkpoint of ``size``, once it serves one."""
    answer = await eventually(
        lambda: tail.api.get(f"/api/v1/tlog/checkpoints/{size}", headers=headers),
        until=lambda a: a.status == 200,
        what=f"the tail to serve the checkpoint of size {size}",
    )
    return answer.body.decode()


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_the_tails_tree_and_checkpoints_are_the_ledgers(log, start_tail, tmp_path):
    tail = await start_tail()
    signed = [await log.sign()]  # size 0, signed at the sequencer's start
    await record(log.client, "acme", "s1", 1, 3)
    signed.append(await log.sign())
    await record(log.client, "acme", "s1", 2, 4)
    signed.append(await log.sign())
    sizes = [size_of(n) for n in signed]
    assert sizes == [0, 3, 11]

    for note, size in zip(signed, sizes, strict=True):
        # Served as LEDGER_TLOG holds it (no witness has cosigned), and the
        # tail's own tree has the ledger file's root at that size.
        assert await served(tail, size) == note
        assert tail_root(tmp_path / "tail", size) == file_root(log.db, size)
    latest = await tail.api.get("/api/v1/tlog/checkpoint")
    assert latest.status == 200 and latest.body.decode() == signed[-1]
    assert latest.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert (await tail.api.get("/api/v1/tlog/checkpoints/4")).error["details"] == {
        "kind": "checkpoint",
        "size": 4,
    }

    proof = (await tail.api.get("/api/v1/tlog/consistency", params={"old": "3", "new": "11"})).json()
    assert proof["old_size"] == 3 and proof["new_size"] == 11
    heads = [TreeHead.of_note(n) for n in signed]
    merkle.verify_consistency(
        3, 11, heads[1].root, heads[2].root, [base64.b64decode(h) for h in proof["proof"]]
    )
    for params, parameter in [
        ({"old": "5", "new": "4"}, "old"),
        ({"old": "0", "new": "12"}, "new"),
        ({"old": "0"}, "new"),
        ({"new": "3"}, "old"),
        ({"old": "-1", "new": "3"}, "old"),
    ]:
        refused = await tail.api.get("/api/v1/tlog/consistency", params=params)
        assert refused.status == 400 and refused.error["details"]["parameter"] == parameter, params
    bad_size = await tail.api.get("/api/v1/tlog/checkpoints/x1")
    assert bad_size.status == 400 and bad_size.error["details"]["parameter"] == "size"

    metrics = (await tail.api.get("/metrics")).body.decode()
    assert metric(metrics, "laneledger_tail_tlog_checkpoint_size") == 11
    assert metric(metrics, "laneledger_tail_tlog_checkpoint_mismatches_total") == 0


async def test_proofs_verify_offline_and_stay_within_the_tenant(log, start_tail):
    acme, globex = secrets.token_hex(16), secrets.token_hex(16)
    tail = await start_tail(access=AccessPolicy.from_tokens({"acme": acme, "globex": globex}))
    as_acme = {"Authorization": f"Bearer {acme}"}
    await record(log.client, "acme", "s1", 2, 3)  # positions 1..6
    await record(log.client, "globex", "g1", 1, 2)  # 7, 8
    await eventually(lambda: tail.feed.applied, until=lambda n: n == 8, what="the tail at position 8")

    # Nothing covers the events yet (the sequencer signed size 0 at its start).
    await served(tail, 0)
    waiting = await tail.api.get("/api/v1/proofs/2", headers=as_acme)
    assert waiting.status == 503 and waiting.error["code"] == "unavailable"
    assert (await tail.api.get("/api/v1/sessions/s1/proof", headers=as_acme)).status == 503

    note = await log.sign()
    assert size_of(note) == 8
    # Public: the log-wide routes need no token on a guarded tail.
    assert await served(tail, 8) == note
    assert (await tail.api.get("/api/v1/tlog/checkpoint")).body.decode() == note
    assert (await tail.api.get("/api/v1/tlog/consistency", params={"old": "0", "new": "8"})).status == 200
    # Guarded: the proofs are tenant data.
    assert (await tail.api.get("/api/v1/proofs/2")).status == 401
    assert (await tail.api.get("/api/v1/sessions/s1/proof")).status == 401

    proof = await tail.api.get("/api/v1/proofs/2", headers=as_acme)
    assert proof.status == 200 and proof.headers["Content-Type"] == "text/plain; charset=utf-8"
    verified = verify_bundle(proof.body.decode(), log.signer.verifier(), origin=ORIGIN)
    assert verified.checkpoint.size == 8
    assert (
        verified.event is not None and verified.event["position"] == 2 and verified.event["tenant"] == "acme"
    )

    bundle = await tail.api.get("/api/v1/sessions/s1/proof", headers=as_acme)
    assert bundle.status == 200
    checked = verify_session_bundle(bundle.body, log.signer.verifier(), origin=ORIGIN)
    assert checked.events == 6 and checked.checkpoint_size == 8
    streamed = decoded(bundle.body, SessionBundle)  # written in chunks, read as the document's Struct
    assert (streamed.tenant, streamed.session_id, len(streamed.events)) == ("acme", "s1", 6)

    # Another tenant's event and session are missing, exactly as absent ones.
    theirs = await tail.api.get("/api/v1/proofs/7", headers=as_acme)
    absent = await tail.api.get("/api/v1/proofs/99", headers=as_acme)
    assert theirs.status == absent.status == 404
    assert theirs.error["details"] == {"kind": "event", "position": 7}
    assert absent.error["details"] == {"kind": "event", "position": 99}
    their_session = await tail.api.get("/api/v1/sessions/g1/proof", headers=as_acme)
    no_session = await tail.api.get("/api/v1/sessions/zz/proof", headers=as_acme)
    assert their_session.status == no_session.status == 404
    assert their_session.error["details"]["kind"] == no_session.error["details"]["kind"] == "session"
    as_globex = {"Authorization": f"Bearer {globex}"}
    mine = await tail.api.get("/api/v1/proofs/7", headers=as_globex)
    assert verify_bundle(mine.body.decode(), log.signer.verifier(), origin=ORIGIN).event["tenant"] == "globex"

    # An older checkpoint by size: it must cover the position, and be one the tail has.
    await record(log.client, "acme", "s2", 1, 1)  # position 9
    await log.sign()
    await served(tail, 9)
    old = await tail.api.get("/api/v1/proofs/2", params={"size": "8"}, headers=as_acme)
    assert verify_bundle(old.body.decode(), log.signer.verifier(), origin=ORIGIN).checkpoint.size == 8
    short = await tail.api.get("/api/v1/proofs/2", params={"size": "0"}, headers=as_acme)
    assert short.status == 400 and short.error["details"]["parameter"] == "size"
    unknown = await tail.api.get("/api/v1/proofs/2", params={"size": "5"}, headers=as_acme)
    assert unknown.status == 404 and unknown.error["details"]["kind"] == "checkpoint"


async def test_witness_cosignatures_are_kept_served_and_checked(log, start_tail):
    witness = Cosigner.generate(WITNESS)
    tail = await start_tail(tlog_witnesses=(witness.verifier(),))
    await record(log.client, "acme", "s1", 1, 3)
    note = await log.sign()
    assert await served(tail, 3) == note
    text, log_signatures = split_note(note)

    cosigned = sign_note(text, [witness], keep=log_signatures)
    stored = await tail.api.post("/api/v1/tlog/cosignatures", data=cosigned.encode())
    assert stored.status == 200, stored.body
    key = f"{WITNESS}+{witness.key_id:08x}"
    assert stored.json() == {"size": 3, "witnesses": [key], "kept_newer": []}
    assert (await tail.api.get("/api/v1/tlog/checkpoint")).body.decode() == cosigned
    proof = (await tail.api.get("/api/v1/proofs/3")).body.decode()
    checked = verify_bundle(
        proof, log.signer.verifier(), origin=ORIGIN, witnesses=[witness.verifier()], quorum=1
    )
    assert checked.witnesses == (WITNESS,)

    # Refused, each with its typed error, and nothing stored.
    stranger = Cosigner.generate("witness.example/stranger")
    unknown = await tail.api.post(
        "/api/v1/tlog/cosignatures", data=sign_note(text, [stranger], keep=log_signatures).encode()
    )
    assert unknown.status == 400 and unknown.error["code"] == "invalid_request"
    assert unknown.error["details"]["reason"] == "note_unverified"
    assert f"witness.example/stranger+{stranger.key_id:08x}" in unknown.error["details"]["signers"]

    line = split_note(cosigned)[1][-1]
    flipped = bytearray(line.signature)
    flipped[-1] ^= 1
    tampered = (
        text
        + "\n"
        + "".join(s.line() for s in (*log_signatures, Signature(line.name, line.key_id, bytes(flipped))))
    )
    bad = await tail.api.post("/api/v1/tlog/cosignatures", data=tampered.encode())
    assert bad.status == 400 and bad.error["details"] == {"reason": "note_signature_invalid", "key": key}

    other = sign_checkpoint(TreeHead(ORIGIN, 3, bytes(32)), log.signer)  # a root the log never had
    foreign = await tail.api.post(
        "/api/v1/tlog/cosignatures", data=sign_note(split_note(other)[0], [witness]).encode()
    )
    assert foreign.status == 404 and foreign.error["details"] == {"kind": "checkpoint", "size": 3}
    too_large = await tail.api.post("/api/v1/tlog/cosignatures", data=b"x" * (64 * 1024 + 1))
    assert too_large.status == 413
    not_a_note = await tail.api.post("/api/v1/tlog/cosignatures", data=b"hello\n")
    assert not_a_note.status == 400 and not_a_note.error["code"] == "malformed_message"
    assert (await tail.api.get("/api/v1/tlog/checkpoint")).body.decode() == cosigned

    # Kept across a restart: the tail's own record.
    await start_tail.stop(tail)
    again = await start_tail(tlog_witnesses=(witness.verifier(),))
    assert (await again.api.get("/api/v1/tlog/checkpoints/3")).body.decode() == cosigned


async def test_an_older_cosignature_never_replaces_a_newer_one(log, start_tail):
    now = [1_700_000_100]
    witness = Cosigner.generate(WITNESS, clock=lambda: now[0])
    key = f"{WITNESS}+{witness.key_id:08x}"
    tail = await start_tail(tlog_witnesses=(witness.verifier(),))
    await record(log.client, "acme", "s1", 1, 2)
    text2, log2 = split_note(await log.sign())
    await served(tail, 2)
    older = sign_note(text2, [witness], keep=log2)
    now[0] += 60
    newer = sign_note(text2, [witness], keep=log2)
    assert older != newer

    async def post(note: str) -> dict:
        answer = await tail.api.post("/api/v1/tlog/cosignatures", data=note.encode())
        assert answer.status == 200, answer.body
        return answer.json()

    assert await post(newer) == {"size": 2, "witnesses": [key], "kept_newer": []}
    # The older one, re-posted (or arriving late): accepted, and the newer stays.
    assert await post(older) == {"size": 2, "witnesses": [key], "kept_newer": [key]}
    assert (await tail.api.get("/api/v1/tlog/checkpoints/2")).body.decode() == newer
    # The same one again: idempotent.
    assert await post(newer) == {"size": 2, "witnesses": [key], "kept_newer": []}
    assert (await tail.api.get("/api/v1/tlog/checkpoints/2")).body.decode() == newer

    # A cosignature of a smaller tree, posted after one of a larger, leaves
    # the larger one's (the latest checkpoint's) in place.
    await record(log.client, "acme", "s1", 1, 1)
    text3, log3 = split_note(await log.sign())
    await served(tail, 3)
    now[0] += 60
    latest = sign_note(text3, [witness], keep=log3)
    assert (await post(latest))["kept_newer"] == []
    assert await post(older) == {"size": 2, "witnesses": [key], "kept_newer": [key]}
    assert (await tail.api.get("/api/v1/tlog/checkpoint")).body.decode() == latest
    assert (await tail.api.get("/api/v1/tlog/checkpoints/2")).body.decode() == newer


async def test_a_checkpoint_that_is_not_the_tails_tree_is_not_served(log, start_tail, js):
    tail = await start_tail()
    await record(log.client, "acme", "s1", 1, 4)
    await log.sign()
    await served(tail, 4)
    # Signed with the log's own key, but not the ledger's tree at size 2.
    forged = sign_checkpoint(TreeHead(ORIGIN, 2, merkle.leaf_hash(b"forged")), log.signer)
    await js.publish(SUBJECTS.tlog_checkpoint, forged.encode(), stream=SUBJECTS.tlog_stream)
    await js.publish(SUBJECTS.tlog_checkpoint, b"not a note", stream=SUBJECTS.tlog_stream)
    await record(log.client, "acme", "s1", 1, 1)
    after = await log.sign()  # read after the forged one: the tail did not stop at it
    assert await served(tail, 5) == after

    missing = await tail.api.get("/api/v1/tlog/checkpoints/2")
    assert missing.status == 404
    metrics = (await tail.api.get("/metrics")).body.decode()
    assert metric(metrics, "laneledger_tail_tlog_checkpoint_mismatches_total") == 2
    assert metric(metrics, "laneledger_tail_tlog_checkpoint_size") == 5


async def test_a_restarted_tail_resumes_reading_checkpoints(log, start_tail):
    tail = await start_tail()
    await record(log.client, "acme", "s1", 1, 2)
    first = await log.sign()
    await served(tail, 2)
    await start_tail.stop(tail)
    await record(log.client, "acme", "s1", 1, 1)
    second = await log.sign()
    again = await start_tail()
    assert await served(again, 3) == second
    assert (await again.api.get("/api/v1/tlog/checkpoints/2")).body.decode() == first
    assert again.service.model.checkpoint_sequence == 3  # sizes 0, 2, 3: read once each


async def test_a_read_model_from_before_the_tree_gets_it_on_open(log, start_tail, tmp_path):
    tail = await start_tail()
    await record(log.client, "acme", "s1", 2, 5)
    await eventually(lambda: tail.feed.applied, until=lambda n: n == 10, what="the tail at position 10")
    await start_tail.stop(tail)
    path = tmp_path / "tail" / "tail.db"
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE tlog_hashes")  # as a tail.db written before the tree
    conn.commit()
    conn.close()

    model = ReadModel(path)
    try:
        assert model.applied == 10
    finally:
        model.close()
    for size in (1, 7, 10):
        assert tail_root(tmp_path / "tail", size) == file_root(log.db, size)


def test_a_message_that_is_no_event_gets_the_hash_of_its_bytes_as_leaf(tmp_path):
    model = ReadModel(tmp_path / "tail.db")
    try:
        model.apply([(1, b"not an event")])
        conn = model.connection()
        assert tree_store.tree_size(conn) == 1
        assert tree_store.root(conn, 1) == merkle.leaf_hash(b"not an event")
    finally:
        model.close()


def test_the_tail_takes_witness_keys_from_its_options_or_environment(monkeypatch, capsys):
    from laneledger.services.tail.__main__ import parse_args

    one, two = (Cosigner.generate(f"witness.example/w{n}").verifier().to_text() for n in (1, 2))
    monkeypatch.delenv("LANELEDGER_TLOG_WITNESS_KEYS", raising=False)
    assert parse_args([]).tlog_witness_key == ()
    given = parse_args(["--tlog-witness-key", one, "--tlog-witness-key", two]).tlog_witness_key
    assert [w.to_text() for w in given] == [one, two]
    monkeypatch.setenv("LANELEDGER_TLOG_WITNESS_KEYS", f"{two} {one}")
    assert [w.to_text() for w in parse_args([]).tlog_witness_key] == [two, one]
    note_key = Signer.generate(ORIGIN).verifier().to_text()  # a log's key, not a witness's
    monkeypatch.setenv("LANELEDGER_TLOG_WITNESS_KEYS", note_key)
    with pytest.raises(SystemExit) as stopped:
        parse_args([])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("laneledger-tail: LANELEDGER_TLOG_WITNESS_KEYS=")


async def test_a_checkpoint_beyond_the_tails_tree_waits_for_it(log, js, tmp_path):
    """The follower on a read model that has applied 3 of the 6 positions a
    checkpoint covers: it keeps the checkpoint unread, and takes it once the
    read model has them."""
    from concurrent.futures import ThreadPoolExecutor

    from laneledger.services.tail.metrics import TailMetrics
    from laneledger.services.tail.tlogfollow import CheckpointFollower

    await record(log.client, "acme", "s1", 2, 3)
    note = await log.sign()
    assert size_of(note) == 6
    conn = sqlite3.connect(f"file:{log.db}?mode=ro", uri=True)
    events = [(p, bytes(b)) for p, b in conn.execute("SELECT position, body FROM events ORDER BY position")]
    conn.close()

    model = ReadModel(tmp_path / "tail.db")
    apply_thread = ThreadPoolExecutor(1)
    registry = CollectorRegistry()
    metrics = TailMetrics(registry)
    try:
        follower = CheckpointFollower(js, SUBJECTS, model, apply_thread, metrics, interval_s=1.0)
        await asyncio.get_running_loop().run_in_executor(apply_thread, model.apply, events[:3])
        await follower.read_new()
        assert (model.checkpoint_sequence, model.checkpoint_size) == (1, 0)  # size 0 only; 6 waits
        await asyncio.get_running_loop().run_in_executor(apply_thread, model.apply, events[3:])
        await follower.read_new()
        assert (model.checkpoint_sequence, model.checkpoint_size) == (2, 6)
        assert tlog.served_note(model.connection(), 6) == note
        assert registry.get_sample_value("laneledger_tail_tlog_checkpoint_mismatches_total") == 0
        assert registry.get_sample_value("laneledger_tail_tlog_checkpoint_size") == 6
    finally:
        apply_thread.shutdown()
        model.close()
