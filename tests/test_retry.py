"""The one retry policy (laneledger.sdk.retry), in-process on a fake clock:
the pauses it draws, what it retries, its attempt and time budgets, the
policies of the loops that use it, pause for pause, and the OpenAI Agents
recorder's rules for what it gives up."""

from __future__ import annotations

import asyncio
import logging

import pytest

from laneledger.adapters.openai_agents_mapping import RECORD_BACKOFF, TraceMapper
from laneledger.contract.errors import InvalidRequest, LedgerError, LedgerUnavailable, TransportError
from laneledger.otel.live import AWAY_BACKOFF
from laneledger.runtime.follow import REREAD_BACKOFF
from laneledger.sdk.client import TRANSPORT_BACKOFF
from laneledger.sdk.retry import Backoff, OnRetry, Pauses, RetryOn, logged, retry
from laneledger.services.checkpoint.anchors import FOLLOW_BACKOFF


class FakeTime:
    """A clock that only the fake sleep moves; every pause is recorded."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


class Flaky:
    """An action that fails ``times`` times with ``exc``, then returns "done"."""

    def __init__(self, times: int, exc: Exception) -> None:
        self.left, self.exc, self.calls = times, exc, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise self.exc
        return "done"


def run(
    flaky: Flaky,
    backoff: Backoff,
    fake: FakeTime,
    *,
    retry_on: RetryOn,
    on_retry: OnRetry | None = None,
    draw: float = 1.0,
) -> str:
    """``retry`` on the fake clock; every draw ``draw`` (1.0: the ceiling)."""
    return asyncio.run(
        retry(
            flaky,
            backoff,
            retry_on=retry_on,
            on_retry=on_retry,
            sleep=fake.sleep,
            clock=fake.clock,
            draw=lambda: draw,
        )
    )


def test_pauses_double_up_to_the_cap_with_full_jitter() -> None:
    backoff = Backoff(first=0.1, cap=2.0)
    assert [backoff.ceiling(n) for n in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert backoff.ceiling(10_000) == 2.0  # no overflow however long the outage
    assert backoff.pause(3, lambda: 0.0) == 0.0
    assert backoff.pause(3, lambda: 0.5) == 0.4
    draws = [backoff.pause(4) for _ in range(200)]  # the real random draw
    assert all(0 <= pause < 1.6 for pause in draws) and len(set(draws)) > 100


def test_a_retryable_failure_is_tried_again_until_it_succeeds() -> None:
    fake = FakeTime()
    flaky = Flaky(3, TransportError("nats away"))
    assert run(flaky, Backoff(first=0.1, cap=0.25), fake, retry_on=(TransportError,)) == "done"
    assert flaky.calls == 4
    assert fake.pauses == [0.1, 0.2, 0.25]


def test_another_failure_leaves_at_once() -> None:
    fake = FakeTime()
    flaky = Flaky(1, InvalidRequest("bad"))
    with pytest.raises(InvalidRequest):
        run(flaky, Backoff(first=0.1, cap=2.0), fake, retry_on=(TransportError,))
    assert flaky.calls == 1 and fake.pauses == []


def retryable(exc: Exception) -> bool:
    return isinstance(exc, LedgerError) and exc.retryable


def test_a_predicate_decides_what_is_retried() -> None:
    fake = FakeTime()
    down = Flaky(2, LedgerUnavailable("down"))
    assert run(down, Backoff(0.1, 2.0), fake, retry_on=retryable) == "done"
    assert down.calls == 3
    refused = Flaky(2, InvalidRequest("bad"))
    with pytest.raises(InvalidRequest):
        run(refused, Backoff(0.1, 2.0), fake, retry_on=retryable)
    assert refused.calls == 1


def test_the_attempt_budget_counts_the_first_try() -> None:
    fake = FakeTime()
    flaky = Flaky(5, TransportError("nats away"))
    with pytest.raises(TransportError, match="nats away"):
        run(flaky, Backoff(first=0.1, cap=2.0, attempts=3), fake, retry_on=(TransportError,))
    assert flaky.calls == 3 and fake.pauses == [0.1, 0.2]
    once = Flaky(1, TransportError("nats away"))
    with pytest.raises(TransportError):
        run(once, Backoff(first=0.1, cap=2.0, attempts=1), fake, retry_on=(TransportError,))
    assert once.calls == 1


def test_no_pause_ends_past_the_time_budget() -> None:
    fake = FakeTime()
    flaky = Flaky(100, TransportError("no responders"))
    with pytest.raises(TransportError):
        run(flaky, Backoff(first=0.05, cap=1.0, within=1.0), fake, retry_on=(TransportError,))
    # 0.05 + 0.1 + 0.2 + 0.4 = 0.75 s; the next, 0.8 s, would end at 1.55 s
    assert fake.pauses == [0.05, 0.1, 0.2, 0.4]
    assert fake.now - 100.0 <= 1.0


def test_each_retry_is_reported_before_its_pause(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTime()
    seen: list[tuple[str, float]] = []
    run(
        Flaky(2, OSError("refused")),
        Backoff(0.2, 10.0),
        fake,
        draw=0.5,
        retry_on=(OSError,),
        on_retry=lambda exc, pause: seen.append((str(exc), pause)),
    )
    assert seen == [("refused", 0.1), ("refused", 0.2)]
    caplog.set_level(logging.INFO)
    logged(logging.getLogger("test.retry"), "send 3 span(s)", logging.INFO)(OSError("refused"), 0.25)
    assert caplog.messages == ["cannot send 3 span(s) yet (refused); retrying in 0.2 s"]


def test_cancellation_is_never_retried() -> None:
    async def scenario() -> int:
        calls = 0

        async def cancelled() -> None:
            nonlocal calls
            calls += 1
            raise asyncio.CancelledError

        with pytest.raises(asyncio.CancelledError):
            await retry(cancelled, Backoff(0.1, 2.0), retry_on=lambda exc: True, sleep=FakeTime().sleep)
        return calls

    assert asyncio.run(scenario()) == 1


def test_pauses_grow_until_reset() -> None:
    fake = FakeTime()
    pauses = Pauses(Backoff(first=0.4, cap=3.0), sleep=fake.sleep, draw=lambda: 1.0)

    async def scenario() -> None:
        for _ in range(5):
            await pauses.wait()
        pauses.reset()
        await pauses.wait()

    asyncio.run(scenario())
    assert fake.pauses == [0.4, 0.8, 1.6, 3.0, 3.0, 0.4]


def test_a_backoff_that_cannot_pause_is_refused() -> None:
    with pytest.raises(ValueError, match="0 < first <= cap"):
        Backoff(first=0.0, cap=1.0)
    with pytest.raises(ValueError, match="0 < first <= cap"):
        Backoff(first=2.0, cap=1.0)
    with pytest.raises(ValueError, match="at least one attempt"):
        Backoff(first=0.1, cap=1.0, attempts=0)


@pytest.mark.parametrize(
    ("backoff", "ceilings"),
    [
        # sdk.client.append and sdk.checkpoints (their attempts: the caller's retries + 1)
        (TRANSPORT_BACKOFF, [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]),
        # runtime.follow: opening the consumer, re-reading a gap that comes back
        (REREAD_BACKOFF, [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]),
        # otel.live: a receiver or NATS away (spec/otel.md: "backoff up to 10 s")
        (AWAY_BACKOFF, [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0]),
        # adapters.openai_agents_mapping (spec/openai-agents.md: "backing off up to 2 s")
        (RECORD_BACKOFF, [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]),
        # services.checkpoint.anchors: following the stream again
        (FOLLOW_BACKOFF, [0.4, 0.8, 1.6, 3.0, 3.0]),
    ],
)
def test_each_loop_keeps_the_bounds_it_had(backoff: Backoff, ceilings: list[float]) -> None:
    assert [backoff.ceiling(n) for n in range(len(ceilings))] == ceilings
    assert backoff.attempts is None and backoff.within is None  # budgets are per call


def recorder_mapper() -> TraceMapper:
    """The OpenAI Agents recorder's mapper; ``retrying`` never touches its client."""
    return TraceMapper(None, tenant="acme", strict_tools=False)  # type: ignore[arg-type]


def test_the_agents_recorder_drops_a_refusal_at_once_and_counts_it() -> None:
    mapper, refused = recorder_mapper(), Flaky(1, InvalidRequest("bad span"))
    assert asyncio.run(mapper.retrying("a span", refused)) is None
    assert refused.calls == 1 and mapper.lost == 1


def test_the_agents_recorder_stops_retrying_once_its_close_deadline_passed() -> None:
    mapper, down = recorder_mapper(), Flaky(5, LedgerUnavailable("down"))
    mapper.give_up_at = 0.0  # closed, and its deadline long past
    assert asyncio.run(mapper.retrying("a span", down)) is None
    assert down.calls == 1 and mapper.lost == 1


def test_the_agents_recorder_lets_a_bug_through() -> None:
    mapper = recorder_mapper()
    with pytest.raises(KeyError):
        asyncio.run(mapper.retrying("a span", Flaky(1, KeyError("trace"))))
    assert mapper.lost == 0
