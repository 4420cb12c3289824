"""``laneledger mcp`` judged by another implementation: the MCP Inspector's
command line (TypeScript SDK; ``make mcp-inspector`` installs it from the
npm registry, pinned in tests/mcp-inspector), over stdio and streamable
HTTP, against a real nats-server, sequencer and tail. Its answers are
checked against Korg §8's shapes (spec/mcp.md)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from external_programs import NODE
from tail_support import MAIN, SUB, wait_applied
from tail_support import korg_call as call

from laneledger.mcp.serve import mcp_url_of

pytestmark = pytest.mark.timeout(120)

INSPECTOR = Path(__file__).resolve().parent / "mcp-inspector" / "node_modules" / ".bin" / "mcp-inspector"
if not NODE.found or not INSPECTOR.exists():
    pytest.skip(
        f"no MCP Inspector at {INSPECTOR}: make mcp-inspector ({NODE.missing})", allow_module_level=True
    )


async def inspect(*target: str, method: str, **options: str) -> tuple[int, Any, str]:
    """Run ``mcp-inspector --cli``; (exit status, its JSON answer or None, its output)."""
    flags = [item for name, value in options.items() for item in (f"--{name.replace('_', '-')}", value)]
    proc = await asyncio.create_subprocess_exec(
        str(INSPECTOR),
        "--cli",
        *target,
        "--method",
        method,
        *flags,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode()
    start = text.find("{")
    try:
        answer = json.loads(text[start:]) if start >= 0 and proc.returncode == 0 else None
    except ValueError:
        answer = None
    return proc.returncode or 0, answer, text


async def post(tail, body: dict) -> int:
    answer = await tail.ingest.post("/api/agent/tool-call", json_body=body)
    assert answer.status == 200, answer.body
    return int(answer.json()["seq_id"])


@pytest.mark.slow
async def test_the_inspector_reads_korg_resources_over_stdio_and_http(client, start_tail):
    tail = await start_tail()
    root = await post(tail, call("human:dusk", "user_prompt"))
    llm = await post(tail, call(MAIN, "llm_inference", root))
    sub = await post(tail, call(SUB, "user_prompt", llm))
    await wait_applied(tail.service, sub)
    stdio = (sys.executable, "-m", "laneledger.cli", "mcp", "--url", tail.url)

    status, listed, _ = await inspect(*stdio, method="resources/list")
    assert status == 0
    uris = {r["uri"] for r in listed["resources"]}
    assert {"korg://local/ledger/recent", "korg://local/ledger/heads", "korg://local/schema/event"} <= uris

    status, read, _ = await inspect(
        *stdio, method="resources/read", uri=f"korg://local/session/{root}/events"
    )
    (content,) = read["contents"]
    assert content["mimeType"] == "application/json"
    page = json.loads(content["text"])
    assert [e["seq_id"] for e in page["events"]] == [root, llm, sub]
    assert [e["triggered_by"] for e in page["events"]] == [None, root, llm]
    assert page["has_more"] is False

    # §8.2: the six templates, blob included; a blob URI is never listed.
    status, templates, _ = await inspect(*stdio, method="resources/templates/list")
    assert status == 0
    korg = {t["uriTemplate"] for t in templates["resourceTemplates"] if t["uriTemplate"].startswith("korg:")}
    assert korg == {
        f"korg://{{ledger}}/{path}"
        for path in (
            "session/{root_seq}",
            "session/{root_seq}/summary",
            "session/{root_seq}/events",
            "event/{seq_id}",
            "agent/{source_agent}/recent",
            "blob/{sha256}",
        )
    }
    assert not any("/blob/" in uri for uri in uris)

    # §8.3.1's worked example, tail surface: newest first, next_cursor the last seq_id.
    status, read, _ = await inspect(*stdio, method="resources/read", uri="korg://local/ledger/recent?limit=2")
    page = json.loads(read["contents"][0]["text"])
    assert ([e["seq_id"] for e in page["events"]], page["next_cursor"], page["has_more"]) == (
        [sub, llm],
        llm,
        True,
    )
    # The sub-agent's spine alone, as §8.3's skeleton.
    status, read, _ = await inspect(
        *stdio,
        method="resources/read",
        uri=f"korg://local/session/{root}/summary?source_agent={quote(SUB, safe='')}",
    )
    (skeleton,) = json.loads(read["contents"][0]["text"])["events"]
    assert skeleton == {
        "seq_id": sub,
        "source_agent": SUB,
        "tool_name": "user_prompt",
        "triggered_by": llm,
        "success": True,
        "duration_ms": 142,
        "has_payload_refs": False,
    }

    status, _, text = await inspect(*stdio, method="resources/read", uri="korg://local/event/999999")
    assert status != 0 and "-32602" in text

    status, result, _ = await inspect(
        *stdio, method="tools/call", tool_name="korg_query_events", tool_arg=f"triggered_by={root}"
    )
    assert result["isError"] is False
    assert [e["seq_id"] for e in json.loads(result["content"][0]["text"])["events"]] == [llm]

    # The same server over streamable HTTP.
    proc = await asyncio.create_subprocess_exec(
        *stdio, "--serve", "--listen", "127.0.0.1:0", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        url = mcp_url_of((await asyncio.wait_for(proc.stdout.readline(), 30)).decode())
        status, read, text = await inspect(
            url, method="resources/read", transport="http", uri="korg://local/ledger/heads"
        )
        assert status == 0, text
        assert json.loads(read["contents"][0]["text"])["heads"] == [root]
    finally:
        proc.terminate()
        await proc.wait()
