"""The committed-stream mirror publishes every batch queued while it waited
for the server in one round, with one ack wait: small batches arriving faster
than an ack round trip must not queue up behind each other (the tail would
see every commit late). On a stream that allows them, a round goes out as
atomic batches (ADR-50), one ack each, once it holds ``ATOMIC_FROM`` events;
one by one where it does not, and when it is smaller."""

from __future__ import annotations

import asyncio

import nats
from loop_turns import publishes_between_turns
from polling import eventually

from laneledger.contract.subjects import Subjects
from laneledger.services.sequencer import mirror as mirror_module
from laneledger.services.sequencer.mirror import ACK_EVERY, ATOMIC_FROM, CommittedStreamMirror
from laneledger.services.sequencer.streams import ensure_stream, events_stream_config
from laneledger.store import CommittedRecord
from laneledger.store.atomicbatch import BATCH_ID, BATCH_SEQUENCE, MAX_MESSAGES


def record(position: int) -> CommittedRecord:
    return CommittedRecord(
        position=position,
        event_id=f"e{position}",
        event_type="stream.text_delta",
        tenant="acme",
        session_id="s",
        run_id="r",
        lane_id="lane",
        body=b'{"position": %d}' % position,
    )


async def empty_mirror(
    nc, js, subjects: Subjects, atomic: bool = False, replicas: int = 1
) -> CommittedStreamMirror:
    """A mirror of an empty ledger onto a new committed stream."""
    await ensure_stream(js, events_stream_config(subjects.events_stream, subjects, replicas, atomic=atomic))
    mirror = CommittedStreamMirror(
        nc,
        subjects,
        subjects.events_stream,
        read_after=lambda pos, n: asyncio.sleep(0, []),
        ledger_last_position=lambda: 0,
    )
    await mirror.catch_up()
    return mirror


async def test_batches_queued_during_a_round_go_out_in_the_next_one(nc, js):
    subjects = Subjects()
    mirror = await empty_mirror(nc, js, subjects)
    rounds: list[int] = []  # the position each ack was asked for
    ask = mirror._acks.publish

    async def counting(subject, body, headers):
        rounds.append(int(headers["Nats-Expected-Last-Sequence"]) + 1)
        return await ask(subject, body, headers)

    mirror._acks.publish = counting  # type: ignore[method-assign]
    for first in range(1, 11, 2):  # five batches of two, queued before the mirror runs
        await mirror.submit([record(first), record(first + 1)])

    running = asyncio.create_task(mirror.run())
    try:
        await eventually(lambda: mirror.published, until=lambda n: n == 10, what="10 published", timeout=2)
        assert rounds == [10]
        # And a batch queued later is its own round, in order after them.
        await mirror.submit([record(11)])
        await eventually(lambda: mirror.published, until=lambda n: n == 11, what="11 published", timeout=2)
        assert rounds == [10, 11]
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    info = await js.stream_info(subjects.events_stream)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (11, 1, 11)
    stored = await js.get_msg(subjects.events_stream, 7)
    assert stored.data == b'{"position": 7}'


async def test_each_event_goes_out_on_its_lanes_subject_with_the_subject_cache_at_its_bound(
    nc, js, monkeypatch
):
    """The mirror keeps each lane's subject (bounded, emptied when full):
    over more lanes than the bound, every message still goes out on its own
    lane's subject, hashed tokens included (a tenant name with a space)."""
    monkeypatch.setattr(mirror_module, "_LANE_SUBJECTS", 2)
    subjects = Subjects()
    mirror = await empty_mirror(nc, js, subjects)
    lanes = [("acme", "s", "r", "l1"), ("Acme Corp", "s 2", "r", "l1"), ("acme", "s", "r", "l3")]
    records = [
        CommittedRecord(p, f"e{p}", "stream.text_delta", *lanes[(p - 1) % 3], b'{"position": %d}' % p)
        for p in range(1, 8)
    ]
    await mirror._publish_new(records)
    assert mirror.published == 7 and len(mirror._lane_subjects) <= 2
    for r in records:
        stored = await js.get_msg(subjects.events_stream, r.position)
        assert stored.subject == subjects.events(r.tenant, r.session_id, r.run_id, r.lane_id)
        assert stored.data == r.body


