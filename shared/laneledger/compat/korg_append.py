"""Korg's append shape: one ``AgentToolCall`` (Korg §1, §1.2.1) as a client
posts it, decoded and checked, and the ledger payload it becomes.

Written by the ingest service (``POST /api/agent/tool-call``), read back by
the tail's journal (``EVENT_TYPE``); normative text: ``spec/korg-mapping.md``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from laneledger.contract.contentref import MAX_REFS_PER_APPEND
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import MAX_WIRE_INT, Hash, Id, MediaType, Name, WireCount, decode
from laneledger.history.causality import KORG_TOOL_CALL

EVENT_TYPE = KORG_TOOL_CALL  # the ledger event type of a posted tool call
# Korg §1.2.7: fields the server derives; a client that sends them is ignored, not refused.
SERVER_DERIVED = frozenset(
    {
        "seq_id",
        "event_id",
        "actor_id",
        "causation_id",
        "ledger_hash",
        "parent_hash",
        "emitted_at",
        "recorded_at",
        "hlc_physical",
        "hlc_logical",
        "timestamp",
    }
)
# Korg §1.1 prefixes -> laneledger actor kinds.
ACTOR_KINDS = {"agent": "agent", "human": "human", "korg": "service", "mcp": "tool", "import": "service"}


def actor_kind_of(key: str) -> str:
    """The actor kind a key's Korg §1.1 prefix names (``human:dusk`` is a
    human); ``service`` for any other key. How a key named by a person (an
    operator's ``--actor``, an erasure's ``actor_key``) becomes an actor."""
    prefix, colon, _ = key.partition(":")
    return ACTOR_KINDS.get(prefix, "service") if colon else "service"


class PayloadRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    sha256: Hash
    size_bytes: WireCount
    label: Name | None = None
    media_type: MediaType | None = None  # laneledger's descriptors carry it (spec/content.md)


class ToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The Korg append shape (§1, §1.2.1), plus an optional ``session_id``.
    ``args`` and ``result`` are any JSON value (required, null included), as
    Korg's server takes them; its spec says object, its adapter sends strings."""

    source_agent: Id
    tool_name: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    args: Any
    result: Any
    success: bool
    duration_ms: WireCount
    # Any I-JSON integer: one below 1 names no event (422 causation_violation).
    triggered_by: Annotated[int, msgspec.Meta(ge=-MAX_WIRE_INT, le=MAX_WIRE_INT)] | None = None
    payload_refs: Annotated[list[PayloadRef], msgspec.Meta(max_length=MAX_REFS_PER_APPEND)] = []
    event_type: Literal["AgentToolCall"] = "AgentToolCall"
    session_id: Id | None = None

    def payload(self) -> dict[str, Any]:
        """The ledger event's payload: the call as posted, less the envelope fields."""
        return {
            "source_agent": self.source_agent,
            "tool_name": self.tool_name,
            "args": self.args,
            "result": self.result,
            "success": self.success,
            "duration_ms": self.duration_ms,
            "triggered_by": self.triggered_by,
            "payload_refs": msgspec.to_builtins(self.payload_refs),
        }

    @property
    def actor_kind(self) -> str:
        return ACTOR_KINDS[self.source_agent.split(":", 1)[0]]

    @property
    def lane_kind(self) -> str:
        return "subagent" if "/sub-" in self.source_agent else "main"


class ToolCallAppended(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The answer to an appended tool call: ``seq_id`` is the event's ledger position."""

    seq_id: Annotated[int, msgspec.Meta(ge=1, le=MAX_WIRE_INT)]
    event_id: Id
    session_id: Id
    lane_id: Id
    lane_seq: Annotated[int, msgspec.Meta(ge=1, le=MAX_WIRE_INT)]
    entry_hash: Hash


class BlobStored(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The answer to a stored blob (or one already there)."""

    sha256: Hash
    size_bytes: WireCount


def read_tool_call(data: bytes) -> ToolCall:
    """Decode the append shape; server-derived fields are dropped (Korg §1.2.7),
    any other unknown field is refused with its path."""
    raw = decode(data, dict[str, Any])  # malformed or too large: typed errors
    for name in SERVER_DERIVED & raw.keys():
        del raw[name]
    call = decode(msgspec.json.encode(raw), ToolCall)
    prefix, _, rest = call.source_agent.partition(":")
    if prefix not in ACTOR_KINDS or not rest:
        raise InvalidRequest(
            "source_agent must be agent:<name>@<version>, human:<id>, korg:<component>, "
            "mcp:<server> or import:<source>@<version>",
            path="$.source_agent",
            found=call.source_agent,
        )
    return call
