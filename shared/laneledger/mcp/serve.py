"""Run the MCP server over stdio (one client, the configured token) or
streamable HTTP (many clients, each with its own bearer token, passed
through to the tail)."""

from __future__ import annotations

import re
import socket
import sys
from typing import Any

import aiohttp
import uvicorn
from mcp.server.stdio import stdio_server
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .server import LedgerServer
from .tailclient import TailClient

PATH = "/mcp"
BEARER = "bearer "


def _ingest(url: str | None, http: aiohttp.ClientSession) -> TailClient | None:
    return TailClient(url, http, "the ingest service") if url else None


async def serve_stdio(url: str, token: str | None, ingest_url: str | None = None) -> None:
    async with aiohttp.ClientSession() as http:
        ledger = LedgerServer(TailClient(url, http), lambda _context: token, _ingest(ingest_url, http))
        async with stdio_server() as (read, write):
            await ledger.server.run(read, write, ledger.initialization_options())


def bearer_of(context: Any) -> str | None:
    """The token of the HTTP request a handler serves (``Authorization: Bearer``)."""
    request = getattr(context, "request", None)
    header = request.headers.get("authorization", "") if request is not None else ""
    return header[len(BEARER) :].strip() or None if header.lower().startswith(BEARER) else None


def mcp_url_of(ready_line: str) -> str:
    """The endpoint a ``--serve`` ready line names (its ``mcp=``)."""
    found = re.search(r"^laneledger-mcp ready http=\S+ mcp=(\S+)", ready_line)
    if found is None:
        raise ValueError(f"not the MCP server's ready line: {ready_line[:200]!r}")
    return found.group(1)


async def healthz(_request: Request) -> JSONResponse:
    """Liveness, as every service answers it (the container's HEALTHCHECK):
    the process serves HTTP. It holds no state; the tail has its own."""
    return JSONResponse({"status": "ok"})


async def serve_http(url: str, host: str, port: int, ingest_url: str | None = None) -> None:
    """Serve until stopped; once listening prints the line every service
    prints, ``laneledger-mcp ready http=http://HOST:PORT mcp=http://HOST:PORT/mcp``.
    The SDK's app: sessions bounded in number and idle time, request bodies in
    size, and DNS-rebinding protection on a loopback address."""
    async with aiohttp.ClientSession() as http:
        ledger = LedgerServer(TailClient(url, http), bearer_of, _ingest(ingest_url, http))
        app = ledger.server.streamable_http_app(
            streamable_http_path=PATH, host=host, custom_starlette_routes=[Route("/healthz", healthz)]
        )
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # Listening before the ready line, so a client that reads it never
        # finds the port closed (uvicorn listens only once it serves).
        sock.listen(2048)
        bound = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        base = f"http://[{host}]:{bound}" if ":" in host else f"http://{host}:{bound}"
        print(f"laneledger-mcp ready http={base} mcp={base}{PATH}", flush=True, file=sys.stdout)
        await server.serve(sockets=[sock])