async def stored(js, subjects: Subjects) -> list[tuple[int, bytes]]:
    info = await js.stream_info(subjects.events_stream)
    return [
        (seq, (await js.get_msg(subjects.events_stream, seq)).data)
        for seq in range(info.state.first_seq, info.state.last_seq + 1)
    ]


def spy_on_batches(monkeypatch) -> list[tuple[int, int]]:
    """(expected last sequence, messages) of every atomic batch the mirror sends."""
    sent: list[tuple[int, int]] = []
    publish = mirror_module.publish_batch

    async def spy(nc, messages, *, expected_last_sequence, **kwargs):
        sent.append((expected_last_sequence, len(messages)))
        return await publish(nc, messages, expected_last_sequence=expected_last_sequence, **kwargs)

    monkeypatch.setattr(mirror_module, "publish_batch", spy)
    return sent


async def test_a_round_goes_out_as_atomic_batches_of_at_most_a_thousand_events(nc, js, monkeypatch):
    subjects = Subjects()
    mirror = await empty_mirror(nc, js, subjects, atomic=True)
    assert mirror.atomic
    sent = spy_on_batches(monkeypatch)
    records = [record(p) for p in range(1, MAX_MESSAGES + 501)]
    await mirror._publish_new(records)
    assert sent == [(0, MAX_MESSAGES), (MAX_MESSAGES, 500)]
    assert mirror._acks._sub is None  # no message acknowledged one by one
    assert mirror.published == MAX_MESSAGES + 500
    assert await stored(js, subjects) == [(r.position, r.body) for r in records]


async def test_a_round_smaller_than_atomic_from_goes_one_by_one(nc, js, monkeypatch):
    """A lone request's receipt waits for its round: below ``ATOMIC_FROM``
    events one by one is the faster way (one fsync per event against an
    atomic commit's fixed cost), from it on an atomic batch."""
    subjects = Subjects()
    mirror = await empty_mirror(nc, js, subjects, atomic=True)
    sent = spy_on_batches(monkeypatch)
    small = [record(p) for p in range(1, ATOMIC_FROM)]
    await mirror._publish_new(small)
    assert sent == [] and mirror.atomic and mirror.published == ATOMIC_FROM - 1
    large = [record(p) for p in range(ATOMIC_FROM, 2 * ATOMIC_FROM)]
    await mirror._publish_new(large)
    assert sent == [(ATOMIC_FROM - 1, ATOMIC_FROM)]
    assert await stored(js, subjects) == [(r.position, r.body) for r in small + large]


async def test_a_large_round_one_by_one_waits_for_an_ack_every_ack_every_events(nc, js, monkeypatch):
    """On a stream without atomic batches (a server before 2.12, or one
    that refused them) a 1000-event round goes one by one, ``ACK_EVERY``
    events at a time, each group acknowledged before the next is sent;
    meanwhile another task gets the loop."""
    subjects = Subjects()
    mirror = await empty_mirror(nc, js, subjects, atomic=False)
    assert not mirror.atomic
    asked: list[int] = []  # the position each ack was asked for
    acked_then: list[int] = []  # and what the stream had acknowledged when it was
    ask = mirror._acks.publish

    async def asking(subject, body, headers):
        asked.append(int(headers["Nats-Expected-Last-Sequence"]) + 1)
        acked_then.append(mirror.published)
        return await ask(subject, body, headers)

    mirror._acks.publish = asking  # type: ignore[method-assign]
    records = [record(p) for p in range(1, MAX_MESSAGES + 1)]
    _, steps = await publishes_between_turns(
        nc, monkeypatch, mirror._publish_new(records), publishes=MAX_MESSAGES
    )
    assert len(asked) > 1  # a round of a thousand is never sent in one go
    assert asked == [*range(ACK_EVERY, MAX_MESSAGES, ACK_EVERY), MAX_MESSAGES]
    assert acked_then == [0, *asked[:-1]]  # each group sent once the one before was acknowledged
    assert max(steps) <= ACK_EVERY, steps
    assert mirror.published == MAX_MESSAGES
    assert await stored(js, subjects) == [(r.position, r.body) for r in records]


