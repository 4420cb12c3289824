"""Where the ledger's connection is used (services/sequencer/writerthread.py):
calls keep their order and the connection never has two users; small batches
commit on the event loop once the writer thread is idle; large ones are
written on the loop and committed (the fsync) on the thread."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import msgspec
import pytest
from metrics_support import wait_for
from prometheus_client import CollectorRegistry

from laneledger.audit.ledger import audit_ledger
from laneledger.contract.errors import InternalError
from laneledger.contract.model import encode
from laneledger.contract.subjects import REPLY_HEADER, Subjects
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.services.sequencer.writerthread import WriterThread
from laneledger.store import LedgerWriter, open_ledger


@pytest.fixture
def thread_and_release():
    """A writer thread, and an event its blocked test calls wait on: set at
    the end, so the thread's shutdown never waits on a call a failed test left."""
    thread, release = WriterThread(), threading.Event()
    yield thread, release
    release.set()
    thread.shutdown()


async def test_calls_run_in_order_and_the_thread_is_busy_until_they_return(thread_and_release):
    thread, release = thread_and_release
    order: list[str] = []

    def blocked() -> str:
        release.wait(10)
        order.append("first")
        return "first"

    first = thread.run(blocked)
    second = thread.run(order.append, "second")
    assert not thread.idle
    with pytest.raises(RuntimeError, match="overtake"):
        thread.run_here(order.append, "here")
    release.set()
    assert await first == "first"
    await second
    assert order == ["first", "second"]
    await asyncio.sleep(0)  # the count-down is delivered through the loop
    assert thread.idle


async def test_until_idle_waits_for_every_call_in_hand(thread_and_release):
    thread, release = thread_and_release
    await asyncio.wait_for(thread.until_idle(), 1)  # nothing in hand: at once
    calls = [thread.run(release.wait, 10), thread.run(release.wait, 10)]
    waiting = asyncio.ensure_future(thread.until_idle())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    release.set()
    await asyncio.wait_for(waiting, 5)
    assert thread.idle and all(call.done() for call in calls)
    thread.run_here(len, [])  # allowed now


async def test_a_cancelled_waiter_does_not_make_the_thread_look_idle(thread_and_release):
    """An awaiting task that gives up does not stop the call: the thread stays
    busy until the call itself returns."""
    thread, release = thread_and_release
    started = threading.Event()

    def blocked() -> None:
        started.set()
        release.wait(10)

    async def idle() -> bool:
        return thread.idle

    waiter = asyncio.ensure_future(thread.run(blocked))
    await asyncio.to_thread(started.wait, 10)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    await asyncio.sleep(0.05)
    assert not thread.idle
    release.set()
    assert await wait_for(idle, timeout=2, interval=0.01)


async def test_run_here_runs_on_the_loop_thread_and_delivers_errors_as_run_does(thread_and_release):
    thread, _ = thread_and_release
    here = thread.run_here(threading.get_ident)
    assert here.done() and await here == threading.get_ident()

    def refuse() -> None:
        raise InternalError("ledger commit failed: disk I/O error")

    for outcome in (thread.run_here(refuse), thread.run(refuse)):
        with pytest.raises(InternalError, match="disk I/O error"):
            await outcome


async def test_small_batches_commit_on_the_loop_large_ones_commit_on_the_writer_thread(
    nats_server, nc, js, tmp_path: Path
):
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    calls: list[tuple[str, int, bool]] = []  # (step, requests, on the loop thread)
    loop_thread = threading.get_ident()

    def recording(step: str, fn, size):
        def call(arg):
            calls.append((step, size(arg), threading.get_ident() == loop_thread))
            return fn(arg)

        return call

    # apply_batch stages then commits through these attributes, as the sequencer does.
    writer.stage_batch = recording("stage", writer.stage_batch, len)  # type: ignore[method-assign]
    writer.commit_staged = recording(  # type: ignore[method-assign]
        "commit", writer.commit_staged, lambda staged: len(staged.receipts)
    )
    settings = SequencerSettings(inline_commit_max=4)
    sequencer = Sequencer(nc, writer, SequencerMetrics(CollectorRegistry()), settings)
    await sequencer.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            agent = await client.ensure_actor("acme", "agent:writer-thread", "agent")
            lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=agent.id)
            await client.append(
                lane,
                0,
                [make_event(lane.id, "stream.text_delta", actor_id=agent.id, payload={"text": "alone"})],
            )
            await sequencer.stop()
            # Fifty requests queued while nothing pulls: batches over the limit.
            inbox = nc.new_inbox()
            receipts = await nc.subscribe(inbox)
            for seq in range(1, 51):
                event = make_event(
                    lane.id, "stream.text_delta", actor_id=agent.id, payload={"text": f"queued {seq}"}
                )
                body = encode(
                    {"lane_id": lane.id, "expected_last_seq": seq, "append_id": f"q{seq}", "events": [event]}
                )
                await js.publish(Subjects().append("acme", lane.id), body, headers={REPLY_HEADER: inbox})
            sequencer = Sequencer(nc, writer, SequencerMetrics(CollectorRegistry()), settings)
            await sequencer.start()
            answered = 0
            while answered < 50:
                answered += len(msgspec.json.decode((await receipts.next_msg(timeout=10)).data))
            head = await client.get_lane(lane.id)
    finally:
        await sequencer.stop()
    assert head.last_seq == 51
    # Every batch is written on the loop; small ones commit there too, once
    # the thread is idle, large ones on the thread.
    assert all(on_loop for step, n, on_loop in calls if step == "stage")
    assert all(on_loop for step, n, on_loop in calls if step == "commit" and n <= 4)
    large = [on_loop for step, n, on_loop in calls if step == "commit" and n > 4]
    assert large and not any(large)


