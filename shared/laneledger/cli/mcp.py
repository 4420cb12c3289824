"""``mcp``: laneledger's MCP server over a tail service (spec/mcp.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from laneledger.cli.clienttoken import CLIENT_TOKEN_FILE_ENV
from laneledger.cli.tail import add_tail_options
from laneledger.contract.errors import InvalidRequest

PORT = 8475  # --serve's default port, beside the services' 8470-8474 and 8476
LISTEN_ENV = "LANELEDGER_MCP_LISTEN"
TAIL_URL_ENV = "LANELEDGER_MCP_TAIL_URL"  # --url (env): the tail it reads
INGEST_URL_ENV = "LANELEDGER_MCP_INGEST_URL"  # --ingest-url (env): where korg_append_event posts


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "mcp",
        help="serve the ledger to agents over MCP (Korg §8 resources, proofs, subscriptions)",
        description="An MCP server reading a tail service: over stdio (for `claude mcp add` and .mcp.json), "
        "or with --serve over streamable HTTP at http://LISTEN/mcp, each client's bearer token passed "
        "through to the tail.",
    )
    # stdio: --token-file is the token; --serve: each client's own. As a deployed
    # service (deploy/mcp.Dockerfile) it is configured by environment.
    add_tail_options(sub, url_env=TAIL_URL_ENV)
    sub.add_argument(
        "--ingest-url",
        default=os.environ.get(INGEST_URL_ENV),
        metavar="URL",
        help="the ingest service, where the korg_append_event tool posts "
        f"(default: --url, one base URL routing Korg's writes; env {INGEST_URL_ENV})",
    )
    sub.add_argument("--serve", action="store_true", help="serve streamable HTTP instead of stdio")
    sub.add_argument(
        "--listen",
        default=os.environ.get(LISTEN_ENV, f"127.0.0.1:{PORT}"),
        metavar="HOST:PORT",
        help=f"--serve: where (port 0: any; env {LISTEN_ENV})",
    )
    sub.set_defaults(run=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    from laneledger.mcp.serve import serve_http, serve_stdio  # the SDK loads only for this command

    if args.serve:
        # Each HTTP client brings its own token: one file's for every client would
        # lend it to anyone who reaches the port. Refused when given; the
        # variable (set for the other commands) is not used here.
        if args.token_file and args.token_file != os.environ.get(CLIENT_TOKEN_FILE_ENV):
            raise InvalidRequest(
                "--token-file is for stdio: with --serve each client sends its own bearer token",
                parameter="token_file",
            )
        host, _, port = args.listen.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidRequest("--listen must be HOST:PORT", parameter="listen", found=args.listen)
        host = host.strip("[]")
        asyncio.run(serve_http(args.url, host, int(port), args.ingest_url))
        return 0
    token = Path(args.token_file).read_text().strip() if args.token_file else None
    asyncio.run(serve_stdio(args.url, token, args.ingest_url))
    return 0
