"""Korg's stream-json adapter against the real tail (issue 20): the requests
the adapter (Korg ``adapters/stream-json``, v1.2) makes for a Claude Code
capture with a sub-agent, posted as it posts them — one at a time, each
``triggered_by`` the seq_id an earlier answer gave — and the journal
``GET /api/journal`` returns checked against Korg §2, §2a, §2b and the §6
dogfood checklist, then verified by ``laneledger verify --format korg-ledger-v1``.

The capture (Claude Code 2.1.150, ``-p``), and what the adapter posts for it:

    system/init                          1  user_prompt    human:claude-code-user  root, result "Success"
    assistant msg_01 (tool_use Bash)     2  llm_inference  main     <- 1
    user tool_result (Bash)              3  Bash           main     <- 2   result: the text
    assistant msg_02 (tool_use Agent)    4  llm_inference  main     <- 2   (§2a: the previous inference)
    user text, parent_tool_use_id=Agent  5  user_prompt    sub      <- 4   (§2b: the spawning inference)
    assistant msg_s1 (tool_use Read)     6  llm_inference  sub      <- 5
    user tool_result (Read), 3 KiB       7  Read           sub      <- 6   result: a content ref, blob first
    user tool_result (Agent)             8  Agent          main     <- 4   (the diamond at 4)
    assistant msg_03 (text)              9  llm_inference  main     <- 4
    result                              10  session_complete main   <- 9   (last emitted), float cost

The adapter writes the Read output to ``<cwd>/.korg/blobs/<sha256[:2]>/<sha256>``
before it posts the reference (§7.3 blob first); against laneledger the
client uploads that file at its name first (``PUT /api/blob/{sha256}``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from korg_dogfood import blob_refs, check_spines, dogfood
from tail_support import fill, new_lane, wait_applied

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(sys.executable).with_name("laneledger")
VERSION = "2.1.150"
HUMAN = "human:claude-code-user"
MAIN = f"agent:claude-code/main@{VERSION}"
SPAWN_ID = "toolu_01Bq7rKkXr9Tz2pVt5WnY8cD"
SUB = f"agent:claude-code/sub-{SPAWN_ID[:8]}@{VERSION}"  # the adapter's name: ptuid[:8]
README = "".join(
    f"## Section {n}\nlaneledger keeps an execution ledger for agent harnesses.\n" for n in range(48)
)
SYNTHESIZED = "[adapter-synthesized: original CLI prompt not captured in stream-json; see v1.2]"


def adapter_calls(readme_ref: dict[str, Any]) -> list[tuple[dict[str, Any], int | None]]:
    """(body, index of the call it is triggered by) — the adapter's posts, in order."""
    digest = readme_ref["_ref"].removeprefix("sha256:")

    def body(agent: str, tool: str, args: Any, result: Any, **extra: Any) -> dict[str, Any]:
        return {
            "source_agent": agent,
            "tool_name": tool,
            "args": args,
            "result": result,
            "payload_refs": [],
            "success": True,
            "duration_ms": 0,
            **extra,
        }

    return [
        (body(HUMAN, "user_prompt", {"prompt": SYNTHESIZED}, "Success"), None),
        (body(MAIN, "llm_inference", {}, {"success": True}), 0),
        (body(MAIN, "Bash", {"command": "ls", "description": "List files"}, "README.md\nsrc\ntests\n"), 1),
        (body(MAIN, "llm_inference", {"thinking": "Delegate the README."}, {"success": True}), 1),
        (body(SUB, "user_prompt", {"prompt": "Summarize README.md"}, {"success": True}), 3),
        (body(SUB, "llm_inference", {}, {"success": True}), 4),
        (
            body(
                SUB,
                "Read",
                {"file_path": "/work/demo/README.md"},
                readme_ref,
                payload_refs=[{"sha256": digest, "size_bytes": readme_ref["size_bytes"], "label": "Read"}],
                duration_ms=12,
            ),
            5,
        ),
        (
            body(
                MAIN,
                "Agent",
                {
                    "description": "Summarize README",
                    "prompt": "Summarize README.md",
                    "subagent_type": "general-purpose",
                },
                "The README describes an execution ledger in 48 sections.",
                duration_ms=4210,
            ),
            3,
        ),
        (body(MAIN, "llm_inference", {}, {"success": True}), 3),
        (
            body(
                MAIN,
                "session_complete",
                {"cwd": "/work/demo", "model": "claude-opus-4-5", "permission_mode": "default"},
                {
                    "subtype": "success",
                    "duration_ms": 9120,
                    "total_cost_usd": 0.0421,
                    "summary": "The README describes an execution ledger.",
                    "terminal_reason": None,
                    "stop_reason": "end_turn",
                    "permission_denials": [],
                    "num_turns": 3,
                },
                duration_ms=9120,
            ),
            8,
        ),
    ]


