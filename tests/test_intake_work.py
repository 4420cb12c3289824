"""The sequencer's intake counts work, not requests (spec/wire.md, "Tenants
and limits"): a batch is bounded in requests, events and bytes and shared
among the tenants by those; a tenant's rate is charged in work tokens; every
pull asks its stream for a bounded number of bytes."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from nats.aio.msg import Msg
from polling import eventually

from laneledger.contract.subjects import Subjects, token
from laneledger.runtime.tenants import Tenants, parse_tenants
from laneledger.services.sequencer.intake import (
    THROTTLED_SLICE_S,
    TOKEN_BYTES,
    BatchBudget,
    Gate,
    Intake,
    TokenBucket,
    Work,
    _Source,
)
from laneledger.services.sequencer.streams import SEQUENCER_CONSUMER

SUBJECTS = Subjects()
TENANTS = parse_tenants("[tenants.acme]\n[tenants.globex]\n")
BUDGET = BatchBudget(requests=500, events=1000, bytes=2 << 20)


def _request(events: int = 1, filler: int = 0) -> bytes:
    """An append request's shape, as the intake reads it (the batch, not the
    intake, decides whether it is a valid one)."""
    return json.dumps({"events": [{"payload": {"text": "x" * filler}} for _ in range(events)]}).encode()


def _msg(data: bytes) -> Msg:
    return Msg(None, subject="ledger.append.acme.l1", data=data)  # type: ignore[arg-type]


# ------------------------------------------------------------ pure logic


def test_a_request_costs_one_token_per_event_or_per_token_bytes_whichever_is_more() -> None:
    assert Work.of(_msg(_request())).tokens == 1
    assert Work.of(_msg(_request(events=1000))).tokens == 1000
    huge = Work.of(_msg(_request(filler=900_000)))
    assert huge.events == 1 and huge.tokens == -(-huge.bytes // TOKEN_BYTES) > 200
    # What the batch will refuse unread still costs its bytes and one event.
    assert Work.of(_msg(b"not json")).events == 1
    assert Work.of(_msg(b'{"events": 5}')).events == 1
    # More events than an append may hold: refused at once, charged as the most.
    assert Work.of(_msg(json.dumps({"events": [1] * 200_000}).encode())).events == 1000


def test_the_bucket_takes_a_request_once_it_holds_its_cost() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=1000.0, burst=100, clock=lambda: now[0])
    assert bucket.ready(1000)  # dearer than the burst: a full bucket will do ...
    bucket.take(1000)  # ... and the rest is debt: 900 tokens
    assert not bucket.ready(1)
    assert bucket.wait_s(50) == pytest.approx(0.95)
    now[0] += 0.94
    assert not bucket.ready(50)
    now[0] += 0.02
    assert bucket.ready(50) and not bucket.ready(100)


def test_a_bucket_found_dry_is_taken_from_again_only_once_it_holds_a_slice() -> None:
    # (A rate of 2048/s and clock steps of 1/1024 s keep the tokens exact.)
    now = [0.0]
    bucket = TokenBucket(rate=2048.0, burst=100, clock=lambda: now[0])
    slice_tokens = int(2048 * THROTTLED_SLICE_S)
    assert slice_tokens == 20
    bucket.take(100)
    assert not bucket.ready(1) and bucket.throttled
    now[0] += 1 / 1024  # two tokens: enough for a request, not for a slice
    assert not bucket.ready(1)
    assert bucket.wait_s(1) == pytest.approx((slice_tokens - 2) / 2048)
    now[0] += 9 / 1024
    assert bucket.ready(1) and not bucket.throttled
    for _ in range(slice_tokens):  # the slice is taken a request at a time ...
        assert bucket.ready(1)
        bucket.take(1)
    assert not bucket.ready(1)  # ... until it runs dry again
    # A request dearer than the slice waits for its own cost, a full bucket at most.
    assert bucket.wait_s(50) == pytest.approx(50 / 2048)
    assert bucket.wait_s(1000) == pytest.approx(100 / 2048)


def test_a_tenant_within_its_rate_never_waits_for_a_slice() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2000.0, burst=2000, clock=lambda: now[0])
    for _ in range(10_000):  # 1000 requests a second, one every millisecond
        assert bucket.ready(1)
        bucket.take(1)
        now[0] += 0.001
    assert not bucket.throttled


class _Queued:
    """A PullFeed's part the batching reads: requests already delivered."""

    def __init__(self, msgs: list[Msg]) -> None:
        self.msgs = msgs

    def take(self, max_msgs: int) -> list[Msg]:
        taken, self.msgs = self.msgs[:max_msgs], self.msgs[max_msgs:]
        return taken


