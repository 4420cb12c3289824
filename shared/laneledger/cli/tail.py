"""``tail``: follow the ledger live from a tail service, readable or as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import aiohttp

from laneledger.cli.clienttoken import CLIENT_TOKEN_FILE_ENV, client_headers
from laneledger.contract.errors import LedgerUnavailable
from laneledger.contract.vocabulary import family_of
from laneledger.runtime.sseframes import frames

FILTERS = ("tenant", "session_id", "run_id", "lane_id", "actor_id", "event_type")
COLOURS = {"lifecycle": "36", "cost": "33", "hitl": "35", "streaming": "2", "extension": "34"}


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "tail",
        help="follow committed events live",
        description="Follow the ledger through a tail service's SSE endpoint: backfill from "
        "--from-position (default: the start), then live. Filters combine with AND; "
        "--event-type is a prefix. Following a session or run ends after its terminal event. "
        "Readable lines (coloured on a terminal) or, with --json, one committed event per line.",
    )
    add_tail_options(sub)
    for name in FILTERS:
        sub.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar="VALUE")
    sub.add_argument(
        "--from-position",
        type=int,
        default=0,
        metavar="N",
        help="deliver events after position N (resume where you stopped)",
    )
    sub.add_argument("--json", action="store_true", help="print each committed event as JSON")
    sub.set_defaults(run=cmd_tail)


def add_tail_options(sub: argparse.ArgumentParser, url_env: str | None = None) -> None:
    """``--url`` and ``--token-file``: which tail service, read with which
    token (``url_env``: a variable that sets ``--url``)."""
    default = "http://127.0.0.1:8471"
    if url_env is None:
        sub.add_argument("--url", default=default, help="tail service URL")
    else:
        sub.add_argument(
            "--url", default=os.environ.get(url_env, default), help=f"tail service URL (env {url_env})"
        )
    sub.add_argument(
        "--token-file",
        metavar="FILE",
        default=os.environ.get(CLIENT_TOKEN_FILE_ENV),
        help=f"the bearer token to read it with (env {CLIENT_TOKEN_FILE_ENV})",
    )


def cmd_tail(args: argparse.Namespace) -> int:
    return asyncio.run(follow(args))


async def follow(args: argparse.Namespace) -> int:
    params = {name: getattr(args, name) for name in FILTERS if getattr(args, name)}
    params["from_position"] = str(args.from_position)
    colour = sys.stdout.isatty() and not args.json
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.get(
                f"{args.url.rstrip('/')}/api/v1/events",
                params=params,
                headers=client_headers(args.token_file),
            ) as response,
        ):
            if response.status != 200:
                body = await response.json(content_type=None)
                error = body.get("error", {}) if isinstance(body, dict) else {}
                print(
                    f"laneledger: {error.get('code', response.status)}: {error.get('message', body)}",
                    file=sys.stderr,
                )
                return 2
            async for kind, data in frames(response.content):
                if kind == "end":
                    print(f"-- end: {data}", file=sys.stderr)
                    return 0
                event = json.loads(data)
                print(data if args.json else line(event, colour), flush=True)
    except aiohttp.ClientError as exc:
        raise LedgerUnavailable(f"cannot read {args.url}: {exc}") from exc
    return 0


def line(event: dict[str, Any], colour: bool) -> str:
    payload = json.dumps(event.get("payload", {}), separators=(",", ":"))
    if len(payload) > 80:
        payload = payload[:77] + "..."
    kind = event["event_type"]
    if colour:
        kind = f"\033[{COLOURS.get(family_of(kind), '0')}m{kind}\033[0m"
    return (
        f"{event['position']:>7}  {event['committed_at'][11:23]}  {event['session_id']}/"
        f"{event['lane_id'][-6:]}#{event['seq']:<4} {kind}  {payload}"
    )
