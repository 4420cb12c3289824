"""The tail's streamed answers (spec/tail.md, "Limits and memory"): history
pages are written a piece at a time, every piece and live-tail page is held
against one process-wide read memory (readers wait for it; a page that would
wait too long is a typed 429), and a client that leaves mid-stream is not an
error — no ERROR record, and the work stops at once."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from polling import eventually
from tail_support import fill, new_lane, wait_applied

from laneledger.runtime.access import Scope
from laneledger.services.tail import pagestream
from laneledger.services.tail.handlers import history
from laneledger.services.tail.limits import LimitSettings

MiB = 1 << 20
TEXT = "t" * 1000  # ~1.3 KB events


def count_pieces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """History reads counted (one a piece), pieces of about 4 KiB."""
    calls: list[int] = []
    page = history.History._page

    def counted(self, *args, **kwargs):
        calls.append(1)
        return page(self, *args, **kwargs)

    monkeypatch.setattr(history, "PIECE_BYTES", 4096)
    monkeypatch.setattr(history.History, "_page", counted)
    return calls


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_history_page_is_streamed_in_pieces_and_is_the_same_page(
    client, actor, start_tail, monkeypatch
):
    tail = await start_tail()
    lane = await new_lane(client, actor)
    positions = await fill(client, lane, actor, 60, payload={"text": TEXT})
    await wait_applied(tail.service, positions[-1])
    path = f"/api/v1/lanes/{lane.id}/events"
    whole = (await tail.api.get(path, params={"limit": "50"})).json()

    pieces = count_pieces(monkeypatch)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{tail.url}{path}", params={"limit": "50"}) as response:
            assert response.status == 200 and response.headers.get("Transfer-Encoding") == "chunked"
            streamed = await response.json()
    assert len(pieces) > 10  # ~3 events a piece
    assert streamed == {**whole, "applied_position": streamed["applied_position"]}
    assert [e["seq"] for e in streamed["events"]] == list(range(1, 51))
    assert streamed["next_cursor"] == 50 and streamed["has_more"] is True

    # The page's bytes bound the page, as when it was built whole.
    monkeypatch.setattr(history, "PAGE_BYTES", 20_000)
    seqs: list[int] = []
    cursor = None
    for _ in range(20):
        params = {"limit": "1000"} | ({} if cursor is None else {"cursor": str(cursor)})
        page = (await tail.api.get(path, params=params)).json()
        assert 0 < len(page["events"]) < 20
        seqs += [e["seq"] for e in page["events"]]
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    assert seqs == list(range(1, 61))
    assert tail.service.read_memory.used == 0


async def test_readers_wait_for_the_read_memory_and_a_page_that_would_wait_too_long_is_a_429(
    client, actor, start_tail, monkeypatch
):
    tail = await start_tail(limits=LimitSettings(read_memory_bytes=16 * MiB))  # 4 MiB a scope
    lane = await new_lane(client, actor)
    positions = await fill(client, lane, actor, 5)
    await wait_applied(tail.service, positions[-1])
    budget = tail.service.read_memory
    others = [await budget.take(Scope(t), 4 * MiB, wait_s=None) for t in ("a", "b", "c", "d")]
    assert budget.used == budget.limit_bytes

    monkeypatch.setattr(pagestream, "BUDGET_WAIT_S", 0.2)
    answer = await tail.api.get(f"/api/v1/lanes/{lane.id}/events")
    assert answer.status == 429 and answer.headers["Retry-After"] == "1"
    assert answer.error["code"] == "quota_exceeded" and answer.error["details"]["limit"] == "read_memory"

    async with tail.api.stream({"session_id": "s1"}) as live:  # waits, holding nothing
        with pytest.raises(TimeoutError):
            await live.next(timeout=0.5)
        for hold in others:
            hold.release()
        frames = [await live.next() for _ in positions]
    assert [f.position for f in frames] == positions
    assert (await tail.api.get(f"/api/v1/lanes/{lane.id}/events")).status == 200


async def test_clients_that_leave_mid_stream_are_not_errors_and_their_work_stops(
    client, actor, start_tail, monkeypatch, caplog
):
    caplog.set_level(logging.DEBUG, logger="laneledger.tail")
    tail = await start_tail()
    lane = await new_lane(client, actor)
    positions = await fill(client, lane, actor, 600, payload={"text": TEXT})
    await wait_applied(tail.service, positions[-1])
    pieces = count_pieces(monkeypatch)
    subscribers = tail.service.metrics.subscribers

    async with aiohttp.ClientSession() as http:
        # A history page of 600 events in ~200 pieces: the client takes 1 KB and leaves.
        async with http.get(f"{tail.url}/api/v1/lanes/{lane.id}/events", params={"limit": "1000"}) as page:
            assert page.status == 200 and await page.content.read(1024)
            page.close()
        # A live tail from position 1: the client takes a frame and leaves, events keep coming.
        async with http.get(f"{tail.url}/api/v1/events", params={"from_position": "0"}) as live:
            assert live.status == 200 and await live.content.readline()
            live.close()
    more = await fill(client, lane, actor, 200, payload={"text": TEXT})
    await wait_applied(tail.service, more[-1])
    await eventually(
        lambda: subscribers._value.get(),
        until=lambda open_tails: open_tails == 0,
        what="the live tail to end once its client left",
    )
    assert len(pieces) < 100, f"{len(pieces)} pieces of ~200 read after the client left"
    assert tail.service.read_memory.used == 0
    assert errors(caplog) == []
    assert any("the client left" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
