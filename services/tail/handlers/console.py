"""The web console: static files shipped in the package (``console/``:
index.html, app.js, app.css — plain JavaScript, no build step, no external
resources) served at ``/`` and ``/console/{asset}``. It only uses the tail's
own API; ``spec/tail.md`` says what each view shows.

The files are read once, when the app is made, from the installed package
(``pyproject.toml`` lists them as package data, so a wheel carries them).
Only the names in ``ASSETS`` are served: the path parameter never reaches
the file system.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from laneledger.contract.errors import EntityNotFound

DIRECTORY = Path(__file__).resolve().parent.parent / "console"  # services/tail/console/
PAGE = "index.html"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}


def _load() -> dict[str, bytes]:
    return {name: (DIRECTORY / name).read_bytes() for name in (PAGE, *ASSETS)}


def console_routes() -> list[web.RouteDef]:
    files = _load()
    # Same-origin only: the console needs nothing from elsewhere, and a page
    # that shows a ledger should not be framed by another site.
    headers = {
        "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-cache",
    }

    async def page(_: web.Request) -> web.Response:
        return web.Response(body=files[PAGE], content_type="text/html", charset="utf-8", headers=headers)

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["asset"]
        if name not in ASSETS:
            raise EntityNotFound("no such console file", kind="console_asset", name=name[:64])
        return web.Response(body=files[name], content_type=ASSETS[name], charset="utf-8", headers=headers)

    return [web.get("/", page, name="console"), web.get("/console/{asset}", asset, name="console_asset")]
