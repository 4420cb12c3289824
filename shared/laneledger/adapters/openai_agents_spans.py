"""What the OpenAI Agents SDK reported, as plain values: the copies the
tracing processor takes of a trace or span the moment it is reported (the SDK
keeps filling a span's data afterwards, and the copy is read on the recorder
thread), a tool request from the run hooks, and what the mapping reads out of
them (spec/openai-agents.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Custom spans the Runner opens around a whole run and each model round.
STRUCTURAL_SPANS = ("task", "turn")

_ID8 = re.compile(r"[0-9A-Za-z_-]{8}")


@dataclass(frozen=True)
class TraceInfo:
    trace_id: str
    workflow_name: str
    group_id: str | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class SpanInfo:
    """A span as it was when the SDK reported it; ``data`` is its
    ``span_data.export()`` (JSON values), plus a response's model and output."""

    trace_id: str
    span_id: str
    parent_id: str | None
    data: dict[str, Any]
    started_at: str | None = None
    ended_at: str | None = None
    error: dict[str, Any] | None = None

    @property
    def kind(self) -> str:
        kind = self.data.get("type")
        if kind == "custom" and isinstance(self.data.get("data"), Mapping):
            sdk_kind = self.data["data"].get("sdk_span_type")
            if sdk_kind in STRUCTURAL_SPANS:
                return str(sdk_kind)
        return str(kind)


@dataclass(frozen=True)
class ToolRequest:
    """A function tool about to run (the run hooks' ``on_tool_start``)."""

    trace_id: str
    span_id: str
    tool_call_id: str | None
    name: str
    arguments: str | None


def tokens_of(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """The ledger's token fields from the SDK's usage (``input_tokens``,
    ``output_tokens``, ``input_tokens_details.cached_tokens`` /
    ``cache_write_tokens``; ``cached_input_tokens`` in turn spans)."""
    if not usage:
        return {}
    details = usage.get("input_tokens_details") or {}
    found = {
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cache_read_tokens": details.get("cached_tokens", usage.get("cached_input_tokens")),
        "cache_write_tokens": details.get("cache_write_tokens", usage.get("cache_write_input_tokens")),
    }
    return {k: v for k, v in found.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def id8(span_id: str) -> str:
    """A sub-agent actor's ``<id8>`` (spec/verify.md, "Actor identity"): the
    span id's last 8 characters (the SDK's ids end in random hex), else 8 hex
    digits of its SHA-256."""
    tail = span_id[-8:]
    return tail if _ID8.fullmatch(tail) else hashlib.sha256(span_id.encode()).hexdigest()[:8]


def duration_ms(span: SpanInfo) -> int | None:
    if not span.started_at or not span.ended_at:
        return None
    try:
        delta = datetime.fromisoformat(span.ended_at) - datetime.fromisoformat(span.started_at)
    except ValueError:
        return None
    return max(0, int(delta.total_seconds() * 1000))


def arguments_of(raw: Any) -> Any:
    """A tool's arguments as the JSON object they spell, else as sent."""
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw
        return parsed if isinstance(parsed, dict) else raw
    return raw
