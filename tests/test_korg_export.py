"""The korg-ledger-v1 export round trip, and the rewind CLI, as a user runs
them: a real session through the real sequencer, the ``laneledger`` command
as a subprocess, our korg-profile verifier on the result."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from korg_dogfood import blob_refs, dogfood
from worked_example import TENANT, record_worked_example

from laneledger.cli import main
from laneledger.compat.korg import KORG_LEDGER_V1, read_jsonl
from laneledger.contract.chain import verify_chain
from laneledger.contract.errors import ChainFault
from laneledger.history.branching import rewind_session
from laneledger.sdk.client import LedgerClient, make_event

SCRIPT = Path(sys.executable).with_name("laneledger")


async def cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI as a subprocess, without blocking the in-process sequencer's loop."""
    return await asyncio.to_thread(subprocess.run, [str(SCRIPT), *args], capture_output=True, timeout=60)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


async def blobs_of(client: LedgerClient, tenant: str, records: list[dict]) -> dict[str, bytes | None]:
    """The blob store's bytes for every payload_refs descriptor (None: absent)."""
    store = await client.blob_store()
    found: dict[str, bytes | None] = {}
    for sha256 in blob_refs(records):
        found[sha256] = (
            await store.get(tenant, f"sha256:{sha256}") if await store.has(tenant, sha256) else None
        )
    return found


