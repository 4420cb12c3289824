"""The one way to the sequencer's ledger writer (services/sequencer/writerthread.py):
calls keep their order and the connection never has two users; small batches
commit on the event loop once the writer thread is idle; large ones are
written on the loop and committed (the fsync) on the thread; and the writer
refuses every use of its connection while a staged batch's transaction is
open, so a hand-off done wrong fails loudly instead of committing the wrong
rows."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import msgspec
import pytest
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.audit.ledger import audit_ledger
from laneledger.contract.errors import InternalError
from laneledger.contract.model import AppendCommitted, AppendRejected, CreateLane, EnsureActor, encode
from laneledger.contract.subjects import REPLY_HEADER, Subjects
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.services.sequencer.writerthread import LOOP_COMMIT_BYTES, WriterThread
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import PreparedAppend, prepare_append
from laneledger.store.txlog import MemoryTxLog, TxLogMoved

INLINE_MAX = 2


class Ledger:
    """A ledger file with one actor and one lane, its writer, and the writer
    thread in front of it (batches of up to ``INLINE_MAX`` commit inline)."""

    def __init__(self, path: Path) -> None:
        self.conn = open_ledger(path)
        self.writer = LedgerWriter(self.conn)
        self.actor = self.writer.ensure_actor(EnsureActor(tenant="acme", key="agent:wt@1", kind="agent"))
        self.lane = self.writer.create_lane(
            CreateLane(tenant="acme", session_id="s", run_id="r", name="main", actor_id=self.actor.id)
        )
        self.thread = WriterThread(self.writer, inline_commit_max=INLINE_MAX)
        self.seq = 0  # the lane's head as far as the appends made so far expect

    def appends(self, n: int, events: int = 1) -> list[PreparedAppend]:
        """``n`` appends of ``events`` events, each expecting the previous one's head."""
        batch = []
        for _ in range(n):
            body = encode(
                {
                    "lane_id": self.lane.id,
                    "expected_last_seq": self.seq,
                    "append_id": f"a{self.seq}",
                    "events": [
                        make_event(self.lane.id, "stream.text_delta", actor_id=self.actor.id, payload={})
                        for _ in range(events)
                    ],
                }
            )
            batch.append(prepare_append(body))
            self.seq += events
        return batch

    def stored_seqs(self) -> list[int]:
        return [msgspec.json.decode(body)["seq"] for _, body in self.writer.reader.events_after(0)]


@pytest.fixture
def ledger(tmp_path: Path):
    """A ``Ledger``, and an event its blocked test calls wait on: set at the
    end, so the thread's shutdown never waits on a call a failed test left."""
    ledger, release = Ledger(tmp_path / "ledger.db"), threading.Event()
    yield ledger, release
    release.set()
    ledger.thread.shutdown()
    ledger.conn.close()


async def test_calls_run_in_order_and_the_thread_is_busy_until_they_return(ledger):
    ledger, release = ledger
    thread = ledger.thread
    order: list[str] = []

    def blocked() -> str:
        release.wait(10)
        order.append("first")
        return "first"

    first = thread.call(blocked)
    second = thread.call(order.append, "second")
    assert not thread.idle
    release.set()
    assert await first == "first"
    await second
    assert order == ["first", "second"]
    # the count-down is delivered through the loop
    await eventually(lambda: thread.idle, what="the writer thread to be idle", timeout=2)


async def test_until_idle_waits_for_every_call_in_hand(ledger):
    ledger, release = ledger
    thread = ledger.thread
    await asyncio.wait_for(thread.until_idle(), 1)  # nothing in hand: at once
    returned: list[int] = []  # appended on the thread as each call returns

    def blocked(n: int) -> None:
        release.wait(10)
        returned.append(n)

    calls = [thread.call(blocked, 1), thread.call(blocked, 2)]
    waiting = asyncio.ensure_future(thread.until_idle())
    await asyncio.sleep(0.05)  # a negative check: a chance for the waiter to end too early
    assert not waiting.done()
    release.set()
    await asyncio.wait_for(waiting, 5)
    # Both calls have returned on the thread. (Their asyncio futures learn it
    # through the loop too, maybe a turn later: idle is about the thread.)
    assert thread.idle and returned == [1, 2]
    await asyncio.gather(*calls)


