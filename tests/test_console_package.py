"""The console's static files: shipped as package data (a build of the
package carries them, byte for byte), served with their types and a
same-origin content security policy, and free of external resources."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import pytest_asyncio
from source_copy import copy_sources
from tail_fixtures import client_in_process, start_tail_in_process

from laneledger.services.tail.handlers.console import ASSETS, DIRECTORY, PAGE

# Route logic: the tail's app in-process over an in-process writer (tail_fixtures.py).
client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

pytestmark = pytest.mark.timeout(90)

FILES = (PAGE, *ASSETS)


def test_a_build_of_the_package_carries_the_console(tmp_path):
    """setuptools' build_py, from pyproject.toml's package data, on a copy of
    the sources (so nothing is written into the working tree); what it builds
    is what a wheel holds."""
    src = copy_sources(tmp_path / "src")
    out = tmp_path / "lib"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import setuptools; setuptools.setup()",
            "-q",
            "build_py",
            "--build-lib",
            str(out),
        ],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in FILES:
        built = out / "laneledger" / "services" / "tail" / "console" / name
        assert built.read_bytes() == (DIRECTORY / name).read_bytes(), name


def test_the_files_use_no_external_resource():
    for name in FILES:
        text = (DIRECTORY / name).read_text()
        urls = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert urls == set(), (name, urls)
        for ref in re.findall(r'(?:src|href)="([^"]*)"', text):
            assert ref.startswith(("/", "#")), (name, ref)


async def test_served_with_types_and_policy(client, start_tail):
    tail = await start_tail()
    page = await tail.api.get("/", params={"session_id": "s1"})  # a link with filters
    assert page.status == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert page.body == (DIRECTORY / PAGE).read_bytes()
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    for name, media in ASSETS.items():
        answer = await tail.api.get(f"/console/{name}")
        assert answer.status == 200 and answer.headers["Content-Type"].startswith(media)
        assert answer.body == (DIRECTORY / name).read_bytes()
    for bad in ("index.html", "..%2Fconsole.py", "app.jsx"):
        missing = await tail.api.get(f"/console/{bad}")
        assert missing.status == 404, bad
        assert missing.error["code"] == "entity_not_found", bad