async def exported(db: Path, session_id: str, out: Path, *options: str) -> list[dict]:
    """``laneledger export --format korg-ledger-v1`` of one session into
    ``out``; it succeeds, and its records."""
    done = await cli(
        "export",
        "--db",
        str(db),
        "--format",
        "korg-ledger-v1",
        "--session",
        session_id,
        *options,
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    return lines(out)


async def verified(path: Path, *key: str) -> None:
    """``laneledger verify --format korg-ledger-v1`` accepts the file."""
    done = await cli("verify", "--format", "korg-ledger-v1", *key, str(path))
    assert done.returncode == 0, (done.stdout, done.stderr)


async def test_export_verifies_maps_causes_and_rewinds_and_names_a_tampered_line(
    client: LedgerClient, sequencer, tmp_path: Path
) -> None:
    ex = await record_worked_example(client)
    rewinder = (await client.ensure_actor(TENANT, "human:dusk", "human")).id
    await rewind_session(client, ex.session_id, ex.ids[5], actor_id=rewinder, reason="retry")
    db, out = tmp_path / "ledger.db", tmp_path / "s2b.jsonl"

    records = await exported(db, ex.session_id, out)
    assert [r["seq_id"] for r in records] == list(range(1, 9))
    # triggered_by is the cause's seq_id: §2b's worked example, exactly
    assert [r.get("triggered_by") for r in records[:7]] == [None, 1, 2, 3, 4, 2, 6]
    assert [r["tool_name"] for r in records[:7]] == [
        "user_prompt",
        "llm_inference",
        "user_prompt",
        "llm_inference",
        "Read",
        "Agent",
        "llm_inference",
    ]
    assert records[4]["source_agent"] == "agent:claude-code/sub-toolu_01@2.1.150"
    assert records[4]["args"] == {"file_path": "README.md"}
    assert all(r["event_type"] == "AgentToolCall" and r["schema_version"] == "1.0" for r in records)
    assert all("rewind_of" not in r for r in records[:7])
    rewind = records[7]
    assert rewind["rewind_of"] == 5 and rewind["tool_name"] == "rewind"
    assert rewind["triggered_by"] == 5  # not a root: the forward walk from seq 5 reaches it
    assert rewind["args"] == {"target_seq_id": 5, "invalidated_seq_ids": [6, 7], "reason": "retry"}
    assert rewind["source_agent"] == "human:dusk"
    assert records[0]["metadata"]["event_id"] == ex.ids[1]
    assert records[0]["prev_hash"] == "0" * 64
    assert dogfood(records, {}).seq == 1  # Korg §6: one root, every record reachable from it

    done = await cli("verify", "--format", "korg-ledger-v1", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == records[-1]["entry_hash"]
    assert verify_chain(read_jsonl(out), profile=KORG_LEDGER_V1) == records[-1]["entry_hash"]

    # one edited line: verify names it
    tampered = tmp_path / "tampered.jsonl"
    edited = [dict(r) for r in records]
    edited[3]["args"] = {"model": "another"}
    tampered.write_text("".join(json.dumps(r) + "\n" for r in edited))
    done = await cli("verify", "--format", "korg-ledger-v1", str(tampered))
    assert done.returncode == 1
    assert done.stdout.decode().startswith("FAIL seq 4: content_tampered"), done.stdout
    # one deleted line: the next one is named (the verifier the CLI runs, in-process)
    tampered.write_text("".join(json.dumps(r) + "\n" for i, r in enumerate(records) if i != 2))
    with pytest.raises(ChainFault) as fault:
        verify_chain(read_jsonl(tampered), profile=KORG_LEDGER_V1)
    assert fault.value.message.startswith("seq 4: broken_link")

    # keyed: verifies with the key only
    keyed = tmp_path / "keyed.jsonl"
    await exported(db, ex.session_id, keyed, "--hmac-key", "k1")
    assert (
        verify_chain(read_jsonl(keyed), profile=KORG_LEDGER_V1, key=b"k1") == lines(keyed)[-1]["entry_hash"]
    )
    dogfood(lines(keyed), {}, key=b"k1")
    await verified(keyed, "--hmac-key", "k1")
    with pytest.raises(ChainFault) as fault:
        verify_chain(read_jsonl(keyed), profile=KORG_LEDGER_V1)
    assert fault.value.details["kind"] == "content_tampered"


async def test_export_refuses_what_korg_cannot_hash_and_bad_usage(
    client: LedgerClient, sequencer, tmp_path: Path, capsys
) -> None:
    ex = await record_worked_example(client)
    lane = ex.lanes["main"]
    head = (await client.get_lane(lane.id)).last_seq
    receipt = await client.append(
        lane,
        head,
        [make_event(lane.id, "ext.acme.score", actor_id=ex.actors["main"], payload={"score": 0.25})],
    )
    db = str(tmp_path / "ledger.db")
    done = await cli("export", "--db", db, "--format", "korg-ledger-v1", "--session", ex.session_id)
    assert done.returncode == 2
    assert f"position {receipt.positions[0]}".encode() in done.stderr
    assert b"float" in done.stderr and b"Traceback" not in done.stderr
    # the same command in-process (a subprocess each is slow on a busy box)
    assert main(["export", "--db", db, "--format", "korg-ledger-v1"]) == 2
    assert "needs --session" in capsys.readouterr().err
    assert main(["export", "--db", db, "--format", "korg-ledger-v1", "--session", "nope"]) == 2
    assert "no such session" in capsys.readouterr().err


async def test_the_rewind_and_fork_commands(client: LedgerClient, nats_server, sequencer, capsys) -> None:
    ex = await record_worked_example(client)
    done = await cli(
        "rewind", ex.session_id, ex.ids[3], "--actor", "human:dusk", "--dry-run", "--nats", nats_server.url
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["invalidated"] == [[ex.positions[4], ex.positions[7]]]
    assert b"dry run" in done.stderr
    assert len((await client.load_session(ex.session_id)).events) == 7

    done = await cli(
        "rewind",
        ex.session_id,
        str(ex.positions[5]),
        "--actor",
        "human:dusk",
        "--reason",
        "bad read",
        "--nats",
        nats_server.url,
    )
    assert done.returncode == 0, done.stderr
    view = await client.load_session(ex.session_id)
    recorded = view.events[-1]
    assert recorded.event_type == "session.rewound" and recorded.payload["reason"] == "bad read"
    assert recorded.payload["invalidated"] == [[ex.positions[6], ex.positions[7]]]

    done = await cli(
        "fork", ex.lanes["main"].id, "1", "retry", "--actor", "agent:x@1", "--nats", nats_server.url
    )
    assert done.returncode == 0, done.stderr
    fork = json.loads(done.stdout)
    assert fork["forked_from"]["event_id"] == ex.ids[2] and fork["last_seq"] == 1

    capsys.readouterr()
    status = await asyncio.to_thread(
        main, ["rewind", ex.session_id, "999999", "--actor", "human:dusk", "--nats", nats_server.url]
    )
    assert status == 2 and "no event at this position" in capsys.readouterr().err


async def test_a_claude_code_import_exports_as_a_verifiable_korg_journal(
    client: LedgerClient, sequencer, tmp_path: Path
) -> None:
    from test_claude_code_import import CAPTURE, SESSION

    from laneledger.compat.claudecode import ClaudeCodeImport

    await ClaudeCodeImport(client, tenant=TENANT).run(CAPTURE.read_bytes().splitlines(keepends=True))
    out = tmp_path / "claude.jsonl"
    records = await exported(tmp_path / "ledger.db", SESSION, out)
    assert verify_chain(read_jsonl(out), profile=KORG_LEDGER_V1) == records[-1]["entry_hash"]
    await verified(out)
    # One root (Korg §2): the synthesized root prompt, exported first although
    # the session's lifecycle events were committed before it in its append;
    # they, and every other event naming no cause, are triggered by it.
    assert dogfood(records, await blobs_of(client, TENANT, records)).seq == 1
    root = records[0]
    assert root["tool_name"] == "user_prompt" and root["args"]["synthesized"] is True
    assert "triggered_by" not in root
    by_type: dict[str, dict] = {}
    for record in records:
        by_type.setdefault(record["metadata"]["event_type"], record)  # the first of each type: main's
    for lifecycle in ("session.started", "run.started", "turn.started"):
        assert by_type[lifecycle]["triggered_by"] == 1, lifecycle
        assert by_type[lifecycle]["metadata"]["position"] < root["metadata"]["position"]
    assert [r["metadata"]["position"] for r in records[1:]] == sorted(
        r["metadata"]["position"] for r in records[1:]
    )
    names = {r["tool_name"] for r in records}
    assert {"user_prompt", "llm_inference", "Read"} <= names
    assert {r["source_agent"] for r in records} == {
        "human:unknown",  # the root prompt (Korg §2b's worked example: source=human:…)
        "agent:claude-code/main@2.1.150",
        "agent:claude-code/sub-askSpawn@2.1.150",  # the last 8 characters of toolu_03TaskSpawn
    }


async def test_payload_refs_describe_every_content_reference(
    client: LedgerClient, sequencer, tmp_path: Path
) -> None:
    """Korg §6.4 checks the blobs of payload_refs: an exported record lists
    every content reference its args and result hold, the SDK's descriptors
    and a bare sentinel alike, and the blobs are there."""
    ex = await record_worked_example(client)
    lane = ex.lanes["main"]
    output = "".join(f"{n:04} ok\n" for n in range(400))  # 3.2 KB: the SDK stores it as a blob
    stored = b"s" * 1500
    ref = await (await client.blob_store()).put(TENANT, stored)  # referenced below without a descriptor
    head = (await client.get_lane(lane.id)).last_seq
    await client.append(
        lane,
        head,
        [
            make_event(
                lane.id, "ext.acme.tool_output", actor_id=ex.actors["main"], payload={"output": output}
            ),
            make_event(
                lane.id,
                "ext.acme.note",
                actor_id=ex.actors["main"],
                payload={"attachments": [{"_ref": ref, "size_bytes": len(stored)}]},
            ),
        ],
    )
    out = tmp_path / "refs.jsonl"
    records = await exported(tmp_path / "ledger.db", ex.session_id, out)
    tool_output, note = records[-2:]
    sha = hashlib.sha256(output.encode()).hexdigest()
    assert tool_output["args"]["output"] == {"_ref": f"sha256:{sha}", "size_bytes": len(output)}
    assert [(d["sha256"], d["size_bytes"], d["label"]) for d in tool_output["payload_refs"]] == [
        (sha, len(output), "output")
    ]
    assert note["payload_refs"] == [
        {"sha256": ref.removeprefix("sha256:"), "size_bytes": 1500, "label": "args.attachments[0]"}
    ]
    assert tool_output["triggered_by"] == note["triggered_by"] == 1  # no cause: the root's
    blobs = await blobs_of(client, TENANT, records)
    assert blobs[sha] == output.encode() and blobs[ref.removeprefix("sha256:")] == stored
    dogfood(records, blobs)
    await verified(out)
    # A missing blob is what §6.4 reports.
    with pytest.raises(AssertionError, match=r"§6\.4"):
        dogfood(records, {**blobs, sha: None})
