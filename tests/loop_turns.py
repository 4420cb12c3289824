"""How many publishes a coroutine makes between two turns of another task
on the event loop: what the tests of a large atomic batch and of a large
round one by one check (neither may hold the loop for a whole round)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


async def publishes_between_turns(
    nc: Any, monkeypatch: pytest.MonkeyPatch, publishing: Awaitable[T], *, publishes: int
) -> tuple[T, list[int]]:
    """Await ``publishing`` (which makes ``publishes`` calls of
    ``nc.publish``) while another task counts them each time it gets the
    loop; its result, and the publishes made between two turns."""
    sent = 0
    publish = nc.publish

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal sent
        sent += 1
        return await publish(*args, **kwargs)

    monkeypatch.setattr(nc, "publish", counted)
    seen: list[int] = []  # publishes made each time the other task got the loop

    async def other_task() -> None:
        while sent < publishes - 1:
            seen.append(sent)
            await asyncio.sleep(0)

    watching = asyncio.create_task(other_task())
    result = await publishing
    await watching
    return result, [b - a for a, b in itertools.pairwise([0, *seen, sent])]
