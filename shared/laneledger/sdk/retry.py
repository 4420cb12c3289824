"""One retry policy: exponential backoff with full jitter.

The ``n``-th pause after a failure (``n`` from 0) is drawn uniformly from
``[0, min(cap, first * 2**n))``: "full jitter", so that the producers, the
exporters and the services that lost NATS (or a sequencer) at the same
instant do not all come back at the same instants. What may be retried,
and for how long, is each caller's: an attempt budget (``attempts``, the
first try included), a time budget (``within``: no pause that would end
later than that many seconds after the first try starts), or neither (a
loop that waits out an outage for as long as it lasts, until cancelled).

``retry`` runs one action under a policy; ``Pauses`` is for a loop that
keeps its own shape (a consumer that re-reads, a follower that starts over)
and only needs the next pause. Both take their ``sleep``, ``clock`` and
random draw as arguments, so tests run them without waiting.

In ``laneledger.sdk``, the lowest layer that retries (laneledger.devtools.layers).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[object]]
# Which failures are worth another try: exception classes, or a test.
RetryOn = tuple[type[Exception], ...] | Callable[[Exception], bool]
OnRetry = Callable[[Exception, float], None]  # (the failure, the pause before the next try)

_MAX_DOUBLINGS = 60  # 2**60 times any first pause is past every cap, and still a float


@dataclass(frozen=True, slots=True)
class Backoff:
    """The policy: pauses start below ``first`` seconds and double up to
    ``cap``; at most ``attempts`` tries (None: no limit); no pause ending
    more than ``within`` seconds after the first try (None: no limit)."""

    first: float
    cap: float
    attempts: int | None = None
    within: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap:
            raise ValueError(f"a backoff needs 0 < first <= cap, not first={self.first}, cap={self.cap}")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"a backoff needs at least one attempt, not {self.attempts}")

    def ceiling(self, failures: int) -> float:
        """The longest pause after ``failures + 1`` failures in a row."""
        return min(self.cap, math.ldexp(self.first, min(failures, _MAX_DOUBLINGS)))

    def pause(self, failures: int, draw: Callable[[], float] = random.random) -> float:
        """A pause after ``failures + 1`` failures in a row, with full jitter
        (``draw()`` in ``[0, 1)``)."""
        return draw() * self.ceiling(failures)


def logged(log: logging.Logger, what: str, level: int = logging.WARNING) -> OnRetry:
    """An ``on_retry`` that logs ``cannot <what> yet (<error>); retrying in <pause> s``."""

    def on_retry(exc: Exception, pause: float) -> None:
        log.log(level, "cannot %s yet (%s); retrying in %.1f s", what, exc, pause)

    return on_retry


def _worth_retrying(retry_on: RetryOn, exc: Exception) -> bool:
    return isinstance(exc, retry_on) if isinstance(retry_on, tuple) else retry_on(exc)


async def retry(
    action: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    retry_on: RetryOn,
    on_retry: OnRetry | None = None,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    draw: Callable[[], float] = random.random,
) -> T:
    """``await action()`` until it returns. After a failure ``retry_on``
    accepts, the action is run again after a pause (``on_retry(exc, pause)``
    first: a log line) while the policy's budgets allow; once they do not,
    that failure is raised. Any other exception (cancellation included)
    leaves at once."""
    started = clock()
    failures = 0
    while True:
        try:
            return await action()
        except Exception as exc:
            if not _worth_retrying(retry_on, exc):
                raise
            pause = backoff.pause(failures, draw)
            failures += 1
            if backoff.attempts is not None and failures >= backoff.attempts:
                raise
            if backoff.within is not None and clock() + pause - started > backoff.within:
                raise
            if on_retry is not None:
                on_retry(exc, pause)
        await sleep(pause)


class Pauses:
    """The successive pauses of one policy, for a loop of its own:
    ``await pauses.wait()`` after each failure, ``pauses.reset()`` after a
    success. Its budgets (``attempts``, ``within``) are the loop's to keep."""

    __slots__ = ("_backoff", "_draw", "_sleep", "failures")

    def __init__(
        self, backoff: Backoff, *, sleep: Sleep = asyncio.sleep, draw: Callable[[], float] = random.random
    ) -> None:
        self._backoff = backoff
        self._sleep = sleep
        self._draw = draw
        self.failures = 0  # in a row, since the last reset

    async def wait(self) -> float:
        """Sleep the next pause; returns how long it was."""
        pause = self._backoff.pause(self.failures, self._draw)
        self.failures += 1
        await self._sleep(pause)
        return pause

    def reset(self) -> None:
        self.failures = 0
