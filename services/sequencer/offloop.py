"""Append step 0 of heavy requests, off the sequencer's event loop.

Step 0 (``store.append.prepare_append``: decode, validation, redaction of up
to a MiB of text, canonical form, hashing) is Python CPU work: on the event
loop one heavy request would keep every other tenant's batch, receipt and
lease renewal waiting for its whole CPU time (tens of milliseconds; a batch
of them, hundreds). So a request of at least ``HEAVY_BYTES`` or
``HEAVY_EVENTS`` is prepared in a worker process (``OffLoop``: a process
pool, real parallelism where a thread would hold the GIL through the
redaction's regexes), started as the intake's gate (intake.py: the request,
and the later requests of its stream, are held while it runs; other
tenants' requests go on into batches, so order within a stream is kept). The
batch then takes the prepared append (``take``) instead of preparing it on
the loop: what the loop pays for it is unpickling the result (about 3.5 ms of
CPU for a thousand events, 0.3 ms for a 0.9 MiB one, where step 0 took 16
to 49 ms: ``bench/offloop.py``).
A command as large (an actor's display name of a MiB, say) has its
redaction done there too (``redact_command``).

The worker has the sequencer's redactor (sent once, when it starts) and no
actor keys: signatures of such a request are checked by the writer, as for
any actor it did not know yet. What the worker refuses comes back as the
request's rejection receipt; if the worker fails (or the pool is broken:
it is made again for the next request), the batch prepares the request on
the loop as before, so an outcome is never lost, only not moved off the loop.

The pool has ``workers`` processes (one by default: the loop and one worker
use both cores of a small machine), each started at a lower CPU priority
(``WORKER_NICENESS``): where the cores are contended, the loop serving every
tenant goes before the heavy requests of one. It starts when the sequencer
becomes active with a tenants file (``warm``: its start, half a second of
CPU importing the ledger's code, is not paid in the middle of a tenant's
traffic), else on the first heavy request (a process costs its start and
its memory; a single-tenant ledger may never send one).
Each stream holds at most one request at its gate, so at most one request
per tenant waits for the pool.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from nats.aio.msg import Msg

from laneledger.contract.contentref import refs_in
from laneledger.contract.errors import RequestError
from laneledger.contract.model import AppendRejected, Command
from laneledger.contract.redaction import Redactor, redact_command
from laneledger.store.append import PreparedAppend, prepare_append, readable_ids
from laneledger.store.writer import rejection

log = logging.getLogger("laneledger.sequencer")

# A request this large, or with this many events, is prepared off the loop
# (its step 0 costs several milliseconds of CPU: bench/offloop.py).
HEAVY_BYTES = 64 * 1024
HEAVY_EVENTS = 64
# Added to a worker's niceness (lower CPU priority than the event loop's).
WORKER_NICENESS = 5


@dataclass(frozen=True, slots=True)
class Prepared:
    """A heavy request's step 0, done by a worker: the prepared append, or
    the receipt refusing it; and the content references it names."""

    outcome: PreparedAppend | AppendRejected
    refs: list[tuple[str, int]]


def is_heavy(data: bytes, events: int) -> bool:
    return len(data) >= HEAVY_BYTES or events >= HEAVY_EVENTS


class OffLoop:
    def __init__(self, redactor: Redactor, max_request_bytes: int, workers: int = 1) -> None:
        self._redactor, self._max_bytes, self._workers = redactor, max_request_bytes, workers
        self._pool: ProcessPoolExecutor | None = None
        # Prepared requests not yet taken by their batch: id(msg) -> (msg, result).
        self._ready: dict[int, tuple[Msg, Prepared]] = {}

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self._workers,
                # spawn: the sequencer has threads (writer, lease) a fork would copy mid-use
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self._redactor,),
            )
        return self._pool

    def warm(self) -> None:
        """Start the worker processes now, not on the first heavy request."""
        pool = self._executor()
        for _ in range(self._workers):
            pool.submit(_noop)

    async def run(self, msg: Msg, tenant_token: str | None, lane_token: str | None) -> Prepared:
        """Prepare ``msg`` in a worker; kept for ``take``. Raises what the
        pool raises (the batch then prepares it on the loop)."""
        pool = self._executor()
        try:
            prepared = await asyncio.get_running_loop().run_in_executor(
                pool, _prepare, msg.data, tenant_token, lane_token, self._max_bytes
            )
        except BrokenProcessPool:
            log.warning("the step 0 worker process died; a new one starts with the next heavy request")
            if self._pool is pool:
                self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
            raise
        self._ready[id(msg)] = (msg, prepared)
        return prepared

    def take(self, msg: Msg) -> PreparedAppend | AppendRejected | None:
        """What a worker made of ``msg`` (None: it was not prepared aside)."""
        found = self._ready.pop(id(msg), None)
        return found[1].outcome if found is not None and found[0] is msg else None

    async def redact_command(self, cmd: Command) -> tuple[Command, dict[str, int]]:
        """``redaction.redact_command`` in a worker (a command's free-form
        fields may hold a MiB of text to scan)."""
        pool = self._executor()
        return await asyncio.get_running_loop().run_in_executor(pool, _redact_command, cmd)

    def close(self) -> None:
        self._ready.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


# ----------------------------------------------------------- in the worker

_worker_redactor: Redactor | None = None


def _start_worker(redactor: Redactor) -> None:
    global _worker_redactor
    _worker_redactor = redactor
    os.nice(WORKER_NICENESS)
    # A worker outlives a killed sequencer otherwise (it waits on a queue
    # whose pipe it holds both ends of): it ends when its parent does.
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_end_with, args=(parent.sentinel,), daemon=True).start()


def _noop() -> None:
    pass


def _end_with(parent_sentinel: int) -> None:
    multiprocessing.connection.wait([parent_sentinel])
    os._exit(0)


def _prepare(data: bytes, tenant_token: str | None, lane_token: str | None, max_bytes: int) -> Prepared:
    try:
        append = prepare_append(
            data,
            tenant_token=tenant_token,
            lane_token=lane_token,
            max_bytes=max_bytes,
            redactor=_worker_redactor,
        )
    except RequestError as err:
        append_id, lane_id = readable_ids(data)
        return Prepared(rejection(err, append_id=append_id, lane_id=lane_id), [])
    refs = [
        ref
        for event in append.sent
        if isinstance(payload := event.get("payload"), dict)
        for ref in refs_in(payload)
    ]
    return Prepared(append, refs)


def _redact_command(cmd: Command) -> tuple[Command, dict[str, int]]:
    assert _worker_redactor is not None  # set by _start_worker
    return redact_command(cmd, _worker_redactor)