async def test_on_a_replicated_stream_every_round_is_an_atomic_batch(cluster, monkeypatch):
    """On R3 a message one by one is a consensus round of its own: a small
    round goes as one batch, as large ones do."""
    subjects = Subjects()
    client = await nats.connect(cluster.urls)
    try:
        mirror = await empty_mirror(client, client.jetstream(), subjects, atomic=True, replicas=3)
        sent = spy_on_batches(monkeypatch)
        await mirror._publish_new([record(1), record(2)])
        assert sent == [(0, 2)] and mirror.published == 2
    finally:
        await client.close()


async def test_a_stream_that_stops_allowing_atomic_batches_gets_them_one_by_one(nc, js, monkeypatch):
    subjects = Subjects()
    mirror = await empty_mirror(nc, js, subjects, atomic=True)
    config = (await js.stream_info(subjects.events_stream)).config
    config.allow_atomic = False
    await js.update_stream(config)
    sent = spy_on_batches(monkeypatch)
    first = [record(p) for p in range(1, ATOMIC_FROM + 1)]
    await mirror._publish_new(first)
    assert sent == [(0, ATOMIC_FROM)] and not mirror.atomic  # refused once, then the old path
    later = [record(p) for p in range(ATOMIC_FROM + 1, 2 * ATOMIC_FROM + 1)]
    await mirror._publish_new(later)
    assert sent == [(0, ATOMIC_FROM)]
    assert await stored(js, subjects) == [(r.position, r.body) for r in first + later]


async def test_a_mirror_that_died_between_its_batch_and_the_commit_left_nothing(nc, js):
    """The dead mirror's uncommitted batch is never stored: its successor
    publishes the same positions from the ledger, and they land at them."""
    subjects = Subjects()
    await ensure_stream(js, events_stream_config(subjects.events_stream, subjects, 1, atomic=True))
    for p in (1, 2):  # sent, never committed
        await nc.publish(
            subjects.events("acme", "s", "r", "lane"),
            b"from the dead mirror",
            headers={BATCH_ID: "dead", BATCH_SEQUENCE: str(p)},
        )
    await nc.flush()
    mirror = await empty_mirror(nc, js, subjects, atomic=True)
    await mirror._publish_new([record(1), record(2), record(3)])
    assert await stored(js, subjects) == [(p, record(p).body) for p in (1, 2, 3)]


async def test_an_existing_committed_stream_is_upgraded_to_allow_atomic_batches(js):
    subjects = Subjects()
    await ensure_stream(js, events_stream_config(subjects.events_stream, subjects, 1))
    assert not (await js.stream_info(subjects.events_stream)).config.allow_atomic
    await ensure_stream(js, events_stream_config(subjects.events_stream, subjects, 1, atomic=True))
    assert (await js.stream_info(subjects.events_stream)).config.allow_atomic
    await ensure_stream(js, events_stream_config(subjects.events_stream, subjects, 1))  # never turned off
    assert (await js.stream_info(subjects.events_stream)).config.allow_atomic


async def test_flushed_waits_for_every_queued_round_but_not_for_a_faulted_stream(nc, js):
    """What a stopping sequencer waits for (``Sequencer.stop``): rounds of
    several atomic batches all stored, but nothing once a foreign message
    stops the mirror (it would publish again only when the stream is whole)."""
    subjects = Subjects()
    mirror = await empty_mirror(nc, js, subjects, atomic=True)
    for first in range(1, 2001, 500):  # 2,000 events queued: a round of two batches
        await mirror.submit([record(p) for p in range(first, first + 500)])
    running = asyncio.create_task(mirror.run())
    try:
        await asyncio.wait_for(mirror.flushed(2000), 10)
        assert mirror.published == 2000 and mirror.fault is None
        await js.publish(subjects.events("acme", "s", "r", "lane"), b"foreign")  # at sequence 2001
        await mirror.submit([record(2001)])
        await asyncio.wait_for(mirror.flushed(2001), 5)
        assert mirror.published == 2000 and mirror.fault is not None
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
