"""``eventually()``: the one way a test waits for something to become true.

::

    applied = await eventually(lambda: tail.feed.applied, until=lambda n: n >= 40, what="the tail at 40")
    info = await eventually(
        lambda: js.stream_info("LEDGER_EVENTS"),
        until=lambda info: info.state.last_seq >= last,
        what=f"LEDGER_EVENTS at position {last}",
    )
    await eventually(lambda: proc.log_text(), until=lambda text: "ready" in text, what="the ready line")

``probe`` is called (and awaited when it returns an awaitable) every
``interval`` seconds until ``until(value)`` holds (by default: until the value
is truthy); the value that satisfied it is returned. Exceptions of the
``retry_on`` types count as "not yet" (a server still starting, an election
under way); any other exception, an ``assert`` in the probe included, ends the
wait at once, so a probe can fail fast when waiting has become pointless (the
process died). When ``timeout`` passes first, the wait fails with an
``AssertionError`` naming ``what`` it waited for and the last value the probe
returned or the last exception it raised.

``eventually_sync`` is the same for code that has no event loop (a helper run
in a thread, a synchronous test).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")

TIMEOUT_S = 30.0  # generous: the machines running the suite are small and shared
INTERVAL_S = 0.05

_NOTHING = object()


async def eventually(
    probe: Callable[[], T | Awaitable[T]],
    *,
    what: str,
    until: Callable[[T], object] = bool,
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``probe`` until ``until`` holds for its value; return that value."""
    deadline = time.monotonic() + timeout
    last: Any = _NOTHING
    while True:
        # A probe that hangs must not outlast the wait.
        bound = asyncio.timeout(max(deadline - time.monotonic(), interval))
        try:
            async with bound:
                value: Any = probe()
                if inspect.isawaitable(value):
                    value = await value
        except TimeoutError as exc:
            if not bound.expired():
                if not isinstance(exc, retry_on):
                    raise
                last = exc
            else:
                raise AssertionError(_timed_out(what, timeout, last, hung=True)) from None
        except retry_on as exc:
            last = exc
        else:
            if until(value):
                return cast(T, value)
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout, last))
        await asyncio.sleep(interval)


def eventually_sync(
    probe: Callable[[], T],
    *,
    what: str,
    until: Callable[[T], object] = bool,
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> T:
    """:func:`eventually` without an event loop (a probe that hangs is not cut short)."""
    deadline = time.monotonic() + timeout
    last: Any = _NOTHING
    while True:
        try:
            value = probe()
        except retry_on as exc:
            last = exc
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout, last))
        time.sleep(interval)


def _timed_out(what: str, timeout: float, last: object, *, hung: bool = False) -> str:
    message = f"timed out after {timeout:g}s waiting for {what}"
    if hung:
        message += "; the last probe was still running"
    if isinstance(last, BaseException):
        return f"{message}; last raised: {last!r}"
    if last is not _NOTHING:
        return f"{message}; last seen: {_short(last)}"
    return message


def _short(value: object, head: int = 500, tail: int = 1500) -> str:
    """``repr(value)``, its middle cut when long (a log's end says the most)."""
    text = repr(value)
    if len(text) <= head + tail:
        return text
    return f"{text[:head]} ... ({len(text) - head - tail} characters) ... {text[-tail:]}"
