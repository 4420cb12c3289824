"""The OpenAPI description of ``korgread``'s routes (merged by ``openapi.py``)."""

from __future__ import annotations

from typing import Any

from laneledger.compat.korg_view import TOOL_CALL_FIELDS
from laneledger.runtime.apidoc import error_responses, json_body, parameter, schema_ref

from .queries import EVENTS_LIMITS, HEADS_LIMITS, SUMMARY_LIMITS

_TEXT = {"type": "string", "minLength": 1, "maxLength": 256}
_POSITION = {"type": "integer", "minimum": 1}
_LEDGER = parameter("ledger", "path", _TEXT, "a tenant; local: the tail's Korg tenant")
_ROOT = parameter("root_seq", "path", _POSITION, "the seq_id of the session's root")
_AGENT = parameter("source_agent", "query", _TEXT, "only this agent's events")
_CAUSE = parameter("triggered_by", "query", _POSITION, "only the events this seq_id triggered")


def _limit(limits: tuple[int, int]) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": 1, "maximum": limits[1], "default": limits[0]}
    return parameter("limit", "query", schema, "at most this many")


def _cursor(direction: str) -> dict[str, Any]:
    return parameter(
        "cursor", "query", {"type": "integer", "minimum": 0}, f"returns seq_id {direction} cursor"
    )


_ERRORS = error_responses(400, 404, 500)

SCHEMAS: dict[str, Any] = {
    "KorgRecord": {
        "type": "object",
        "description": "one committed event as a Korg AgentToolCall record (spec/korg-mapping.md)",
        "required": ["schema_version", "seq_id", *TOOL_CALL_FIELDS, "timestamp", "metadata"],
        "properties": {
            "schema_version": {"const": "1.0"},
            "seq_id": _POSITION,
            "event_type": {"const": "AgentToolCall"},
            "source_agent": {"type": "string"},
            "tool_name": {"type": "string"},
            "args": {},
            "result": {},
            "success": {"type": "boolean"},
            "duration_ms": {"type": "integer", "minimum": 0},
            "triggered_by": {"type": ["integer", "null"]},
            "payload_refs": {"type": "array", "items": {"type": "object"}},
            "timestamp": {"type": "string"},
            "metadata": {"type": "object", "required": ["event_id", "position", "root_seq"]},
        },
    },
    "KorgSkeleton": {
        "type": "object",
        "required": [
            "seq_id",
            "source_agent",
            "tool_name",
            "triggered_by",
            "success",
            "duration_ms",
            "has_payload_refs",
        ],
        "additionalProperties": False,
        "properties": {
            "seq_id": _POSITION,
            "source_agent": {"type": "string"},
            "tool_name": {"type": "string"},
            "triggered_by": {"type": ["integer", "null"]},
            "success": {"type": "boolean"},
            "duration_ms": {"type": "integer", "minimum": 0},
            "has_payload_refs": {"type": "boolean"},
        },
    },
    "KorgPage": {
        "type": "object",
        "required": ["events", "next_cursor", "has_more"],
        "properties": {
            "events": {
                "type": "array",
                "items": {"anyOf": [schema_ref("KorgRecord"), schema_ref("KorgSkeleton")]},
            },
            "next_cursor": {"type": ["integer", "null"]},
            "has_more": {"type": "boolean"},
            "source_agent": {"type": "string", "description": "the agent (agent/recent only)"},
        },
    },
    "KorgHeads": {
        "type": "object",
        "required": ["heads", "next_cursor", "has_more"],
        "properties": {
            "heads": {"type": "array", "items": _POSITION},
            "next_cursor": {"type": ["integer", "null"]},
            "has_more": {"type": "boolean"},
        },
    },
    "KorgSession": {
        "type": "object",
        "required": [
            "root_seq",
            "root_event",
            "total_events",
            "agent_count",
            "agents",
            "first_seq",
            "last_seq",
            "last_event_at",
            "last_event_seq",
            "schema_version",
        ],
        "properties": {
            "root_event": schema_ref("KorgRecord"),
            "agents": {"type": "array", "items": {"type": "string"}},
        },
    },
    "KorgLedgers": {
        "type": "object",
        "required": ["ledgers", "local_tenant"],
        "properties": {
            "ledgers": {"type": "array", "items": {"type": "string"}},
            "local_tenant": {"type": ["string", "null"]},
        },
    },
}


def _get(operation: str, summary: str, parameters: list[dict[str, Any]], schema: str) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation,
            "summary": summary,
            "parameters": parameters,
            "responses": {"200": json_body(schema, summary), **_ERRORS},
        }
    }


PATHS: dict[str, Any] = {
    "/api/korg": _get("korgLedgers", "Korg §8: the ledgers this token may read", [], "KorgLedgers"),
    "/api/korg/{ledger}/ledger/recent": _get(
        "korgRecent",
        "Korg §8: recent events, newest first",
        [_LEDGER, _cursor("<"), _limit(EVENTS_LIMITS), _CAUSE],
        "KorgPage",
    ),
    "/api/korg/{ledger}/ledger/heads": _get(
        "korgHeads",
        "Korg §8: session roots, newest first",
        [_LEDGER, _cursor("<"), _limit(HEADS_LIMITS)],
        "KorgHeads",
    ),
    "/api/korg/{ledger}/agent/recent": _get(
        "korgAgentRecent",
        "Korg §8: one agent's recent events, newest first",
        [_LEDGER, {**_AGENT, "required": True}, _cursor("<"), _limit(EVENTS_LIMITS), _CAUSE],
        "KorgPage",
    ),
    "/api/korg/{ledger}/session/{root_seq}": _get(
        "korgSession", "Korg §8.3: a session's metadata", [_LEDGER, _ROOT], "KorgSession"
    ),
    "/api/korg/{ledger}/session/{root_seq}/summary": _get(
        "korgSessionSummary",
        "Korg §8.3: a session's skeleton, oldest first",
        [_LEDGER, _ROOT, _cursor(">"), _limit(SUMMARY_LIMITS), _AGENT],
        "KorgPage",
    ),
    "/api/korg/{ledger}/session/{root_seq}/events": _get(
        "korgSessionEvents",
        "Korg §8.3: a session's events, oldest first",
        [_LEDGER, _ROOT, _cursor(">"), _limit(EVENTS_LIMITS), _AGENT],
        "KorgPage",
    ),
    "/api/korg/{ledger}/event/{seq_id}": _get(
        "korgEvent",
        "Korg §8: one event",
        [_LEDGER, parameter("seq_id", "path", _POSITION, "its ledger position")],
        "KorgRecord",
    ),
}
