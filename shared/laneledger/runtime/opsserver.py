"""The small HTTP surface every service has: /healthz, /readyz, /metrics.

/healthz is answered by the event loop itself, so it says "the loop is not
stuck"; /readyz asks the service whether it can do its job right now.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest


def ops_routes(
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    *,
    details: Callable[[], dict[str, Any]] | None = None,
) -> list[web.RouteDef]:
    """``details``: more for /readyz's body (the sequencer's role)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        more = details() if details is not None else {}
        if ready():
            return web.json_response({"status": "ready", **more})
        return web.json_response({"status": "not ready", **more}, status=503)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics)]


def counting_middleware(requests: Counter) -> Middleware:
    """Counts every answered request in ``requests`` (labels: the route's
    canonical path, or ``unmatched``, and the status), so a path's ids never
    become label values."""

    @web.middleware
    async def count(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        requests.labels(name, str(response.status)).inc()
        return response

    return count


# The longest request line a documented request can need: a handful of query
# parameters of up to 256 characters, each up to 12 bytes percent-encoded
# (aiohttp's default, 8190, is less). Longer is refused by aiohttp's parser
# with a plain-text 400, before any route or middleware sees it.
MAX_REQUEST_LINE = 64 * 1024


async def start_http(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start ``app``; returns the runner and the bound port (``port=0`` picks one)."""
    runner = web.AppRunner(app, access_log=None, max_line_size=MAX_REQUEST_LINE)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, bound
