"""Heavy append requests are prepared off the sequencer's event loop
(services/sequencer/offloop.py): a worker process does step 0 with the
sequencer's redactor, its outcome is the one the loop would have reached,
and the loop itself spends no more than a few milliseconds of CPU at a time
on such a request."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg
from raw_appends import Inbox

from laneledger.contract.ids import new_id
from laneledger.contract.model import AppendCommitted, AppendRejected
from laneledger.contract.redaction import Redacted, Redactor
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.offloop import HEAVY_BYTES, HEAVY_EVENTS, OffLoop, WorkerFailed, is_heavy
from laneledger.services.sequencer.prepworker import WORKER_NICENESS
from laneledger.store.append import PreparedAppend, prepare_append

pytestmark = pytest.mark.timeout(90)

LANE = new_id()
REDACTOR = Redactor({"order_no": r"ORD-[0-9]{6}"})
JWT_CHAIN = "eyJhbGciOi." * (600 * 1024 // 11)  # a redaction bomb: costly to scan


def _request(lane_id: str, expected: int, payloads: list[Any], actor_id: str = "agent:a") -> bytes:
    events = [{**make_event(lane_id, "stream.text_delta", actor_id=actor_id), "payload": p} for p in payloads]
    return msgspec.json.encode(
        {"append_id": new_id(), "lane_id": lane_id, "expected_last_seq": expected, "events": events}
    )


def _msg(data: bytes) -> Msg:
    return Msg(None, subject="ledger.append.acme.l1", data=data)  # type: ignore[arg-type]


def test_which_requests_are_heavy() -> None:
    assert not is_heavy(b"x" * (HEAVY_BYTES - 1), HEAVY_EVENTS - 1)
    assert is_heavy(b"x" * HEAVY_BYTES, 1) and is_heavy(b"{}", HEAVY_EVENTS)


async def test_a_worker_reaches_the_outcome_the_loop_would() -> None:
    offloop = OffLoop(REDACTOR, max_request_bytes=1 << 20)
    try:
        cases = {
            "many events, a configured secret": _request(
                LANE, 0, [{"text": f"ORD-{i:06d}"} for i in range(100)]
            ),
            "a redaction bomb": _request(LANE, 0, [{"text": JWT_CHAIN}]),
            "not an append": b'{"events": [' + b"1," * 40_000 + b"1]}",
        }
        for name, data in cases.items():
            msg = _msg(data)
            await offloop.run(msg, None, None)
            taken = offloop.take(msg)
            assert taken is not None and offloop.take(msg) is None, name  # taken once
            aside = taken.outcome
            try:
                inline: PreparedAppend | str = prepare_append(data, redactor=REDACTOR)
            except Exception as exc:  # noqa: BLE001 - compared below
                inline = getattr(exc, "code", "")
            if isinstance(inline, PreparedAppend):
                assert isinstance(aside, PreparedAppend), name
                assert (aside.digest, aside.sent, dict(aside.redactions)) == (
                    inline.digest,
                    inline.sent,
                    dict(inline.redactions),
                ), name
            else:
                assert isinstance(aside, AppendRejected) and aside.error.code == inline, name
    finally:
        await offloop.close()


@pytest.fixture
def loop_cpu() -> Iterator[list[tuple[object, float]]]:
    """The CPU time (this thread's) of every callback and task step the
    event loop runs while the test does, with the task it stepped (None for
    a plain callback): the loop's stretches of work that nothing else on it
    can interrupt, measured without the wall clock a loaded machine distorts."""
    stretches: list[tuple[object, float]] = []
    run = asyncio.events.Handle._run
    # What this xdist worker's earlier tests left on the heap is not the
    # sequencer's work: frozen, a full collection (run inside whichever step
    # allocates) does not walk it. In one `make test` a single step measured
    # 287 ms of CPU, most likely such a collection.
    gc.collect()
    gc.freeze()

    def timed(handle: asyncio.events.Handle) -> None:
        started = time.thread_time()
        try:
            run(handle)
        finally:
            stretches.append((getattr(handle._callback, "__self__", None), time.thread_time() - started))

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]
    try:
        yield stretches
    finally:
        asyncio.events.Handle._run = run  # type: ignore[method-assign]
        gc.unfreeze()


async def test_heavy_requests_cost_the_loop_a_few_milliseconds_at_a_time(
    nc, sequencer, client, actor, loop_cpu: list[tuple[object, float]]
) -> None:
    lane = await client.create_lane("acme", "s1", "r1", "heavy", actor_id=actor.id)
    heavy = [
        _request(lane.id, 0, [{"text": JWT_CHAIN}], actor.id),
        _request(lane.id, 1, [{"text": f"delta {i} " * 40} for i in range(1000)], actor.id),
        _request(lane.id, 1001, [{"text": "x" * 900_000}], actor.id),
    ]
    async with Inbox(nc) as inbox:
        # One heavy request first: without a tenants file the worker process
        # starts on the first one, and its spawn (a fork of this whole test
        # process, its page tables growing with every earlier test of the
        # xdist worker) is not the per-request cost measured here.
        warm_lane = await client.create_lane("acme", "s1", "r1", "warm", actor_id=actor.id)
        await inbox.send(
            client.subjects.append("acme", warm_lane.id),
            _request(warm_lane.id, 0, [{"text": JWT_CHAIN}], actor.id),
        )
        assert isinstance(await inbox.next(), AppendCommitted)
        loop_cpu.clear()
        for body in heavy:
            await inbox.send(client.subjects.append("acme", lane.id), body)
        receipts = [await inbox.next() for _ in heavy]
    assert [type(r) for r in receipts] == [AppendCommitted] * 3, receipts
    assert [r.positions[-1] - r.positions[0] + 1 for r in receipts if isinstance(r, AppendCommitted)] == [
        1,
        1000,
        1,
    ]
    page = await client.load_lane(lane.id, after_seq=0, limit=1)
    assert "[REDACTED:jwt]" in msgspec.json.encode(page.events[0].payload).decode()
    # Inline, step 0 of each costs the loop 15-50 ms of CPU in one stretch
    # (bench/offloop.py); aside, the most is unpickling the 1000 events or
    # publishing them on the committed stream. (This test's own task, which
    # reads the receipts and the lane on the same loop, is not counted.) A
    # bound in CPU time, not wall time, so a loaded machine does not move it.
    test = asyncio.current_task()
    sequencers = sorted(cpu for task, cpu in loop_cpu if task is not test)
    assert sequencers[-1] < 0.015, sequencers[-5:]


async def test_a_missing_blob_in_a_request_prepared_aside_is_named_by_its_event(
    nc, sequencer, client, actor
) -> None:
    """The references come back from the worker with the index of the event
    naming each: the refusal names that event and its path."""
    lane = await client.create_lane("acme", "s1", "r1", "refs", actor_id=actor.id)
    made_up = {"_ref": "sha256:" + "ab" * 32, "size_bytes": 10}
    payloads: list[Any] = [{"text": f"delta {i}"} for i in range(HEAVY_EVENTS + 6)]
    payloads[HEAVY_EVENTS] = {"content": made_up}
    body = _request(lane.id, 0, payloads, actor.id)
    async with Inbox(nc) as inbox:
        await inbox.send(client.subjects.append("acme", lane.id), body)
        receipt = await inbox.next()
    assert isinstance(receipt, AppendRejected) and receipt.error.code == "blob_missing", receipt
    event_id = msgspec.json.decode(body)["events"][HEAVY_EVENTS]["id"]
    assert receipt.error.details["path"] == f"$.events[{HEAVY_EVENTS}].payload"
    assert receipt.error.details["event_id"] == event_id


class _SendsAsIs(Redactor):
    """A hostile producer's client: it redacts nothing before sending."""

    def redact(self, value: Any) -> Redacted:
        return Redacted(value, 0)

    def surely_clean(self, value: Any) -> bool:
        return True


async def test_a_large_commands_redaction_runs_off_the_loop(
    nats_server, sequencer, loop_cpu: list[tuple[object, float]]
) -> None:
    async with await LedgerClient.connect(nats_server.url, timeout=30.0, redactor=_SendsAsIs()) as client:
        loop_cpu.clear()
        # As large as the field bounds let a command be (spec/wire.md): heavy.
        actor = await client.ensure_actor(
            "acme",
            "agent:bomb",
            "agent",
            display_name=JWT_CHAIN[:1023],
            attributes={"note": JWT_CHAIN[: 64 * 1024 - 16]},
        )
        test = asyncio.current_task()
        sequencers = sorted(cpu for task, cpu in loop_cpu if task is not test)
    assert actor.display_name is not None and "eyJhbGciOi" not in actor.display_name
    assert "[REDACTED:jwt]" in actor.display_name and "[REDACTED:jwt]" in str(actor.attributes)
    assert sequencers[-1] < 0.015, sequencers[-5:]


async def test_a_light_request_behind_a_heavy_one_of_its_lane_keeps_its_place(
    nc, sequencer, client, actor
) -> None:
    """The light request is ready long before the heavy one is prepared
    aside; it still commits after it (expecting its position), not before."""
    lane = await client.create_lane("acme", "s1", "r1", "order", actor_id=actor.id)
    subject = client.subjects.append("acme", lane.id)
    async with Inbox(nc) as inbox:
        await inbox.send(subject, _request(lane.id, 0, [{"text": JWT_CHAIN}], actor.id))
        await inbox.send(subject, _request(lane.id, 1, [{"text": "light"}], actor.id))
        heavy, light = await inbox.next(), await inbox.next()
    assert isinstance(heavy, AppendCommitted) and isinstance(light, AppendCommitted), (heavy, light)
    assert (heavy.positions[0], light.positions[0]) == (heavy.positions[0], heavy.positions[0] + 1)


def _gone(pid: int) -> bool:
    """Whether the process has ended (a zombie waiting for its reaper has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


async def test_the_worker_runs_niced_and_a_dead_one_is_replaced_without_losing_the_request() -> None:
    offloop = OffLoop(REDACTOR, max_request_bytes=1 << 20)
    try:
        light = _msg(_request(LANE, 0, [{"text": "light"}]))
        await offloop.run(light, None, None)  # the worker has started (and niced itself)
        pid = offloop.worker_pid
        assert pid is not None and offloop.take(light) is not None
        assert os.getpriority(os.PRIO_PROCESS, pid) >= os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICENESS
        msg = _msg(_request(LANE, 0, [{"text": JWT_CHAIN}]))
        os.kill(pid, signal.SIGSTOP)  # so the job is still unanswered when it dies
        job = asyncio.create_task(offloop.run(msg, None, None))
        await asyncio.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerFailed):  # the batch then prepares it on the loop
            await job
        assert offloop.take(msg) is None
        await offloop.run(msg, None, None)  # a new worker
        taken = offloop.take(msg)
        assert taken is not None and isinstance(taken.outcome, PreparedAppend)
        assert offloop.worker_pid not in (None, pid)
    finally:
        await offloop.close()


async def test_a_heavy_request_whose_worker_fails_commits_prepared_on_the_loop(
    nc, sequencer, client, actor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker failing (dead, or no answer in its job timeout under load)
    is the designed fallback, not an error: the request is prepared on the
    loop and commits, and the sequencer says so at WARNING."""

    async def failing(self: OffLoop, msg: object, tenant: object, lane: object) -> None:
        raise WorkerFailed("the step 0 worker answered no job in 10 s")

    monkeypatch.setattr(OffLoop, "run", failing)
    lane = await client.create_lane("acme", "s1", "r1", "fallback", actor_id=actor.id)
    async with Inbox(nc) as inbox:
        await inbox.send(
            client.subjects.append("acme", lane.id), _request(lane.id, 0, [{"text": JWT_CHAIN}], actor.id)
        )
        receipt = await inbox.next()
    assert isinstance(receipt, AppendCommitted), receipt
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any(
        "prepared on the loop" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
    )


async def test_a_stuck_worker_is_ended_after_the_job_timeout_and_replaced() -> None:
    offloop = OffLoop(REDACTOR, max_request_bytes=1 << 20, job_timeout_s=1.0)
    try:
        light = _msg(_request(LANE, 0, [{"text": "light"}]))
        await offloop.run(light, None, None)
        pid = offloop.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # alive, answering nothing
        with pytest.raises(WorkerFailed, match="answered no job"):
            await offloop.run(light, None, None)
        await offloop.run(light, None, None)
        assert offloop.worker_pid not in (None, pid) and _gone(pid)
    finally:
        await offloop.close()


_PARENT = """
import asyncio, sys
from laneledger.contract.redaction import DEFAULT_REDACTOR
from laneledger.services.sequencer.offloop import OffLoop

async def main():
    offloop = OffLoop(DEFAULT_REDACTOR, 1 << 20)
    await offloop.warm()
    print(offloop.worker_pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_a_sigkilled_sequencer_leaves_no_worker_behind() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert not _gone(worker)
    finally:
        parent.kill()  # SIGKILL: nothing of the parent's runs
        parent.wait()
    deadline = time.monotonic() + 10
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(worker), f"worker {worker} outlived its parent"