async def test_a_cancelled_waiter_does_not_make_the_thread_look_idle(ledger):
    """An awaiting task that gives up does not stop the call: the thread stays
    busy until the call itself returns."""
    ledger, release = ledger
    thread = ledger.thread
    started = threading.Event()

    def blocked() -> None:
        started.set()
        release.wait(10)

    waiter = asyncio.ensure_future(thread.call(blocked))
    await asyncio.to_thread(started.wait, 10)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    await asyncio.sleep(0.05)  # a negative check: a chance for a wrong count-down to arrive
    assert not thread.idle
    release.set()
    await eventually(lambda: thread.idle, what="the writer thread to be idle", timeout=2)


@pytest.mark.parametrize("size", [INLINE_MAX, INLINE_MAX + 3], ids=["inline", "staged"])
async def test_a_commit_waits_for_the_calls_in_hand_and_never_overtakes_them(ledger, size):
    """A command in hand when a batch arrives runs first, and the batch does
    not touch the writer until it returned, inline or staged."""
    ledger, release = ledger
    thread, writer = ledger.thread, ledger.writer
    seen: list[int] = []

    def command() -> None:
        release.wait(10)
        seen.append(writer.reader.last_position())

    before = thread.call(command)
    committing = asyncio.ensure_future(thread.commit(ledger.appends(size)))
    await asyncio.sleep(0.05)  # a negative check: a chance for the batch to overtake the command
    assert not committing.done() and writer.last_position == 0  # not written, not even staged
    release.set()
    result = await (await committing)
    await before
    assert seen == [0]  # the command saw the ledger as it was before the batch
    assert [r.last_seq for r in result.receipts] == list(range(1, size + 1))
    assert ledger.stored_seqs() == list(range(1, size + 1))


async def test_small_batches_commit_on_the_loop_large_ones_hand_only_their_commit_to_the_thread(ledger):
    ledger, _ = ledger
    thread, writer = ledger.thread, ledger.writer
    loop_thread = threading.get_ident()
    commits_on: list[bool] = []  # per commit_staged: on the loop thread
    commit_staged = writer.commit_staged

    def recorded(staged):
        commits_on.append(threading.get_ident() == loop_thread)
        return commit_staged(staged)

    writer.commit_staged = recorded  # type: ignore[method-assign]
    small = await thread.commit(ledger.appends(INLINE_MAX))
    assert small.done()  # committed before commit() returned
    assert all(isinstance(r, AppendCommitted) for r in small.result().receipts)
    large = await (await thread.commit(ledger.appends(INLINE_MAX + 1)))
    assert all(isinstance(r, AppendCommitted) for r in large.receipts)
    assert commits_on == [True, False]
    assert ledger.stored_seqs() == list(range(1, 2 * INLINE_MAX + 2))


@pytest.mark.parametrize("size", [INLINE_MAX, INLINE_MAX + 3], ids=["inline", "staged"])
async def test_a_failed_write_is_the_outcome_and_leaves_nothing_open(ledger, size):
    """A file that may not grow (SQLite's own size limit, a real SQLITE_FULL):
    the batch's outcome is ``InternalError``, nothing of it is stored, and
    the writer takes the same requests once there is room."""
    ledger, _ = ledger
    pages = ledger.conn.execute("PRAGMA page_count").fetchone()[0]
    ledger.conn.execute(f"PRAGMA max_page_count = {pages}")
    batch = ledger.appends(size, events=50)  # more than the free space left in the file's pages
    outcome = await ledger.thread.commit(batch)
    with pytest.raises(InternalError, match="database or disk is full"):
        await outcome
    assert ledger.stored_seqs() == [] and ledger.writer.last_position == 0
    ledger.conn.execute("PRAGMA max_page_count = 1073741823")
    result = await (await ledger.thread.commit(batch))
    assert [r.last_seq for r in result.receipts] == [50 * (i + 1) for i in range(size)]


