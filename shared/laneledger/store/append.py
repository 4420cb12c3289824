"""Step 0 of the append algorithm: read one append request off the wire.

Everything here depends on the request alone, not on the ledger's state, so
it runs before the writer sees the request (spec/object-model.md, "The append
algorithm"). A failure raises a typed ``RequestError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET, to_builtins

from laneledger.contract.canonical import admits_fast
from laneledger.contract.chain import append_digest
from laneledger.contract.contentref import MAX_REFS_PER_APPEND, refs_in, request_may_reference
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import MAX_REQUEST_BYTES, AppendRequest, decode
from laneledger.contract.redaction import (
    EVENT_IDENTIFIERS,
    REDACTED_FIELDS,
    Redactor,
    redact_event,
    refuse_secret_identifiers,
)
from laneledger.contract.signing import Ed25519PublicKey, check_signature
from laneledger.contract.subjects import token


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    request: AppendRequest
    # The events as the JSON objects the producer sent (what gets hashed).
    sent: list[dict[str, Any]]
    digest: str
    # The tenant token of the subject it arrived on; None when it did not
    # come through a subject (the writer then skips the tenant-route check).
    tenant_token: str | None = None
    # Per event: whether its signature verified under its actor's key, checked
    # here when the key was already known (CPU work kept off the writer
    # thread); None where the writer must check (or nothing to check).
    signatures: tuple[bool | None, ...] = ()
    # Secrets the sequencer redacted from this request, per rule (counted in
    # its metrics); the digest and everything after it see the redacted events.
    redactions: Mapping[str, int] = field(default_factory=dict)
    # Whether ``sent`` takes the canonical fast path (``admits_fast``): walked
    # once here, so the writer hashes each event without walking it again.
    admitted: bool = False
    # False when the request's bytes cannot hold a content reference
    # (``request_may_reference``, certain): its events' payloads are then
    # not searched for one, here or by the sequencer's blob check.
    may_reference: bool = True


def prepare_append(
    data: bytes,
    *,
    tenant_token: str | None = None,
    lane_token: str | None = None,
    max_bytes: int = MAX_REQUEST_BYTES,
    actor_keys: Mapping[str, Ed25519PublicKey] | None = None,
    redactor: Redactor | None = None,
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
    redactions: dict[str, int] = {}
    if redactor is not None and not redactor.surely_clean([_redacted_or_refused(raw) for raw in sent]):
        request, sent, redactions = _redacted(request, sent, redactor)
        for i, raw in enumerate(sent):
            refuse_secret_identifiers(raw, EVENT_IDENTIFIERS, redactor, at=f"$.events[{i}]")
    may_reference = request_may_reference(data)
    if may_reference:
        _bound_refs(sent)
    signatures: tuple[bool | None, ...] = ()
    if actor_keys and any(event.signature is not UNSET for event in request.events):
        signatures = tuple(
            check_signature(raw, key)
            if event.signature is not UNSET and (key := actor_keys.get(event.actor_id))
            else None
            for event, raw in zip(request.events, sent, strict=True)
        )
    admitted = admits_fast(sent)
    return PreparedAppend(
        request,
        sent,
        append_digest(sent, admitted=admitted),
        tenant_token,
        signatures,
        redactions,
        admitted,
        may_reference,
    )


def _redacted_or_refused(event: dict[str, Any]) -> list[Any]:
    """What of ``event`` redaction reads (its free-form fields) and what it
    refuses when secret-shaped (its identifiers), for one ``surely_clean``
    over the whole request: the fast path's test of the joined strings then
    runs once, not once per field group. Clean together means clean apart
    (a hint or secret key in one group is one in the whole); any doubt takes
    the per-event path."""
    return [event.get(name) for name in (*REDACTED_FIELDS, *EVENT_IDENTIFIERS)]


def _bound_refs(sent: list[dict[str, Any]]) -> None:
    """Refuse an append naming more content references than the ledger
    looks up for one (``MAX_REFS_PER_APPEND``), before any is looked up."""
    named = sum(len(refs_in(event.get("payload"))) for event in sent)
    if named > MAX_REFS_PER_APPEND:
        raise InvalidRequest(
            f"the append names {named} content references; at most {MAX_REFS_PER_APPEND} may be "
            "named by one append: send its events in several",
            path="$.events",
            limit="refs_per_append",
            limit_value=MAX_REFS_PER_APPEND,
            found=named,
        )


def _redacted(
    request: AppendRequest, sent: list[dict[str, Any]], redactor: Redactor
) -> tuple[AppendRequest, list[dict[str, Any]], dict[str, int]]:
    """Redaction, before anything is hashed or checked (spec/content.md):
    the events' payload and extensions, in both the sent JSON and the decoded
    request, so no later step sees a secret."""
    counts: dict[str, int] = {}
    events = list(request.events)
    for i, raw in enumerate(sent):
        clean, rules = redact_event(raw, redactor)
        if not rules:
            continue
        sent[i] = clean
        events[i] = msgspec.structs.replace(
            events[i],
            payload=clean["payload"],
            **({"extensions": clean["extensions"]} if "extensions" in clean else {}),
        )
        for rule, n in rules.items():
            counts[rule] = counts.get(rule, 0) + n
    if counts:
        request = msgspec.structs.replace(request, events=events)
    return request, sent, counts


_ids_decoder = msgspec.json.Decoder(dict[str, Any])


def readable_ids(data: bytes) -> tuple[str | None, str | None]:
    """``(append_id, lane_id)`` of a request that failed to decode, when they
    can still be read, so its rejection receipt can name them."""
    try:
        obj = _ids_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None, None
    append_id, lane_id = obj.get("append_id"), obj.get("lane_id")
    return (
        append_id if isinstance(append_id, str) else None,
        lane_id if isinstance(lane_id, str) else None,
    )
