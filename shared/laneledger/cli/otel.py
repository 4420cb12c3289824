"""``otel export``: send a session, a run or the live ledger to an OTLP/HTTP
receiver as OpenTelemetry GenAI spans (``spec/otel.md``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from laneledger.cli.natsoption import add_nats_option
from laneledger.cli.report import fail
from laneledger.contract.subjects import EVENTS_STREAM
from laneledger.otel.mapping import SpanMapper

if TYPE_CHECKING:  # the SDK is an extra: imported where a command needs it
    from laneledger.otel.sdkspans import SpanSender

ENDPOINT_ENV = "LANELEDGER_OTEL_ENDPOINT"
HEADERS_ENV = "LANELEDGER_OTEL_HEADERS"
DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
DEFAULT_TAIL = "http://127.0.0.1:8471"
INSTALL_HINT = "pip install 'laneledger[otel]'"


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"a header is NAME=VALUE, not {text[:40]!r}")
    return name.strip(), value.strip()


def headers_of(args: argparse.Namespace) -> dict[str, str]:
    """``--header`` over ``$LANELEDGER_OTEL_HEADERS`` (``NAME=VALUE,NAME=VALUE``,
    as OTEL_EXPORTER_OTLP_HEADERS spells them: a secret stays off the command line)."""
    found: dict[str, str] = {}
    env = os.environ.get(HEADERS_ENV, "")
    for item in filter(None, (part.strip() for part in env.split(","))):
        try:
            name, value = header(item)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"${HEADERS_ENV}: {exc}") from None
        found[name] = value
    found.update(dict(args.header or []))
    return found


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    otel = commands.add_parser(
        "otel",
        help="send the ledger to an OpenTelemetry (OTLP/HTTP) receiver",
        description="OpenTelemetry export: runs, sub-agents, model and tool calls as GenAI spans.",
    )
    sub = otel.add_subparsers(title="commands", metavar="COMMAND", required=True).add_parser(
        "export",
        help="export a session, a run, or the live ledger as spans",
        description="Map committed events to OpenTelemetry GenAI spans (a run is a trace rooted at "
        "an invoke_agent span, a sub-agent an invoke_agent child, a model call a chat span, a tool "
        "call an execute_tool span; spec/otel.md) and send them over OTLP/HTTP. Ids are derived from "
        "ledger ids, so exporting again sends the same spans. --session (with --run: one run) reads "
        "the ledger over NATS and sends every finished span; --live follows the committed stream "
        "with a durable consumer and sends each span once its end is committed, resuming after a "
        "restart where it stopped.",
    )
    what = sub.add_mutually_exclusive_group()
    what.add_argument("--session", dest="session_id", metavar="SESSION", help="export one session")
    what.add_argument("--live", action="store_true", help="follow the committed stream until stopped")
    sub.add_argument("--run", dest="run_id", metavar="RUN", help="with --session: only this run")
    sub.add_argument(
        "--tenant",
        help="--session: whose session (needed only when several tenants have the id); "
        "--live: export only this tenant's events (default: every tenant's)",
    )
    sub.add_argument(
        "--endpoint",
        default=os.environ.get(ENDPOINT_ENV, DEFAULT_ENDPOINT),
        help=f"the OTLP/HTTP traces URL (env {ENDPOINT_ENV}; default {DEFAULT_ENDPOINT})",
    )
    sub.add_argument(
        "--header",
        action="append",
        type=header,
        metavar="NAME=VALUE",
        help=f"an HTTP header for the receiver, e.g. Authorization=Basic … (repeatable; also "
        f"${HEADERS_ENV}, NAME=VALUE,NAME=VALUE)",
    )
    sub.add_argument(
        "--tail-url",
        default=DEFAULT_TAIL,
        help=f"the tail the spans' event and blob links point at (default {DEFAULT_TAIL})",
    )
    add_nats_option(sub)
    sub.add_argument("--stream", default=EVENTS_STREAM, help="--live: the committed stream")
    sub.add_argument(
        "--consumer",
        default="laneledger-otel",
        help="--live: the durable consumer's name (one per receiver; it holds the position)",
    )
    sub.add_argument("--timeout-s", type=float, default=10.0, help="per OTLP request (default 10)")
    sub.set_defaults(run=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    if args.run_id and not args.session_id:
        return fail("otel export: --run needs --session (run ids are a session's own)")
    if not args.session_id and not args.live:
        return fail("otel export: name what to export: --session SESSION [--run RUN], or --live")
    try:
        headers = headers_of(args)
    except ValueError as exc:
        return fail(str(exc))
    try:
        from laneledger.otel.sdkspans import SpanSender
    except ImportError as exc:
        return fail(f"otel export: OpenTelemetry's SDK is not installed ({exc.name}): {INSTALL_HINT}")
    sender = SpanSender(args.endpoint, headers=headers, timeout_s=args.timeout_s)
    try:
        return asyncio.run(_live(args, sender) if args.live else _history(args, sender))
    finally:
        sender.close()


async def _history(args: argparse.Namespace, sender: SpanSender) -> int:
    from laneledger.otel.history import map_history
    from laneledger.sdk.client import LedgerClient

    async with await LedgerClient.connect(args.nats) as client:
        found = await map_history(
            client, SpanMapper(tail_url=args.tail_url), args.session_id, args.run_id, tenant=args.tenant
        )
    await sender.send(found.spans)
    print(
        f"exported {len(found.spans)} span(s) from {found.events} event(s) to {sender.endpoint}; "
        f"{found.open_spans} span(s) not finished, not sent",
        file=sys.stderr,
    )
    return 0


async def _live(args: argparse.Namespace, sender: SpanSender) -> int:
    from laneledger.otel.live import LiveExporter
    from laneledger.sdk.client import LedgerClient

    def progress(spans: int, position: int) -> None:
        print(f"exported {spans} span(s) through position {position}", flush=True)

    async with await LedgerClient.connect(args.nats) as client:
        exporter = LiveExporter(
            client.nc,
            client,
            sender,
            SpanMapper(tail_url=args.tail_url),
            stream=args.stream,
            consumer=args.consumer,
            tenant=args.tenant,
            progress=progress,
        )
        await exporter.run()
    return 0
