"""A laneledger service as a real OS process, for crash and multi-process tests.

::

    proc = ServiceProcess("laneledger.services.sequencer", [...args], log_dir)
    proc.start()                # waits for "laneledger-<name> ready http=URL [position=N]"
    proc.pid, proc.http_url, proc.position, proc.ready_line
    proc.kill()                 # SIGKILL its process group, like a crash
    proc.restart()              # start again (SIGTERM first if running)
    proc.terminate()            # SIGTERM and wait (clean stop); returns the exit code
    proc.stop()                 # terminate, SIGKILL if it hangs; idempotent, never raises

It runs ``python -m <module> <args>`` in its own session (process group);
stdout and stderr go to ``<log_dir>/<name>.stdout.log`` and ``.stderr.log``
(appended across restarts), so no pipe can
fill up and block it. Every process started is stopped by :meth:`stop`, by
the context manager, or at interpreter exit. ``log_path``/``log_text`` let
failure_logs.show_log_on_failure add its output to a failing report.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from polling import eventually_sync

REPO = Path(__file__).resolve().parent.parent
_READY = re.compile(r"^laneledger-\S+ ready http=(\S+)(?: position=(\d+))?.*$", re.MULTILINE)
_RUNNING: set[ServiceProcess] = set()


class ServiceProcessError(RuntimeError):
    pass


class ServiceProcess:
    def __init__(
        self,
        module: str,
        args: list[str] | tuple[str, ...],
        log_dir: str | os.PathLike[str],
        *,
        log_name: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path = REPO,
    ) -> None:
        self.module = module
        self.args = list(args)
        log_name = log_name or self.name
        self.stdout_path = Path(log_dir) / f"{log_name}.stdout.log"
        self.stderr_path = Path(log_dir) / f"{log_name}.stderr.log"
        self.env = env or {}  # added to this process's environment
        self.cwd = cwd
        self.http_url: str | None = None
        self.position: int | None = None  # the position it reported when ready, if any
        self.ready_line = ""
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # -- state -------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.module.rsplit(".", 1)[-1]

    @property
    def url(self) -> str | None:
        return self.http_url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.stderr_path

    def log_text(self) -> str:
        return "\n".join(
            p.read_text(encoding="utf-8", errors="replace")
            for p in (self.stdout_path, self.stderr_path)
            if p.exists()
        )

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(
            f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
            for p in (self.stdout_path, self.stderr_path)
            if p.exists()
        )

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<ServiceProcess {self.module} {state}>"

    # -- lifecycle -----------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> ServiceProcess:
        """Start it and wait for its ready line; a no-op when running."""
        if self.running:
            return self
        self.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.stdout_path.stat().st_size if self.stdout_path.exists() else 0
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args],
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
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
        proc = self._proc
        assert proc is not None

        def ready_line() -> re.Match[str] | None:
            code = proc.poll()
            with open(self.stdout_path, "rb") as out:
                out.seek(offset)
                found = _READY.search(out.read().decode("utf-8", errors="replace"))
            if not found and code is not None:
                raise ServiceProcessError(
                    f"{self.name} exited with code {code} before it was ready\n{self.log_tail()}"
                )
            return found

        # Synchronous: start() runs in a thread when an event loop must keep serving.
        try:
            found = eventually_sync(
                ready_line, what=f"{self.name}'s ready line", timeout=timeout, interval=0.01
            )
        except AssertionError as exc:
            raise ServiceProcessError(f"{exc}\n{self.log_tail()}") from None
        self.ready_line, self.http_url = found[0], found[1]
        self.position = int(found[2]) if found[2] is not None else None

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
                raise ServiceProcessError(
                    f"{self.name} did not stop within {timeout:g}s of SIGTERM\n{self.log_tail()}"
                ) from None
        self._forget()
        return proc.returncode

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

    def restart(self, timeout: float = 15.0) -> ServiceProcess:
        """Start it again on the same data; SIGTERM first if it is running."""
        if self.running:
            self.terminate(timeout)
        self._forget()
        return self.start(timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate, falling back to SIGKILL; never raises, leaves nothing behind."""
        try:
            self.terminate(timeout)
        except ServiceProcessError:
            pass
        finally:
            self.kill()

    def _forget(self) -> None:
        self._proc = None
        _RUNNING.discard(self)

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for proc in list(_RUNNING):
        proc.stop(timeout=5)