def test_a_tenant_over_its_rate_is_batched_a_slice_at_a_time_while_others_go_at_once() -> None:
    now = [0.0]
    acme = [Msg(None, subject="ledger.append.acme.l1", data=_request()) for _ in range(500)]  # type: ignore[arg-type]
    globex = [Msg(None, subject="ledger.append.globex.l1", data=_request())]  # type: ignore[arg-type]
    intake = Intake(None, None, SUBJECTS, replicas=1, budget=BUDGET)  # type: ignore[arg-type]
    intake._sources = [
        _Source("acme", _Queued(acme), TokenBucket(2048.0, 40, clock=lambda: now[0])),  # type: ignore[arg-type]
        _Source("globex", _Queued([]), TokenBucket(2048.0, 2048, clock=lambda: now[0])),  # type: ignore[arg-type]
    ]
    assert [_tenant(m) for m in intake._share()] == ["acme"] * 40  # its burst
    now[0] += 1 / 1024
    assert intake._share() == []  # two tokens: acme waits for its slice ...
    intake._sources[1].feed.msgs = globex  # type: ignore[attr-defined]
    assert intake._share() == globex  # ... globex, within its rate, does not
    now[0] += 9 / 1024
    assert [_tenant(m) for m in intake._share()] == ["acme"] * 20  # 10 ms of acme's rate at once


# ------------------------------------------------- against a real server


async def _queued(
    nc, js, tenants: Tenants, queues: dict[str, list[bytes]], gate: Gate | None = None
) -> Intake:
    """An intake opened on append streams already holding ``queues``."""
    made = Intake(nc, js, SUBJECTS, replicas=1, budget=BUDGET)
    await made.open(tenants)  # creates the streams
    await made.stop()
    for tenant, bodies in queues.items():
        for body in bodies:
            await js.publish(SUBJECTS.append(tenant, "l1"), body)
    intake = Intake(nc, js, SUBJECTS, replicas=1, budget=BUDGET, gate=gate)
    await intake.open(tenants)
    # The victim's requests were waiting before the batches were read: its
    # feed has them (the first pull of each feed, not a batch, decides that).
    if "globex" in queues:
        stream = SUBJECTS.tenant_append_stream(token("globex"))
        await eventually(
            lambda: js.consumer_info(stream, SEQUENCER_CONSUMER),
            until=lambda info: info.num_ack_pending == len(queues["globex"]),
            what="globex's requests delivered to the intake",
        )
    return intake


async def _until_globex_is_in(intake: Intake, globex: int) -> list[list[Msg]]:
    """Batches read until ``globex`` requests of globex's are in one."""
    found: list[list[Msg]] = []
    while sum(_tenant(m) == "globex" for batch in found for m in batch) < globex:
        batch = await intake.next_batch(5.0)
        assert batch, "the intake found nothing waiting"
        found.append(batch)
    return found


def _tenant(msg: Msg) -> str:
    return msg.subject.split(".")[2]


def _within(batch: list[Msg], budget: BatchBudget) -> bool:
    """The batch bound: its first request (or the budget, if more) plus one
    budget beyond it, for other tenants' first requests (Intake._share)."""
    work = [Work.of(m) for m in batch]
    first = work[0]
    return (
        len(batch) <= 2 * budget.requests
        and sum(w.events for w in work) <= max(first.events, budget.events) + budget.events
        and sum(w.bytes for w in work) <= max(first.bytes, budget.bytes) + budget.bytes
    )


