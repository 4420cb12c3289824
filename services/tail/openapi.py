"""The OpenAPI 3.1 document of the tail's HTTP API, served at
``/api/v1/openapi.json``. ``tests/test_tail_openapi.py`` validates it and the
tests check the tail's responses against it."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from laneledger.runtime.access import ACCESS_TOKEN_PARAMETER
from laneledger.runtime.apidoc import (
    JSON_MEDIA,
    document,
    error_responses,
    json_body,
    ops_paths,
    parameter,
    schema_ref,
    secure_guarded,
)
from laneledger.runtime.httpjson import json_response

from . import korgreaddoc, timeline, transparency
from .owners import TENANT_PARAMETER_DOC


def _obj(required: list[str], props: dict[str, Any], *, extra: bool = False) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props, "additionalProperties": extra}


_ID = {"type": "string", "minLength": 1, "maxLength": 256}
_NULLABLE_ID = {"type": ["string", "null"], "minLength": 1, "maxLength": 256}
_HASH = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_TS = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"}
_POS = {"type": "integer", "minimum": 1}
_COUNT = {"type": "integer", "minimum": 0}
_DECIMAL = {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$"}


def _tally(**keys: dict[str, Any]) -> dict[str, Any]:
    """A cost sum in one currency, keyed by ``keys`` (costs.py)."""
    return _obj(
        [*keys, "amount", "events", "input_tokens", "output_tokens"],
        {**keys, "amount": _DECIMAL, "events": _COUNT, "input_tokens": _COUNT, "output_tokens": _COUNT},
    )


SCHEMAS: dict[str, Any] = {
    "ErrorBody": _obj(
        ["code", "message", "retryable", "details"],
        {
            "code": {"type": "string", "description": "stable code, spec/errors.md"},
            "message": {"type": "string"},
            "retryable": {"type": "boolean"},
            "details": {"type": "object"},
        },
    ),
    "Error": _obj(["error"], {"error": schema_ref("ErrorBody")}),
    "Status": _obj(["status"], {"status": {"type": "string"}}),
    "CommittedEvent": _obj(
        [
            "schema_version",
            "id",
            "lane_id",
            "subject_id",
            "event_type",
            "actor_id",
            "occurred_at",
            "payload",
            "extensions",
            "tenant",
            "session_id",
            "run_id",
            "seq",
            "position",
            "append_id",
            "committed_at",
            "prev_hash",
            "entry_hash",
        ],
        {
            "schema_version": {"type": "string"},
            "id": _ID,
            "lane_id": _ID,
            "subject_id": _ID,
            "event_type": {"type": "string"},
            "actor_id": _ID,
            "occurred_at": _TS,
            "payload": {"type": "object"},
            "extensions": {"type": "object"},
            "causation_id": _ID,
            "tenant": _ID,
            "session_id": _ID,
            "run_id": _ID,
            "seq": _POS,
            "position": _POS,
            "append_id": _ID,
            "committed_at": _TS,
            "prev_hash": _HASH,
            "entry_hash": _HASH,
            # present when the actor signs (spec/object-model.md, "Signed producers")
            "signature": {"type": "string", "pattern": "^[0-9a-f]{128}$"},
        },
    ),
    "Lane": _obj(
        ["id", "tenant", "session_id", "run_id", "name", "kind", "created_at", "last_seq", "head_hash"],
        {
            "id": _ID,
            "tenant": _ID,
            "session_id": _ID,
            "run_id": _ID,
            "name": _ID,
            "kind": {"type": "string"},
            "parent_lane_id": _NULLABLE_ID,
            "actor_id": _NULLABLE_ID,
            "created_at": _TS,
            "last_seq": _COUNT,
            "head_hash": _HASH,
            "forked_from": {"oneOf": [schema_ref("ForkOrigin"), {"type": "null"}]},
        },
    ),
    "ForkOrigin": _obj(
        ["lane_id", "seq", "position", "event_id", "entry_hash"],
        {"lane_id": _ID, "seq": _POS, "position": _POS, "event_id": _ID, "entry_hash": _HASH},
    ),
    "CausalNode": _obj(
        [
            "position",
            "event_id",
            "lane_id",
            "seq",
            "actor_id",
            "event_type",
            "role",
            "name",
            "summary",
            "cause",
            "cause_id",
            "invalidated",
        ],
        {
            "position": _POS,
            "event_id": _ID,
            "lane_id": _ID,
            "seq": _POS,
            "actor_id": _ID,
            "event_type": {"type": "string"},
            "role": {"enum": ["prompt", "inference", "tool", "rewind", "other"]},
            "name": {"type": "string", "description": "tool or model name, else the event type"},
            "summary": {"type": "string", "maxLength": 120},
            "cause": {
                "type": ["integer", "null"],
                "minimum": 1,
                "description": "position of the event causation_id names; null: a root",
            },
            "cause_id": _NULLABLE_ID,
            "invalidated": {
                "type": "boolean",
                "description": "a session.rewound event of the session covers it",
            },
        },
    ),
    "CausalSpine": _obj(
        [
            "lane_id",
            "events",
            "first_position",
            "last_position",
            "first_cause",
            "spawned_by",
            "name",
            "kind",
            "parent_lane_id",
            "actor_id",
            "forked_from",
        ],
        {
            "lane_id": _ID,
            "events": _COUNT,
            "first_position": _POS,
            "last_position": _POS,
            "first_cause": {
                "type": ["integer", "null"],
                "minimum": 1,
                "description": "position the spine's first event points at: where a "
                "sub-agent hangs off its parent (Korg §2b)",
            },
            "spawned_by": {
                "type": ["integer", "null"],
                "minimum": 1,
                "description": "position of the spawning tool call, when the "
                "spine's first event names it (laneledger.sdk.spine)",
            },
            "name": _NULLABLE_ID,
            "kind": {"type": ["string", "null"]},
            "parent_lane_id": _NULLABLE_ID,
            "actor_id": _NULLABLE_ID,
            "forked_from": {"oneOf": [schema_ref("ForkOrigin"), {"type": "null"}]},
        },
    ),
    "CausalRewind": _obj(
        ["position", "actor_id", "target_position", "invalidated", "invalidated_count"],
        {
            "position": _POS,
            "actor_id": _ID,
            "target_position": _POS,
            "invalidated": {
                "type": "array",
                "items": {"type": "array", "items": _POS, "minItems": 2, "maxItems": 2},
            },
            "invalidated_count": _COUNT,
        },
    ),
    "CausalTree": _obj(
        [
            "session_id",
            "applied_position",
            "structure_complete",
            "exclude_invalidated",
            "spines",
            "rewinds",
            "roots",
            "nodes",
            "next_cursor",
            "has_more",
        ],
        {
            "session_id": _ID,
            "applied_position": _COUNT,
            "structure_complete": {
                "type": "boolean",
                "description": "always true: the structure is read page by "
                "page (load_structure); kept for the clients "
                "that check it",
            },
            "exclude_invalidated": {"type": "boolean"},
            "spines": {"type": "array", "items": schema_ref("CausalSpine")},
            "rewinds": {"type": "array", "items": schema_ref("CausalRewind")},
            "roots": {"type": "array", "items": _POS, "description": "this page's nodes without a cause"},
            "nodes": {"type": "array", "items": schema_ref("CausalNode")},
            "next_cursor": {"type": ["integer", "null"]},
            "has_more": {"type": "boolean"},
        },
    ),
    "Turn": _obj(
        ["id", "lane_id", "turn_no", "created_at"],
        {"id": _ID, "lane_id": _ID, "turn_no": _POS, "created_at": _TS},
    ),
    "Action": _obj(
        ["id", "lane_id", "turn_id", "action_type", "name", "effect", "idempotency", "created_at"],
        {
            "id": _ID,
            "lane_id": _ID,
            "turn_id": _ID,
            "action_type": {"type": "string"},
            "name": {"type": "string"},
            "effect": {"type": "string", "description": "none, read, write, unknown"},
            "idempotency": {
                "type": "string",
                "description": "not_applicable, inherent, keyed, none, unknown",
            },
            "idempotency_key": {"type": ["string", "null"]},
            "created_at": _TS,
        },
    ),
    "Attempt": _obj(
        ["id", "lane_id", "action_id", "attempt_no", "created_at"],
        {"id": _ID, "lane_id": _ID, "action_id": _ID, "attempt_no": _POS, "created_at": _TS},
    ),
    "Page": _obj(
        ["direction", "events", "next_cursor", "has_more", "applied_position"],
        {
            "direction": {"enum": ["forward", "backward"]},
            "events": {"type": "array", "items": schema_ref("CommittedEvent")},
            "next_cursor": {
                "type": ["integer", "null"],
                "description": "key of the page's last event; null for an empty page",
            },
            "has_more": {"type": "boolean"},
            "applied_position": _COUNT,
        },
        extra=True,
    ),
    "LaneEvents": {
        "allOf": [
            schema_ref("Page"),
            _obj(
                ["lane_id"],
                {
                    "lane_id": _ID,
                    "with_origin": {"const": True, "description": "present when with_origin=true"},
                    "origins": {
                        "type": "array",
                        "items": schema_ref("ForkOrigin"),
                        "description": "with_origin: the fork points, the lane's own first",
                    },
                },
                extra=True,
            ),
        ]
    },
    "Structure": _obj(
        ["lanes", "turns", "actions", "attempts", "structure_complete"],
        {
            "structure_complete": {
                "type": "boolean",
                "description": "always true: the structure is read page by page "
                "(load_structure); kept for the clients that check it",
            },
            "lanes": {"type": "array", "items": schema_ref("Lane")},
            "turns": {"type": "array", "items": schema_ref("Turn")},
            "actions": {"type": "array", "items": schema_ref("Action")},
            "attempts": {"type": "array", "items": schema_ref("Attempt")},
        },
        extra=True,
    ),
    "Session": {
        "allOf": [
            schema_ref("Page"),
            schema_ref("Structure"),
            _obj(
                ["session_id", "tenant", "run_ids"],
                {"session_id": _ID, "tenant": _ID, "run_ids": {"type": "array", "items": _ID}},
                extra=True,
            ),
        ]
    },
    "Run": {
        "allOf": [
            schema_ref("Page"),
            schema_ref("Structure"),
            _obj(["session_id", "run_id"], {"session_id": _ID, "run_id": _ID}, extra=True),
        ]
    },
    "UnresolvedAttempt": _obj(
        [
            "attempt_id",
            "attempt",
            "action",
            "requested_position",
            "requested_event",
            "reconcile_before_retry",
        ],
        {
            "attempt_id": _ID,
            "attempt": {"oneOf": [schema_ref("Attempt"), {"type": "null"}]},
            "action": {"oneOf": [schema_ref("Action"), {"type": "null"}]},
            "requested_position": _POS,
            "requested_event": schema_ref("CommittedEvent"),
            "reconcile_before_retry": {
                "type": "boolean",
                "description": "true when the action may have had an effect that a retry would "
                "repeat (effect write/unknown, idempotency not inherent/keyed, "
                "or the action is unknown)",
            },
        },
    ),
    "Inspection": _obj(
        [
            "session_id",
            "run_id",
            "applied_position",
            "structure_complete",
            "terminal_events",
            "linked_checkpoints",
            "unresolved_attempts",
        ],
        {
            "session_id": _ID,
            "run_id": _ID,
            "applied_position": _COUNT,
            "structure_complete": {
                "type": "boolean",
                "description": "always true: the structure is read page by page (load_structure)",
            },
            "terminal_events": {"type": "array", "items": schema_ref("CommittedEvent")},
            "linked_checkpoints": {"type": "array", "items": schema_ref("CommittedEvent")},
            "unresolved_attempts": {"type": "array", "items": schema_ref("UnresolvedAttempt")},
        },
    ),
    "VerifyReport": _obj(
        ["scope", "intact", "events", "lanes", "last_position", "applied_position", "keyed", "fault"],
        {
            "scope": {
                "enum": ["lane", "session", "ledger", "tenant"],
                "description": "tenant: a tenant token's whole-ledger verify, its own lanes",
            },
            "lane_id": _ID,
            "session_id": _ID,
            "tenant": _ID,
            "intact": {"type": "boolean"},
            "events": _COUNT,
            "lanes": _COUNT,
            "last_position": _COUNT,
            "applied_position": _COUNT,
            "keyed": {"type": "boolean", "description": "verified with an HMAC key"},
            "lane_tips": {"type": "object", "additionalProperties": _HASH},
            "fault": {
                "oneOf": [{"type": "null"}, schema_ref("ErrorBody")],
                "description": "chain_fault (details: kind broken_link, content_tampered or "
                "not_chained; position, lane_id, seq, field, expected, found) "
                "or integrity_failure (kind row_mismatch)",
            },
        },
    ),
    "SessionSummary": _obj(
        [
            "tenant",
            "session_id",
            "first_position",
            "last_position",
            "first_event_at",
            "last_event_at",
            "events",
            "runs",
            "lanes",
            "status",
            "attempts_open",
            "pauses_pending",
            "cost",
        ],
        {
            "tenant": _ID,
            "session_id": _ID,
            "first_position": _COUNT,
            "last_position": _COUNT,
            "first_event_at": {"type": "string", "description": "committed_at of its first event"},
            "last_event_at": {"type": "string", "description": "committed_at of its last event"},
            "events": _COUNT,
            "runs": _COUNT,
            "lanes": _COUNT,
            "status": {
                "enum": ["running", "completed", "failed"],
                "description": "failed once a run failed; completed once the session completed or "
                "every run ended; else running",
            },
            "attempts_open": {**_COUNT, "description": "attempts requested and not settled"},
            "pauses_pending": {**_COUNT, "description": "hitl.paused without its hitl.responded"},
            "cost": {
                "type": "array",
                "items": _obj(
                    ["currency", "amount"], {"currency": {"type": "string"}, "amount": {"type": "string"}}
                ),
            },
        },
    ),
    "EventRef": _obj(
        ["position", "event_id", "event_type", "lane_id", "seq", "session_id"],
        {
            "position": _COUNT,
            "event_id": _ID,
            "event_type": _ID,
            "lane_id": _ID,
            "seq": _COUNT,
            "session_id": _ID,
        },
    ),
    "EventCausation": _obj(
        ["position", "event_id", "causation_id", "cause", "caused", "more_caused"],
        {
            "position": _COUNT,
            "event_id": _ID,
            "causation_id": _NULLABLE_ID,
            "cause": {"anyOf": [schema_ref("EventRef"), {"type": "null"}]},
            "caused": {"type": "array", "items": schema_ref("EventRef")},
            "more_caused": {"type": "boolean"},
        },
    ),
    "SessionPage": _obj(
        ["applied_position", "sessions", "next_before"],
        {
            "applied_position": _COUNT,
            "sessions": {"type": "array", "items": schema_ref("SessionSummary")},
            "next_before": {
                "type": ["integer", "null"],
                "description": "pass as before= for the next page; null on the last",
            },
        },
    ),
    "CostReport": _obj(
        [
            "applied_position",
            "tenant",
            "session_id",
            "run_id",
            "events",
            "bucket_s",
            "totals",
            "by_model",
            "by_tenant",
            "series",
        ],
        {
            "applied_position": _COUNT,
            "tenant": _NULLABLE_ID,
            "session_id": _NULLABLE_ID,
            "run_id": _NULLABLE_ID,
            "events": _COUNT,
            "bucket_s": {
                "type": "integer",
                "minimum": 1,
                "description": "width of a series bucket, as asked or chosen",
            },
            "totals": {"type": "array", "items": _tally(currency={"type": "string"})},
            "by_model": {
                "type": "array",
                "items": _tally(
                    provider={"type": "string"}, model={"type": "string"}, currency={"type": "string"}
                ),
            },
            "by_tenant": {"type": "array", "items": _tally(tenant=_ID, currency={"type": "string"})},
            "series": {
                "type": "array",
                "items": _obj(
                    ["start", "model", "tenant", "currency", "amount"],
                    {
                        "start": _TS,
                        "model": {"type": "string"},
                        "tenant": _ID,
                        "currency": {"type": "string"},
                        "amount": _DECIMAL,
                    },
                ),
                "description": "one point per (bucket, model, tenant, currency), by bucket start",
            },
        },
    ),
    "Money": _obj(["currency", "amount"], {"currency": {"type": "string"}, "amount": _DECIMAL}),
    "Span": _obj(
        [
            "id",
            "lane_id",
            "run_id",
            "started_position",
            "started_at",
            "outcome",
            "ended_position",
            "ended_at",
            "duration_ms",
            "cost",
        ],
        {
            "id": _ID,
            "lane_id": _NULLABLE_ID,
            "run_id": _NULLABLE_ID,
            "started_position": {"type": ["integer", "null"], "minimum": 1},
            "started_at": {"oneOf": [_TS, {"type": "null"}]},
            "outcome": {
                "enum": ["completed", "failed", None],
                "description": "null while open (an unresolved attempt)",
            },
            "ended_position": {"type": ["integer", "null"], "minimum": 1},
            "ended_at": {"oneOf": [_TS, {"type": "null"}]},
            "duration_ms": {
                "type": ["integer", "null"],
                "description": "between the two events' occurred_at",
            },
            "cost": {"type": "array", "items": schema_ref("Money")},
        },
    ),
    "Pause": _obj(
        [
            "pause_id",
            "lane_id",
            "run_id",
            "position",
            "paused_at",
            "trigger",
            "decision",
            "responded_position",
        ],
        {
            "pause_id": {"type": "string"},
            "lane_id": _ID,
            "run_id": _ID,
            "position": _POS,
            "paused_at": _TS,
            "trigger": {"type": ["string", "null"]},
            "decision": {"type": ["string", "null"], "description": "null: pending"},
            "responded_position": {"type": ["integer", "null"], "minimum": 1},
        },
    ),
    "Activity": _obj(
        ["session_id", "applied_position", "turns", "actions", "attempts", "pauses", "cost"],
        {
            "session_id": _ID,
            "applied_position": _COUNT,
            "turns": {"type": "array", "items": schema_ref("Span")},
            "actions": {"type": "array", "items": schema_ref("Span")},
            "attempts": {"type": "array", "items": schema_ref("Span")},
            "pauses": {"type": "array", "items": schema_ref("Pause")},
            "cost": {"type": "array", "items": schema_ref("Money")},
        },
    ),
    "KorgEnvelope": _obj(
        ["schema_version", "seq_id", "metadata", "event", "prev_hash", "entry_hash"],
        {
            "schema_version": {"const": "1.0"},
            "seq_id": _POS,
            "prev_hash": {
                **_HASH,
                "description": "korg-ledger-v1 chain over the journal selected (session_id), "
                "from 64 zeros at its first record",
            },
            "entry_hash": _HASH,
            "metadata": _obj(
                [
                    "triggered_by",
                    "causation_id",
                    "event_id",
                    "actor_id",
                    "seq_id",
                    "ledger_hash",
                    "parent_hash",
                    "emitted_at",
                    "recorded_at",
                    "session_id",
                    "hlc_physical",
                    "hlc_logical",
                    "rewind_of",
                    "payload_refs",
                ],
                {
                    "triggered_by": {"type": ["integer", "null"]},
                    "causation_id": {"type": ["string", "null"]},
                    "event_id": _ID,
                    "actor_id": {"const": "korg:api"},
                    "seq_id": _POS,
                    "ledger_hash": _HASH,
                    "parent_hash": {"oneOf": [_HASH, {"type": "null"}]},
                    "emitted_at": {"type": "string"},
                    "recorded_at": {"type": "string"},
                    "session_id": {"type": ["string", "null"]},
                    "hlc_physical": {"type": "integer"},
                    "hlc_logical": {"type": "integer"},
                    "rewind_of": {"type": ["integer", "null"]},
                    "payload_refs": {"type": "array"},
                },
            ),
            "event": _obj(
                [
                    "event_type",
                    "tool_name",
                    "source_agent",
                    "args",
                    "result",
                    "success",
                    "duration_ms",
                    "timestamp",
                    "payload_refs",
                ],
                {
                    "event_type": {"const": "AgentToolCall"},
                    "tool_name": {"type": "string"},
                    "source_agent": {"type": "string"},
                    "args": {},
                    "result": {},
                    "success": {"type": "boolean"},
                    "duration_ms": {"type": "integer"},
                    "timestamp": {"type": "string"},
                    "payload_refs": {"type": "array"},
                },
            ),
        },
    ),
}


_TEXT = {"type": "string", "minLength": 1, "maxLength": 256}
_PAGE_PARAMS = [
    parameter(
        "cursor",
        "query",
        {"type": "integer", "minimum": 0},
        "exclusive start key: forward returns keys > cursor, backward keys < cursor",
    ),
    parameter(
        "direction",
        "query",
        {"enum": ["forward", "backward"], "default": "forward"},
        "forward: oldest first; backward: newest first",
    ),
    parameter(
        "limit",
        "query",
        {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
        "events per page",
    ),
]
_SESSION = parameter("session_id", "path", _TEXT, "host session id")
_EXCLUDE = parameter(
    "exclude_invalidated",
    "query",
    {"enum": ["false", "true"], "default": "false"},
    "true: leave out the session's events its session.rewound events invalidate",
)
_RUN = parameter("run_id", "path", _TEXT, "host run id")
_OWNER = TENANT_PARAMETER_DOC
_SHA256 = parameter(
    "sha256",
    "path",
    {"type": "string", "pattern": "^(sha256:)?[0-9a-f]{64}$"},
    "lowercase hex sha256 (a content ref's `sha256:` prefix allowed)",
)
_BLOB_BYTES = {
    "description": "the blob's bytes; content type sniffed",
    "content": {
        "application/octet-stream": {
            "schema": {"type": "string", "contentMediaType": "application/octet-stream"}
        },
        JSON_MEDIA: {"schema": {}},
        "text/plain": {"schema": {"type": "string"}},
    },
}

PATHS: dict[str, Any] = {
    "/": {
        "get": {
            "operationId": "console",
            "summary": "the web console (HTML): live tail, session view, costs",
            "responses": {
                "200": {
                    "description": "the console",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                }
            },
        }
    },
    **ops_paths("connected to NATS and caught up within the configured lag"),
    "/api/v1/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "this document",
            "responses": {
                "200": {"description": "OpenAPI 3.1", "content": {JSON_MEDIA: {"schema": {"type": "object"}}}}
            },
        }
    },
    "/api/v1/events": {
        "get": {
            "operationId": "tailEvents",
            "summary": "live tail (server-sent events): backfill after the resume position, then live",
            "description": (
                "Frames: `id: <position>`, `event: ledger-event`, `data: <CommittedEvent JSON>`. "
                "Idle connections get `: keepalive` comments. A tail that names run_id (or else "
                "session_id) ends after that run's (session's) terminal event with an "
                "`event: end` frame whose id is the terminal event's position."
            ),
            "parameters": [
                parameter("tenant", "query", _TEXT, "only this tenant"),
                parameter("session_id", "query", _TEXT, "only this session; follows it to its end"),
                parameter("run_id", "query", _TEXT, "only this run; follows it to its end"),
                parameter("lane_id", "query", _TEXT, "only this lane"),
                parameter("actor_id", "query", _TEXT, "only this actor"),
                parameter("event_type", "query", _TEXT, "event types starting with this prefix"),
                parameter(
                    "from_position",
                    "query",
                    {"type": "integer", "minimum": 0},
                    "the last position the client has; delivery starts after it (default 0)",
                ),
                parameter(
                    "Last-Event-ID",
                    "header",
                    {"type": "string", "pattern": "^[0-9]+$"},
                    "as from_position, and wins over it",
                ),
                parameter(
                    "exclude_invalidated",
                    "query",
                    {"enum": ["false", "true"], "default": "false"},
                    "true: leave out events the rewinds of the sessions in scope "
                    "invalidated, including rewinds committed while the tail is open",
                ),
            ],
            "responses": {
                "200": {
                    "description": "an event stream",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **error_responses(400, 429),
            },
        }
    },
    "/api/v1/events/{position}": {
        "get": {
            "operationId": "getEvent",
            "summary": "one committed event by ledger position",
            "parameters": [
                parameter("position", "path", _POS, "ledger position"),
                parameter(
                    "exclude_invalidated",
                    "query",
                    {"enum": ["false", "true"], "default": "false"},
                    "true: 404 (details.invalidated) for an event a rewind of its session invalidated",
                ),
            ],
            "responses": {
                "200": json_body("CommittedEvent", "the committed event"),
                **error_responses(400, 404, 500),
            },
        }
    },
    "/api/v1/lanes/{lane_id}/events": {
        "get": {
            "operationId": "laneEvents",
            "summary": "a lane's events; cursor is a lane seq (a position with with_origin)",
            "parameters": [
                parameter("lane_id", "path", _TEXT, "lane id"),
                *_PAGE_PARAMS,
                _EXCLUDE,
                _OWNER,
                parameter(
                    "with_origin",
                    "query",
                    {"enum": ["false", "true"], "default": "false"},
                    "true: a fork's full history, keyed by position: the origin "
                    "lane's events up to the fork point (recursively), then the "
                    "lane's own; a page holds one lane's events",
                ),
            ],
            "responses": {
                "200": json_body("LaneEvents", "one page"),
                **error_responses(400, 404, 429, 503, 504),
            },
        }
    },
    "/api/v1/sessions/{session_id}": {
        "get": {
            "operationId": "getSession",
            "summary": "a session: runs, lanes, structure, and its events; cursor is a position",
            "parameters": [_SESSION, *_PAGE_PARAMS, _EXCLUDE, _OWNER],
            "responses": {
                "200": json_body("Session", "the session and one page of its events"),
                **error_responses(400, 404, 429, 503, 504),
            },
        }
    },
    "/api/v1/sessions/{session_id}/causal-tree": {
        "get": {
            "operationId": "causalTree",
            "summary": "a session's causal tree: nodes (paged by position) with their cause, "
            "spines (main agent, sub-agents, forks) and rewinds",
            "parameters": [
                _SESSION,
                parameter(
                    "cursor",
                    "query",
                    {"type": "integer", "minimum": 0},
                    "nodes with position > cursor (default 0)",
                ),
                parameter(
                    "limit",
                    "query",
                    {"type": "integer", "minimum": 1, "maximum": 2000, "default": 500},
                    "nodes per page",
                ),
                _EXCLUDE,
                _OWNER,
            ],
            "responses": {
                "200": json_body("CausalTree", "one page of the tree"),
                **error_responses(400, 404, 503, 504),
            },
        }
    },
    "/api/v1/sessions/{session_id}/runs/{run_id}": {
        "get": {
            "operationId": "getRun",
            "summary": "a run: lanes, structure, and its events; cursor is a position",
            "parameters": [_SESSION, _RUN, *_PAGE_PARAMS, _EXCLUDE, _OWNER],
            "responses": {
                "200": json_body("Run", "the run and one page of its events"),
                **error_responses(400, 404, 429, 503, 504),
            },
        }
    },
    "/api/v1/sessions/{session_id}/runs/{run_id}/inspection": {
        "get": {
            "operationId": "inspectRun",
            "summary": "terminal events, linked checkpoints and unresolved attempts of a run",
            "parameters": [_SESSION, _RUN, _OWNER],
            "responses": {
                "200": json_body("Inspection", "the run's inspection"),
                **error_responses(400, 404, 503, 504),
            },
        }
    },
    "/api/v1/blobs/{sha256}": {
        "get": {
            "operationId": "getBlob",
            "summary": "a content-addressed blob, raw",
            "parameters": [
                _SHA256,
                parameter(
                    "tenant",
                    "query",
                    _TEXT,
                    "the blob's tenant: the token's own by default; required with "
                    "the operator token or on an open tail",
                ),
            ],
            "responses": {
                "200": _BLOB_BYTES,
                **error_responses(400, 404, 500),
            },
        }
    },
    "/api/v1/verify": {
        "get": {
            "operationId": "verify",
            "summary": "recompute the hash chains of a lane, a session or (no parameter) the ledger",
            "parameters": [
                parameter("lane_id", "query", _TEXT, "verify this lane"),
                parameter("session_id", "query", _TEXT, "verify this session's lanes"),
                parameter(
                    "tenant",
                    "query",
                    _TEXT,
                    "the tenant whose lane or session it is (as elsewhere: needed only when several "
                    "tenants have the id), or alone: verify this tenant's lanes (the token's own by default)",
                ),
            ],
            "responses": {
                "200": json_body("VerifyReport", "intact, or the first fault"),
                **error_responses(400, 404, 429, 503, 504),
            },
        }
    },
    "/console/{asset}": {
        "get": {
            "operationId": "consoleAsset",
            "summary": "a static file of the web console",
            "parameters": [parameter("asset", "path", {"enum": ["app.js", "app.css"]}, "file name")],
            "responses": {
                "200": {
                    "description": "the file",
                    "content": {
                        "text/javascript": {"schema": {"type": "string"}},
                        "text/css": {"schema": {"type": "string"}},
                    },
                },
                **error_responses(404),
            },
        }
    },
    "/api/v1/costs": {
        "get": {
            "operationId": "costs",
            "summary": "cost.recorded totals by currency, model and tenant, and a series over time",
            "parameters": [
                parameter("tenant", "query", _TEXT, "only this tenant"),
                parameter("session_id", "query", _TEXT, "only this session"),
                parameter("run_id", "query", _TEXT, "only this run"),
                parameter(
                    "bucket_s",
                    "query",
                    {"type": "integer", "minimum": 1, "maximum": 2678400},
                    "series bucket width in seconds (default: chosen for at most 120 buckets)",
                ),
            ],
            "responses": {"200": json_body("CostReport", "the report"), **error_responses(400, 403, 500)},
        }
    },
    "/api/v1/events/{position}/causation": {
        "get": {
            "operationId": "eventCausation",
            "summary": "an event's cause and the events it caused (same tenant), oldest first",
            "parameters": [
                parameter("position", "path", _POS, "ledger position"),
                parameter(
                    "limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}, "caused (100)"
                ),
            ],
            "responses": {
                "200": json_body("EventCausation", "its cause and what it caused"),
                **error_responses(400, 404, 500),
            },
        }
    },
    "/api/v1/sessions": {
        "get": {
            "operationId": "sessions",
            "summary": "the sessions index: one summary per session, newest (last event) first",
            "parameters": [
                parameter("tenant", "query", _TEXT, "only this tenant (a tenant's token: its own)"),
                parameter(
                    "status",
                    "query",
                    {"enum": ["running", "completed", "failed", "unresolved", "paused"]},
                    "a status, or unresolved (attempts open) / paused (pauses pending)",
                ),
                parameter("actor_id", "query", _TEXT, "sessions with an event of this actor"),
                parameter("q", "query", _TEXT, "text in the session id"),
                parameter("since", "query", _TEXT, "active at or after this time (RFC 3339)"),
                parameter("until", "query", _TEXT, "active at or before this time (RFC 3339)"),
                parameter(
                    "before", "query", {"type": "integer", "minimum": 1}, "last event before this position"
                ),
                parameter(
                    "limit", "query", {"type": "integer", "minimum": 1, "maximum": 500}, "page size (50)"
                ),
            ],
            "responses": {
                "200": json_body("SessionPage", "a page of sessions"),
                **error_responses(400, 403, 500),
            },
        }
    },
    "/api/v1/sessions/{session_id}/activity": {
        "get": {
            "operationId": "sessionActivity",
            "summary": "a session's turns, actions and attempts with outcome, duration and cost, "
            "and its human-in-the-loop pauses, from its events",
            "parameters": [_SESSION, _OWNER],
            "responses": {
                "200": json_body("Activity", "the session's activity"),
                **error_responses(400, 404, 500),
            },
        }
    },
    "/api/journal": {
        "get": {
            "operationId": "korgJournal",
            "summary": "Korg: the Korg tenant's journal as NDJSON, one KorgEnvelope per line, oldest first",
            "parameters": [
                parameter("session_id", "query", _TEXT, "only this session"),
                parameter("cursor", "query", {"type": "integer", "minimum": 0}, "returns seq_id > cursor"),
                parameter("limit", "query", {"type": "integer", "minimum": 1}, "at most this many"),
                parameter(
                    "triggered_by",
                    "query",
                    {"type": "integer", "minimum": 0},
                    "only the children of this seq_id",
                ),
            ],
            "responses": {
                "200": {
                    "description": "NDJSON; each line a KorgEnvelope",
                    "content": {
                        "application/x-ndjson": {
                            "schema": {"type": "string"},
                            "x-line-schema": schema_ref("KorgEnvelope"),
                        }
                    },
                },
                **error_responses(400),
            },
        }
    },
    "/api/blob/{sha256}": {
        "get": {
            "operationId": "korgGetBlob",
            "summary": "Korg: a blob of the Korg tenant, raw (Korg §8.4.1)",
            "parameters": [_SHA256],
            "responses": {
                "200": _BLOB_BYTES,
                **error_responses(400, 404, 500, 503, 504),
            },
        },
    },
}


def _secure(paths: dict[str, Any]) -> None:
    """Every guarded path takes a bearer token and may answer 401, and 403 for
    a tenant its token does not grant (``apidoc.secure_guarded``); the live
    tail also takes ``access_token`` (EventSource cannot set headers)."""
    for path, operation in secure_guarded(paths, "401", "403"):
        if path in QUERY_TOKEN_PATHS:
            operation["security"].append({"accessTokenQuery": []})
            operation["parameters"].append(
                parameter(
                    ACCESS_TOKEN_PARAMETER,
                    "query",
                    {"type": "string", "minLength": 1},
                    "the bearer token, for clients that cannot set Authorization",
                )
            )


QUERY_TOKEN_PATHS = ("/api/v1/events",)
SCHEMAS.update(timeline.SCHEMAS)
PATHS.update(timeline.PATHS)
SCHEMAS.update(transparency.SCHEMAS)
PATHS.update(transparency.PATHS)
SCHEMAS.update(korgreaddoc.SCHEMAS)
PATHS.update(korgreaddoc.PATHS)
_secure(PATHS)

DOCUMENT: dict[str, Any] = document(
    title="laneledger tail",
    description="Live tail, history, blobs, verification and Korg compatibility over the "
    'laneledger committed stream. Every error is {"error": ErrorBody} '
    "(spec/errors.md); see spec/tail.md.",
    paths=PATHS,
    schemas=SCHEMAS,
    bearer_description="a tenant's token (sees that tenant only) or the "
    "operator's (every tenant); spec/tail.md, Access",
    security_schemes={
        "accessTokenQuery": {
            "type": "apiKey",
            "in": "query",
            "name": ACCESS_TOKEN_PARAMETER,
            "description": "the same token, on the live tail only",
        },
    },
)


def openapi_route() -> web.RouteDef:
    async def get_openapi(_: web.Request) -> web.Response:
        return json_response(DOCUMENT)

    return web.get("/api/v1/openapi.json", get_openapi, name="openapi")
