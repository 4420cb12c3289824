"""Signed tree heads (spec/tlog.md, "Checkpoints of the ledger"): the active
sequencer signs the ledger's Merkle tree as C2SP checkpoints on LEDGER_TLOG,
at an interval when the tree grew and on request, once per tree size; the
keys come from ``laneledger tlog keygen``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from polling import eventually
from sequencer_process import SequencerProcess
from tlog_support import file_root, start_signing_sequencer

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import Reply, ReplyOk
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.store import open_ledger
from laneledger.tlog import merkle
from laneledger.tlog.checkpoint import TreeHead, open_checkpoint
from laneledger.tlog.cosignature import CosignatureVerifier, Cosigner
from laneledger.tlog.note import Ed25519Verifier, Signer

SCRIPT = Path(sys.executable).with_name("laneledger")
SUBJECTS = Subjects()
ORIGIN = "ledger.example/acme"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def head_of(note: str, signer: Signer) -> TreeHead:
    return open_checkpoint(note, [signer.verifier()], origin=ORIGIN)[0]


async def checkpoints(js) -> list[str]:
    """Every signed note on LEDGER_TLOG, in order."""
    info = await js.stream_info(SUBJECTS.tlog_stream)
    return [
        (await js.get_msg(SUBJECTS.tlog_stream, seq)).data.decode()
        for seq in range(info.state.first_seq, info.state.last_seq + 1)
    ]


async def record(client: LedgerClient, actor_id: str, name: str, events: int) -> None:
    lane = await LaneRecorder.open(client, "acme", "s1", "r1", name, actor_id=actor_id)
    for n in range(events):
        await lane.append([lane.event("stream.text_delta", actor_id=actor_id, payload={"n": n})])


async def test_checkpoints_are_signed_as_the_tree_grows_once_per_size(nats_server, nc, js, tmp_path):
    signer = Signer.generate(ORIGIN)
    db = tmp_path / "ledger.db"
    service = await start_signing_sequencer(nc, db, signer)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:tlog-tests", "agent")
            await record(client, actor.id, "main", 5)
            first = await eventually(
                lambda: checkpoints(js),
                until=lambda notes: notes and head_of(notes[-1], signer).size == 5,
                what="a checkpoint of size 5",
            )
            await record(client, actor.id, "second", 4)
            notes = await eventually(
                lambda: checkpoints(js),
                until=lambda notes: head_of(notes[-1], signer).size == 9,
                what="a checkpoint of size 9",
            )
            await asyncio.sleep(1.0)  # five intervals with no growth: nothing new
            assert await checkpoints(js) == notes
    finally:
        await service.stop()

    heads = [head_of(n, signer) for n in notes]
    sizes = [h.size for h in heads]
    assert sizes == sorted(set(sizes)) and sizes[-1] == 9 and first[-1] in notes
    for head in heads:  # each states the ledger's own tree at its size
        assert head == TreeHead(ORIGIN, head.size, file_root(db, head.size))
    conn = open_ledger(db)
    try:
        from laneledger.tlog import store

        proof = store.consistency_proof(conn, 5, 9)
    finally:
        conn.close()
    merkle.verify_consistency(5, 9, file_root(db, 5), heads[-1].root, proof)
    assert service.tree_heads is not None and service.tree_heads.latest == notes[-1]


async def test_a_checkpoint_on_request_and_none_again_after_a_restart(nats_server, nc, js, tmp_path):
    signer = Signer.generate(ORIGIN)
    db = tmp_path / "ledger.db"
    service = await start_signing_sequencer(
        nc, db, signer, interval_s=3600
    )  # signs at start, then on request only
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:tlog-tests", "agent")
            await record(client, actor.id, "main", 3)
        signed = await asyncio.to_thread(cli, "tlog", "sign", "--nats", nats_server.url)
        assert signed.returncode == 0, signed.stderr
        assert head_of(signed.stdout, signer) == TreeHead(ORIGIN, 3, file_root(db, 3))
        again = await nc.request(SUBJECTS.tlog_sign, b"", timeout=5)
        reply = msgspec.json.decode(again.data, type=Reply)
        assert isinstance(reply, ReplyOk) and reply.result == {"checkpoint": signed.stdout}
        notes = await checkpoints(js)
        assert notes[-1] == signed.stdout and len(notes) == 2  # size 0 at start, then 3
    finally:
        await service.stop()
    restarted = await start_signing_sequencer(nc, db, signer, interval_s=3600)
    try:
        await eventually(lambda: restarted.tree_heads.latest, what="the restarted signer's first look")
        assert await checkpoints(js) == notes  # size 3 is on the stream already
    finally:
        await restarted.stop()


async def test_no_sequencer_signing_is_a_clear_error(nats_server):
    result = await asyncio.to_thread(cli, "tlog", "sign", "--nats", nats_server.url)
    assert result.returncode == 2
    assert "no sequencer signs checkpoints" in result.stderr


def test_keygen_writes_a_private_key_once_and_prints_its_note_key(tmp_path):
    key_file = tmp_path / "tlog.key"
    made = cli("tlog", "keygen", "--origin", ORIGIN, "--key-file", str(key_file))
    assert made.returncode == 0, made.stderr
    verifier = Ed25519Verifier.from_text(made.stdout.strip())
    signer = Signer.from_file(key_file)
    assert (verifier.name, verifier.key_id) == (ORIGIN, signer.key_id)
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    assert cli("tlog", "note-key", "--key-file", str(key_file)).stdout == made.stdout
    before = key_file.read_bytes()
    again = cli("tlog", "keygen", "--origin", ORIGIN, "--key-file", str(key_file))
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert key_file.read_bytes() == before
    bad = cli("tlog", "keygen", "--origin", "two words", "--key-file", str(tmp_path / "other.key"))
    assert bad.returncode == 2 and "--origin" in bad.stderr and not (tmp_path / "other.key").exists()


async def test_the_sequencer_service_signs_with_its_key_file(nats_server, js, tmp_path):
    key_file = tmp_path / "tlog.key"
    made = cli("tlog", "keygen", "--origin", ORIGIN, "--key-file", str(key_file))
    verifier = Ed25519Verifier.from_text(made.stdout.strip())
    seq = SequencerProcess(
        nats_server.url,
        tmp_path / "ledger.db",
        log_dir=tmp_path,
        extra_args=("--tlog-key-file", str(key_file), "--tlog-checkpoint-interval-s", "0.2"),
    )
    seq.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:tlog-tests", "agent")
            await record(client, actor.id, "main", 2)
        notes = await eventually(
            lambda: checkpoints(js),
            until=lambda notes: open_checkpoint(notes[-1], [verifier], origin=ORIGIN)[0].size == 2,
            what="the service's checkpoint of size 2",
        )
    finally:
        seq.stop()
    assert open_checkpoint(notes[-1], [verifier], origin=ORIGIN)[0].root == file_root(
        tmp_path / "ledger.db", 2
    )

    bad_key = tmp_path / "bad.key"
    bad_key.write_text("PRIVATE+KEY+not-a-key\n")
    refused = SequencerProcess(
        nats_server.url, tmp_path / "other.db", log_dir=tmp_path, extra_args=("--tlog-key-file", str(bad_key))
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", refused.module, *refused.args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "key" in result.stderr, result.stderr


def test_keygen_makes_a_witness_key_too(tmp_path):
    key_file = tmp_path / "witness.key"
    made = cli("tlog", "keygen", "--witness", "--origin", "witness.example/w1", "--key-file", str(key_file))
    assert made.returncode == 0, made.stderr
    verifier = CosignatureVerifier.from_text(made.stdout.strip())
    assert verifier.key_id == Cosigner.from_text(key_file.read_text().strip()).key_id
    assert cli("tlog", "note-key", "--key-file", str(key_file)).stdout == made.stdout
    with pytest.raises(InvalidRequest):  # a witness key is not a log's signing key
        Signer.from_file(key_file)
