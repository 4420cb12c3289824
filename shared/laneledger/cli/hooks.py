"""``hook claude-code``: a Claude Code command hook that records the hook it
is called for (``laneledger.adapters.claude_agent``).

Claude Code runs it with one hook JSON object on standard input. Exit status,
as Claude Code reads it:

    0  recorded (or nothing to record); on PreToolUse a deny decision, when the
       ledger could not commit the request, is printed as JSON on stdout
    1  a ledger failure on a hook after the fact (PostToolUse, Stop, …): a
       non-blocking error, stderr shown to the user
    2  malformed hook input: one line on stderr; on PreToolUse Claude Code
       treats exit 2 as a block, so a hook it cannot read fails closed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from laneledger.adapters.claude_agent import ClaudeAgentRecorder, deny
from laneledger.cli.natsoption import add_nats_option
from laneledger.cli.report import PROG, fail
from laneledger.compat.claudecode_names import DEFAULT_HUMAN, is_human_key
from laneledger.contract.errors import InvalidRequest, LedgerError, RequestError
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.natsconnect import DEFAULT_NATS, checked_nats

NATS_ENV = "LANELEDGER_NATS_URL"
TENANT_ENV = "LANELEDGER_TENANT"
TIMEOUT_ENV = "LANELEDGER_HOOK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "hook",
        help="record an agent harness's hooks as they fire",
        description="Record what an agent harness does from its hooks, as it happens.",
    )
    kinds = sub.add_subparsers(title="harnesses", metavar="HARNESS", required=True)
    cc = kinds.add_parser(
        "claude-code",
        help="a Claude Code command hook (the hook JSON on standard input)",
        description="Read one Claude Code hook input (JSON) on standard input and record it: "
        "PreToolUse commits the tool call's request before the tool runs and denies the tool "
        '(a permissionDecision "deny" on stdout) when the ledger cannot commit; PostToolUse and '
        "PostToolUseFailure settle the call; SubagentStart and SubagentStop give a sub-agent its "
        "lane; Stop ends the run. A hook delivered twice records once. Exit status 0 recorded "
        "(or denied), 1 a ledger failure after the fact, 2 malformed input.",
    )
    add_nats_option(
        cc,
        default=None,
        help=f"NATS server URL, or several comma-separated (default ${NATS_ENV} or {DEFAULT_NATS})",
    )
    cc.add_argument("--tenant", help=f"tenant of the session (default ${TENANT_ENV} or default)")
    cc.add_argument(
        "--human",
        metavar="KEY",
        default=DEFAULT_HUMAN,
        help=f"actor key of the human the session's root prompt is recorded by (default {DEFAULT_HUMAN})",
    )
    cc.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the ledger before denying the tool "
        f"(default ${TIMEOUT_ENV} or {DEFAULT_TIMEOUT_S:g})",
    )
    cc.set_defaults(run=cmd_hook_claude_code)


def _read_input() -> dict[str, Any]:
    raw = sys.stdin.buffer.read()
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the hook input is not JSON: {exc}", reason="not_json") from None
    if not isinstance(obj, dict):
        raise InvalidRequest("the hook input is a JSON object", path="$", reason="not_an_object")
    return obj


async def _record(args: argparse.Namespace, obj: dict[str, Any]) -> dict[str, Any]:
    async with await LedgerClient.connect(
        args.nats, timeout=args.timeout, connect_timeout=args.timeout
    ) as client:
        recorder = ClaudeAgentRecorder(client, tenant=args.tenant, human=args.human, timeout=args.timeout)
        return await recorder.handle(obj)


def cmd_hook_claude_code(args: argparse.Namespace) -> int:
    try:
        args.nats = args.nats or checked_nats(os.environ.get(NATS_ENV) or DEFAULT_NATS)
    except ValueError as exc:
        return fail(f"${NATS_ENV}: {exc}")
    args.tenant = args.tenant or os.environ.get(TENANT_ENV) or "default"
    if args.timeout is None:
        try:
            args.timeout = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
        except ValueError:
            return fail(f"${TIMEOUT_ENV}: not a number of seconds")
    if not is_human_key(args.human):
        return fail(f"--human {args.human}: not a human's actor key, human:<identifier>")
    try:
        obj = _read_input()
    except InvalidRequest as exc:
        return fail(f"<stdin>: {exc.message}")
    try:
        out = asyncio.run(_record(args, obj))
    except RequestError as exc:  # malformed input (or the ledger refused it as such)
        return fail(f"<stdin>: {exc.message}")
    except LedgerError as exc:
        if obj.get("hook_event_name") == "PreToolUse":  # could not even connect: strict, deny
            out = deny(f"laneledger could not record the call ({exc.code}): {exc}; the tool did not run")
        else:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 1
    except OSError as exc:  # the connection itself failed before the client could type it
        if obj.get("hook_event_name") == "PreToolUse":
            out = deny(f"laneledger could not reach the ledger: {exc}; the tool did not run")
        else:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 1
    if out:
        print(json.dumps(out))
    return 0
