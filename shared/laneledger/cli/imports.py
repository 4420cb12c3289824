"""``import claude-code``: a Claude Code stream-json capture (a file, or ``-``
for a live pipe) recorded as a session (spec/claude-code.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import IO, Any

from laneledger.cli.natsoption import add_nats_option
from laneledger.cli.report import STDIN, fail
from laneledger.compat.claudecode import ClaudeCodeImport
from laneledger.compat.claudecode_names import DEFAULT_HUMAN, is_human_key
from laneledger.sdk.client import LedgerClient


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "import",
        help="record another harness's output as a session",
        description="Record what another agent harness wrote as a laneledger session.",
    )
    sources = sub.add_subparsers(title="sources", metavar="SOURCE", required=True)
    cc = sources.add_parser(
        "claude-code",
        help="a `claude -p --output-format stream-json --verbose` capture",
        description="Read a Claude Code stream-json capture (FILE, or - for a live pipe: "
        "`claude -p ... --output-format stream-json --verbose | laneledger import claude-code -`) "
        "and append it through the sequencer as a session: the init line starts it, each "
        "assistant message is an inference, each tool use with its result a tool call, each "
        "sub-agent its own lane, the result line completes the run. Importing the same capture "
        "again is idempotent. A malformed line stops the import with exit status 2, naming the "
        "line; what came before it stays committed. Mapping: spec/claude-code.md.",
    )
    cc.add_argument("file", metavar="FILE", help="the capture, or - for standard input")
    add_nats_option(cc)
    cc.add_argument("--tenant", default="default", help="tenant of the session (default: default)")
    cc.add_argument(
        "--session", dest="session_id", metavar="ID", help="session id (default: the capture's session_id)"
    )
    cc.add_argument("--run", dest="run_id", metavar="ID", help="run id (default: the init line's uuid)")
    cc.add_argument(
        "--human",
        metavar="KEY",
        default=DEFAULT_HUMAN,
        help="actor key of the human whose prompts the capture holds: the root prompt and "
        f"the user's prompts are recorded by it (human:<identifier>; default {DEFAULT_HUMAN})",
    )
    cc.add_argument("--json", action="store_true", help="print the summary as JSON")
    cc.set_defaults(run=cmd_import_claude_code)


async def _lines(stream: IO[bytes]) -> AsyncIterator[bytes]:
    """Lines as they arrive, without blocking the event loop on a live pipe."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, stream.readline)
        if not line:
            return
        yield line


async def _import(args: argparse.Namespace, stream: IO[bytes]) -> int:
    async with await LedgerClient.connect(args.nats) as client:
        importer = ClaudeCodeImport(
            client, tenant=args.tenant, session_id=args.session_id, run_id=args.run_id, human=args.human
        )
        summary = await importer.run(_lines(stream))
    report: dict[str, Any] = {
        "session_id": summary.session_id,
        "run_id": summary.run_id,
        "lines": summary.lines,
        "events": summary.events,
        "appends": summary.appends,
        "replayed_appends": summary.replayed,
        "lanes": summary.lanes,
        "line_types": dict(sorted(summary.by_kind.items())),
        "dropped": dict(sorted(summary.dropped.items())),
        "tool_calls_without_result": summary.unresolved_tools,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"imported {summary.lines} lines as session {summary.session_id} run {summary.run_id}: "
            f"{summary.events} events in {summary.appends} appends "
            f"({summary.replayed} already committed), {len(summary.lanes)} lanes"
        )
        for kind, count in report["dropped"].items():
            print(f"  dropped {count} {kind} line(s)")
        for tool_use_id in summary.unresolved_tools:
            print(f"  tool call {tool_use_id} has no result in the capture (left unresolved)")
    return 0


def cmd_import_claude_code(args: argparse.Namespace) -> int:
    if not is_human_key(args.human):  # before anything connects or reads
        return fail(f"--human {args.human}: not a human's actor key, human:<identifier>")
    if args.file == STDIN:
        return asyncio.run(_import(args, sys.stdin.buffer))
    with open(args.file, "rb") as stream:
        return asyncio.run(_import(args, stream))
