"""The stream comparison of `laneledger verify --nats` on a consumer that
answers 503 (no leader: a cluster electing one after a node restart). The
cluster fault test meets this only by chance; here the fetch is made to answer
503 at will, on a real ledger and a real stream (spec/verify.md): a passing
503 is retried and the comparison completes, one that lasts ends in
``stream_timeout`` at the comparison's deadline, never in an exception."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.js.client import JetStreamContext
from nats.js.errors import ServiceUnavailableError

from laneledger.audit.ledger import check_stream
from laneledger.contract.errors import IntegrityError
from laneledger.sdk.client import make_event

EVENTS = 40


@pytest.fixture
async def mirrored_ledger(client, actor, sequencer, tmp_path):
    """A ledger of EVENTS events, all of them on LEDGER_EVENTS."""
    lane = await client.create_lane("acme", "session-1", "run-1", "main", actor_id=actor.id)
    for seq in range(0, EVENTS, 4):
        await client.append(
            lane, seq, [make_event(lane.id, "action.started", actor_id=actor.id) for _ in range(4)]
        )
    deadline = time.monotonic() + 10
    while sequencer.mirror.published < EVENTS:
        assert time.monotonic() < deadline, "the committed stream did not catch up"
        await asyncio.sleep(0.02)
    return tmp_path / "ledger.db"


def answer_503(monkeypatch, times: int | None) -> list[int]:
    """Make the next ``times`` fetches (every one, when None) answer 503."""
    real_fetch = JetStreamContext.PullSubscription.fetch
    refused: list[int] = []

    async def fetch(self, *args, **kwargs):
        if times is None or len(refused) < times:
            refused.append(1)
            raise ServiceUnavailableError(code=503, description="No Responders")
        return await real_fetch(self, *args, **kwargs)

    monkeypatch.setattr(JetStreamContext.PullSubscription, "fetch", fetch)
    return refused


async def test_a_passing_503_is_retried_and_everything_is_compared(mirrored_ledger, js, monkeypatch):
    refused = answer_503(monkeypatch, times=3)
    check = await check_stream(js, mirrored_ledger, timeout=20.0)
    assert len(refused) == 3
    assert check.messages == EVENTS and check.lag == 0


async def test_a_lasting_503_ends_in_stream_timeout_at_the_deadline(mirrored_ledger, js, monkeypatch):
    refused = answer_503(monkeypatch, times=None)
    started = time.monotonic()
    with pytest.raises(IntegrityError) as caught:
        await check_stream(js, mirrored_ledger, timeout=1.5)
    assert caught.value.details["kind"] == "stream_timeout"
    assert caught.value.details["position"] == 1  # nothing could be compared
    assert len(refused) >= 2
    assert 1.5 <= time.monotonic() - started < 10.0
