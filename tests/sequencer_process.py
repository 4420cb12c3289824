"""The sequencer as a real OS process, for crash and multi-process tests.

::

    seq = SequencerProcess(nats_url, tmp_path / "ledger.db", log_dir=tmp_path)
    seq.start()                 # waits for "laneledger-sequencer ready http=... position=N"
    seq.pid, seq.http_url, seq.position
    seq.kill()                  # SIGKILL, like a crash
    seq.restart()               # start again on the same database
    seq.terminate()             # SIGTERM and wait (clean stop)
    seq.stop()                  # terminate, SIGKILL if it hangs; idempotent

It runs ``python -m services.sequencer --http-port 0`` in its own session
(process group); stdout and stderr go to log files (appended across
restarts), so no pipe can fill up and block it. Every process it started is
stopped by :meth:`stop`, by the context manager, or at interpreter exit.
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_READY = re.compile(r"^laneledger-sequencer ready http=(\S+) position=(\d+)\s*$", re.MULTILINE)
_RUNNING: set[SequencerProcess] = set()


class SequencerProcessError(RuntimeError):
    pass


class SequencerProcess:
    def __init__(
        self,
        nats_url: str,
        db_path: str | os.PathLike[str],
        *,
        log_dir: str | os.PathLike[str] | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.nats_url = nats_url
        self.db_path = Path(db_path)
        log_dir = Path(log_dir) if log_dir is not None else self.db_path.parent
        self.stdout_path = log_dir / "sequencer.stdout.log"
        self.stderr_path = log_dir / "sequencer.stderr.log"
        self.extra_args = tuple(extra_args)
        self.env = env
        self.http_url: str | None = None
        self.position: int | None = None  # the ledger position it reported when ready
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # -- state -------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        """Its log (stderr); with :meth:`log_text` this lets conftest's
        ``show_log_on_failure`` add it to a failing test's report."""
        return self.stderr_path

    def log_text(self) -> str:
        parts = []
        for path in (self.stdout_path, self.stderr_path):
            try:
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
            except FileNotFoundError:
                pass
        return "\n".join(parts)

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for path in (self.stdout_path, self.stderr_path):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                continue
            parts.append(f"--- {path.name}\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<SequencerProcess db={str(self.db_path)!r} {state}>"

    # -- lifecycle -----------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> SequencerProcess:
        """Start it and wait for its ready line; a no-op when running."""
        if self.running:
            return self
        self.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.stdout_path.stat().st_size if self.stdout_path.exists() else 0
        args = [
            sys.executable, "-m", "services.sequencer",
            "--nats", self.nats_url,
            "--db", str(self.db_path),
            "--http-host", "127.0.0.1",
            "--http-port", "0",
            *self.extra_args,
        ]  # fmt: skip
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                args, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True,
            )
        _RUNNING.add(self)
        self.starts += 1
        try:
            self._wait_ready(offset, timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self, offset: int, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while True:
            with open(self.stdout_path, "rb") as out:
                out.seek(offset)
                text = out.read().decode("utf-8", errors="replace")
            found = _READY.search(text)
            if found:
                self.http_url, self.position = found[1], int(found[2])
                return
            code = self._proc.poll()
            if code is not None:
                raise SequencerProcessError(
                    f"sequencer exited with code {code} before it was ready\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise SequencerProcessError(
                    f"sequencer not ready within {timeout:g}s\n{self.log_tail()}"
                )
            time.sleep(0.01)

    def terminate(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait for a clean exit; returns its exit code (None if it
        was not running). Raises if it does not exit in time (after killing it)."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise SequencerProcessError(
                    f"sequencer did not stop within {timeout:g}s of SIGTERM\n{self.log_tail()}"
                ) from None
        code = proc.returncode
        self._forget()
        return code

    def kill(self) -> None:
        """SIGKILL its process group at once, like a crash, and reap it. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        # Signal the group only while its leader is unreaped (the pid is still ours).
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self._forget()

    def restart(self, timeout: float = 15.0) -> SequencerProcess:
        """Start it again on the same database; SIGTERM first if it is running."""
        if self.running:
            self.terminate(timeout)
        self._forget()
        return self.start(timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate, falling back to SIGKILL; never raises, leaves nothing behind."""
        try:
            self.terminate(timeout)
        except SequencerProcessError:
            pass
        finally:
            self.kill()

    def _forget(self) -> None:
        self._proc = None
        _RUNNING.discard(self)

    def __enter__(self) -> SequencerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


async def wait_for_stream(js, last_position: int, *, stream: str = "LEDGER_EVENTS",
                          timeout: float = 15.0) -> None:
    """Wait (bounded) until the committed stream reaches ``last_position``: the
    sequencer publishes to it after sending the receipts."""
    deadline = time.monotonic() + timeout
    while (await js.stream_info(stream)).state.last_seq < last_position:
        if time.monotonic() > deadline:
            raise AssertionError(f"{stream} did not reach position {last_position} in {timeout:g}s")
        await asyncio.sleep(0.05)


@atexit.register
def _stop_all() -> None:
    for seq in list(_RUNNING):
        seq.stop(timeout=5)