def test_while_a_batch_is_staged_every_other_use_of_the_writer_raises(ledger):
    """The rules of the hand-off, enforced by the writer: between
    ``stage_batch`` and ``commit_staged`` nothing else may read or write
    through it (it would see, or commit, the open transaction's rows), and
    only the staged batch itself, once, can be committed."""
    ledger, _ = ledger
    writer = ledger.writer
    staged = writer.stage_batch(ledger.appends(2))
    refused = "a staged batch holds the ledger connection"
    with pytest.raises(RuntimeError, match=refused):
        writer.reader.get_lane(ledger.lane.id)
    with pytest.raises(RuntimeError, match=refused):
        writer.reader.events_after(0)
    with pytest.raises(RuntimeError, match=refused):
        writer.ensure_actor(EnsureActor(tenant="acme", key="agent:other@1", kind="agent"))
    with pytest.raises(RuntimeError, match=refused):
        writer.stage_batch(ledger.appends(1))
    with pytest.raises(RuntimeError, match=refused):
        writer.apply_batch([])
    other = LedgerWriter(ledger.conn)  # a staged batch ends only on the writer that staged it
    with pytest.raises(RuntimeError, match="not the one staged"):
        other.commit_staged(staged)
    result = writer.commit_staged(staged)
    assert [r.last_seq for r in result.receipts] == [1, 2]
    with pytest.raises(RuntimeError, match="not the one staged"):
        writer.commit_staged(staged)  # once
    assert ledger.stored_seqs() == [1, 2]  # the connection is free again


def test_a_staged_batch_rolled_back_leaves_nothing(ledger):
    ledger, _ = ledger
    writer = ledger.writer
    batch = ledger.appends(3)
    writer.roll_back_staged(writer.stage_batch(batch))
    assert ledger.stored_seqs() == [] and writer.last_position == 0
    assert writer.reader.get_lane(ledger.lane.id).last_seq == 0
    result = writer.apply_batch(batch)  # the same requests commit with the seqs they would have had
    assert [r.last_seq for r in result.receipts] == [1, 2, 3]


async def test_after_shutdown_the_thread_takes_nothing_and_leaves_nothing_open(ledger):
    ledger, _ = ledger
    thread = ledger.thread
    thread.shutdown()
    for batch in (ledger.appends(INLINE_MAX), ledger.appends(INLINE_MAX + 1)):
        with pytest.raises(RuntimeError, match="shut down"):
            await thread.commit(batch)
    with pytest.raises(RuntimeError, match="shut down"):
        thread.call(len, [])
    assert ledger.stored_seqs() == []  # nothing staged holds the writer


