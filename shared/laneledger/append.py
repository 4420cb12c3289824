"""Step 0 of the append algorithm: read one append request off the wire.

Everything here depends on the request alone, not on the ledger's state, so
it runs before the writer sees the request (spec/object-model.md, "The append
algorithm"). A failure raises a typed ``RequestError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import to_builtins

from .chain import append_digest
from .errors import InvalidRequest
from .model import MAX_REQUEST_BYTES, AppendRequest, decode
from .subjects import token


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    request: AppendRequest
    # The events as the JSON objects the producer sent (what gets hashed).
    sent: list[dict[str, Any]]
    digest: str
    # The tenant token of the subject it arrived on; None when it did not
    # come through a subject (the writer then skips the tenant-route check).
    tenant_token: str | None = None


def prepare_append(
    data: bytes,
    *,
    tenant_token: str | None = None,
    lane_token: str | None = None,
    max_bytes: int = MAX_REQUEST_BYTES,
) -> PreparedAppend:
    request = decode(data, AppendRequest, max_bytes=max_bytes)
    if lane_token is not None and token(request.lane_id) != lane_token:
        raise InvalidRequest(
            "lane_id does not match the lane token of the subject",
            path="$.lane_id",
            lane_id=request.lane_id,
            subject_lane_token=lane_token,
        )
    sent = [to_builtins(event) for event in request.events]
    return PreparedAppend(request, sent, append_digest(sent), tenant_token)


_ids_decoder = msgspec.json.Decoder(dict[str, Any])


def readable_ids(data: bytes) -> tuple[str | None, str | None]:
    """``(append_id, lane_id)`` of a request that failed to decode, when they
    can still be read, so its rejection receipt can name them."""
    try:
        obj = _ids_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, None
    append_id, lane_id = obj.get("append_id"), obj.get("lane_id")
    return (
        append_id if isinstance(append_id, str) else None,
        lane_id if isinstance(lane_id, str) else None,
    )
