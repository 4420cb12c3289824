"""StreamFollower over positions an erasure deleted from LEDGER_EVENTS: each
is handed out in order from its erased copy on LEDGER_ERASED, as if the
stream held it; a position with no copy is still a gap (runtime/follow.py).
The streams are made as the sequencer makes them (services/sequencer/streams.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from laneledger.contract.subjects import Subjects
from laneledger.runtime.follow import StreamFollower, StreamGap
from laneledger.services.sequencer.streams import erased_stream_config, events_stream_config
from laneledger.store.erasedcopies import publish_erased_event, shred

SUBJECTS = Subjects()
EVENTS = SUBJECTS.events_stream


async def ledger_streams(js, last: int, *, erased: range = range(0), deleted: range = range(0)) -> None:
    """Events 1..``last`` (body ``b"<n>"``); each of ``erased`` copied as
    ``b"erased <n>"`` on LEDGER_ERASED, then it and each of ``deleted``
    (copied or not) deleted from LEDGER_EVENTS."""
    await js.add_stream(events_stream_config(EVENTS, SUBJECTS, 1))
    await js.add_stream(erased_stream_config(SUBJECTS, 1))
    for n in range(1, last + 1):
        await js.publish(SUBJECTS.events("t", "s", "r", "l"), str(n).encode(), stream=EVENTS)
    for n in erased:
        await publish_erased_event(js, SUBJECTS, n, f"erased {n}".encode(), timeout_s=5)
    for n in {*erased, *deleted}:
        assert await shred(js, EVENTS, n)


async def read_until(
    follower: StreamFollower, last: int, max_msgs: int | None = None
) -> list[tuple[int, bytes]]:
    """What the follower hands out through position ``last``; each batch's
    erased positions checked against ``from_erased``."""
    got: list[tuple[int, bytes]] = []
    while follower.position < last:
        batch = await follower.read(max_msgs)
        assert max_msgs is None or len(batch) <= max_msgs
        assert follower.from_erased == {p for p, body in batch if body.startswith(b"erased")}
        got.extend(batch)
    return got


def bodies(got: list[tuple[int, bytes]]) -> list[tuple[int, str]]:
    return [(p, body.decode()) for p, body in got]


async def test_a_hole_with_erased_copies_is_read_from_them_in_order(nc, js):
    await ledger_streams(js, 5, erased=range(2, 4))
    follower = StreamFollower(nc, name="erased", on_gap="fail")
    await follower.open(after=0)
    try:
        got = await asyncio.wait_for(read_until(follower, 5), 10)
    finally:
        await follower.close()
    assert bodies(got) == [(1, "1"), (2, "erased 2"), (3, "erased 3"), (4, "4"), (5, "5")]


async def test_a_long_hole_from_position_1_is_read_in_bounded_batches(nc, js):
    # 150 erased positions: more than are looked up at once, more than a read asks for.
    await ledger_streams(js, 152, erased=range(1, 151))
    follower = StreamFollower(nc, name="long", on_gap="fail")
    await follower.open(after=0)
    try:
        got = await asyncio.wait_for(read_until(follower, 152, max_msgs=40), 20)
    finally:
        await follower.close()
    assert bodies(got) == [(n, f"erased {n}") for n in range(1, 151)] + [(151, "151"), (152, "152")]


async def test_a_position_without_a_copy_is_a_gap_after_the_copies_before_it(nc, js):
    await ledger_streams(js, 6, erased=range(2, 4), deleted=range(4, 5))
    follower = StreamFollower(nc, name="gap", on_gap="fail")
    await follower.open(after=0)
    got: list[tuple[int, bytes]] = []
    try:
        with pytest.raises(StreamGap) as gap:
            await asyncio.wait_for(read_until_gap(follower, got), 10)
    finally:
        await follower.close()
    assert bodies(got) == [(1, "1"), (2, "erased 2"), (3, "erased 3")]
    assert (gap.value.position, gap.value.sequence) == (4, 5)


async def read_until_gap(follower: StreamFollower, got: list[tuple[int, bytes]]) -> None:
    while True:
        got.extend(await follower.read())


async def test_a_service_rereads_a_position_without_a_copy_and_never_skips_it(nc, js, caplog):
    await ledger_streams(js, 6, erased=range(2, 4), deleted=range(4, 5))
    follower = StreamFollower(nc, name="service")  # on_gap="reread"
    got: list[tuple[int, bytes]] = []
    await follower.open(after=0)
    try:
        deadline = time.monotonic() + 20
        while caplog.text.count("gap after position 3") < 3:  # re-read, paced, never skipped
            assert time.monotonic() < deadline, bodies(got)
            got.extend(await follower.read())
    finally:
        await follower.close()
    assert bodies(got) == [(1, "1"), (2, "erased 2"), (3, "erased 3")]
    assert follower.position == 3
