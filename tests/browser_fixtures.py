"""The ``browser`` fixture (a pytest plugin, registered in conftest.py): a fresh
headless Chromium for one test, closed after it. A JavaScript error in any of
its pages fails the test; without Chromium the test skips, naming the install
command."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from browser_support import CHROMIUM_ARGS, ConsoleBrowser
from external_programs import CHROMIUM
from playwright.async_api import async_playwright


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[ConsoleBrowser]:
    executable = CHROMIUM.path
    if executable is None:
        pytest.skip(CHROMIUM.missing)
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        wrapped = ConsoleBrowser(chromium)
        try:
            yield wrapped
        finally:
            await chromium.close()
    # A script error in the console is a failure even if the page looked right.
    assert not wrapped.errors, f"page errors: {wrapped.errors}\nconsole: {wrapped.messages[-20:]}"
