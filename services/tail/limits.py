"""Per-token limits on the tail's costly requests (spec/tail.md, "Limits").

Two kinds, each counted per token scope (a tenant's tokens share its
count; the operator token has its own; an open tail is one scope):

* ``tails``: open live tails (``GET /api/v1/events``);
* ``reads``: expensive reads in flight (session proofs, verification,
  history pages).

Over the limit the request is refused at once, before any work or header,
with 429 ``quota_exceeded`` (``details.limit`` names which, with the limit
and ``retry_after_s``, also sent as ``Retry-After``): nothing is queued, so
a tenant that opens too many costs the tail nothing more, and it never
waits behind another tenant's. Together with each request's own buffer (a
page) this bounds the tail's memory (spec/tail.md, "Memory").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import Gauge

from laneledger.contract.errors import QuotaExceeded
from laneledger.runtime.access import Scope, scope_of

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TAILS = "live_tails"
READS = "expensive_reads"
RETRY_AFTER_S = 1


@dataclass(frozen=True)
class LimitSettings:
    tails_per_token: int = 32  # open live tails
    reads_per_token: int = 4  # session proofs, verifications, history pages in flight
    read_memory_bytes: int = 256 << 20  # pages held at once, all readers together (budget.py)


def scope_key(scope: Scope) -> str:
    """Whose count a request is: its tenant's, the operator's, or the open tail's."""
    if scope.tenant is not None:
        return f"tenant:{scope.tenant}"
    return "operator" if scope.operator else "open"


class Limiter:
    """One kind of limit: at most ``limit`` at once per scope."""

    def __init__(self, kind: str, limit: int, in_flight: Gauge | None = None) -> None:
        self.kind = kind
        self.limit = limit
        self._in_flight = in_flight
        self._held: Counter[str] = Counter()

    @contextmanager
    def slot(self, scope: Scope) -> Iterator[None]:
        """Holds one of the scope's slots for the block; 429 when none is free."""
        key = scope_key(scope)
        if self._held[key] >= self.limit:
            raise QuotaExceeded(
                f"at most {self.limit} {self.kind.replace('_', ' ')} at once per token; retry after one ends",
                limit=self.kind,
                limit_value=self.limit,
                tenant=scope.tenant,
                retry_after_s=RETRY_AFTER_S,
            )
        self._held[key] += 1
        if self._in_flight is not None:
            self._in_flight.inc()
        try:
            yield
        finally:
            if self._in_flight is not None:
                self._in_flight.dec()
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]  # no entry left behind per scope ever seen

    def guard(self, handler: Handler) -> Handler:
        """``handler`` holding one of its request's scope's slots while it runs."""

        async def limited(request: web.Request) -> web.StreamResponse:
            with self.slot(scope_of(request)):
                return await handler(request)

        return limited


class ReadLimits:
    """The tail's two limits; open tails are counted by the SSE handler's own
    gauge (``laneledger_tail_subscribers``), expensive reads by ``reads_in_flight``."""

    def __init__(self, settings: LimitSettings, reads_in_flight: Gauge) -> None:
        self.tails = Limiter(TAILS, settings.tails_per_token)
        self.reads = Limiter(READS, settings.reads_per_token, reads_in_flight)
