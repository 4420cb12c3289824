"""The answer of ``/api/v1/verify`` (``handlers/verify.py``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType

from laneledger.contract.model import Hash, Id

from . import Answer, Count


class ErrorBody(Answer, kw_only=True):
    """A typed error's body as ``LedgerError.to_wire`` has it: all four fields
    (``contract.model.ErrorBody`` leaves out its defaults). The document's
    ``ErrorBody`` schema is ``apidoc.error_schemas``'s, the same."""

    code: str
    message: str
    retryable: bool
    details: dict[str, Any]


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
