"""The ledger commands of the CLI as a user runs them: export a real ledger,
verify it from the database and from the export, find tampering, inspect."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tail_support import wait_applied

from laneledger.sdk.client import LaneRecorder

SCRIPT = Path(sys.executable).with_name("laneledger")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, timeout=60)


async def acli(*args: str) -> subprocess.CompletedProcess:
    """``cli`` without blocking the event loop the in-process sequencer runs on."""
    return await asyncio.to_thread(cli, *args)


@pytest.fixture
async def ledger_db(client, actor, sequencer, tmp_path):
    """A small real ledger: two sessions, a sub-agent lane, costs; returns its file."""
    main = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
    sub = await LaneRecorder.open(
        client, "acme", "s1", "r1", "sub-1", actor_id=actor.id, kind="subagent", parent_lane_id=main.lane.id
    )
    other = await LaneRecorder.open(client, "acme", "s2", "r1", "main", actor_id=actor.id)
    await main.append([main.event("run.started", actor_id=actor.id, subject_id="r1")])
    for recorder in (sub, other, main):
        await recorder.append(
            [
                recorder.event(
                    "cost.recorded",
                    actor_id=actor.id,
                    payload={
                        "provider": "p",
                        "model": "m",
                        "currency": "USD",
                        "amount": "0.5",
                        "input_tokens": 10,
                        "output_tokens": 2,
                    },
                )
            ]
        )
    await main.append([main.event("run.completed", actor_id=actor.id, subject_id="r1")])
    return tmp_path / "ledger.db"


async def test_export_then_verify_offline_and_from_the_db(ledger_db, tmp_path):
    export = tmp_path / "ledger.jsonl"
    result = cli("export", "--db", str(ledger_db), "-o", str(export))
    assert result.returncode == 0, result.stderr
    lines = export.read_bytes().splitlines()
    assert [json.loads(line)["position"] for line in lines] == [1, 2, 3, 4, 5]
    for source in (("--db", str(ledger_db)), (str(export),), ("--file", str(export))):
        result = cli("verify", *source)
        assert result.returncode == 0, result
        lines = result.stdout.decode().splitlines()
        assert lines[0] == "intact: 5 events in 3 lanes, positions 1..5"
        # The file has the Merkle tree to recompute; an export carries none.
        tree_lines = [line.split(",")[0] for line in lines[1:]]
        assert tree_lines == (["tree: 5 leaves"] if source[0] == "--db" else [])


async def test_tampered_export_names_the_first_bad_position(ledger_db, tmp_path):
    export = tmp_path / "ledger.jsonl"
    assert cli("export", "--db", str(ledger_db), "-o", str(export)).returncode == 0
    records = [json.loads(line) for line in export.read_bytes().splitlines()]
    records[2]["payload"]["amount"] = "0.05"  # the sub-agent's cost, made smaller
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = cli("verify", str(tampered))
    assert result.returncode == 1
    assert result.stdout.decode().startswith(
        f"FAIL position 3 (lane {records[2]['lane_id']} seq 1): content_tampered"
    )
    deleted = tmp_path / "deleted.jsonl"
    deleted.write_text("".join(json.dumps(r) + "\n" for r in records[:1] + records[2:]))
    result = cli("verify", str(deleted))
    assert (
        result.returncode == 1
        and "position 2" in result.stdout.decode()
        and "broken_link" in result.stdout.decode()
    )


async def test_tampered_db_is_found(ledger_db, tmp_path):
    copy = tmp_path / "copy.db"
    with sqlite3.connect(ledger_db) as source, sqlite3.connect(copy) as target:
        source.backup(target)  # the live file's WAL included
    db = sqlite3.connect(copy)
    body = json.loads(db.execute("SELECT body FROM events WHERE position = 4").fetchone()[0])
    body["payload"]["output_tokens"] = 2000
    db.execute("UPDATE events SET body = ? WHERE position = 4", (json.dumps(body),))
    db.commit()
    db.close()
    result = cli("verify", "--db", str(copy))
    assert result.returncode == 1
    assert "position 4" in result.stdout.decode() and "content_tampered" in result.stdout.decode()


async def test_inspect_session(ledger_db, nats_server):
    result = await acli("inspect", "session", "s1", "--nats", nats_server.url)
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "- lane main [main]" in text and "    - lane sub-1 [subagent]" in text
    assert "cost: 1.0" in text
    assert "terminal: run.completed (r1)" in text
    as_json = json.loads((await acli("inspect", "session", "s1", "--nats", nats_server.url, "--json")).stdout)
    assert len(as_json["events"]) == 4 and as_json["tenant"] == "acme"
    missing = await acli("inspect", "session", "nope", "--nats", nats_server.url)
    assert missing.returncode == 2 and b"entity_not_found" in missing.stderr


@pytest.mark.slow
def test_unreachable_nats_is_a_clear_error():
    result = cli("inspect", "session", "s1", "--nats", "nats://127.0.0.1:1")
    assert result.returncode == 2
    assert result.stderr.decode().startswith("laneledger: unavailable:")
    assert b"Traceback" not in result.stderr


async def test_tail_and_verify_through_a_tail_service(ledger_db, start_tail):
    tail = await start_tail()
    await wait_applied(tail, 5)
    result = await acli("tail", "--url", tail.url, "--session-id", "s1", "--run-id", "r1", "--json")
    assert result.returncode == 0, result.stderr  # the run ended: so does the tail
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["position"] for e in events] == [1, 2, 4, 5]  # s2's event at 3 filtered out
    resumed = await acli(
        "tail", "--url", tail.url, "--session-id", "s1", "--run-id", "r1", "--from-position", "2", "--json"
    )
    assert [json.loads(line)["position"] for line in resumed.stdout.splitlines()] == [4, 5]
    readable = await acli(
        "tail", "--url", tail.url, "--session-id", "s1", "--run-id", "r1", "--event-type", "cost."
    )
    assert readable.returncode == 0
    lines = readable.stdout.decode().splitlines()
    assert len(lines) == 2 and all("cost.recorded" in line for line in lines)
    assert "\033[" not in readable.stdout.decode()  # no colour when not on a terminal
    verified = await acli("verify", "--url", tail.url)
    assert verified.returncode == 0, verified
    assert verified.stdout.decode().strip() == "intact: 5 events in 3 lanes, positions 1..5"
    bad = await acli("tail", "--url", tail.url, "--from-position", "-4")
    assert bad.returncode == 2 and b"from_position" in bad.stderr


async def test_reconcile_lists_a_terminal_checkpoint_never_linked(client, actor, checkpoints, nats_server):
    lane = await LaneRecorder.open(client, "acme", "s7", "r7", "main", actor_id=actor.id)
    await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r7")])
    clean = await acli("reconcile", "--session", "s7", "--nats", nats_server.url)
    assert clean.returncode == 0 and clean.stdout == b""
    saved = await checkpoints.save(
        "s7/r7/main",
        expected_revision=0,
        format="application/json",
        state={"done": True},
        session_id="s7",
        run_id="r7",
        terminal=True,
    )
    # ... and the harness dies before linking it.
    result = await acli("reconcile", "--session", "s7", "--nats", nats_server.url)
    assert result.returncode == 1
    assert result.stdout.decode().startswith(f"unlinked: checkpoint {saved.id} key s7/r7/main revision 1")
