"""The answer of ``/api/v1/costs`` (``handlers/costs.py``): cost.recorded sums."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from laneledger.contract.model import Id, Timestamp

from . import Answer, Count, Decimal


class Money(Answer, kw_only=True):
    currency: str
    amount: Decimal


class CostTotal(Answer, kw_only=True):
    """A cost sum in one currency, with the tokens and events behind it."""

    currency: str
    amount: Decimal
    events: Count
    input_tokens: Count
    output_tokens: Count


class ModelCost(CostTotal, kw_only=True):
    provider: str
    model: str


class TenantCost(CostTotal, kw_only=True):
    tenant: Id


class CostPoint(Answer, kw_only=True):
    """One point of the series: a (bucket, model, tenant, currency)."""

    start: Timestamp
    model: str
    tenant: Id
    currency: str
    amount: Decimal


class CostReport(Answer, kw_only=True):
    applied_position: Count
    tenant: Id | None
    session_id: Id | None
    run_id: Id | None
    events: Count
    bucket_s: Annotated[int, Meta(ge=1, description="width of a series bucket, as asked or chosen")]
    totals: list[CostTotal]
    by_model: list[ModelCost]
    by_tenant: list[TenantCost]
    series: Annotated[
        list[CostPoint], Meta(description="one point per (bucket, model, tenant, currency), by bucket start")
    ]
