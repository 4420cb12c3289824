"""One committed event as a Korg §8 record, read from the tail's index
(normative text: ``spec/korg-mapping.md``, "Indexed Korg view").

Pure: the tail's ``korgindex`` stores, per event, its ``source_agent``, its
``triggered_by`` and its session root; this module renders a committed body
with those into the flat AgentToolCall record §8.3 serves (``record``) and
the ~150-byte skeleton of ``/summary`` (``skeleton``). A Korg tool call
comes back as posted; a natively recorded event maps as the korg-ledger-v1
export maps it (``korg_export``), except that ``seq_id`` is its ledger
position, as everywhere on the tail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneledger.compat.korg_export import SCHEMA_VERSION, payload_refs_of
from laneledger.contract.chain import ERASED
from laneledger.contract.contentref import REFS_FIELD
from laneledger.history.causality import INFERENCE, KORG_TOOL_CALL, PROMPT, TOOL, role_of

# The AgentToolCall fields a record carries (Korg §1), in Korg's order.
TOOL_CALL_FIELDS = (
    "source_agent",
    "tool_name",
    "args",
    "result",
    "success",
    "duration_ms",
    "triggered_by",
    "payload_refs",
)


def source_agent_of(event_type: str, payload: Mapping[str, Any], actor_id: str) -> str:
    """Who did it: a Korg call's ``source_agent`` as posted; a native
    event's actor id (the tail holds events, not the sequencer's actor keys)."""
    if event_type == KORG_TOOL_CALL:
        agent = payload.get("source_agent")
        if isinstance(agent, str) and agent:
            return agent
    return actor_id


def tool_name_of(event_type: str, payload: Mapping[str, Any]) -> str:
    role, name = role_of(event_type, payload, None)
    if event_type == KORG_TOOL_CALL:
        return name
    return {PROMPT: "user_prompt", INFERENCE: "llm_inference", TOOL: name}.get(role, event_type)


def record(body: Mapping[str, Any], source_agent: str, triggered_by: int | None, root: int) -> dict[str, Any]:
    """The full §8.3 event object of one committed event (``body`` decoded;
    ``root``: the seq_id of its session's root, in ``metadata.root_seq``)."""
    payload: Mapping[str, Any] = body.get("payload") or {}
    event_type = body["event_type"]
    if event_type == KORG_TOOL_CALL:
        args, result = payload.get("args", {}), payload.get("result", {})
        success = payload.get("success", True) is not False
        duration = payload.get("duration_ms", 0)
    else:
        args, result = dict(payload), {}
        success = not event_type.endswith(".failed")
        duration = payload.get("duration_ms", 0)
    return {
        "schema_version": SCHEMA_VERSION,
        "seq_id": body["position"],
        "event_type": "AgentToolCall",
        "source_agent": source_agent,
        "tool_name": tool_name_of(event_type, payload),
        "args": args,
        "result": result,
        "success": success,
        "duration_ms": duration if type(duration) is int and duration >= 0 else 0,
        "triggered_by": triggered_by,
        "payload_refs": payload_refs_of(args, result, payload.get(REFS_FIELD)),
        "timestamp": body["committed_at"],
        "metadata": {
            "event_id": body["id"],
            "event_type": event_type,
            "session_id": body["session_id"],
            "lane_id": body["lane_id"],
            "lane_seq": body["seq"],
            "position": body["position"],
            "root_seq": root,
            "laneledger_entry_hash": body["entry_hash"],
            # Its content erased (spec/erasure.md): by which erasure.
            **({"erased": body[ERASED]} if ERASED in body else {}),
        },
    }


def skeleton(full: Mapping[str, Any]) -> dict[str, Any]:
    """The §8.3 ``/summary`` record of a full record."""
    return {
        "seq_id": full["seq_id"],
        "source_agent": full["source_agent"],
        "tool_name": full["tool_name"],
        "triggered_by": full["triggered_by"],
        "success": full["success"],
        "duration_ms": full["duration_ms"],
        "has_payload_refs": bool(full["payload_refs"]),
    }
