"""The tail's one budget of read memory (spec/tail.md, "Limits and memory").

Every page of event data a reader holds — a live tail's page between its
read and the end of its write, a history page's piece — is held against
one process-wide count of bytes. A reader reserves the most a page can be
before reading it, keeps what the page came to, and gives it back once the
page is written (the write waits while its client is slow, so a slow client
holds its page, and only its page). So the tail never holds more than
``limit_bytes`` of pages at once, however many readers there are.

One token scope (``limits.scope_key``) may hold at most a quarter of it, so
a tenant whose clients stop reading pins at most that much and others still
read. A reader over the budget waits, first come first served; one that
would wait longer than its ``wait_s`` is refused: 429 ``quota_exceeded``
(``limit: read_memory``) with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from prometheus_client import Gauge

from laneledger.contract.errors import QuotaExceeded
from laneledger.runtime.access import Scope

from .limits import RETRY_AFTER_S, scope_key

READ_MEMORY = "read_memory"
SCOPE_SHARE = 4  # one scope holds at most limit_bytes / SCOPE_SHARE


@dataclass
class Hold:
    """Bytes one reader holds; ``keep`` sets them to what its page came to."""

    budget: ReadBudget
    key: str
    nbytes: int

    def keep(self, nbytes: int) -> None:
        """What the page did not need goes back; a page over its reservation
        (by a few bytes of framing) is counted as it is, without waiting."""
        if nbytes < self.nbytes:
            self.budget._release(self.key, self.nbytes - nbytes)
        elif nbytes > self.nbytes:
            self.budget._take(self.key, nbytes - self.nbytes)
        self.nbytes = nbytes

    def release(self) -> None:
        self.keep(0)


@dataclass
class _Waiter:
    key: str
    nbytes: int
    ready: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class ReadBudget:
    def __init__(self, limit_bytes: int, held: Gauge | None = None) -> None:
        self.limit_bytes = limit_bytes
        self.scope_bytes = limit_bytes // SCOPE_SHARE
        self.used = 0
        self._by_scope: Counter[str] = Counter()
        self._waiters: deque[_Waiter] = deque()
        self._held = held

    @asynccontextmanager
    async def hold(self, scope: Scope, nbytes: int, *, wait_s: float | None) -> AsyncIterator[Hold]:
        """``take`` for the block."""
        held = await self.take(scope, nbytes, wait_s=wait_s)
        try:
            yield held
        finally:
            held.release()

    async def take(self, scope: Scope, nbytes: int, *, wait_s: float | None) -> Hold:
        """Holds ``nbytes`` (at most the scope's share) until released,
        waiting for them first; refused (429) after ``wait_s``, never when None."""
        key = scope_key(scope)
        nbytes = min(nbytes, self.scope_bytes)
        await self._acquire(key, nbytes, wait_s)
        return Hold(self, key, nbytes)

    async def _acquire(self, key: str, nbytes: int, wait_s: float | None) -> None:
        if not self._waiters and self._fits(key, nbytes):
            self._take(key, nbytes)  # the usual case: no future, no queue
            return
        waiter = _Waiter(key, nbytes)
        self._waiters.append(waiter)
        self._grant()
        if waiter.ready.done():
            return
        try:
            async with asyncio.timeout(wait_s):
                await asyncio.shield(waiter.ready)
        except BaseException as exc:
            if waiter.ready.done():
                self._release(key, nbytes)  # granted just as it gave up
            else:
                waiter.ready.cancel()
                self._waiters.remove(waiter)
                self._grant()  # it may have held up the queue
            if isinstance(exc, TimeoutError):
                raise QuotaExceeded(
                    f"the tail holds its read memory ({self.limit_bytes // (1 << 20)} MiB, a quarter per"
                    " token) for other pages; retry after they are sent",
                    limit=READ_MEMORY,
                    limit_bytes=self.limit_bytes,
                    scope_limit_bytes=self.scope_bytes,
                    retry_after_s=RETRY_AFTER_S,
                ) from None
            raise

    def _fits(self, key: str, nbytes: int) -> bool:
        return self.used + nbytes <= self.limit_bytes and self._by_scope[key] + nbytes <= self.scope_bytes

    def _take(self, key: str, nbytes: int) -> None:
        self.used += nbytes
        self._by_scope[key] += nbytes
        if self._held is not None:
            self._held.set(self.used)

    def _release(self, key: str, nbytes: int) -> None:
        self.used -= nbytes
        self._by_scope[key] -= nbytes
        if not self._by_scope[key]:
            del self._by_scope[key]
        if self._held is not None:
            self._held.set(self.used)
        self._grant()

    def _grant(self) -> None:
        """Wake waiters in order while they fit; one that does not fit only
        because its own scope is full does not hold up the others."""
        for waiter in list(self._waiters):
            if self._fits(waiter.key, waiter.nbytes):
                self._waiters.remove(waiter)
                self._take(waiter.key, waiter.nbytes)
                waiter.ready.set_result(None)
            elif self.used + waiter.nbytes > self.limit_bytes:
                return  # the whole budget is short: first come first served
