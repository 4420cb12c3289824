"""A real browser for the console's tests: Debian's Chromium
(``/usr/bin/chromium``, or ``$LANELEDGER_TEST_CHROMIUM``; see
external_programs.py) driven by Playwright for Python. ``playwright install``
is never run: Playwright's own driver talks to the system browser.

* ``ConsoleBrowser``: one headless Chromium; ``await b.page(url)`` opens a page
  and records its console messages and page errors (the ``browser`` fixture,
  in browser_fixtures.py, gives one per test).
* ``screenshot(page, name)``: a full-page PNG in ``build/screenshots/``
  (git-ignored), for a person to look at.
"""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, Page, expect
from tail_support import REPO

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "build" / "screenshots"
WAIT_MS = 30_000  # every expectation below is bounded by this (CPU contention in CI)

expect.set_options(timeout=WAIT_MS)


class ConsoleBrowser:
    """One Chromium; ``await b.page(url)`` opens a page and records its errors."""

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self.errors: list[str] = []
        self.messages: list[str] = []

    async def page(self, url: str, width: int = 1280, height: int = 900) -> Page:
        context = await self.browser.new_context(viewport={"width": width, "height": height})
        page = await context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", lambda msg: self.messages.append(f"{msg.type}: {msg.text}"))
        await page.goto(url)
        return page


async def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path} is suspiciously small"
    return path
