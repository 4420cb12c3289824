"""The answers of Korg's read routes (``handlers/korgread.py``, ``korg.py``): its
§8 records and pages, and the §1.2 envelopes of ``/api/journal``
(spec/korg-mapping.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType

from laneledger.contract.model import ErasureMark, Hash, Id

from . import Answer, Count, Position

SchemaVersion = Literal["1.0"]
Duration = Annotated[int, Meta(ge=0)]  # milliseconds
PayloadRefs = list[dict[str, Any]]


class KorgRecordMetadata(Answer, kw_only=True):
    """Where the record's event is in the ledger."""

    event_id: Id
    event_type: str
    session_id: Id
    lane_id: Id
    lane_seq: Position
    position: Position
    root_seq: Position
    laneledger_entry_hash: Hash
    erased: Annotated[
        ErasureMark | UnsetType,
        Meta(description="the erasure that erased the event's content (spec/erasure.md); absent when whole"),
    ] = UNSET


class KorgRecord(Answer, kw_only=True):
    """One committed event as a Korg AgentToolCall record (spec/korg-mapping.md)."""

    schema_version: SchemaVersion
    seq_id: Position
    event_type: Literal["AgentToolCall"]
    source_agent: str
    tool_name: str
    args: Any
    result: Any
    success: bool
    duration_ms: Duration
    triggered_by: int | None
    payload_refs: PayloadRefs
    timestamp: str
    metadata: KorgRecordMetadata


class KorgSkeleton(Answer, kw_only=True):
    """A record without its arguments and result (§8.3 ``/summary``)."""

    seq_id: Position
    source_agent: str
    tool_name: str
    triggered_by: int | None
    success: bool
    duration_ms: Duration
    has_payload_refs: bool


class KorgPage(Answer, kw_only=True):
    events: list[KorgRecord]
    next_cursor: int | None
    has_more: bool
    source_agent: Annotated[str, Meta(description="the agent (agent/recent only)")] | UnsetType = UNSET


class KorgSkeletonPage(Answer, kw_only=True):
    events: list[KorgSkeleton]
    next_cursor: int | None
    has_more: bool


class KorgHeads(Answer, kw_only=True):
    heads: list[Position]
    next_cursor: int | None
    has_more: bool


class KorgSession(Answer, kw_only=True):
    root_seq: Position
    root_event: KorgRecord
    total_events: Count
    agent_count: Count
    agents: list[str]
    first_seq: Position
    last_seq: Position
    last_event_at: str | None
    last_event_seq: Position
    schema_version: SchemaVersion = "1.0"


class KorgLedgers(Answer, kw_only=True):
    ledgers: list[str]
    local_tenant: str | None


class KorgEnvelopeMetadata(Answer, kw_only=True):
    triggered_by: int | None
    causation_id: str | None
    event_id: Id
    actor_id: Literal["korg:api"]
    seq_id: Position
    ledger_hash: Hash
    parent_hash: Hash | None
    emitted_at: str
    recorded_at: str
    session_id: str | None
    hlc_physical: int
    hlc_logical: int
    rewind_of: int | None
    payload_refs: list[Any]


class KorgToolCall(Answer, kw_only=True):
    event_type: Literal["AgentToolCall"]
    tool_name: str
    source_agent: str
    args: Any
    result: Any
    success: bool
    duration_ms: int
    timestamp: str
    payload_refs: list[Any]


class KorgEnvelope(Answer, kw_only=True):
    """A journal line (Korg §1.2)."""

    schema_version: SchemaVersion
    seq_id: Position
    prev_hash: Annotated[
        Hash,
        Meta(
            description="korg-ledger-v1 chain over the journal selected (session_id), from 64 zeros "
            "at its first record"
        ),
    ]
    entry_hash: Hash
    metadata: KorgEnvelopeMetadata
    event: KorgToolCall