async def drive(tail, workspace: Path) -> list[dict[str, Any]]:
    """Post the adapter's requests; returns the answers."""
    data = README.encode()
    digest = hashlib.sha256(data).hexdigest()
    local = workspace / ".korg" / "blobs" / digest[:2] / digest  # where the adapter wrote it
    local.parent.mkdir(parents=True)
    local.write_bytes(data)
    upload = await tail.ingest.request("PUT", f"/api/blob/{local.name}", data=local.read_bytes())
    assert upload.status == 200, upload.body
    answers: list[dict[str, Any]] = []
    for body, cause in adapter_calls({"_ref": f"sha256:{digest}", "size_bytes": len(data)}):
        body["triggered_by"] = None if cause is None else answers[cause]["seq_id"]
        answer = await tail.ingest.post("/api/agent/tool-call", json_body=body)
        assert answer.status == 200, (body["tool_name"], answer.body)
        answers.append(answer.json())
    return answers


async def blobs_of(tail, records: list[dict[str, Any]]) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for sha256 in blob_refs(records):
        answer = await tail.api.get(f"/api/blob/{sha256}")
        found[sha256] = answer.body if answer.status == 200 else None
    return found


async def verify_journal_file(path, body: bytes) -> subprocess.CompletedProcess[bytes]:
    """``laneledger verify --format korg-ledger-v1`` on the journal as Korg's CI would keep it; it passes."""
    path.write_bytes(body)
    done = await asyncio.to_thread(
        subprocess.run,
        [str(SCRIPT), "verify", "--format", "korg-ledger-v1", str(path)],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


async def test_the_adapters_requests_make_a_journal_korg_accepts(client, start_tail, tmp_path):
    tail = await start_tail()
    answers = await drive(tail, tmp_path)
    await wait_applied(tail.service, answers[-1]["seq_id"])
    seq = [a["seq_id"] for a in answers]

    journal = await tail.api.get("/api/journal", params={"session_id": "korg"})
    assert journal.status == 200  # every line checked against KorgEnvelope by TailAPI
    records = [json.loads(line) for line in journal.body.splitlines()]
    assert [r["seq_id"] for r in records] == seq
    events = [r["event"] for r in records]
    # What was posted comes back: string results, the content ref, the float cost.
    assert events[0]["result"] == "Success" and events[0]["source_agent"] == HUMAN
    assert events[2]["result"] == "README.md\nsrc\ntests\n"
    assert events[7]["result"].startswith("The README describes")
    assert events[9]["result"]["total_cost_usd"] == 0.0421
    readme = hashlib.sha256(README.encode()).hexdigest()
    assert events[6]["result"] == {"_ref": f"sha256:{readme}", "size_bytes": len(README)}
    assert events[6]["payload_refs"] == [{"sha256": readme, "size_bytes": len(README), "label": "Read"}]
    assert all(r["metadata"]["actor_id"] == "korg:api" for r in records)

    # §2 / §2a / §2b
    root = dogfood(records, await blobs_of(tail, records))  # §6, and Korg's reference verification
    assert root.seq == seq[0]
    spines = check_spines(records)
    assert spines == {MAIN: [seq[1], seq[3], seq[8]], SUB: [seq[5]]}
    parent = {r["seq_id"]: r["metadata"]["triggered_by"] for r in records}

    def walk(start: int) -> list[int]:
        path = [start]
        while parent[path[-1]] is not None:
            path.append(parent[path[-1]])
        return path

    # The walks back of §2b: both spines converge at the spawning inference.
    assert walk(seq[8]) == [seq[8], seq[3], seq[1], seq[0]]
    assert walk(seq[6]) == [seq[6], seq[5], seq[4], seq[3], seq[1], seq[0]]
    assert parent[seq[4]] == parent[seq[7]] == seq[3]  # the diamond

    # laneledger's own verifier, on the journal as Korg's CI would keep it.
    done = await verify_journal_file(tmp_path / "journal.jsonl", journal.body)
    assert done.stdout.decode().strip() == records[-1]["entry_hash"]


# The journal's seq_ids are ledger positions, which other tenants' events
# interleave: Korg's verifiers (and ours) accept the gaps.
async def test_a_journal_among_other_tenants_events_verifies(client, actor, start_tail, tmp_path):
    tail = await start_tail()
    lane = await new_lane(client, actor)
    await fill(client, lane, actor, 2)  # the ledger is shared: positions 1 and 2 are acme's
    answers = await drive(tail, tmp_path)
    await wait_applied(tail.service, answers[-1]["seq_id"])
    journal = await tail.api.get("/api/journal", params={"session_id": "korg"})
    records = [json.loads(line) for line in journal.body.splitlines()]
    dogfood(records, await blobs_of(tail, records))  # Korg's checks pass
    await verify_journal_file(tmp_path / "journal.jsonl", journal.body)