async def test_the_sequencer_commits_small_batches_on_the_loop_and_large_ones_on_the_thread(
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
    settings = SequencerSettings(inline_commit_max=4, txlog=False)  # the split without a log
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
    settings = SequencerSettings(inline_commit_max=1, txlog=False)
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


class GatedLog(MemoryTxLog):
    """A log whose append is awaited on the loop (an ``AsyncTxLog``, as
    JetStream's is) and answers only once ``ack`` is set; ``refuse``: it
    answers that the log moved on, storing nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.ack = asyncio.Event()
        self.refuse = False
        self.appending = asyncio.Event()  # set while an append waits for ``ack``

    async def append_async(self, record: bytes, *, after: int) -> int:
        self.appending.set()
        try:
            await self.ack.wait()
        finally:
            self.appending.clear()
        if self.refuse:
            raise TxLogMoved("the log moved on", expected_last_sequence=after)
        return self.append(record, after=after)


def applied_where(ledger: Ledger) -> list[bool]:
    """Per ``apply_batch`` of the ledger's writer from now on: whether it
    ran on a thread other than the loop's."""
    on_thread: list[bool] = []
    apply_batch = ledger.writer.apply_batch

    def recorded(batch):
        on_thread.append(threading.current_thread() is not threading.main_thread())
        return apply_batch(batch)

    ledger.writer.apply_batch = recorded  # type: ignore[method-assign]
    return on_thread


@pytest.fixture
def logged(ledger):
    """``ledger`` committing through a ``GatedLog``, with the writer thread
    in front of it as the sequencer has it with a log (``through_log``)."""
    ledger, _ = ledger
    log = GatedLog()
    ledger.writer.use_txlog(log)
    ledger.writer.catch_up()  # seeds the log with the actor and the lane
    ledger.thread.shutdown()  # replaced: shut down by the fixture it came from
    ledger.thread = WriterThread(ledger.writer, inline_commit_max=INLINE_MAX, through_log=True)
    return ledger, log


async def test_with_a_log_a_small_batch_awaits_its_append_on_the_loop_and_calls_queue_behind_it(logged):
    ledger, log = logged
    assert ledger.writer.commits_on_loop
    committing = await ledger.thread.commit(ledger.appends(INLINE_MAX))
    await asyncio.wait_for(log.appending.wait(), 2)  # on the loop, no thread waiting for it
    assert not ledger.thread.idle and not committing.done()
    # A read handed over meanwhile waits: the batch's transaction holds the connection.
    read = ledger.thread.call(ledger.stored_seqs)
    await asyncio.sleep(0.05)
    assert not read.done()
    log.ack.set()
    result = await asyncio.wait_for(committing, 2)
    assert [r.positions for r in result.receipts] == [[1], [2]]
    assert await asyncio.wait_for(read, 2) == [1, 2]  # after the commit, and seeing it
    await asyncio.wait_for(ledger.thread.until_idle(), 2)
    assert ledger.writer.txlog_seq == len(log.records)


@pytest.mark.parametrize(
    ("requests", "events", "request_bytes"),
    [(INLINE_MAX + 1, 1, 0), (1, INLINE_MAX + 1, 0), (1, 1, LOOP_COMMIT_BYTES + 1)],
    ids=["requests", "events", "bytes"],
)
async def test_with_a_log_a_heavy_batch_is_applied_whole_on_the_thread(
    logged, requests, events, request_bytes
):
    """Too many requests, events (one request may hold a thousand) or bytes
    to write on the loop: the thread writes it, and waits for the log."""
    ledger, log = logged
    log.ack.set()
    on_thread = applied_where(ledger)
    batch = ledger.appends(requests, events)
    result = await asyncio.wait_for(await ledger.thread.commit(batch, request_bytes=request_bytes), 5)
    assert on_thread == [True] and len(result.committed) == requests * events


async def test_a_refused_append_on_the_loop_writes_nothing_and_the_file_reads_the_log_next(logged):
    ledger, log = logged
    log.refuse = True
    log.ack.set()
    batch = ledger.appends(1)
    with pytest.raises(TxLogMoved):
        await asyncio.wait_for(await ledger.thread.commit(batch), 2)
    assert ledger.stored_seqs() == [] and ledger.writer.last_position == 0
    # Behind now (the record may have landed): the next batch reads the log on the thread first.
    assert not ledger.writer.commits_on_loop
    log.refuse = False
    result = await asyncio.wait_for(await ledger.thread.commit(batch), 5)
    assert [r.positions for r in result.receipts] == [[1]]
    assert ledger.writer.commits_on_loop


async def test_a_commit_on_the_loop_is_not_cancelled_with_its_awaiter(logged):
    """Like a batch on the thread, it ends on its own: a cancel mid-append
    would leave the file behind a record that may have landed."""
    ledger, log = logged
    committing = await ledger.thread.commit(ledger.appends(1))
    await asyncio.wait_for(log.appending.wait(), 2)
    waiter = asyncio.ensure_future(committing)
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    log.ack.set()
    await asyncio.wait_for(ledger.thread.until_idle(), 2)
    assert ledger.stored_seqs() == [1] and ledger.writer.txlog_seq == len(log.records)


async def test_a_refusal_decided_on_the_loop_is_decided_again_where_the_log_is_read(logged):
    """A batch that wrote nothing but refused a request may have been
    decided on a file behind the log: it goes to the thread, whose writer
    reads the log before it refuses (``LedgerWriter.apply_batch``)."""
    ledger, log = logged
    log.ack.set()
    ledger.seq = 5  # expects a head the lane does not have
    decided_on = applied_where(ledger)
    result = await asyncio.wait_for(await ledger.thread.commit(ledger.appends(1)), 5)
    assert decided_on == [True]
    [receipt] = result.receipts
    assert isinstance(receipt, AppendRejected) and receipt.error.code == "lane_conflict"


async def test_calls_queued_behind_a_commit_on_the_loop_keep_their_order(logged):
    """A call made as the commit ends, before those queued behind it were
    handed to the thread, still runs after them."""
    ledger, log = logged
    ran: list[str] = []
    committing = await ledger.thread.commit(ledger.appends(1))
    await asyncio.wait_for(log.appending.wait(), 2)
    first = ledger.thread.call(ran.append, "first")
    second = ledger.thread.call(ran.append, "second")
    # Made the moment the commit's outcome is known: before the two queued
    # calls have had a turn of the loop to go to the thread.
    third: list[asyncio.Future[None]] = []
    committing.add_done_callback(lambda _: third.append(ledger.thread.call(ran.append, "third")))
    log.ack.set()
    await asyncio.wait_for(committing, 2)
    await asyncio.wait_for(asyncio.gather(first, second, *third), 2)
    assert ran == ["first", "second", "third"]
    await asyncio.wait_for(ledger.thread.until_idle(), 2)
