"""The answer of ``/api/v1/verify`` (``handlers/verify.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from laneledger.contract.model import ErrorBody, Hash, Id

from . import Answer, Count

VerifyScope = Literal["lane", "session", "ledger", "tenant"]


class VerifyReport(Answer, kw_only=True):
    scope: Annotated[
        VerifyScope,
        Meta(description="tenant: a tenant token's whole-ledger verify, its own lanes"),
    ]
    lane_id: Id | UnsetType = UNSET
    session_id: Id | UnsetType = UNSET
    tenant: Id | UnsetType = UNSET
    intact: bool
    events: Count
    lanes: Count
    last_position: Count
    applied_position: Count
    keyed: Annotated[bool, Meta(description="verified with an HMAC key")]
    lane_tips: dict[str, Hash] | UnsetType = UNSET
    fault: Annotated[
        ErrorBody | None,
        Meta(
            description="chain_fault (details: kind broken_link, content_tampered or not_chained; "
            "position, lane_id, seq, field, expected, found) or integrity_failure (kind row_mismatch)"
        ),
    ]
