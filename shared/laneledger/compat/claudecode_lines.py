"""Decoding Claude Code stream-json lines (spec/claude-code.md): what
``laneledger.compat.claudecode`` maps, checked before it maps anything.

A line is first strict JSON (``parse_line``), then, for the line types the
importer reads fields of, a msgspec Struct of a union tagged by ``type``
(``decode_line``). The Structs type only what the mapping reads; what it
keeps as it came (a line of an ``ext.claude_code.*`` event, a tool's input,
a result's content) stays the decoded JSON. A shape that does not fit is
``InvalidRequest`` (``reason: "wrong_shape"``) naming the line and the path.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, TypeVar

import msgspec

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.strictjson import decode_json

SUB_LANE_PREFIX = "sub-"
# A lane name is an Id (at most 256 characters): the prefix and the full id.
MAX_PARENT_TOOL_USE_ID = 256 - len(SUB_LANE_PREFIX)
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")
_MAX_DECIMALS = Decimal(10) ** -18
_AT = re.compile(r"^(?P<what>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.S)
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")

_S = TypeVar("_S")

# None (absent or null) on the main agent's lines, else the id of the tool
# call that spawned the line's sub-agent: it names a lane.
ParentToolUseId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PARENT_TOOL_USE_ID)] | None


class Line(msgspec.Struct, tag_field="type", kw_only=True):
    """What every line may carry."""

    parent_tool_use_id: ParentToolUseId = None


class AssistantMessage(msgspec.Struct, kw_only=True):
    id: str
    content: list[Any]  # blocks kept as they came: repeats are compared whole
    model: Any = None
    usage: Any = None
    stop_reason: Any = None


class AssistantLine(Line, tag="assistant"):
    message: AssistantMessage


class UserMessage(msgspec.Struct, kw_only=True):
    content: Any = None  # a string, or blocks (text, tool_result)


class UserLine(Line, tag="user"):
    message: UserMessage
    tool_use_result: Any = None


class ResultLine(Line, tag="result"):
    subtype: Any = None
    is_error: Any = None
    total_cost_usd: Any = None
    model_usage: Any = msgspec.field(default=None, name="modelUsage")


class SystemLine(Line, tag="system"):
    subtype: Any = None


class StreamEventLine(Line, tag="stream_event"):
    pass


class RateLimitLine(Line, tag="rate_limit_event"):
    pass


class OtherLine(msgspec.Struct, kw_only=True):
    """A line type this importer does not know: kept, on its agent's lane."""

    parent_tool_use_id: ParentToolUseId = None


KnownLine = AssistantLine | UserLine | ResultLine | SystemLine | StreamEventLine | RateLimitLine
CaptureLine = KnownLine | OtherLine
_KNOWN_TYPES = frozenset({"assistant", "user", "result", "system", "stream_event", "rate_limit_event"})


class ToolUseBlock(msgspec.Struct, kw_only=True):
    """A ``tool_use`` block of an assistant message, decoded when the message
    is recorded."""

    id: str
    name: str
    input: Any = None


def parse_line(raw: str | bytes, line_no: int) -> dict[str, Any] | None:
    """One capture line as an object; None for a blank line. A line that is
    not strict JSON (``strictjson``: no NaN, no duplicate keys) is
    ``MalformedMessage``, one that is not an object with a string ``type``
    is ``InvalidRequest``; both name the line in ``details.line``."""
    data = raw.encode() if isinstance(raw, str) else raw
    if not data.strip():
        return None
    value = decode_json(data, file="", line=line_no)
    if not isinstance(value, dict):
        raise InvalidRequest("not a JSON object", line=line_no, path="$", reason="not_an_object")
    if not isinstance(value.get("type"), str):
        raise InvalidRequest('no string "type"', line=line_no, path="$.type", reason="no_type")
    return value


def decode_line(obj: dict[str, Any], line_no: int) -> CaptureLine:
    """A parsed line (``parse_line``) as the Struct of its type."""
    if obj["type"] in _KNOWN_TYPES:
        # A union is not a ``type[...]`` to mypy; msgspec decodes it by its tag.
        return decode_as(obj, KnownLine, line_no)  # type: ignore[arg-type]
    return decode_as(obj, OtherLine, line_no)


def decode_as(value: Any, shape: type[_S], line_no: int, at: str = "$") -> _S:
    """``value`` (part of line ``line_no``, at path ``at``) as ``shape``, or
    ``InvalidRequest`` naming the path that does not fit."""
    try:
        return msgspec.convert(value, shape)
    except msgspec.ValidationError as exc:
        raise _wrong_shape(str(exc), line_no, at) from None


def _wrong_shape(error: str, line_no: int, at: str) -> InvalidRequest:
    found = _AT.match(error)
    what, path = (found["what"], found["path"] or "$") if found else (error, "$")
    path = at + path[1:]
    missing = _MISSING.match(what)
    if missing:
        path, what = f"{path}.{missing['field']}", "missing"
    return InvalidRequest(f"{path}: {what}", line=line_no, path=path, reason="wrong_shape")


def decimal_string(value: Any, what: str, line_no: int) -> str:
    """A JSON number (Claude Code writes costs as floats) as the decimal
    string cost.recorded wants, rounded to 18 places."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidRequest(f"{what} is not a number", line=line_no, path=f"$.{what}")
    try:
        amount = Decimal(repr(value) if isinstance(value, float) else str(value))
    except InvalidOperation:
        raise InvalidRequest(f"{what} is not a number", line=line_no, path=f"$.{what}") from None
    if not amount.is_finite():
        raise InvalidRequest(f"{what} is not finite", line=line_no, path=f"$.{what}")
    text = format(amount.quantize(_MAX_DECIMALS).normalize(), "f")
    return "0" if text in ("-0", "") else text


def text_of(content: Any) -> str | None:
    """A user message's or tool result's text: a string, or text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        texts = [p for p in parts if isinstance(p, str)]
        return "\n".join(texts) if texts else None
    return None


def duration_ms(tool_use_result: Any) -> int | None:
    """A tool's duration where the capture states one (Claude Code puts it on
    some tools' ``tool_use_result``)."""
    if not isinstance(tool_use_result, dict):
        return None
    for name in ("durationMs", "totalDurationMs", "duration_ms"):
        value = tool_use_result.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def timestamp_of(obj: dict[str, Any]) -> str | None:
    """The line's own RFC 3339 ``timestamp``, if it has a well-formed one."""
    stamp = obj.get("timestamp")
    return stamp if isinstance(stamp, str) and TIMESTAMP.match(stamp) else None


def epoch_ms(stamp: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 timestamp (the fraction
    cut to microseconds, which is all ``datetime`` holds)."""
    stamp = re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00")
    return int(datetime.fromisoformat(stamp).timestamp() * 1000)
