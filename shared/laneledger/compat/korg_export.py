"""Export one session as a korg-ledger-v1 journal (normative text:
``spec/korg-mapping.md``, "korg-ledger-v1 export").

Every committed event of the session becomes one flat AgentToolCall record,
in position order, renumbered ``seq_id`` 1, 2, 3 … (Korg's seq_id is dense
within one journal), its cause as ``triggered_by`` (that event's seq_id), and
chained with ``prev_hash`` / ``entry_hash`` under the korg-ledger-v1 profile
(``laneledger.compat.korg``), so ``laneledger verify --format korg-ledger-v1`` and
Korg's own verifier accept it. A ``session.rewound`` event becomes a record
with ``rewind_of`` = the seq_id rewound to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from laneledger.compat.korg import KORG_LEDGER_V1, check_value, korg_canonical
from laneledger.contract.chain import GENESIS_HASH, link
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
from laneledger.store.reader import LedgerReader
from laneledger.store.schema import open_ledger
from laneledger.store.sqlite import fetch_all

SCHEMA_VERSION = "1.0"


def korg_record(
    body: Mapping[str, Any],
    node: Node,
    source_agent: str,
    seq_of: Mapping[int, int],
    session_positions: Iterable[int],
) -> dict[str, Any]:
    """The unchained record of one committed event (``seq_of``: position ->
    seq_id of every event of the session)."""
    payload = body.get("payload") or {}
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
    if node.event_type == KORG_TOOL_CALL:  # a Korg call comes back as it was posted
        record.update(
            source_agent=payload.get("source_agent", source_agent),
            tool_name=node.name,
            args=payload.get("args", {}),
            result=payload.get("result", {}),
            success=payload.get("success", True),
            duration_ms=payload.get("duration_ms", 0),
            payload_refs=payload.get("payload_refs", []),
        )
    elif node.role == REWIND:
        gone = Invalidation([payload])
        target_seq = seq_of.get(payload.get("target_position", 0))  # positions start at 1: 0 is none
        record.update(
            source_agent=source_agent,
            tool_name="rewind",
            args={
                "target_seq_id": target_seq,
                "invalidated_seq_ids": [seq_of[p] for p in session_positions if p in gone],
                **({"reason": payload["reason"]} if "reason" in payload else {}),
            },
            result={},
            success=True,
            duration_ms=0,
            payload_refs=[],
            rewind_of=target_seq,
        )
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
            payload_refs=[],
        )
    if node.cause is not None and node.cause in seq_of:
        record["triggered_by"] = seq_of[node.cause]
    return record


def export_session(
    view: SessionView, actor_keys: Mapping[str, str], out: BinaryIO, *, key: bytes | None = None
) -> int:
    """Write ``view`` as korg-ledger-v1 JSON lines; returns the record count.
    ``NotCanonicalizable`` (naming the event's position and the value's path)
    for a value korg-ledger-v1 cannot hash, such as a float."""
    bodies = [msgspec.to_builtins(event) for event in view.events]
    nodes = nodes_of(bodies, subjects_of(view.actions, view.attempts))
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
    db: str | Path, session_id: str, out: BinaryIO, *, key: bytes | None = None
) -> int:
    """``export_session`` of a session read from a ledger database (read-only)."""
    conn = open_ledger(db, readonly=True)
    try:
        reader = LedgerReader(conn)
        view = decoder(SessionView).decode(encode(reader.load_session(session_id)))
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
