"""Fixtures and helpers for the checkpoint service's tests (not a test module).

Test modules import the fixtures they use by name, which registers them::

    from checkpoint_support import checkpoint_service, checkpoints  # noqa: F401

* ``checkpoint_service``: the real service, in this process, on the test's
  nats-server, next to conftest's in-process ``sequencer``; its SQLite file
  in ``tmp_path``.
* ``checkpoints``: a ``CheckpointClient`` over conftest's ``client``.
* ``CheckpointProcess``: the service as a real OS process
  (``python -m services.checkpoint``), with ``kill()`` (SIGKILL) and ``restart()``.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from prometheus_client import CollectorRegistry

from laneledger.checkpoints import CheckpointClient
from laneledger.client import LedgerClient
from services.checkpoint.metrics import CheckpointMetrics
from services.checkpoint.service import CheckpointService, CheckpointSettings
from services.checkpoint.store import CheckpointStore

REPO = Path(__file__).resolve().parent.parent
ANCHOR_WAIT_S = 10.0  # the service's bound; tests that want a timeout ask for less per save
_RUNNING: set[CheckpointProcess] = set()


@pytest_asyncio.fixture
async def checkpoint_service(nc, sequencer, tmp_path: Path) -> AsyncIterator[CheckpointService]:
    store = CheckpointStore.open(tmp_path / "checkpoints.db")
    service = CheckpointService(
        nc, store, CheckpointMetrics(CollectorRegistry()),
        CheckpointSettings(anchor_wait_s=ANCHOR_WAIT_S, max_inline_bytes=4096, refresh_interval_s=0.2),
    )
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
        store.close()


@pytest_asyncio.fixture
async def checkpoints(client: LedgerClient, checkpoint_service: CheckpointService) -> CheckpointClient:
    return CheckpointClient(client)


async def wait_until(predicate, timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``predicate`` (sync or async) until true; bounded in time."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g}s")
        await asyncio.sleep(0.02)


class CheckpointProcess:
    """``python -m services.checkpoint`` as a child process in its own session;
    output in log files next to its data dir. Same shape as SequencerProcess."""

    READY = re.compile(r"^laneledger-checkpoint ready http=(\S+) position=(\d+)\s*$", re.MULTILINE)

    def __init__(self, nats_url: str, data_dir: str | os.PathLike[str], *,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.nats_url = nats_url
        self.data_dir = Path(data_dir)
        self.stdout_path = self.data_dir.parent / f"{self.data_dir.name}.stdout.log"
        self.stderr_path = self.data_dir.parent / f"{self.data_dir.name}.stderr.log"
        self.extra_args = extra_args
        self.http_url: str | None = None
        self.position: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.stderr_path

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in (self.stdout_path, self.stderr_path)
                         if p.exists())

    def start(self, timeout: float = 20.0) -> CheckpointProcess:
        if self.running:
            return self
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        offset = self.stdout_path.stat().st_size if self.stdout_path.exists() else 0
        args = [sys.executable, "-m", "services.checkpoint", "--nats", self.nats_url,
                "--data", str(self.data_dir), "--http-host", "127.0.0.1", "--http-port", "0",
                *self.extra_args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=err, start_new_session=True)
        _RUNNING.add(self)
        deadline = time.monotonic() + timeout
        try:
            while True:
                with open(self.stdout_path, "rb") as out:
                    out.seek(offset)
                    found = self.READY.search(out.read().decode(errors="replace"))
                if found:
                    self.http_url, self.position = found[1], int(found[2])
                    return self
                if self._proc.poll() is not None:
                    raise RuntimeError(f"checkpoint service exited early\n{self.log_text()[-3000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"checkpoint service not ready in {timeout:g}s\n"
                                       f"{self.log_text()[-3000:]}")
                time.sleep(0.01)
        except BaseException:
            self.kill()
            raise

    def terminate(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; returns the exit code (SIGKILL and raise if it hangs)."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise RuntimeError(f"no clean stop in {timeout:g}s\n{self.log_text()[-3000:]}") from None
        self._forget()
        return proc.returncode

    def kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self._forget()

    def restart(self) -> CheckpointProcess:
        if self.running:
            self.terminate()
        return self.start()

    def stop(self) -> None:
        try:
            self.terminate()
        except RuntimeError:
            pass
        finally:
            self.kill()

    def _forget(self) -> None:
        self._proc = None
        _RUNNING.discard(self)


@atexit.register
def _stop_all() -> None:
    for proc in list(_RUNNING):
        proc.stop()