async def test_commands_and_reads_interleaved_with_appends_never_share_the_connection(
    nats_server, nc, tmp_path: Path
):
    """Commands and reads go to the writer thread while appends commit on the
    loop or on the thread: the writer is never in two calls at once, nor in a
    call while a staged batch's transaction is open (a slow command widens the
    window), every call is answered, the chains are sound."""
    db = tmp_path / "ledger.db"
    writer = LedgerWriter(open_ledger(db))
    users, counting = 0, threading.Lock()
    overlaps: list[str] = []

    def enter(name: str) -> None:
        nonlocal users
        with counting:
            users += 1
            if users > 1:
                overlaps.append(name)

    def leave() -> None:
        nonlocal users
        with counting:
            users -= 1

    def one_user(name: str, fn):
        def guarded(*args, **kwargs):
            enter(name)
            try:
                return fn(*args, **kwargs)
            finally:
                leave()

        return guarded

    def opens(fn):  # the connection is the batch's until commit_staged returns
        def guarded(batch):
            enter("stage_batch")
            try:
                return fn(batch)
            except BaseException:
                leave()
                raise

        return guarded

    def closes(fn):
        def guarded(staged):
            try:
                return fn(staged)
            finally:
                leave()

        return guarded

    writer.stage_batch = opens(writer.stage_batch)  # type: ignore[method-assign]
    writer.commit_staged = closes(writer.commit_staged)  # type: ignore[method-assign]
    # Batches of two or more are staged on the loop and committed on the thread.
    settings = SequencerSettings(inline_commit_max=1)
    sequencer = Sequencer(nc, writer, SequencerMetrics(CollectorRegistry()), settings)
    create_lane = writer.create_lane

    def slow_create_lane(cmd):
        time.sleep(0.02)  # widens the window for an overlap
        return create_lane(cmd)

    writer.create_lane = slow_create_lane  # type: ignore[method-assign]
    # Every command and read goes through _execute.
    sequencer._execute = one_user("command", sequencer._execute)  # type: ignore[method-assign]
    await sequencer.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=10.0) as client:
            agent = await client.ensure_actor("acme", "agent:interleave", "agent")
            lanes = [
                await client.create_lane("acme", "s1", "r1", f"lane-{i}", actor_id=agent.id) for i in range(8)
            ]

            async def write(lane, n: int) -> None:
                for seq in range(n):
                    await client.append(
                        lane,
                        seq,
                        [
                            make_event(
                                lane.id, "stream.text_delta", actor_id=agent.id, payload={"text": f"{seq}"}
                            )
                        ],
                    )

            async def command(i: int) -> None:
                actor = await client.ensure_actor("acme", f"agent:interleave-{i}", "agent")
                lane = await client.create_lane("acme", "s2", "r2", f"side-{i}", actor_id=actor.id)
                assert (await client.get_lane(lane.id)).last_seq == 0
                await client.load_lane(lanes[i % len(lanes)].id)

            await asyncio.gather(*(write(lane, 25) for lane in lanes), *(command(i) for i in range(20)))
            heads = [(await client.get_lane(lane.id)).last_seq for lane in lanes]
    finally:
        await sequencer.stop()
    assert overlaps == []
    assert heads == [25] * len(lanes)
    assert audit_ledger(db).events == 25 * len(lanes)
