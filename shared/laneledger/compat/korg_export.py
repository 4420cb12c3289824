"""Export one session as a korg-ledger-v1 journal (normative text:
``spec/korg-mapping.md``, "korg-ledger-v1 export").

Every committed event of the session becomes one flat AgentToolCall record,
numbered ``seq_id`` 1, 2, 3 … (Korg's seq_id is dense within one journal), its
cause as ``triggered_by`` (that event's seq_id), and chained with
``prev_hash`` / ``entry_hash`` under the korg-ledger-v1 profile
(``laneledger.compat.korg``), so ``laneledger verify --format korg-ledger-v1``
and Korg's own verifier accept it.

The journal has one root, as Korg §2 wants: the session's root prompt (its
first prompt without a cause) is record 1, the others follow in position
order. A record whose event names no cause is ``triggered_by`` the root (Korg
§4: the root is every event's originator) — session, run and turn lifecycle
events, say — except a Korg tool call, which keeps what its client posted,
and another prompt without a cause, which is a root of its own. A
``session.rewound`` event becomes a record with ``rewind_of`` and
``triggered_by`` = the seq_id rewound to. ``payload_refs`` describes every
content reference in ``args`` and ``result`` (Korg §6.4 checks its blobs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from laneledger.compat.korg import KORG_LEDGER_V1, check_value, korg_canonical
from laneledger.contract.chain import ERASED, GENESIS_HASH, link
from laneledger.contract.contentref import REFS_FIELD, is_ref
from laneledger.contract.errors import NotCanonicalizable
from laneledger.contract.model import SessionView, decoder, encode
from laneledger.history.causality import (
    INFERENCE,
    KORG_TOOL_CALL,
    PROMPT,
    REWIND,
    TOOL,
    Node,
    nodes_of,
    subjects_of,
)
from laneledger.history.rewind import Invalidation
from laneledger.sqlite import fetch_all
from laneledger.store.reader import LedgerReader
from laneledger.store.schema import open_current_ledger

SCHEMA_VERSION = "1.0"
ROOT_SEQ = 1  # journal_order puts the root first
_HEX64 = re.compile(r"[0-9a-f]{64}")


def journal_order(nodes: list[Node]) -> list[Node]:
    """The session's nodes in journal order: the root prompt (the first
    prompt without a cause) first, the others in position order. The root
    comes first so that what was committed before it (the session's
    ``session.started``, say) can name it as ``triggered_by``, which must be
    strictly earlier. No prompt without a cause: position order, and the
    first record is the root."""
    root = next((n for n in nodes if n.role == PROMPT and n.cause is None), None)
    if root is None:
        return list(nodes)
    return [root, *(n for n in nodes if n is not root)]


def korg_record(
    body: Mapping[str, Any],
    node: Node,
    source_agent: str,
    seq_of: Mapping[int, int],
    session_positions: Iterable[int],
) -> dict[str, Any]:
    """The unchained record of one committed event (``seq_of``: position ->
    seq_id of every event of the session, in ``journal_order``: the root is
    ``ROOT_SEQ``, what an event naming no cause is triggered by)."""
    payload = body.get("payload") or {}
    parent: int | None = None
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "seq_id": seq_of[node.position],
        "event_type": "AgentToolCall",
        "timestamp": body["committed_at"],
        "metadata": {
            "event_id": node.event_id,
            "event_type": node.event_type,
            "session_id": body["session_id"],
            "lane_id": node.lane_id,
            "lane_seq": node.seq,
            "position": node.position,
            "laneledger_entry_hash": body["entry_hash"],
        },
    }
    if ERASED in body:  # its content erased (spec/erasure.md): say by which erasure
        record["metadata"]["erased"] = body[ERASED]
    if node.event_type == KORG_TOOL_CALL:  # a Korg call comes back as it was posted
        record.update(
            source_agent=payload.get("source_agent", source_agent),
            tool_name=node.name,
            args=payload.get("args", {}),
            result=payload.get("result", {}),
            success=payload.get("success", True),
            duration_ms=payload.get("duration_ms", 0),
        )
    elif node.role == REWIND:
        gone = Invalidation([payload])
        target_seq = seq_of.get(payload.get("target_position", 0))  # positions start at 1: 0 is none
        record.update(
            source_agent=source_agent,
            tool_name="rewind",
            args={
                "target_seq_id": target_seq,
                "invalidated_seq_ids": sorted(seq_of[p] for p in session_positions if p in gone),
                **({"reason": payload["reason"]} if "reason" in payload else {}),
            },
            result={},
            success=True,
            duration_ms=0,
            rewind_of=target_seq,
        )
        parent = target_seq if target_seq is not None else ROOT_SEQ
    else:
        tool = {PROMPT: "user_prompt", INFERENCE: "llm_inference", TOOL: node.name}.get(
            node.role, node.event_type
        )
        duration = payload.get("duration_ms")
        record.update(
            source_agent=source_agent,
            tool_name=tool,
            args=dict(payload),
            result={},
            success=not node.event_type.endswith(".failed"),
            duration_ms=duration if type(duration) is int and duration >= 0 else 0,
        )
        if node.role != PROMPT:
            parent = ROOT_SEQ
    record["payload_refs"] = payload_refs_of(record["args"], record["result"], payload.get(REFS_FIELD))
    if node.cause is not None and node.cause in seq_of:
        parent = seq_of[node.cause]
    if parent is not None and parent < record["seq_id"]:
        record["triggered_by"] = parent
    return record


def payload_refs_of(args: Any, result: Any, described: Any) -> list[dict[str, Any]]:
    """The descriptors of every content reference in ``args`` and
    ``result``: those ``described`` already (the payload's own
    ``payload_refs``, verbatim, when well formed: a Korg client's, or the
    SDK's), then one ``{sha256, size_bytes, label}`` for each other
    sentinel, labelled with its path (``args.content``, ``result``)."""
    refs = [d for d in described if _is_descriptor(d)] if isinstance(described, list) else []
    known = {d.get("sha256") for d in refs}
    for label, sentinel in [*_sentinels(args, "args"), *_sentinels(result, "result")]:
        sha256 = sentinel["_ref"].removeprefix("sha256:")
        if sha256 not in known:
            known.add(sha256)
            refs.append({"sha256": sha256, "size_bytes": sentinel["size_bytes"], "label": label})
    return refs


def _is_descriptor(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("sha256"), str)
        and _HEX64.fullmatch(value["sha256"]) is not None
        and type(value.get("size_bytes")) is int
        and value["size_bytes"] >= 0
    )


def _sentinels(value: Any, label: str) -> Iterable[tuple[str, dict[str, Any]]]:
    if is_ref(value):
        yield label, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != REFS_FIELD:
                yield from _sentinels(item, f"{label}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _sentinels(item, f"{label}[{index}]")


def export_session(
    view: SessionView, actor_keys: Mapping[str, str], out: BinaryIO, *, key: bytes | None = None
) -> int:
    """Write ``view`` as korg-ledger-v1 JSON lines; returns the record count.
    ``NotCanonicalizable`` (naming the event's position and the value's path)
    for a value korg-ledger-v1 cannot hash, such as a float."""
    bodies = [msgspec.to_builtins(event) for event in view.events]
    nodes = journal_order(nodes_of(bodies, subjects_of(view.actions, view.attempts)))
    by_position = {b["position"]: b for b in bodies}
    seq_of = {n.position: seq for seq, n in enumerate(nodes, start=1)}
    prev = GENESIS_HASH
    for node in nodes:
        record = korg_record(
            by_position[node.position], node, actor_keys.get(node.actor_id, node.actor_id), seq_of, seq_of
        )
        try:
            check_value(record)
        except NotCanonicalizable as exc:
            raise NotCanonicalizable(
                f"position {node.position}: {exc.message}",
                position=node.position,
                event_id=node.event_id,
                **exc.details,
            ) from None
        record = link(record, prev, profile=KORG_LEDGER_V1, key=key)
        prev = record["entry_hash"]
        out.write(korg_canonical(record) + b"\n")
    return len(nodes)


def export_session_from_db(
    db: str | Path, session_id: str, out: BinaryIO, *, key: bytes | None = None, tenant: str | None = None
) -> int:
    """``export_session`` of a session read from a ledger database (read-only);
    ``tenant``: whose session, needed only when several tenants have the id."""
    conn = open_current_ledger(db)
    try:
        reader = LedgerReader(conn)
        view = decoder(SessionView).decode(encode(reader.load_session(session_id, tenant)))
        actor_ids = sorted({e.actor_id for e in view.events})
        keys: dict[str, str] = {}
        for start in range(0, len(actor_ids), 500):
            chunk = actor_ids[start : start + 500]
            rows = fetch_all(
                conn,
                f"SELECT id, key FROM actors WHERE id IN ({','.join('?' * len(chunk))})",
                chunk,
                what="ledger read failed",
            )
            keys.update(rows)
    finally:
        conn.close()
    return export_session(view, keys, out, key=key)
