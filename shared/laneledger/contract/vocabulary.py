"""The event vocabulary, as constants (normative text: ``spec/vocabulary.json``).

Event types are open strings on the wire. The core vocabulary is closed per
major version: a type outside it must be a namespaced extension
``<kind>.<namespace>.<name>``, which is stored exactly as sent. A test keeps
these constants equal to ``spec/vocabulary.json``.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal
from typing import Any

from laneledger.contract.errors import InvalidPayload, UnknownEventType

SCHEMA_VERSION = "1.0"
VOCABULARY_VERSION = "laneledger-1"

ACTION_TYPES = ("model_call", "tool_call", "compact", "checkpoint")
EFFECT_KINDS = ("none", "read", "write", "unknown")
IDEMPOTENCY_CLASSES = ("not_applicable", "inherent", "keyed", "none", "unknown")

# Agent Ledger schema 1.0, unchanged.
AGENT_LEDGER_EVENT_TYPES = (
    "session.started",
    "session.completed",
    "run.started",
    "run.completed",
    "run.failed",
    "run.cancelled",
    "lane.created",
    "turn.started",
    "turn.completed",
    "turn.failed",
    "action.started",
    "action.completed",
    "action.failed",
    "attempt.requested",
    "attempt.completed",
    "attempt.failed",
    "lane.framework.snapshot.saved",
    "lane.framework.checkpoint.linked",
)

# A session's rewind (spec/history.md): the writer checks its target, the
# history and the read model fold it.
REWOUND = "session.rewound"

# The event-log families the seeds name, as laneledger core types.
LANELEDGER_EVENT_TYPES = (
    "lane.resumed",
    "cost.recorded",
    "hitl.paused",
    "hitl.responded",
    "stream.text_delta",
    "stream.thinking_delta",
    "stream.tool_call_delta",
    "memory.proposed",
    "memory.approved",
    "memory.rejected",
    "memory.conferred",
    "memory.contributed",
    "context.prompt_composed",
    "context.compaction_applied",
    "context.tool_resolved",
    "verification.preflight",
    REWOUND,
)

CORE_EVENT_TYPES = frozenset(AGENT_LEDGER_EVENT_TYPES + LANELEDGER_EVENT_TYPES)

FAMILIES: dict[str, tuple[str, ...]] = {
    "lifecycle": ("session", "run", "lane", "turn", "action", "attempt"),
    "streaming": ("stream",),
    "cost": ("cost",),
    "hitl": ("hitl",),
    "memory": ("memory",),
    "context": ("context",),
    "verification": ("verification",),
    "extension": ("ext",),
}
_FAMILY_OF_KIND = {kind: family for family, kinds in FAMILIES.items() for kind in kinds}

TERMINAL_EVENT_TYPES: dict[str, tuple[str, ...]] = {
    "session": ("session.completed",),
    "run": ("run.completed", "run.failed", "run.cancelled"),
    "turn": ("turn.completed", "turn.failed"),
    "action": ("action.completed", "action.failed"),
    "attempt": ("attempt.completed", "attempt.failed"),
}

EXTENSION_PATTERN = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_-]*(\.[a-z0-9_][a-z0-9_-]*)+$")
RESERVED_NAMESPACES = frozenset({"core", "laneledger"})

# Amounts are decimal strings so a cost hashes the same in every language:
# a binary float would render differently (0.1 vs 0.1000000000000000055…).
DECIMAL_AMOUNT = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]{1,18})?$")
# Decimal's default context keeps 28 significant digits: a sum of amounts with
# 18 fractional digits outgrows that past 10**10 and would round. Every cost
# sum adds in this context instead (``COST_SUM.add(total, amount)``).
COST_SUM = Context(prec=200)


def check_event_type(event_type: str) -> None:
    """Refuse a type that is neither core nor a well-formed extension."""
    if event_type in CORE_EVENT_TYPES:
        return
    if EXTENSION_PATTERN.match(event_type) is None:
        raise UnknownEventType(
            "event type is not in the core vocabulary and is not a namespaced "
            "extension <kind>.<namespace>.<name>",
            event_type=event_type,
        )
    namespace = event_type.split(".", 2)[1]
    if namespace in RESERVED_NAMESPACES:
        raise UnknownEventType(f"namespace {namespace!r} is reserved", event_type=event_type)


def family_of(event_type: str) -> str:
    return _FAMILY_OF_KIND.get(event_type.split(".", 1)[0], "extension")


def is_extension(event_type: str) -> bool:
    return event_type not in CORE_EVENT_TYPES


def _need(payload: dict[str, Any], field: str, kind: type, event_type: str) -> Any:
    if field not in payload:
        raise InvalidPayload(f"{event_type} payload lacks {field!r}", field=f"payload.{field}")
    value = payload[field]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidPayload(
            f"{event_type} payload field {field!r} must be {kind.__name__}",
            field=f"payload.{field}",
        )
    return value


def _optional_count(payload: dict[str, Any], field: str, event_type: str) -> None:
    if field in payload:
        value = _need(payload, field, int, event_type)
        if value < 0:
            raise InvalidPayload(f"{field} must be >= 0", field=f"payload.{field}")


def _optional(payload: dict[str, Any], field: str, kind: type, event_type: str) -> None:
    if field in payload:
        _need(payload, field, kind, event_type)


def check_payload(event_type: str, payload: dict[str, Any]) -> None:
    """Check the payloads the core vocabulary pins down (spec/vocabulary.md,
    ``payloads`` in spec/vocabulary.json)."""
    match event_type:
        case "cost.recorded":
            _need(payload, "provider", str, event_type)
            _need(payload, "model", str, event_type)
            _need(payload, "currency", str, event_type)
            amount = payload.get("amount")
            if not isinstance(amount, str) or DECIMAL_AMOUNT.match(amount) is None:
                raise InvalidPayload(
                    'cost amount must be a decimal string such as "0.0123" '
                    "(no binary floats in hashed cost fields)",
                    field="payload.amount",
                    found=repr(amount),
                )
            for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
                _optional_count(payload, field, event_type)
            _optional(payload, "action_id", str, event_type)
            _optional(payload, "attempt_id", str, event_type)
        case "hitl.paused":
            _need(payload, "pause_id", str, event_type)
            _need(payload, "trigger", str, event_type)
            _optional(payload, "proposed_action", dict, event_type)
        case "hitl.responded":
            _need(payload, "pause_id", str, event_type)
            decision = _need(payload, "decision", str, event_type)
            if decision not in ("approved", "rejected", "edited"):
                raise InvalidPayload(
                    "decision must be approved, rejected or edited",
                    field="payload.decision",
                    found=decision,
                )
            _optional(payload, "edited_action", dict, event_type)
            _optional(payload, "comment", str, event_type)
        case "attempt.requested":
            if "attempt_no" in payload and _need(payload, "attempt_no", int, event_type) < 1:
                raise InvalidPayload("attempt_no must be >= 1", field="payload.attempt_no")
        case "session.rewound":
            _check_rewound(payload, event_type)
        case _:
            return


def _check_rewound(payload: dict[str, Any], event_type: str) -> None:
    _need(payload, "target_event_id", str, event_type)
    target = _need(payload, "target_position", int, event_type)
    as_of = _need(payload, "as_of_position", int, event_type)
    for field, value, low in (("target_position", target, 1), ("as_of_position", as_of, target)):
        if value < low:
            raise InvalidPayload(f"{field} must be >= {low}", field=f"payload.{field}", found=value)
    spans = _need(payload, "invalidated", list, event_type)
    floor = target
    for index, span in enumerate(spans):
        # Ascending, disjoint [first, last] ranges after the target, up to as_of_position.
        if not (
            isinstance(span, list)
            and len(span) == 2
            and all(type(bound) is int for bound in span)
            and floor < span[0] <= span[1] <= as_of
        ):
            raise InvalidPayload(
                "invalidated must be ascending, disjoint [first, last] position ranges"
                " after target_position and up to as_of_position",
                field="payload.invalidated",
                index=index,
                found=repr(span),
            )
        floor = span[1]
    count = _need(payload, "invalidated_count", int, event_type)
    if not len(spans) <= count <= sum(last - first + 1 for first, last in spans):
        raise InvalidPayload(
            "invalidated_count does not fit the invalidated ranges",
            field="payload.invalidated_count",
            found=count,
        )
    _optional(payload, "reason", str, event_type)


def cost_amount(payload: dict[str, Any]) -> Decimal:
    """The exact amount of a checked ``cost.recorded`` payload."""
    return Decimal(payload["amount"])
