"""Append step 0 of heavy requests, off the sequencer's event loop.

Step 0 (``store.append.prepare_append``: decode, validation, redaction of up
to a MiB of text, canonical form, hashing) is Python CPU work: on the event
loop one heavy request would keep every other tenant's batch, receipt and
lease renewal waiting for its whole CPU time (tens of milliseconds; a batch
of them, hundreds). So a request of at least ``HEAVY_BYTES`` or
``HEAVY_EVENTS`` is prepared in a worker process (``OffLoop``; prepworker.py:
real parallelism where a thread would hold the GIL through the redaction's
regexes), started as the intake's gate (intake.py: the request,
and the later requests of its stream, are held while it runs; other
tenants' requests go on into batches, so order within a stream is kept). The
batch then takes the prepared append (``take``) instead of preparing it on
the loop, with the content references its events name (``Prepared.refs``: the
blob check does not walk them on the loop): what the loop pays for it is
decoding the worker's answer (about 2.3 ms of CPU for a thousand events,
0.3 ms for a 0.9 MiB one, where step 0 took 17 to 59 ms: ``bench/offloop.py``).
A command as large (64 KiB of attributes, say) has its redaction done there
too (``redact_command``).

The worker has the sequencer's redactor (sent once, when it starts) and no
actor keys: signatures of such a request are checked by the writer, as for
any actor it did not know yet. What the worker refuses comes back as the
request's rejection receipt; if the worker fails (it dies, cannot start,
or answers no job in ``JOB_TIMEOUT_S``: it is then killed; a new one starts
with the next heavy request), the batch prepares
the request on the loop as before, so an outcome is never lost, only not
moved off the loop.

There is one worker process (the loop and one worker use both cores of a
small machine), ``python -m laneledger.services.sequencer.prepworker``
speaking length-prefixed msgpack over its stdin and stdout (not
multiprocessing, whose "spawn" re-runs the parent's main module), at a
lower CPU priority (``WORKER_NICENESS``) and ending with the sequencer
(prepworker.py): where the cores are contended, the loop serving every
tenant goes before the heavy requests of one. It starts when the sequencer
becomes active with a tenants file (``warm``: its start, half a second of
CPU importing the ledger's code, is not paid in the middle of a tenant's
traffic), else on the first heavy request (a process costs its start and
its memory; a single-tenant ledger may never send one).
Each stream holds at most one request at its gate, so at most one request
per tenant waits for the worker.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg

from laneledger.contract.errors import error_from_wire
from laneledger.contract.model import AppendRejected, Command
from laneledger.contract.redaction import Redactor, redact_command
from laneledger.store.append import PreparedAppend

from .prepworker import HEADER, MODULE, Done, Hello, Job, Ref, check_size, frame

log = logging.getLogger("laneledger.sequencer")

# A request this large, or with this many events, is prepared off the loop
# (its step 0 costs several milliseconds of CPU: bench/offloop.py).
HEAVY_BYTES = 64 * 1024
HEAVY_EVENTS = 64
# A job the worker has not answered in this long (a MiB takes it well under
# 0.1 s of CPU) ends it: it is stuck, and its jobs are done on the loop.
JOB_TIMEOUT_S = 10.0
# The same, before the worker's first answer: its start (importing the
# ledger's code, niced, on a loaded machine) can take seconds.
START_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Prepared:
    """A heavy request's step 0, done by the worker: the prepared append, or
    the receipt refusing it; and the content references it names."""

    outcome: PreparedAppend | AppendRejected
    refs: list[Ref]


class WorkerFailed(Exception):
    """The worker could not do a job (it died, or failed): the loop does it."""


def is_heavy(data: bytes, events: int) -> bool:
    return len(data) >= HEAVY_BYTES or events >= HEAVY_EVENTS


class _Worker:
    """One running worker process and the jobs it has not answered yet."""

    def __init__(self, proc: asyncio.subprocess.Process, job_timeout_s: float) -> None:
        self.proc, self.job_timeout_s = proc, job_timeout_s
        self.killed = False  # ended by the loop (its reader may not have seen it yet)
        self.answered = False  # it has answered a job: it has started
        self.pending: dict[int, asyncio.Future[Done]] = {}
        self.reader = asyncio.create_task(self._read(), name="step0-worker-reader")

    async def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        decode = msgspec.msgpack.Decoder(Done).decode
        failure: BaseException = WorkerFailed("the step 0 worker process ended")
        try:
            while True:
                (size,) = HEADER.unpack(await stdout.readexactly(HEADER.size))
                done = decode(await stdout.readexactly(check_size(size)))
                self.answered = True
                future = self.pending.pop(done.id, None)
                if future is not None and not future.done():
                    future.set_result(done)
        except asyncio.IncompleteReadError:
            pass
        except Exception as exc:  # noqa: BLE001 - a frame it should not send: it is ended
            failure = WorkerFailed(f"the step 0 worker sent what it should not: {exc}")
            self.kill()
        finally:
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(failure)
            self.pending.clear()

    @property
    def alive(self) -> bool:
        return not (self.killed or self.reader.done())

    async def ask(self, job: Job) -> Done:
        stdin = self.proc.stdin
        assert stdin is not None
        if not self.alive:
            raise WorkerFailed("the step 0 worker process ended")
        future: asyncio.Future[Done] = asyncio.get_running_loop().create_future()
        self.pending[job.id] = future
        try:
            stdin.write(frame(job))
            await stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            self.pending.pop(job.id, None)
            raise WorkerFailed(f"the step 0 worker process took no job: {exc}") from exc
        timeout_s = self.job_timeout_s if self.answered else max(self.job_timeout_s, START_TIMEOUT_S)
        try:
            async with asyncio.timeout(timeout_s):
                done = await future
        except TimeoutError:
            self.kill()  # its reader then fails every job it holds
            raise WorkerFailed(f"the step 0 worker answered no job in {timeout_s:g} s") from None
        if done.failure is not None:
            raise WorkerFailed(f"the step 0 worker failed: {done.failure}")
        return done

    def kill(self) -> None:
        self.killed = True
        if self.proc.returncode is None:
            self.proc.kill()

    async def end(self) -> None:
        self.kill()
        await self.proc.wait()
        await asyncio.gather(self.reader, return_exceptions=True)


class OffLoop:
    def __init__(
        self, redactor: Redactor, max_request_bytes: int, job_timeout_s: float = JOB_TIMEOUT_S
    ) -> None:
        self._redactor, self._max_bytes, self._job_timeout_s = redactor, max_request_bytes, job_timeout_s
        self._worker: _Worker | None = None
        self._starting: asyncio.Lock | None = None
        self._ids = itertools.count()
        # Prepared requests not yet taken by their batch: id(msg) -> (msg, result).
        self._ready: dict[int, tuple[Msg, Prepared]] = {}

    async def _running(self) -> _Worker:
        """The worker, started if it is not running."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._worker is not None and self._worker.alive:
                return self._worker
            if self._worker is not None:
                log.warning("the step 0 worker process died; a new one starts")
                await self._worker.end()
                self._worker = None
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    MODULE,
                    str(os.getpid()),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            except OSError as exc:
                raise WorkerFailed(f"the step 0 worker process did not start: {exc}") from exc
            assert proc.stdin is not None
            patterns, keys = self._redactor.made_of
            proc.stdin.write(frame(Hello(patterns, list(keys))))
            self._worker = _Worker(proc, self._job_timeout_s)
            return self._worker

    @property
    def worker_pid(self) -> int | None:
        """The running worker process's id (None: none is running)."""
        return self._worker.proc.pid if self._worker is not None and self._worker.alive else None

    async def warm(self) -> None:
        """Start the worker process now, not on the first heavy request."""
        try:
            await self._running()
        except WorkerFailed as exc:
            log.warning("%s; heavy requests are prepared on the loop until one starts", exc)

    async def run(self, msg: Msg, tenant_token: str | None, lane_token: str | None) -> Prepared:
        """Prepare ``msg`` in the worker; kept for ``take``. Raises
        ``WorkerFailed`` (the batch then prepares it on the loop)."""
        job = Job(next(self._ids), msg.data, tenant_token, lane_token, self._max_bytes)
        done = await (await self._running()).ask(job)
        outcome = done.prepared or done.rejected
        if outcome is None:
            raise WorkerFailed("the step 0 worker answered neither an append nor a refusal")
        prepared = Prepared(outcome, done.refs)
        self._ready[id(msg)] = (msg, prepared)
        return prepared

    def take(self, msg: Msg) -> Prepared | None:
        """What the worker made of ``msg`` (None: it was not prepared aside)."""
        found = self._ready.pop(id(msg), None)
        return found[1] if found is not None and found[0] is msg else None

    async def redact_command(self, cmd: Command) -> tuple[Command, dict[str, int]]:
        """``redaction.redact_command`` in the worker (a command's free-form
        fields may hold a MiB of text to scan); on the loop if it fails."""
        try:
            done = await (await self._running()).ask(Job(next(self._ids), command=cmd))
        except WorkerFailed as exc:
            log.warning("%s; the command is redacted on the loop", exc)
            return redact_command(cmd, self._redactor)
        if done.error is not None:
            raise error_from_wire(**msgspec.structs.asdict(done.error))
        assert done.command is not None
        return done.command, done.rules

    def forget_untaken(self) -> None:
        """Drop what was prepared for requests no batch took (the intake
        stopped and handed them back: redelivered, they are prepared again)."""
        self._ready.clear()

    async def close(self) -> None:
        self.forget_untaken()
        if self._worker is not None:
            await self._worker.end()
            self._worker = None