@pytest.mark.parametrize(
    "flood",
    [
        pytest.param([_request(filler=900_000) for _ in range(12)], id="900-kB-requests"),
        pytest.param([_request(events=1000) for _ in range(6)], id="1000-event-requests"),
    ],
)
async def test_a_flood_of_heavy_requests_delays_another_tenant_by_a_bounded_batch(
    nats_server, nc, js, flood: list[bytes]
) -> None:
    intake = await _queued(nc, js, TENANTS, {"acme": flood, "globex": [_request(events=2)] * 20})
    try:
        batches = await _until_globex_is_in(intake, 20)
    finally:
        await intake.stop()
    shape = [[_tenant(m) for m in batch] for batch in batches]
    # Every batch within its bound; globex's first request is in the first
    # batch, though acme's request may have spent its budget, and the rest
    # within a few batches, not behind the flood.
    assert all(_within(batch, BUDGET) for batch in batches), shape
    assert "globex" in shape[0], shape
    assert len(batches) <= 3, shape
    acme = sum(_tenant(m) == "acme" for batch in batches for m in batch)
    assert acme <= 2 * len(batches), shape


async def test_beyond_the_budget_each_tenant_has_only_its_share_of_one_more(nats_server, nc, js) -> None:
    """Two tenants' 1000-event floods: each one's first request of a batch
    is too large for its half of the overdraft, so no batch holds two of
    them; globex's small request still joins the first batch."""
    tenants = parse_tenants("[tenants.acme]\n[tenants.initech]\n[tenants.globex]\n")
    flood = [_request(events=1000) for _ in range(3)]
    intake = await _queued(nc, js, tenants, {"acme": flood, "initech": flood, "globex": [_request(events=2)]})
    try:
        for tenant in ("acme", "initech"):
            await eventually(
                lambda tenant=tenant: js.consumer_info(
                    SUBJECTS.tenant_append_stream(token(tenant)), SEQUENCER_CONSUMER
                ),
                until=lambda info: info.num_ack_pending == len(flood),
                what=f"{tenant}'s requests delivered to the intake",
            )
        batches = [await intake.next_batch(5.0)]
    finally:
        await intake.stop()
    shape = [_tenant(m) for m in batches[0]]
    assert "globex" in shape and _within(batches[0], BUDGET), shape
    assert sum(Work.of(m).events == 1000 for m in batches[0]) == 1, shape


async def test_a_tenants_rate_is_charged_in_work_tokens(nats_server, nc, js) -> None:
    tenants = parse_tenants("[tenants.acme]\nappend_rate = 1000\nappend_burst = 1000\n[tenants.globex]\n")
    intake = await _queued(nc, js, tenants, {"acme": [_request(events=1000) for _ in range(3)]})
    try:
        first = await intake.next_batch(5.0)
        assert len(first) == 1
        # 1000 tokens spent: the next 1000-event request waits about a second.
        assert await intake.next_batch(0.5) == []
        assert len(await intake.next_batch(2.0)) == 1
    finally:
        await intake.stop()


async def test_the_work_ahead_of_a_request_is_charged_to_its_tenants_rate(nats_server, nc, js) -> None:
    """A gate's work (the lookups of a thousand blobs, say) costs the tokens
    it reports: the request goes on, the tenant's next ones wait for them."""
    tenants = parse_tenants("[tenants.acme]\nappend_rate = 1000\nappend_burst = 1000\n[tenants.globex]\n")

    async def a_thousand_lookups() -> int:
        return 1000

    intake = await _queued(
        nc, js, tenants, {"acme": [_request() for _ in range(3)]}, gate=lambda msg, work: a_thousand_lookups()
    )
    try:
        taken_at = []
        for _ in range(3):
            batch = await _until_taken(intake)
            assert len(batch) == 1
            taken_at.append(time.monotonic())
    finally:
        await intake.stop()
    # The first two pass on the bucket's burst (the second's lookups put it
    # 1000 tokens in debt); the third waits about a second for the debt to
    # be paid (a lower bound: a loaded machine only makes it longer).
    assert taken_at[2] - taken_at[1] >= 0.8, taken_at


async def _until_taken(intake: Intake) -> list[Msg]:
    """The next batch holding anything (a gate's work may end a wait empty)."""
    async with asyncio.timeout(10):
        while not (batch := await intake.next_batch(1.0)):
            pass
    return batch
