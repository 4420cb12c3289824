"""What the MCP server advertises: Korg §8.2's fixed resources and templates,
laneledger's own, the tools with Korg's input schemas, and how a blob is
packed (§8.4.1). Pure data; ``spec/mcp.md`` is its normative text."""

from __future__ import annotations

import base64
import json
from typing import Any

from mcp import types

INSTRUCTIONS = (
    "laneledger: an execution ledger of AI agents. Read sessions, spines, events and blobs as "
    "korg://{ledger}/... resources (Korg agent event spec §8) and proofs as laneledger://{ledger}/...; "
    "subscriptions are in memory only: after a reconnect, subscribe again and re-read."
)

_FIXED = (
    (
        "ledger/recent",
        "recent events",
        "Recent events across all agents, newest first (cursor: seq_id < cursor).",
    ),
    ("ledger/heads", "session roots", "Session root seq_ids, newest first."),
    ("schema/event", "AgentToolCall schema", "The AgentToolCall JSON Schema."),
    ("schema/spec", "resource scheme", "The korg:// resource scheme as this server serves it."),
    ("stats/integrity", "integrity", "The ledger's chains as the tail verifies them."),
)
_KORG_TEMPLATES = (
    ("session/{root_seq}", "session", "Session metadata (bounded)."),
    (
        "session/{root_seq}/summary",
        "session summary",
        "Structural skeleton, oldest first (cursor: seq_id > cursor; limit 100, max 1000).",
    ),
    (
        "session/{root_seq}/events",
        "session events",
        "Full events, oldest first (cursor: seq_id > cursor; limit 50, max 500).",
    ),
    ("event/{seq_id}", "event", "One event, full body."),
    (
        "agent/{source_agent}/recent",
        "agent recent",
        "One agent's recent events, newest first (percent-encode '/').",
    ),
    ("blob/{sha256}", "blob", "One content-addressed blob (at most 10 MB here; larger: its http_url)."),
)
_LANELEDGER_TEMPLATES = (
    (
        "log/checkpoint",
        "checkpoint",
        "The latest signed checkpoint of the ledger's log, with witness cosignatures.",
    ),
    ("session/{session_id}", "laneledger session", "A session's summary (status, runs, lanes, cost)."),
    ("session/{session_id}/timeline", "timeline", "A session's timeline: lanes, turns, attempts."),
    ("session/{session_id}/causal-tree", "causal tree", "A session's causal tree (spines, spawns)."),
    (
        "session/{session_id}/bundle",
        "session bundle",
        "A session's events with inclusion proofs under a signed checkpoint.",
    ),
    (
        "event/{position}",
        "committed event",
        "One committed event by ledger position, as laneledger stores it.",
    ),
    ("proof/{position}", "inclusion proof", "An event's inclusion proof under the latest signed checkpoint."),
)


def fixed(ledger: str) -> list[types.Resource]:
    found = [
        types.Resource(
            uri=f"korg://{ledger}/{path}", name=f"{ledger}: {name}", description=text, mime_type=_mime(path)
        )
        for path, name, text in _FIXED
    ]
    found.append(
        types.Resource(
            uri=f"laneledger://{ledger}/log/checkpoint",
            name=f"{ledger}: checkpoint",
            description=_LANELEDGER_TEMPLATES[0][2],
            mime_type="application/json",
        )
    )
    return found


def templates() -> list[types.ResourceTemplate]:
    korg = [
        types.ResourceTemplate(uri_template=f"korg://{{ledger}}/{path}", name=name, description=text)
        for path, name, text in _KORG_TEMPLATES
    ]
    own = [
        types.ResourceTemplate(
            uri_template=f"laneledger://{{ledger}}/{path}",
            name=name,
            description=text,
            mime_type="application/json",
        )
        for path, name, text in _LANELEDGER_TEMPLATES[1:]
    ]
    return korg + own


def _mime(path: str) -> str:
    return "text/markdown" if path == "schema/spec" else "application/json"


