"""How the writer reads LEDGER_TXLOG (store/txlogstream.py): a window of
message gets in flight at once, and the next window while the writer applies
the one before (never more), nothing left running when it stops or a get
fails.

Read one message per round trip, a standby cut off from NATS for a few
seconds caught up at about 33 records/s on a loaded machine, slower than the
active sequencer wrote, and never became current again
(tests/fault/test_failover.py, the cut-off sequencer). In process, against a
JetStream whose gets answer only when the test lets them: in flight is
counted, not timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace

import nats.errors
import pytest
from polling import eventually

from laneledger.contract.subjects import Subjects
from laneledger.store.txlog import TxLogUnavailable
from laneledger.store.txlogstream import PART_HEADER, READ_WINDOW, JetStreamTxLog

RECORDS = 2 * READ_WINDOW + 5  # two whole windows and part of a third


def data_of(seq: int) -> bytes:
    return f"record {seq}".encode()


class GatedJetStream:
    """A log of one-part records 1..``last``; a get of a sequence above
    ``held_after`` waits until ``release`` is set, one of ``failing`` raises."""

    def __init__(self, last: int, *, held_after: int = 0, failing: int | None = None) -> None:
        self.last = last
        self.held_after = held_after
        self.failing = failing
        self.release = asyncio.Event()
        self.asked: list[int] = []
        self.in_flight = 0
        self.cancelled = 0
        self.answered = 0

    async def stream_info(self, stream: str) -> SimpleNamespace:
        return SimpleNamespace(state=SimpleNamespace(last_seq=self.last))

    async def get_msg(self, stream: str, seq: int) -> SimpleNamespace:
        self.asked.append(seq)
        self.in_flight += 1
        try:
            if seq == self.failing:
                raise nats.errors.TimeoutError
            if seq > self.held_after:
                await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        self.answered += 1
        return SimpleNamespace(headers={PART_HEADER: "1/1"}, data=data_of(seq))


def reader(js: GatedJetStream) -> JetStreamTxLog:
    return JetStreamTxLog(js, Subjects(), asyncio.get_running_loop(), max_payload=1 << 20)  # type: ignore[arg-type]


async def records_of(txlog: JetStreamTxLog) -> Iterator[tuple[int, bytes]]:
    records, last = await asyncio.to_thread(txlog.read_after, 0)  # as the writer does, off the loop
    assert last == RECORDS
    return iter(records)


async def test_two_windows_of_gets_are_in_flight_at_once_and_no_more_while_the_writer_applies():
    js = GatedJetStream(RECORDS)
    records = await records_of(reader(js))
    first = asyncio.create_task(asyncio.to_thread(next, records))
    # This window's gets and the next one's, all asked before any is answered.
    await eventually(lambda: js.in_flight, until=lambda n: n == 2 * READ_WINDOW, what="two windows in flight")
    assert sorted(js.asked) == list(range(1, 2 * READ_WINDOW + 1))
    js.release.set()
    assert await first == (1, data_of(1))
    # While the writer holds the first window, nothing beyond the next is asked.
    await asyncio.sleep(0.05)
    assert sorted(js.asked) == list(range(1, 2 * READ_WINDOW + 1))
    rest = await asyncio.to_thread(list, records)
    assert [(1, data_of(1)), *rest] == [(seq, data_of(seq)) for seq in range(1, RECORDS + 1)]
    assert sorted(js.asked) == list(range(1, RECORDS + 1))  # each message once


async def test_a_reader_that_stops_early_leaves_no_get_running():
    js = GatedJetStream(RECORDS, held_after=READ_WINDOW)  # the second window never answers
    records = await records_of(reader(js))
    assert await asyncio.to_thread(next, records) == (1, data_of(1))
    await eventually(lambda: js.in_flight, until=lambda n: n == READ_WINDOW, what="the next window asked")
    await asyncio.to_thread(records.close)  # type: ignore[attr-defined]  # the writer stopped reading
    await eventually(lambda: js.in_flight, until=lambda n: n == 0, what="the next window's gets cancelled")
    assert js.cancelled == READ_WINDOW
    assert len(js.asked) == 2 * READ_WINDOW


async def test_a_failed_get_is_the_log_unavailable_and_ends_its_window():
    failing = READ_WINDOW + 3
    js = GatedJetStream(RECORDS, held_after=READ_WINDOW, failing=failing)  # its window-mates wait
    records = await records_of(reader(js))
    with pytest.raises(TxLogUnavailable, match="cannot be read"):
        await asyncio.to_thread(list, records)
    await eventually(lambda: js.in_flight, until=lambda n: n == 0, what="the failed window's gets cancelled")
    # Only the first window was answered; every other get asked (its
    # window-mates, and the next window's if they had started) was cancelled.
    assert js.answered == READ_WINDOW
    assert js.cancelled == len(js.asked) - READ_WINDOW - 1 >= READ_WINDOW - 1
