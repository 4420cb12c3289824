"""OpenTelemetry fixtures (a pytest plugin, registered in conftest.py).

* ``phoenix``: a real OTLP receiver, Arize Phoenix (``arize-phoenix`` from the
  ``dev`` extra), as its own process on free loopback ports with a temporary
  working directory (its SQLite file), once per test session: it takes
  about 14 s to start here. Tests tell their spans apart by trace id (each
  test records its own sessions), and read them back through its REST API.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

STARTUP_TIMEOUT_S = 90.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Phoenix:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.grpc_port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.traces_endpoint = f"{self.url}/v1/traces"
        self._log = workdir / "phoenix.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0

    @property
    def log_path(self) -> Path:
        return self._log

    def log_text(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""

    def start(self) -> Phoenix:
        env = {
            **os.environ,
            "PHOENIX_WORKING_DIR": str(self.workdir / "data"),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        began = time.monotonic()
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "phoenix.server.main", "serve"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        while time.monotonic() - began < STARTUP_TIMEOUT_S:
            if self._proc.poll() is not None:
                raise RuntimeError(f"Phoenix exited with {self._proc.returncode}:\n{self.log_text()[-3000:]}")
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    self.startup_s = time.monotonic() - began
                    print(f"Phoenix ready in {self.startup_s:.1f} s at {self.url}", file=sys.stderr)
                    return self
            except (requests.ConnectionError, requests.Timeout):
                pass  # not listening yet, or listening but still starting (a read timeout)
            time.sleep(0.25)
        self.stop()  # a Phoenix that never became ready is not left running (it was, on a loaded machine)
        raise RuntimeError(f"Phoenix not ready in {STARTUP_TIMEOUT_S} s:\n{self.log_text()[-3000:]}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def spans(self, trace_ids: list[str], project: str = "default") -> list[dict[str, Any]]:
        """Every span Phoenix stored for these traces (OTLP JSON shape), all pages."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"trace_id": trace_ids, "limit": 1000}
            if cursor:
                params["cursor"] = cursor
            url = f"{self.url}/v1/projects/{project}/spans/otlpv1"
            response = requests.get(url, params=params, timeout=10)
            if response.status_code == 404:  # no project yet: nothing arrived
                return []
            response.raise_for_status()
            body = response.json()
            found.extend(body["data"])
            cursor = body.get("next_cursor")
            if not cursor:
                return found


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    server = Phoenix(tmp_path_factory.mktemp("phoenix")).start()
    try:
        yield server
    finally:
        server.stop()
