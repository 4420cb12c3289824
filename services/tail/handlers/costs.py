"""``GET /api/v1/costs``: what the ledger's ``cost.recorded`` events add up
to — totals, by model, by tenant, and a series over time — for the console's
cost view and anyone else who wants the figures without folding the stream.

Everything comes from the read model as of one applied position (in the
body). Amounts are decimal strings summed exactly (``COST_SUM``), never mixed
across currencies: each total is per currency. The series is keyed by the
event's ``occurred_at`` (when the producer incurred the cost; a batch
recorded late still lands where it was spent) cut into buckets of
``bucket_s`` seconds; without ``bucket_s`` the bucket is the
smallest of a fixed ladder that keeps the span within ``MAX_BUCKETS``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from concurrent.futures import Executor
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import IntegrityError
from laneledger.contract.vocabulary import COST_SUM
from laneledger.runtime.access import scope_of
from laneledger.runtime.httpjson import json_response

from ..answers.costs import CostPoint, CostReport, CostTotal, ModelCost, TenantCost
from ..api import decode_parameters
from ..feed import Feed
from ..projections import events
from ..queries import MAX_BUCKET_S, CostsQuery
from ..readmodel import ReadModel

MAX_BUCKETS = 120
# Round bucket widths, so the plot's ticks fall on readable times.
LADDER = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400, MAX_BUCKET_S)


class CostPayload(msgspec.Struct):
    provider: str
    model: str
    amount: str
    currency: str
    input_tokens: int = 0
    output_tokens: int = 0


class CostEvent(msgspec.Struct):
    """The fields of a committed ``cost.recorded`` event this report uses."""

    position: int
    tenant: str
    occurred_at: str
    payload: CostPayload


_decode = msgspec.json.Decoder(CostEvent)


class _Mark(msgspec.Struct):
    erased: dict[str, Any] | None = None


_mark = msgspec.json.Decoder(_Mark)


def _erased(body: bytes) -> bool:
    """Whether the event's content is erased (spec/erasure.md): its amount
    is gone with it, so it adds nothing."""
    return b'"erased":' in body and _mark.decode(body).erased is not None


class Tally:
    """A sum of costs in one currency, with the tokens and events behind it."""

    __slots__ = ("amount", "events", "input_tokens", "output_tokens")

    def __init__(self) -> None:
        self.amount = Decimal(0)
        self.events = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def add(self, amount: Decimal, p: CostPayload) -> None:
        self.amount = COST_SUM.add(self.amount, amount)
        self.events += 1
        self.input_tokens += p.input_tokens
        self.output_tokens += p.output_tokens

    def fields(self) -> dict[str, Any]:
        """The answer's fields of this sum (``answers.costs.CostTotal``)."""
        return {
            "amount": str(self.amount),
            "events": self.events,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }


def bucket_for(span_s: float) -> int:
    """The smallest width of ``LADDER`` that cuts ``span_s`` into at most
    ``MAX_BUCKETS`` buckets."""
    for width in LADDER:
        if span_s // width + 1 <= MAX_BUCKETS:
            return width
    return LADDER[-1]


def _epoch(timestamp: str, position: int) -> float:
    try:
        return datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        raise IntegrityError(
            "a cost.recorded event's occurred_at does not parse",
            kind="cost_unreadable",
            position=position,
            field="occurred_at",
        ) from None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Costs:
    def __init__(self, model: ReadModel, readers: Executor, feed: Feed) -> None:
        self._model = model
        self._readers = readers
        self._feed = feed

    def route(self) -> web.RouteDef:
        return web.get("/api/v1/costs", self.costs, name="costs")

    async def costs(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, CostsQuery)
        tenant = scope_of(request).narrow(query.tenant)  # access.py
        selection = events.Selection(tenant, query.session_id, query.run_id)
        applied = self._feed.applied
        report = await asyncio.get_running_loop().run_in_executor(
            self._readers, self._report, selection, query.bucket_s, applied
        )
        return json_response(report)

    def _report(self, selection: events.Selection, bucket_s: int | None, applied: int) -> CostReport:
        records: list[tuple[float, str, str, str, Decimal, CostPayload]] = []
        for position, body in events.bodies_of_types(
            self._model, selection, ("cost.recorded",), upto=applied
        ):
            if _erased(body):
                continue
            try:
                event = _decode.decode(body)
                amount = Decimal(event.payload.amount)
            except (msgspec.DecodeError, msgspec.ValidationError, InvalidOperation) as exc:
                raise IntegrityError(
                    "a cost.recorded event does not read as a cost",
                    kind="cost_unreadable",
                    position=position,
                    reason=str(exc)[:200],
                ) from None
            p = event.payload
            records.append(
                (_epoch(event.occurred_at, position), p.model, event.tenant, p.currency, amount, p)
            )

        totals: dict[str, Tally] = defaultdict(Tally)
        models: dict[tuple[str, str, str], Tally] = defaultdict(Tally)
        tenants: dict[tuple[str, str], Tally] = defaultdict(Tally)
        for _, model, tenant, currency, amount, p in records:
            totals[currency].add(amount, p)
            models[(p.provider, model, currency)].add(amount, p)
            tenants[(tenant, currency)].add(amount, p)

        width = bucket_s
        if width is None:
            times = [r[0] for r in records]
            span = max(times) - min(times) if records else 0.0
            width = bucket_for(span)
        series: dict[tuple[int, str, str, str], Decimal] = defaultdict(Decimal)
        for epoch, model, tenant, currency, amount, _ in records:
            key = (int(epoch // width) * width, model, tenant, currency)
            series[key] = COST_SUM.add(series[key], amount)

        return CostReport(
            applied_position=applied,
            tenant=selection.tenant,
            session_id=selection.session_id,
            run_id=selection.run_id,
            events=len(records),
            bucket_s=width,
            totals=[CostTotal(currency=c, **t.fields()) for c, t in sorted(totals.items())],
            by_model=[
                ModelCost(provider=pr, model=m, currency=c, **t.fields())
                for (pr, m, c), t in sorted(models.items())
            ],
            by_tenant=[
                TenantCost(tenant=te, currency=c, **t.fields()) for (te, c), t in sorted(tenants.items())
            ],
            series=[
                CostPoint(start=_iso(start), model=m, tenant=te, currency=c, amount=str(amount))
                for (start, m, te, c), amount in sorted(series.items())
            ],
        )
