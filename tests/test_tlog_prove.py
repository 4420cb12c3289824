"""``laneledger prove`` and ``laneledger verify BUNDLE --note-key`` (spec/tlog.md,
"Offline bundles", "Session bundles"): proofs written from a real ledger and
its signed checkpoints, checked with nothing but public keys; every
tampering is named."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tlog_support import start_signing_sequencer

from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.tlog.cosignature import Cosigner
from laneledger.tlog.note import Signer
from laneledger.tlog.witness import Witness

SCRIPT = Path(sys.executable).with_name("laneledger")
ORIGIN = "ledger.example/acme"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


async def acli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *args)


@pytest.fixture
async def ledger(nats_server, nc, tmp_path):
    """A real sequencer signing checkpoints (only at start: proofs must ask
    for fresh ones), two sessions of three lanes; yields (db, signer)."""
    signer = Signer.generate(ORIGIN)
    db = tmp_path / "ledger.db"
    service = await start_signing_sequencer(nc, db, signer, interval_s=3600)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:prove-tests", "agent")
            for session in ("s1", "s2"):
                for name in ("main", "tools", "sub"):
                    lane = await LaneRecorder.open(client, "acme", session, "r1", name, actor_id=actor.id)
                    for n in range(3):
                        await lane.append(
                            [lane.event("stream.text_delta", actor_id=actor.id, payload={"n": n})]
                        )
        yield db, signer
    finally:
        await service.stop()


def verify(path: Path, signer: Signer, *more: str) -> subprocess.CompletedProcess[str]:
    return cli("verify", str(path), "--note-key", signer.verifier().to_text(), *more)


async def test_one_events_proof_verifies_offline_and_tampering_fails(ledger, nats_server, tmp_path):
    db, signer = ledger
    out = tmp_path / "event.tlog-proof"
    made = await acli("prove", "--db", str(db), "--nats", nats_server.url, "--position", "7", "-o", str(out))
    assert made.returncode == 0, made.stderr
    text = out.read_text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra ")
    ok = verify(out, signer)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"intact: position 7 is in {ORIGIN}'s tree of 18\n"

    lines = text.split("\n")
    hash_line = next(
        i for i, line in enumerate(lines) if line and not line.startswith(("c2sp", "extra", "index"))
    )
    raw = bytearray(base64.b64decode(lines[hash_line]))
    raw[0] ^= 1
    lines[hash_line] = base64.b64encode(bytes(raw)).decode()
    bad = tmp_path / "bad.tlog-proof"
    bad.write_text("\n".join(lines))
    failed = verify(bad, signer)
    assert failed.returncode == 1 and failed.stdout.startswith("FAIL position 7: ")

    other = Signer.generate(ORIGIN)
    refused = verify(out, other)
    assert (
        refused.returncode == 1 and "did not sign" in refused.stdout
    ) or "no trusted key" in refused.stdout


async def test_a_session_bundle_verifies_offline_and_names_the_first_failure(ledger, nats_server, tmp_path):
    db, signer = ledger
    out = tmp_path / "s1.bundle.json"
    made = await acli("prove", "--db", str(db), "--nats", nats_server.url, "--session", "s1", "-o", str(out))
    assert made.returncode == 0, made.stderr
    ok = verify(out, signer)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"intact: 9 events, each in {ORIGIN}'s tree of 18\n"
    doc = json.loads(out.read_text())
    assert [e["index"] + 1 for e in doc["events"]] == list(range(1, 10))

    def tampered(name: str, change) -> subprocess.CompletedProcess[str]:
        copy = json.loads(out.read_text())
        change(copy)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(copy))
        return verify(path, signer)

    def edit_payload(doc: dict) -> None:
        event = json.loads(base64.b64decode(doc["events"][4]["event"]))
        event["payload"]["n"] = 99
        doc["events"][4]["event"] = base64.b64encode(json.dumps(event).encode()).decode()

    dropped = tampered("dropped", lambda d: d["events"].pop(4))  # the tools lane's second event
    assert dropped.returncode == 1 and dropped.stdout.startswith("FAIL position 6: "), dropped.stdout
    edited = tampered("edited", edit_payload)
    assert edited.returncode == 1 and edited.stdout.startswith("FAIL position 5: "), edited.stdout
    renamed = tampered("renamed", lambda d: d.update(session_id="s2"))
    assert renamed.returncode == 1 and renamed.stdout.startswith("FAIL position 1: "), renamed.stdout


async def test_witness_cosignatures_and_a_quorum(ledger, nats_server, tmp_path):
    db, signer = ledger
    out = tmp_path / "s2.bundle.json"
    made = await acli("prove", "--db", str(db), "--nats", nats_server.url, "--session", "s2", "-o", str(out))
    assert made.returncode == 0, made.stderr
    w1, w2 = Cosigner.generate("witness.example/w1"), Cosigner.generate("witness.example/w2")
    doc = json.loads(out.read_text())
    doc["checkpoint"] = Witness(w1, signer.verifier(), origin=ORIGIN).cosign(doc["checkpoint"])
    cosigned = tmp_path / "cosigned.json"
    cosigned.write_text(json.dumps(doc))
    keys = ["--witness", w1.verifier().to_text(), "--witness", w2.verifier().to_text()]

    one = verify(cosigned, signer, *keys, "--quorum", "1")
    assert one.returncode == 0, one.stdout + one.stderr
    assert one.stdout.endswith("; cosigned by witness.example/w1\n")
    both = verify(cosigned, signer, *keys)  # the default quorum: every witness named
    assert both.returncode == 1 and "2 witness cosignatures required" in both.stdout
    unsigned = verify(out, signer, *keys, "--quorum", "1")
    assert unsigned.returncode == 1 and "0 of the 1 witness cosignatures" in unsigned.stdout
    assert verify(out, signer, "--quorum", "1").returncode == 2  # more than the witnesses named


async def test_prove_names_what_it_cannot_prove(ledger, nats_server, tmp_path):
    db, _ = ledger
    missing = await acli("prove", "--db", str(db), "--nats", nats_server.url, "--position", "99")
    assert missing.returncode == 2 and "no event at this position" in missing.stderr
    unknown = await acli("prove", "--db", str(db), "--nats", nats_server.url, "--session", "nope")
    assert unknown.returncode == 2 and "no such session" in unknown.stderr
