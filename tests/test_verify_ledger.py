"""`laneledger verify` over whole ledgers the real sequencer wrote: every kind
of tampering (edit, delete, insert, reorder, signatures, causation, actors,
blobs, a fully re-chained forgery) is named by its first bad position and its
fault kind (spec/verify.md)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from prometheus_client import CollectorRegistry
from sequencer_process import wait_for_stream
from test_audit import copy_db

from laneledger.audit.identity import identity_findings
from laneledger.audit.ledger import audit_ledger
from laneledger.contract import errors
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import append_digest, entry_hash
from laneledger.contract.model import LEDGER_OWNED_FIELDS
from laneledger.contract.signing import generate_private_key, sign_event
from laneledger.contract.subjects import token
from laneledger.sdk.blobstore import BlobStore, object_name
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.tree import extend_tree, leaf_of
from laneledger.tlog import merkle

SCRIPT = Path(sys.executable).with_name("laneledger")
KEY = generate_private_key()
OTHER = generate_private_key()
BIG = "lorem ipsum dolor sit amet " * 120  # over 1 KiB: a content reference


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, timeout=60, text=True)


async def acli(*args: str) -> subprocess.CompletedProcess:
    return await asyncio.to_thread(cli, *args)


async def build(client: LedgerClient) -> dict[str, str]:
    """Seven events on three lanes, with the positions the tests name:

    1 main seq1 signer         2 sub seq1 plain, blob, cause 1
    3 main seq2 signer, cause 2  4 main seq3 human
    5 sub seq2 plain, cause 3  6 main seq4 signer
    7 other session, seq1, actor "bot-7" (breaks the identity convention)
    """
    signer = await client.ensure_actor("acme", "agent:verify/main@1", "agent", public_key=KEY)
    plain = await client.ensure_actor("acme", "agent:verify/sub-toolu_01@1", "agent")
    human = await client.ensure_actor("acme", "human:dusk", "human")
    bot = await client.ensure_actor("acme", "bot-7", "agent")
    main = await LaneRecorder.open(client, "acme", "s1", "r1", "main", signers={signer.id: KEY})
    sub = await LaneRecorder.open(
        client, "acme", "s1", "r1", "sub", kind="subagent", parent_lane_id=main.lane.id
    )
    other = await LaneRecorder.open(client, "acme", "s2", "r1", "main")
    r1 = await main.append([main.event("run.started", actor_id=signer.id, subject_id="r1")])
    r2 = await sub.append(
        [
            sub.event(
                "stream.text_delta", actor_id=plain.id, payload={"text": BIG}, causation_id=r1.event_ids[0]
            )
        ]
    )
    r3 = await main.append(
        [
            main.event(
                "stream.text_delta", actor_id=signer.id, payload={"text": "hi"}, causation_id=r2.event_ids[0]
            ),
            main.event("stream.text_delta", actor_id=human.id, payload={"text": "ok"}),
        ]
    )
    await sub.append(
        [
            sub.event(
                "stream.text_delta", actor_id=plain.id, payload={"text": "x"}, causation_id=r3.event_ids[0]
            )
        ]
    )
    r6 = await main.append([main.event("run.completed", actor_id=signer.id, subject_id="r1")])
    r7 = await other.append([other.event("run.started", actor_id=bot.id, subject_id="r1")])
    assert r7.positions == [7]
    return {
        "signer": signer.id,
        "plain": plain.id,
        "human": human.id,
        "bot": bot.id,
        "last_main": r6.event_ids[0],
        "first": r1.event_ids[0],
    }


def sql(db: Path, *statements: tuple[str, tuple]) -> None:
    conn = sqlite3.connect(db)
    try:
        with conn:
            for statement, params in statements:
                assert conn.execute(statement, params).rowcount >= 1, statement
    finally:
        conn.close()


def body_at(db: Path, position: int) -> dict:
    conn = sqlite3.connect(db)
    try:
        (body,) = conn.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()
    finally:
        conn.close()
    return msgspec.json.decode(body)


def rewrite(
    db: Path, position: int, change: Callable[[dict], None], *, rehash: bool, key: bytes | None = None
) -> None:
    """Change the stored body at ``position``; with ``rehash`` recompute its
    entry hash too (what someone without an HMAC key can do)."""
    record = body_at(db, position)
    change(record)
    if rehash:
        record["entry_hash"] = entry_hash(record, key=key)
    sql(db, ("UPDATE events SET body = ? WHERE position = ?", (canonicalize(record), position)))


def move(db: Path, moves: dict[int, int]) -> None:
    """Give rows new positions (the bodies keep theirs)."""
    sql(
        db,
        *[("UPDATE events SET position = ? WHERE position = ?", (-new, old)) for old, new in moves.items()],
        *[("UPDATE events SET position = ? WHERE position = ?", (new, -new)) for new in moves.values()],
    )


def append_forgery(
    db: Path, *, key: bytes | None = None, with_receipt: bool, with_tree: bool | None = None
) -> int:
    """A new event at the end of lane "main" chained like the sequencer would
    chain it (prev_hash = the head, entry_hash recomputed); with its receipt,
    the lanes row updated and its Merkle leaf appended (``with_tree``, by
    default with the receipt) it is indistinguishable without the HMAC key,
    the committed stream or a signed checkpoint."""
    conn = sqlite3.connect(db)
    try:
        (last,) = conn.execute("SELECT max(position) FROM events").fetchone()
        lane_id, seq, head = conn.execute(
            "SELECT lane_id, seq, body FROM events WHERE position = 6"
        ).fetchone()
        (template,) = conn.execute("SELECT body FROM events WHERE position = 4").fetchone()
    finally:
        conn.close()
    record = msgspec.json.decode(template)  # the human's event: no signature to forge
    record.update(
        id="forged-event",
        seq=seq + 1,
        position=last + 1,
        append_id="forged-append",
        prev_hash=msgspec.json.decode(head)["entry_hash"],
        event_type="run.failed",
    )
    record["entry_hash"] = entry_hash(record, key=key)
    statements = [
        (
            "INSERT INTO events (position, id, lane_id, seq, tenant, session_id, run_id,"
            " event_type, append_id, body) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                last + 1,
                "forged-event",
                lane_id,
                seq + 1,
                "acme",
                "s1",
                "r1",
                "run.failed",
                "forged-append",
                canonicalize(record),
            ),
        )
    ]
    if with_receipt:
        proposed = {k: v for k, v in record.items() if k not in LEDGER_OWNED_FIELDS}
        digest = append_digest([proposed])
        receipt = {
            "outcome": "committed",
            "append_id": "forged-append",
            "lane_id": lane_id,
            "digest": digest,
            "first_seq": seq + 1,
            "last_seq": seq + 1,
            "event_ids": ["forged-event"],
            "positions": [last + 1],
            "entry_hashes": [record["entry_hash"]],
            "committed_at": record["committed_at"],
        }
        statements += [
            (
                "INSERT INTO receipts (tenant, append_id, lane_id, digest, body)"
                " SELECT tenant, ?, id, ?, ? FROM lanes WHERE id = ?",
                ("forged-append", digest, msgspec.json.encode(receipt), lane_id),
            ),
            (
                "UPDATE lanes SET last_seq = ?, head_hash = ? WHERE id = ?",
                (seq + 1, record["entry_hash"], lane_id),
            ),
        ]
    sql(db, *statements)
    if with_receipt if with_tree is None else with_tree:
        conn = sqlite3.connect(db)
        try:
            conn.execute("BEGIN")
            extend_tree(conn, [(last + 1, canonicalize(record))])
            conn.commit()
        finally:
            conn.close()
    return last + 1


def fault_of(db: Path, **kwargs) -> tuple[str, int | None]:
    with pytest.raises(errors.IntegrityError) as caught:
        audit_ledger(db, **kwargs)
    details = caught.value.details
    assert caught.value.message.startswith(f"position {details['position']}")
    return details["kind"], details["position"]


@pytest.fixture
async def built(client, js, tmp_path):
    ids = await build(client)
    await wait_for_stream(js, 7)
    return tmp_path / "ledger.db", ids


async def test_every_tampering_is_named_by_position_and_kind(built, tmp_path):
    db, ids = built
    audit = audit_ledger(db)
    assert (audit.events, audit.lanes, audit.actors) == (7, 3, 4)
    assert (audit.signed_events, audit.causal_links) == (3, 3)
    assert [(w.kind, w.position, w.actor_id) for w in audit.warnings] == [("actor_prefix", 7, ids["bot"])]
    assert audit.warning_count == 1
    bodies = sqlite3.connect(db).execute("SELECT body FROM events ORDER BY position").fetchall()
    assert audit.tree_root == merkle.root_of([leaf_of(body) for (body,) in bodies]).hex()

    def forge(record: dict) -> None:
        record["signature"] = sign_event(record, OTHER)["signature"]

    cases: list[tuple[str, Callable[[Path], None], str, int]] = [
        (
            "edit a payload",
            lambda d: rewrite(d, 3, lambda r: r["payload"].update(text="HI"), rehash=False),
            "content_tampered",
            3,
        ),
        (
            "edit a row's lane column",
            lambda d: sql(d, ("UPDATE events SET lane_id = 'elsewhere' WHERE position = 4", ())),
            "row_mismatch",
            4,
        ),
        (
            "delete an event",
            lambda d: sql(d, ("DELETE FROM events WHERE position = 4", ())),
            "broken_link",
            4,
        ),
        (
            "insert an event in the middle",
            lambda d: (
                move(d, {p: p + 1 for p in range(7, 2, -1)}),
                sql(
                    d,
                    (
                        "INSERT INTO events SELECT 3, 'inserted', lane_id, 99, tenant, session_id,"
                        " run_id, event_type, append_id, body FROM events WHERE position = 2",
                        (),
                    ),
                ),
            ),
            "broken_link",
            3,
        ),
        (
            "insert a re-chained event at the end",
            lambda d: append_forgery(d, with_receipt=False),
            "receipt_missing",
            8,
        ),
        (
            "insert a re-chained event, its receipt and lane head, but no leaf",
            lambda d: append_forgery(d, with_receipt=True, with_tree=False),
            "tree_mismatch",
            8,
        ),
        (
            "change a stored tree hash",
            lambda d: sql(d, ("UPDATE tlog_hashes SET hashes = zeroblob(32) WHERE leaf = 2", ())),
            "tree_mismatch",
            3,
        ),
        (
            "append a leaf for no event",
            lambda d: sql(d, ("INSERT INTO tlog_hashes VALUES (7, zeroblob(32))", ())),
            "tree_mismatch",
            8,
        ),
        ("reorder two events of one lane", lambda d: move(d, {3: 4, 4: 3}), "broken_link", 3),
        ("reorder events of two lanes", lambda d: move(d, {5: 6, 6: 5}), "row_mismatch", 5),
        ("split an append by a reorder", lambda d: move(d, {4: 5, 5: 4}), "receipt_mismatch", 4),
        (
            "strip a signature",
            lambda d: rewrite(d, 3, lambda r: r.pop("signature"), rehash=False),
            "signature_missing",
            3,
        ),
        ("forge a signature", lambda d: rewrite(d, 6, forge, rehash=False), "signature_invalid", 6),
        (
            "sign an unkeyed actor's event",
            lambda d: rewrite(d, 5, forge, rehash=False),
            "signature_unexpected",
            5,
        ),
        (
            "point causation later",
            lambda d: rewrite(d, 5, lambda r: r.update(causation_id=ids["last_main"]), rehash=True),
            "causation_not_earlier",
            5,
        ),
        (
            "point causation nowhere",
            lambda d: rewrite(d, 5, lambda r: r.update(causation_id="no-such-event"), rehash=True),
            "causation_unknown",
            5,
        ),
        (
            "point causation into another session",
            lambda d: rewrite(d, 7, lambda r: r.update(causation_id=ids["first"]), rehash=True),
            "causation_other_session",
            7,
        ),
        (
            "delete an actor",
            lambda d: sql(d, ("DELETE FROM actors WHERE id = ?", (ids["human"],))),
            "unknown_actor",
            4,
        ),
        (
            "move an actor to another tenant",
            lambda d: sql(
                d,
                (
                    'UPDATE actors SET body = replace(body, \'"tenant":"acme"\','
                    ' \'"tenant":"globex"\') WHERE id = ?',
                    (ids["plain"],),
                ),
            ),
            "actor_tenant_mismatch",
            2,
        ),
    ]
    for number, (what, tamper, kind, position) in enumerate(cases):
        copy = copy_db(db, tmp_path / f"tampered-{number}.db")
        tamper(copy)
        assert fault_of(copy) == (kind, position), what

    # A forgery re-chained with its receipt, lane head and leaf passes every
    # check a plain SHA-256 ledger allows; the HMAC key, the stream or a
    # checkpoint signed before it catch it (test_cli_verify_with_nats_and_a_keyed_chain).
    copy = copy_db(db, tmp_path / "forged.db")
    assert append_forgery(copy, with_receipt=True) == 8
    forged = audit_ledger(copy)
    assert forged.events == 8 and forged.tree_root != audit.tree_root

    with pytest.raises(errors.IntegrityError) as caught:
        audit_ledger(db, strict_actors=True)
    assert (caught.value.details["kind"], caught.value.details["position"]) == ("actor_prefix", 7)


@pytest.mark.slow
async def test_cli_verify_with_nats_checks_blobs_and_the_stream(built, nats_server, js, tmp_path):
    db, _ = built
    clean = await acli("verify", "--db", str(db), "--nats", nats_server.url)
    assert clean.returncode == 0, clean.stderr
    lines = clean.stdout.splitlines()
    assert lines[0].startswith("WARN position 7: actor_prefix: actor key 'bot-7'")
    assert lines[1] == "intact: 7 events in 3 lanes, positions 1..7"
    assert lines[2] == (
        "checked: 3 signatures valid; 3 causation links earlier and in-session; "
        "1 blob references stored and matching; LEDGER_EVENTS identical "
        "(7 messages)"
    )
    assert lines[3] == f"tree: 7 leaves, root {audit_ledger(db).tree_root}, recomputed and as stored"
    elsewhere = await acli(
        "verify", "--db", str(db), "--nats", nats_server.url, "--prefix", "other"
    )  # a prefix with no blob bucket
    assert elsewhere.returncode == 1
    assert elsewhere.stdout.startswith("FAIL position 2 ") and "blob_missing" in elsewhere.stdout
    strict = await acli("verify", "--db", str(db), "--strict-actors")
    assert strict.returncode == 1 and strict.stdout.startswith("FAIL position 7")
    assert "actor_prefix" in strict.stdout

    # The stream catches a forgery the database alone cannot.
    forged = copy_db(db, tmp_path / "forged.db")
    append_forgery(forged, with_receipt=True)
    assert (await acli("verify", "--db", str(forged))).returncode == 0
    caught = await acli(
        "verify", "--db", str(forged), "--nats", nats_server.url, "--stream-wait-s", "0.3"
    )  # it never catches up: not lag
    assert caught.returncode == 1
    assert caught.stdout.startswith("FAIL position 8: stream_behind")
    assert "(1 behind after waiting " in caught.stdout

    # Blobs: replaced bytes, then a missing blob, both at position 2.
    ref = body_at(db, 2)["payload"]["text"]["_ref"]
    store = await BlobStore.open(js)
    name = object_name(token("acme"), ref)
    await store._obs.put(name, b"other bytes entirely")
    mismatch = await acli("verify", "--db", str(db), "--nats", nats_server.url, "--json")
    assert mismatch.returncode == 1
    fault = msgspec.json.decode(mismatch.stdout)["fault"]
    assert (
        fault["code"],
        fault["details"]["kind"],
        fault["details"]["position"],
        fault["details"]["ref"],
    ) == ("integrity_failure", "blob_mismatch", 2, ref)
    await store._obs.delete(name)
    missing = await acli("verify", "--db", str(db), "--nats", nats_server.url)
    assert missing.returncode == 1
    assert missing.stdout.startswith("FAIL position 2 (lane ") and "blob_missing" in missing.stdout


@pytest.mark.slow
async def test_cli_verify_with_a_keyed_chain(nats_server, nc, tmp_path):
    key_file = tmp_path / "chain.key"
    key_file.write_bytes(b"verify-test-key\n")
    db = tmp_path / "keyed.db"
    service = Sequencer(
        nc, LedgerWriter(open_ledger(db), hmac_key=b"verify-test-key"), SequencerMetrics(CollectorRegistry())
    )
    await service.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            await build(client)
    finally:
        await service.stop()
    ok = await acli("verify", "--db", str(db), "--hmac-key-file", str(key_file))
    assert ok.returncode == 0 and "intact: 7 events" in ok.stdout, ok
    unkeyed = await acli("verify", "--db", str(db))
    assert unkeyed.returncode == 1 and unkeyed.stdout.startswith("FAIL position 1 ")
    assert "content_tampered" in unkeyed.stdout

    # A forger without the key re-chains with plain SHA-256 (or guesses a key):
    # the keyed check names the forged event.
    forged = copy_db(db, tmp_path / "forged.db")
    append_forgery(forged, key=b"a guess", with_receipt=True)
    caught = await acli("verify", "--db", str(forged), "--hmac-key-file", str(key_file))
    assert caught.returncode == 1
    assert caught.stdout.startswith("FAIL position 8 (lane ") and "content_tampered" in caught.stdout

    empty = tmp_path / "empty.key"
    empty.write_bytes(b"\n")
    bad = await acli("verify", "--db", str(db), "--hmac-key-file", str(empty))
    assert bad.returncode == 2 and "empty" in bad.stderr
    no_db = await acli("verify", "--db", str(tmp_path / "missing.db"), "--nats", nats_server.url)
    assert no_db.returncode == 2 and "missing.db: No such file" in no_db.stderr
    misused = await acli("verify", str(key_file), "--nats", nats_server.url)
    assert misused.returncode == 2 and "need --db" in misused.stderr


@pytest.mark.parametrize(
    ("key", "kind", "findings"),
    [
        ("agent:korgex@0.2.2", "agent", []),
        ("agent:claude-code/main@2.1", "agent", []),
        ("agent:claude-code/sub-toolu_01@2.1", "agent", []),
        ("human:dusk", "human", []),
        ("korg:replay", "service", []),
        ("mcp:github", "tool", []),
        ("import:okto@0.1.0", "service", []),
        ("bot-7", "agent", ["actor_prefix"]),
        ("robot:x", "agent", ["actor_prefix"]),
        ("agent:", "agent", ["actor_prefix"]),
        ("agent:flood", "agent", ["actor_version"]),
        ("import:okto", "service", ["actor_version"]),
        ("agent:claude-code/helper@2.1", "agent", ["actor_spine"]),
        ("agent:claude-code/sub-abc@2.1", "agent", ["actor_spine"]),
        ("human:dusk", "agent", ["actor_kind"]),
        ("agent:flood", "service", ["actor_version", "actor_kind"]),
    ],
)
def test_actor_identity_conventions(key: str, kind: str, findings: list[str]) -> None:
    found = identity_findings(key, kind)
    assert [k for k, _ in found] == findings
    assert all(repr(key) in message for _, message in found)
