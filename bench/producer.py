"""One producer process of ``bench/append.py`` (not meant to be run by hand).

Protocol (line-based, driven by the orchestrator):

1. stdin: one JSON line, the configuration (mode, NATS URL, lanes, actor, ...);
2. the producer connects, reads its lanes' heads and prints ``ready``;
3. stdin: ``go <t0>``, where ``t0`` is a ``time.monotonic()`` instant (the
   clock is system-wide on Linux, so it is the same in every process): the
   warm-up runs from ``t0`` to ``t0 + warmup_s``, the measured window from
   there for ``seconds``;
4. at the end of the window it stops offering load, waits (bounded) for what
   is still in flight, and prints one JSON line with its counts.

Modes:

* ``ledger`` - max load through the SDK: one task per lane submits appends
  (``LedgerClient.submit``) back to back, tracking the lane head locally, with
  up to ``window`` appends per producer outstanding (accepted, receipt not yet
  in). Committed events are counted from receipts.
* ``raw`` - the baseline: the same append-request bodies (built by the same
  code), with the same header, ``js.publish_async``-ed to a separate stream with
  the same settings, with up to ``window`` acks outstanding.
* ``bare`` - max load with no SDK: the same append-request bodies, published
  the way ``raw`` publishes them (``js.publish_async``, the same header) but to
  the ledger's append subjects, with one subscription on the reply inbox
  counting receipts and up to ``window`` appends per producer without a
  receipt. The producers then cost what raw ones do, plus reading receipts,
  so the run shows what the ledger commits when its producers are as cheap
  as they can be.
* ``paced`` - open-loop load at a fixed rate (appends/s) with steady
  inter-arrival times, round-robin over the lanes; the latency of every append
  from ``submit`` to its receipt is recorded.
* ``raw-paced`` - the floor under ``paced``: the same open-loop load, the raw
  phase's bodies ``js.publish_async``-ed to its stream, the latency of every
  publish to its JetStream ack recorded.

The event generator is shared with the orchestrator (which uses it to report
event sizes).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import signal
import sys
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from laneledger.contract.errors import LedgerError, LedgerTimeout
from laneledger.contract.ids import new_id
from laneledger.contract.model import Lane, encode
from laneledger.contract.subjects import REPLY_HEADER, Subjects, inbox_prefix
from laneledger.sdk.client import LedgerClient, make_event

# -- realistic events ------------------------------------------------------------------

_MODELS = (("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4.1-mini"), ("google", "gemini-2.5-pro"))
_TOOLS = (
    ("read_file", {"path": "src/laneledger/store/writer.py"}),
    ("run_tests", {"command": "pytest -q tests/test_store_contract.py", "timeout_s": 120}),
    ("grep", {"pattern": "expected_last_seq", "path": "shared/"}),
    ("write_file", {"path": "services/sequencer/service.py", "bytes": 9214}),
)
_DELTAS = (
    "The failing test is test_lane_conflict_after_replay; ",
    "the writer compares the expected head before the replay check, ",
    "so a resend after the lane moved is refused instead of replayed. ",
    "I will read the writer and move the replay check first.",
)


class EventFactory:
    """Proposed events for one lane, in a plausible harness rhythm: a model call
    (started, text deltas, completed, cost), then a tool call (started,
    completed). Completions name their start as ``causation_id``; about one
    event in eight is a ``cost.recorded``. Each is ~300-500 bytes of canonical
    JSON."""

    def __init__(self, lane: Lane, actor_id: str, seed: int = 0) -> None:
        self.lane = lane
        self.actor_id = actor_id
        self.n = seed
        self._step = itertools.cycle(range(8))
        self._started: str | None = None

    def _event(self, event_type: str, payload: dict[str, Any], **fields: Any) -> dict[str, Any]:
        return make_event(self.lane.id, event_type, actor_id=self.actor_id, payload=payload, **fields)

    def next(self) -> dict[str, Any]:
        self.n += 1
        n = self.n
        provider, model = _MODELS[n % len(_MODELS)]
        tool, args = _TOOLS[n % len(_TOOLS)]
        step = next(self._step)
        if step == 0:
            ev = self._event(
                "action.started",
                {
                    "action_type": "model_call",
                    "name": "llm.generate",
                    "model": model,
                    "prompt_tokens": 1200 + n % 900,
                    "max_tokens": 4096,
                },
                extensions={"harness": {"node": "planner", "step": n}},
            )
            self._started = ev["id"]
            return ev
        if step in (1, 2):
            return self._event("stream.text_delta", {"index": n, "text": _DELTAS[n % len(_DELTAS)]})
        if step == 3:
            return self._event(
                "action.completed",
                {
                    "action_type": "model_call",
                    "name": "llm.generate",
                    "status": "ok",
                    "finish_reason": "tool_use",
                    "output_tokens": 180 + n % 300,
                    "tool_calls": 1,
                },
                **self._cause(),
            )
        if step == 4:
            return self._event(
                "cost.recorded",
                {
                    "provider": provider,
                    "model": model,
                    "currency": "USD",
                    "amount": "0.0123",
                    "input_tokens": 1200 + n % 900,
                    "output_tokens": 180 + n % 300,
                },
                subject_id=self.lane.run_id,
            )
        if step == 5:
            ev = self._event(
                "action.started",
                {
                    "action_type": "tool_call",
                    "name": tool,
                    "args": args,
                    "effect": "read",
                },
                extensions={"harness": {"node": "executor", "step": n}},
            )
            self._started = ev["id"]
            return ev
        if step == 6:
            return self._event(
                "action.completed",
                {
                    "action_type": "tool_call",
                    "name": tool,
                    "status": "ok",
                    "exit_code": 0,
                    "duration_ms": 20 + n % 700,
                    "result_bytes": 4000 + n % 9000,
                },
                **self._cause(),
            )
        return self._event(
            "stream.tool_call_delta", {"index": n, "tool": tool, "args_delta": json.dumps(args)[:40]}
        )

    def _cause(self) -> dict[str, Any]:
        cause, self._started = self._started, None
        return {"causation_id": cause} if cause else {}

    def batch(self, k: int) -> list[dict[str, Any]]:
        return [self.next() for _ in range(k)]


def _padded(events: list[dict[str, Any]], total_bytes: int) -> list[dict[str, Any]]:
    """The events with prose added inline to their payloads, about
    ``total_bytes`` in all (a raw producer's; the SDK would externalize it)."""
    prose = "".join(_DELTAS)
    each = total_bytes // len(events)
    pad = (prose * (each // len(prose) + 1))[:each]
    return [{**event, "payload": {**event["payload"], "pad": pad}} for event in events]


def request_body(lane: Lane, expected_last_seq: int, append_id: str, events: list[dict[str, Any]]) -> bytes:
    """The append-request body exactly as ``LedgerClient.submit`` builds it."""
    return encode(
        {
            "lane_id": lane.id,
            "expected_last_seq": expected_last_seq,
            "append_id": append_id,
            "events": events,
        }
    )


# -- the producer ------------------------------------------------------------------------


class Producer:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.mode: str = cfg["mode"]
        self.E: int = cfg["events_per_append"]
        self.window: int = cfg["window"]
        self.actor_id: str = cfg["actor_id"]
        self.lanes = [msgspec.convert(lane, Lane) for lane in cfg["lanes"]]
        self.warmup_s: float = cfg["warmup_s"]
        self.seconds: float = cfg["seconds"]
        self.drain_s: float = cfg["drain_s"]
        self.factories = {
            lane.id: EventFactory(lane, self.actor_id, seed=i * 1_000_003)
            for i, lane in enumerate(self.lanes)
        }
        # bare only: each request's events padded inline (not moved to blobs,
        # as the SDK would) to about this many bytes in all: a byte flood.
        self.inline_bytes: int = cfg.get("inline_bytes", 0)
        self.heads: dict[str, int] = {}
        self.client: LedgerClient | None = None
        # counters
        self.appends_submitted = 0
        self.appends_committed = 0
        self.events_committed = 0  # from receipts, whole phase
        self.events_committed_window = 0  # receipts that arrived inside the window
        self.appends_committed_window = 0
        self.appends_rejected = 0
        self.rejected_codes: dict[str, int] = {}
        self.receipt_timeouts = 0
        self.submit_errors: dict[str, int] = {}
        self.latencies_ms: list[float] = []
        self.latencies_sched_ms: list[float] = []
        self.max_pacer_lag_ms = 0.0
        self.offered_window = 0
        self.first_position: int | None = None
        self.last_position: int | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- set-up ------------------------------------------------------------------------

    async def prepare(self) -> None:
        if self.cfg.get("tenant"):  # a tenant's own user (laneledger nats-config): its subjects
            self.client = await LedgerClient.connect(self.cfg["url"], timeout=30.0, tenant=self.cfg["tenant"])
        else:
            self.client = await LedgerClient.connect(self.cfg["url"], timeout=30.0, tenant_inboxes=True)
        if self.mode in ("raw", "bare", "raw-paced"):
            self.js = self.client.nc.jetstream(publish_async_max_pending=max(self.window, 1))
            # Receipts in the lanes' tenant's inbox: with a tenants file the
            # sequencer sends a tenant's nowhere else (spec/wire.md, "Replies").
            own_prefix, unique = self.client.nc.new_inbox().rsplit(".", 1)
            tenants = {lane.tenant for lane in self.lanes}
            self.inbox = f"{inbox_prefix(tenants.pop()) if len(tenants) == 1 else own_prefix}.{unique}"
        if self.mode in ("raw", "raw-paced"):
            for lane in self.lanes:
                self.heads[lane.id] = lane.last_seq
            self.raw_subjects = Subjects(self.cfg["raw_prefix"])
        elif self.cfg.get("heads_known"):  # the ceiling phase: its stand-in answers no reads
            for lane in self.lanes:
                self.heads[lane.id] = lane.last_seq
        else:
            for lane in self.lanes:  # authoritative heads, from the ledger
                self.heads[lane.id] = (await self.client.get_lane(lane.id)).last_seq

    # -- timing ------------------------------------------------------------------------

    def set_start(self, t0: float) -> None:
        self.t0 = t0
        self.w0 = t0 + self.warmup_s
        self.w1 = self.w0 + self.seconds

    def _count_receipt(self, receipt, arrived: float) -> None:
        n = len(receipt.positions)
        self.appends_committed += 1
        self.events_committed += n
        if self.first_position is None or receipt.positions[0] < self.first_position:
            self.first_position = receipt.positions[0]
        if self.last_position is None or receipt.positions[-1] > self.last_position:
            self.last_position = receipt.positions[-1]
        if self.w0 <= arrived < self.w1:
            self.events_committed_window += n
            self.appends_committed_window += 1

    def _count_rejection(self, err: LedgerError) -> None:
        self.appends_rejected += 1
        self.rejected_codes[err.code] = self.rejected_codes.get(err.code, 0) + 1

    # -- ledger: max load -----------------------------------------------------------------

    async def run_ledger(self) -> None:
        per_lane = max(1, -(-self.window // len(self.lanes)))
        await asyncio.gather(*(self._lane_loop(lane, per_lane) for lane in self.lanes))

    async def _lane_loop(self, lane: Lane, per_lane: int) -> None:
        assert self.client is not None
        await _sleep_until(self.t0)
        factory = self.factories[lane.id]
        outstanding: deque[asyncio.Task] = deque()
        reload = False
        while time.monotonic() < self.w1:
            if reload:  # a rejection: let the rest land, then resume from the ledger's head
                await asyncio.gather(*outstanding, return_exceptions=True)
                outstanding.clear()
                self.heads[lane.id] = (await self.client.get_lane(lane.id)).last_seq
                reload = False
            while len(outstanding) >= per_lane:
                await asyncio.wait([outstanding[0]])
                while outstanding and outstanding[0].done():
                    reload |= outstanding.popleft().result()
            if reload:
                continue
            events = factory.batch(self.E)
            try:
                handle = await self.client.submit(lane, self.heads[lane.id], events)
            except LedgerError as err:
                self.submit_errors[err.code] = self.submit_errors.get(err.code, 0) + 1
                await asyncio.sleep(0.05)
                continue
            self.appends_submitted += 1
            self.heads[lane.id] += self.E
            outstanding.append(asyncio.create_task(self._await_receipt(handle, None, None)))
        await asyncio.gather(*outstanding, return_exceptions=True)

    async def _await_receipt(self, handle, submitted: float | None, scheduled: float | None) -> bool:
        """Wait for one receipt and count it; True if the lane head must be reloaded."""
        try:
            receipt = await handle.receipt(timeout=max(1.0, self.w1 + self.drain_s - time.monotonic()))
        except LedgerTimeout:
            self.receipt_timeouts += 1
            return True
        except LedgerError as err:
            self._count_rejection(err)
            return True
        arrived = time.monotonic()
        self._count_receipt(receipt, arrived)
        if submitted is not None and self.w0 <= scheduled < self.w1:
            self.latencies_ms.append((arrived - submitted) * 1000.0)
            self.latencies_sched_ms.append((arrived - scheduled) * 1000.0)
        return False

    # -- raw JetStream baseline -----------------------------------------------------------

    async def run_raw(self) -> None:
        await _sleep_until(self.t0)
        self.raw_acked = self.raw_acked_window = self.raw_events_window = 0
        self.raw_errors: dict[str, int] = {}
        futures: set[asyncio.Future] = set()
        E, tokens = self.E, itertools.count(1)

        def done(fut: asyncio.Future) -> None:
            futures.discard(fut)
            if fut.cancelled() or fut.exception() is not None:
                name = "cancelled" if fut.cancelled() else type(fut.exception()).__name__
                self.raw_errors[name] = self.raw_errors.get(name, 0) + 1
                return
            self.raw_acked += 1
            if self.w0 <= time.monotonic() < self.w1:
                self.raw_acked_window += 1
                self.raw_events_window += E

        lanes = itertools.cycle(self.lanes)
        while time.monotonic() < self.w1:
            lane = next(lanes)
            events = self.factories[lane.id].batch(E)
            body = request_body(lane, self.heads[lane.id], new_id(), events)
            subject = self.raw_subjects.append(lane.tenant, lane.id)
            # publish_async waits (on its semaphore) while `window` acks are outstanding.
            fut = await self.js.publish_async(
                subject, body, headers={REPLY_HEADER: f"{self.inbox}.{next(tokens)}"}
            )
            self.heads[lane.id] += E
            self.appends_submitted += 1
            futures.add(fut)
            fut.add_done_callback(done)
        if futures:
            await asyncio.wait(list(futures), timeout=self.drain_s)

    # -- bare: max load without the SDK ----------------------------------------------------

    async def run_bare(self) -> None:
        assert self.client is not None
        unanswered = asyncio.Semaphore(self.window)  # appends sent, receipt not yet in
        self.pub_errors: dict[str, int] = {}
        sending = True
        all_answered = asyncio.Event()  # set once sending is over and every receipt is in

        def answered() -> bool:
            return self.appends_committed + self.appends_rejected >= self.appends_submitted

        async def on_receipts(msg) -> None:
            arrived = time.monotonic()
            try:
                answers = _decode_answers(msg.data)
            except msgspec.DecodeError:
                self.submit_errors["unreadable_receipt"] = self.submit_errors.get("unreadable_receipt", 0) + 1
                return
            for answer in answers:
                unanswered.release()
                if answer.outcome == "committed":
                    self._count_receipt(answer, arrived)
                else:
                    code = answer.error.get("code", "?") if answer.error else "?"
                    self.appends_rejected += 1
                    self.rejected_codes[code] = self.rejected_codes.get(code, 0) + 1
            if not sending and answered():
                all_answered.set()

        def acked(fut: asyncio.Future) -> None:
            if fut.cancelled() or fut.exception() is not None:
                name = "cancelled" if fut.cancelled() else type(fut.exception()).__name__
                self.pub_errors[name] = self.pub_errors.get(name, 0) + 1

        sub = await self.client.nc.subscribe(self.inbox, cb=on_receipts)
        await _sleep_until(self.t0)
        lanes = itertools.cycle(self.lanes)
        subjects = self.client.subjects
        # At the phase's end, one extra release wakes a loop that waits on a
        # full window whose receipts never come (then the drain below says so).
        asyncio.get_running_loop().call_later(max(0.0, self.w1 - time.monotonic()), unanswered.release)
        while time.monotonic() < self.w1:
            await unanswered.acquire()
            if time.monotonic() >= self.w1:
                break
            lane = next(lanes)
            events = self.factories[lane.id].batch(self.E)
            if self.inline_bytes:
                events = _padded(events, self.inline_bytes)
            body = request_body(lane, self.heads[lane.id], new_id(), events)
            fut = await self.js.publish_async(
                subjects.append(lane.tenant, lane.id), body, headers={REPLY_HEADER: self.inbox}
            )
            fut.add_done_callback(acked)
            self.heads[lane.id] += self.E
            self.appends_submitted += 1
        sending = False
        if not answered():
            try:
                async with asyncio.timeout(self.drain_s):
                    await all_answered.wait()
            except TimeoutError:
                pass  # counted below as receipt timeouts
        self.receipt_timeouts = self.appends_submitted - self.appends_committed - self.appends_rejected
        await sub.unsubscribe()

    # -- paced: latency at a fixed offered load --------------------------------------------

    async def _pace(self) -> AsyncIterator[tuple[float, Lane]]:
        """The open-loop schedule: each send's scheduled instant and its lane,
        yielded at that instant (late ones at once, their lag kept)."""
        rate = self.cfg["rate"]  # appends/s for this producer
        await _sleep_until(self.t0)
        # Stagger producers inside one inter-arrival so they do not fire in step.
        start = self.t0 + self.cfg.get("phase", 0.0) / rate
        lanes = itertools.cycle(self.lanes)
        for k in itertools.count():
            scheduled = start + k / rate
            if scheduled >= self.w1:
                return
            delay = scheduled - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                self.max_pacer_lag_ms = max(self.max_pacer_lag_ms, -delay * 1000.0)
            if self.w0 <= scheduled < self.w1:
                self.offered_window += 1
            yield scheduled, next(lanes)

    async def run_paced(self) -> None:
        queues = {lane.id: asyncio.Queue() for lane in self.lanes}
        senders = [asyncio.create_task(self._paced_sender(lane, queues[lane.id])) for lane in self.lanes]
        async for scheduled, lane in self._pace():
            queues[lane.id].put_nowait(scheduled)
        for q in queues.values():
            q.put_nowait(None)
        await asyncio.gather(*senders)

    async def run_raw_paced(self) -> None:
        self.raw_acked, self.raw_errors = 0, {}
        pending: set[asyncio.Future] = set()

        def acked(submitted: float, scheduled: float, fut: asyncio.Future) -> None:
            arrived = time.monotonic()
            pending.discard(fut)
            if fut.cancelled() or fut.exception() is not None:
                name = "cancelled" if fut.cancelled() else type(fut.exception()).__name__
                self.raw_errors[name] = self.raw_errors.get(name, 0) + 1
                return
            self.raw_acked += 1
            if self.w0 <= scheduled < self.w1:
                self.latencies_ms.append((arrived - submitted) * 1000.0)
                self.latencies_sched_ms.append((arrived - scheduled) * 1000.0)

        async for scheduled, lane in self._pace():
            body = request_body(lane, self.heads[lane.id], new_id(), self.factories[lane.id].batch(self.E))
            self.heads[lane.id] += self.E
            submitted = time.monotonic()
            fut = await self.js.publish_async(
                self.raw_subjects.append(lane.tenant, lane.id), body, headers={REPLY_HEADER: self.inbox}
            )
            self.appends_submitted += 1
            pending.add(fut)
            fut.add_done_callback(functools.partial(acked, submitted, scheduled))
        if pending:
            await asyncio.wait(list(pending), timeout=self.drain_s)

    async def _paced_sender(self, lane: Lane, queue: asyncio.Queue) -> None:
        assert self.client is not None
        factory = self.factories[lane.id]
        pending: list[asyncio.Task] = []
        reload = False
        while (scheduled := await queue.get()) is not None:
            if reload or any(t.done() and t.result() for t in pending):
                await asyncio.gather(*pending, return_exceptions=True)
                pending.clear()
                self.heads[lane.id] = (await self.client.get_lane(lane.id)).last_seq
                reload = False
            pending = [t for t in pending if not t.done()]
            events = factory.batch(self.E)
            submitted = time.monotonic()
            try:
                handle = await self.client.submit(lane, self.heads[lane.id], events)
            except LedgerError as err:
                self.submit_errors[err.code] = self.submit_errors.get(err.code, 0) + 1
                reload = True
                continue
            self.appends_submitted += 1
            self.heads[lane.id] += self.E
            pending.append(asyncio.create_task(self._await_receipt(handle, submitted, scheduled)))
        await asyncio.gather(*pending, return_exceptions=True)

    # -- result -------------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pid": os.getpid(),
            "mode": self.mode,
            "appends_submitted": self.appends_submitted,
            "submit_errors": self.submit_errors,
        }
        if self.mode == "raw-paced":
            out.update(
                acked=self.raw_acked,
                errors=self.raw_errors,
                latencies_ms=self.latencies_ms,
                latencies_sched_ms=self.latencies_sched_ms,
                offered_window=self.offered_window,
                max_pacer_lag_ms=self.max_pacer_lag_ms,
            )
            return out
        if self.mode == "raw":
            out.update(
                acked=self.raw_acked,
                acked_window=self.raw_acked_window,
                events_window=self.raw_events_window,
                errors=self.raw_errors,
            )
            return out
        out.update(
            appends_committed=self.appends_committed,
            events_committed=self.events_committed,
            appends_committed_window=self.appends_committed_window,
            events_committed_window=self.events_committed_window,
            appends_rejected=self.appends_rejected,
            rejected_codes=self.rejected_codes,
            receipt_timeouts=self.receipt_timeouts,
            first_position=self.first_position,
            last_position=self.last_position,
        )
        if self.mode == "bare":
            out["submit_errors"] = {**self.submit_errors, **self.pub_errors}
        if self.mode == "paced":
            out.update(
                latencies_ms=self.latencies_ms,
                latencies_sched_ms=self.latencies_sched_ms,
                offered_window=self.offered_window,
                max_pacer_lag_ms=self.max_pacer_lag_ms,
            )
        return out


class _Answer(msgspec.Struct):
    """What the bare producer reads of a receipt (``laneledger.contract.model.Receipt``)."""

    outcome: str
    positions: list[int] = []
    error: dict[str, Any] | None = None


_decode_answers = msgspec.json.Decoder(list[_Answer]).decode


async def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def _readline() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def main() -> None:
    cfg = json.loads(await _readline())
    producer = Producer(cfg)
    # Bounded no matter what: the orchestrator may have died.
    hard_limit = cfg["warmup_s"] + cfg["seconds"] + cfg["drain_s"] + 60
    signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
    signal.alarm(int(hard_limit + 30))
    await producer.prepare()
    print("ready", flush=True)
    line = (await _readline()).split()
    if not line or line[0] != "go":
        return
    producer.set_start(float(line[1]))
    run = {
        "ledger": producer.run_ledger,
        "raw": producer.run_raw,
        "bare": producer.run_bare,
        "paced": producer.run_paced,
        "raw-paced": producer.run_raw_paced,
    }[producer.mode]
    await asyncio.wait_for(run(), timeout=hard_limit)
    print(json.dumps(producer.result()), flush=True)
    assert producer.client is not None
    await producer.client.nc.flush()
    await producer.client.nc.close()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
