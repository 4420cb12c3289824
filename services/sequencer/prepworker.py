"""The step 0 worker process (offloop.py starts it; it is not run by hand).

    python -m laneledger.services.sequencer.prepworker PARENT_PID

It reads jobs from stdin and writes their outcomes to stdout, one at a time,
each a frame: a 4-byte big-endian length, then that many bytes of msgpack
(``Hello`` first, then ``Job``s in; ``Done``s out, in the jobs' order). A
plain module run with ``-m``, not multiprocessing: nothing of the sequencer
is imported or re-run in it, only step 0's code.

It runs at a lower CPU priority than its parent (``WORKER_NICENESS``), and
ends with it: at the end of its stdin (the parent closed it, or died), and
on Linux at once, killed by the kernel when the parent dies
(``PR_SET_PDEATHSIG``), even in the middle of a job.
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import sys
from typing import BinaryIO, TypeVar

import msgspec

from laneledger.contract.contentref import refs_in
from laneledger.contract.errors import RequestError
from laneledger.contract.model import AppendRejected, Command, ErrorBody
from laneledger.contract.redaction import Redactor, redact_command
from laneledger.store.append import PreparedAppend, prepare_append, readable_ids
from laneledger.store.batch import rejection

MODULE = "laneledger.services.sequencer.prepworker"
# Added to the worker's niceness (lower CPU priority than the event loop's).
WORKER_NICENESS = 5
HEADER = struct.Struct(">I")
# The largest frame either side accepts: a request (the server's max_payload)
# comes back as its decoded request and its events, about twice its size.
MAX_FRAME = 64 << 20

# (ref, size_bytes, index of the event whose payload names it)
Ref = tuple[str, int, int]


class Hello(msgspec.Struct, frozen=True):
    """The parent's redactor, as ``Redactor(patterns, keys)`` makes it again."""

    patterns: dict[str, str]
    keys: list[str]


class Job(msgspec.Struct, frozen=True):
    """Prepare an append request, or (``command`` set) redact a command."""

    id: int
    data: bytes = b""
    tenant_token: str | None = None
    lane_token: str | None = None
    max_bytes: int = 0
    command: Command | None = None


class Done(msgspec.Struct, frozen=True):
    """A job's outcome: the prepared append (with the content references
    its events name) or the receipt refusing it; the redacted command and
    its counts per rule, or the request error refusing it; or ``failure``,
    the worker's own fault (the loop then does the job itself)."""

    id: int
    prepared: PreparedAppend | None = None
    rejected: AppendRejected | None = None
    refs: list[Ref] = []
    command: Command | None = None
    rules: dict[str, int] = {}
    error: ErrorBody | None = None
    failure: str | None = None


def frame(body: msgspec.Struct) -> bytes:
    data = msgspec.msgpack.encode(body)
    return HEADER.pack(len(data)) + data


def check_size(size: int) -> int:
    if size > MAX_FRAME:
        raise ValueError(f"a frame of {size} bytes, more than {MAX_FRAME}")
    return size


def append_refs(append: PreparedAppend) -> list[Ref]:
    """The content references an append's events name, with each event's
    index (none for a request that cannot hold one, or with no tenant:
    the blob check looks up a tenant's blobs only)."""
    if append.tenant_token is None or not append.may_reference:
        return []
    return [
        (ref, size, i)
        for i, event in enumerate(append.sent)
        if isinstance(payload := event.get("payload"), dict)
        for ref, size in refs_in(payload)
    ]


# ----------------------------------------------------------- in the worker

T = TypeVar("T")


def _read(stream: BinaryIO, kind: type[T]) -> T | None:
    """The next frame, decoded; None at the end of the stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    data = stream.read(check_size(size))
    return msgspec.msgpack.decode(data, type=kind) if len(data) == size else None


def _do(job: Job, redactor: Redactor) -> Done:
    if job.command is not None:
        try:
            cmd, rules = redact_command(job.command, redactor)
        except RequestError as err:
            return Done(job.id, error=ErrorBody(code=err.code, message=err.message, details=err.details))
        return Done(job.id, command=cmd, rules=rules)
    try:
        append = prepare_append(
            job.data,
            tenant_token=job.tenant_token,
            lane_token=job.lane_token,
            max_bytes=job.max_bytes,
            redactor=redactor,
        )
    except RequestError as err:
        append_id, lane_id = readable_ids(job.data)
        return Done(job.id, rejected=rejection(err, append_id=append_id, lane_id=lane_id))
    return Done(job.id, prepared=append, refs=append_refs(append))


def _die_with(parent_pid: int) -> None:
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before that took hold
        os._exit(0)


def main() -> None:
    _die_with(int(sys.argv[1]))
    os.nice(WORKER_NICENESS)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stdout carries frames only
    hello = _read(stdin, Hello)
    if hello is None:
        return
    redactor = Redactor(hello.patterns, hello.keys)
    while (job := _read(stdin, Job)) is not None:
        try:
            done = _do(job, redactor)
        except Exception as exc:  # noqa: BLE001 - reported: the loop does the job itself
            done = Done(job.id, failure=f"{type(exc).__name__}: {exc}")
        stdout.write(frame(done))
        stdout.flush()


if __name__ == "__main__":
    main()
