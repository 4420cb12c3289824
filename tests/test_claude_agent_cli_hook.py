"""``laneledger hook claude-code`` as Claude Code runs it: a real subprocess
with the documented hook JSON on standard input, against a real nats-server
and sequencer."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from laneledger.audit.ledger import audit_ledger

SESSION = "cc-sess-7"
BASE = {"session_id": SESSION, "transcript_path": "/home/u/.claude/projects/p/x.jsonl", "cwd": "/home/u/p"}


async def hook(nats_url: str, obj: Any, *extra: str, raw: bytes | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "laneledger.cli",
        "hook",
        "claude-code",
        "--nats",
        nats_url,
        "--tenant",
        "acme",
        "--timeout",
        "2",
        *extra,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(raw if raw is not None else json.dumps(obj).encode())
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


PRE = {
    **BASE,
    "hook_event_name": "PreToolUse",
    "permission_mode": "default",
    "tool_name": "Write",
    "tool_input": {"file_path": "/home/u/p/a.txt", "content": "hello"},
    "tool_use_id": "toolu_01ABC",
}
POST = {
    **BASE,
    "hook_event_name": "PostToolUse",
    "tool_name": "Write",
    "tool_input": {"file_path": "/home/u/p/a.txt", "content": "hello"},
    "tool_response": {"filePath": "/home/u/p/a.txt", "success": True},
    "tool_use_id": "toolu_01ABC",
}
STOP = {**BASE, "hook_event_name": "Stop", "stop_hook_active": False}


async def test_the_cli_hook_records_a_tool_call_and_the_end(client, nats_server, tmp_path: Path):
    assert await hook(nats_server.url, PRE) == (0, "", "")
    view = await client.load_session(SESSION, tenant="acme")
    requested = [e for e in view.events if e.event_type == "attempt.requested"]
    assert [(e.payload["name"], e.payload["input"]["file_path"]) for e in requested] == [
        ("Write", "/home/u/p/a.txt")
    ]
    assert await hook(nats_server.url, POST) == (0, "", "")
    assert await hook(nats_server.url, STOP) == (0, "", "")
    # Claude Code delivering a hook again records nothing twice.
    assert await hook(nats_server.url, PRE) == (0, "", "")
    assert await hook(nats_server.url, POST) == (0, "", "")
    events = sorted((await client.load_session(SESSION, tenant="acme")).events, key=lambda e: e.position)
    assert [e.event_type for e in events] == [
        "session.started",
        "run.started",
        "turn.started",
        "context.prompt_composed",
        "action.started",
        "attempt.requested",
        "attempt.completed",
        "action.completed",
        "turn.completed",
        "run.completed",
    ]
    completed = events[6]
    assert completed.causation_id == events[5].id
    assert completed.payload["outcome"]["result"] == {"filePath": "/home/u/p/a.txt", "success": True}
    audit = audit_ledger(tmp_path / "ledger.db")
    assert audit.events == len(events) and audit.warning_count == 0


async def test_malformed_hook_input_is_one_line_and_exit_2(client, nats_server):
    code, out, err = await hook(nats_server.url, None, raw=b"{not json")
    assert (code, out) == (2, "")
    assert err.startswith("laneledger: <stdin>: the hook input is not JSON") and err.count("\n") == 1
    code, out, err = await hook(nats_server.url, {**PRE, "tool_use_id": 7})
    assert (code, out) == (2, "")
    assert "tool_use_id" in err and "Traceback" not in err
    code, _, err = await hook(nats_server.url, [1, 2])
    assert code == 2 and "JSON object" in err


async def test_a_ledger_that_is_down_denies_the_tool(client, nats_server, sequencer):
    await sequencer.stop()
    code, out, err = await hook(nats_server.url, PRE)
    assert code == 0, err
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["hookEventName"] == "PreToolUse"
    assert decision["permissionDecision"] == "deny"
    assert "the tool did not run" in decision["permissionDecisionReason"]
    # After the fact a hook cannot block: a non-blocking error (exit 1).
    code, out, err = await hook(nats_server.url, POST)
    assert (code, out) == (1, "") and err.startswith("laneledger: ")


async def test_no_nats_at_all_denies_the_tool(tmp_path: Path):
    code, out, err = await hook("nats://127.0.0.1:9", PRE)  # nothing listens on port 9
    assert code == 0, err
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"