# Korg's AgentToolCall append shape (§1, §1.2.1), as its MCP tool takes it.
EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "source_agent": {
            "type": "string",
            "description": "agent:<name>@<version>, human:<id>, korg:<component>, mcp:<server>"
            " or import:<source>@<version>.",
        },
        "tool_name": {
            "type": "string",
            "minLength": 1,
            "maxLength": 256,
            "description": "user_prompt for a session root, llm_inference for a model call,"
            " else the tool's name.",
        },
        "args": {
            "type": "object",
            "description": "The tool's arguments; values over 1 KiB are stored as blobs.",
        },
        "result": {
            "type": "object",
            "description": "The tool's result; values over 1 KiB are stored as blobs.",
        },
        "success": {"type": "boolean"},
        "duration_ms": {"type": "integer", "minimum": 0},
        "triggered_by": {
            "type": "integer",
            "description": "seq_id of the event that caused this one; omit for a root.",
        },
        "payload_refs": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sha256": {"type": "string"},
                    "size_bytes": {"type": "integer"},
                    "label": {"type": "string"},
                },
                "required": ["sha256", "size_bytes"],
            },
            "default": [],
        },
    },
    "required": ["source_agent", "tool_name", "args", "result", "success", "duration_ms"],
}

# ``korg://{ledger}/schema/event`` (§8.2): the AgentToolCall as every record read
# here carries it, so a client can validate what it reads: the append shape,
# but a root's triggered_by is null (the append tool's input omits it).
RECORD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "AgentToolCall",
    "description": "One event of a korg:// ledger (Korg agent event spec §1). Records read here"
    " also carry seq_id, event_type, timestamp and metadata.",
    **EVENT_SCHEMA,
    "properties": {
        **EVENT_SCHEMA["properties"],
        "triggered_by": {
            "type": ["integer", "null"],
            "description": "seq_id of the event that caused this one; null for a root.",
        },
    },
}

_QUERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limit": {
            "type": "integer",
            "description": "Maximum number of events to return (default 20, max 200).",
            "default": 20,
        },
        "tool_name": {"type": "string", "description": "Filter: only events with this tool_name."},
        "triggered_by": {
            "type": "integer",
            "description": "Filter: only events triggered by this seq_id (forward walk).",
        },
        "source_agent": {"type": "string", "description": "Filter: only events from this source_agent."},
        "ledger": {"type": "string", "description": "Which ledger (default local).", "default": "local"},
    },
    "required": [],
}

_VERIFY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "ledger": {"type": "string", "default": "local"},
    },
    "required": ["session_id"],
}


def tools() -> list[types.Tool]:
    return [
        types.Tool(
            name="korg_append_event",
            description="Append one AgentToolCall event to the ledger (the Korg ledger, korg://local);"
            " returns its seq_id. Use it as triggered_by on your next call to chain events into a"
            " causal tree.",
            input_schema=EVENT_SCHEMA,
            annotations=types.ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=False
            ),
        ),
        types.Tool(
            name="korg_query_events",
            description="Recent events, newest first, filtered by tool_name, triggered_by or source_agent.",
            input_schema=_QUERY_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        types.Tool(
            name="laneledger_verify_session",
            description="Verify a session's hash chains (every lane, from genesis) as the tail checks them.",
            input_schema=_VERIFY_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
    ]


Contents = types.TextResourceContents | types.BlobResourceContents


def text_contents(uri: str, text: str, mime_type: str = "application/json") -> Contents:
    return types.TextResourceContents(uri=uri, text=text, mime_type=mime_type)


def blob_contents(uri: str, data: bytes) -> Contents:
    """§8.4.1: JSON as application/json text, other UTF-8 as text/plain,
    else base64 as a ``blob`` of application/octet-stream."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return types.BlobResourceContents(
            uri=uri, blob=base64.b64encode(data).decode("ascii"), mime_type="application/octet-stream"
        )
    try:
        json.loads(text)
    except ValueError:
        return text_contents(uri, text, "text/plain")
    return text_contents(uri, text)


SPEC_TEXT = """# korg:// resources (Korg agent event spec §8), as laneledger serves them

Fixed: korg://{ledger}/ledger/recent, /ledger/heads, /schema/event, /schema/spec, /stats/integrity.
Templates: korg://{ledger}/session/{root_seq}, /session/{root_seq}/summary, /session/{root_seq}/events,
/event/{seq_id}, /agent/{source_agent}/recent, /blob/{sha256} (never listed).
seq_id is the ledger position. Tail surfaces page newest->oldest (cursor: seq_id < cursor), head
surfaces oldest->newest (seq_id > cursor). Errors carry data.reason: not_found, unknown_ledger,
invalid_params, blob_too_large, not_subscribable. laneledger's own: laneledger://{ledger}/...
(spec/mcp.md).
"""
