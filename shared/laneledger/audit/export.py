"""JSONL exports of a ledger (``laneledger export``) and their offline
verification: positions 1..N and every lane's chain."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from laneledger.audit.faults import position_gap
from laneledger.audit.pages import PAGE, keyset_pages
from laneledger.contract.chain import LaneChains
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.strictjson import decode_json
from laneledger.store import open_ledger


@dataclass(frozen=True)
class ExportAudit:
    events: int
    lanes: int
    last_position: int


def export_ledger(db_path: str | Path, out: Any, *, page: int = PAGE) -> int:
    """Write every committed event of a ledger file, in position order, one
    canonical JSON object per line (the stored bytes, chain fields included)
    to the binary stream ``out``; returns the count. Read-only, one snapshot."""
    db = open_ledger(db_path, readonly=True)
    count = 0
    try:
        db.execute("BEGIN")
        for _, body in keyset_pages(
            db,
            "SELECT position, body FROM events WHERE position > ? ORDER BY position LIMIT ?",
            -(2**63),
            page,
        ):
            out.write(bytes(body))
            out.write(b"\n")
            count += 1
        db.execute("ROLLBACK")
    finally:
        db.close()
    return count


def read_export(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a laneledger JSONL export; a bad line raises a
    ``RequestError`` naming ``file`` and ``line``."""
    name = str(path)
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            record = decode_json(raw, file=name, line=number)
            if not isinstance(record, dict):
                raise InvalidRequest("expected a JSON object", file=name, line=number)
            for key, kind in (("position", int), ("lane_id", str)):
                if not isinstance(record.get(key), kind) or isinstance(record.get(key), bool):
                    raise InvalidRequest(
                        f"field {key}: missing or not {kind.__name__}", file=name, line=number, field=key
                    )
            yield record


def verify_export(records: Iterator[dict[str, Any]], *, hmac_key: bytes | None = None) -> ExportAudit:
    """Verify an export offline: positions 1..N with no gap, and every lane's
    chain (seqs dense, links, recomputed hashes). Raises ``ChainFault``."""
    chains = LaneChains(key=hmac_key)
    position = 0
    for record in records:
        if record["position"] != position + 1:
            raise position_gap(position + 1, record["position"], record["lane_id"], record.get("seq"))
        position = record["position"]
        tenant = record.get("tenant")  # lane ids are each tenant's own
        chains.check(
            record,
            position=position,
            lane=record["lane_id"],
            tenant=tenant if isinstance(tenant, str) else None,
        )
    return ExportAudit(events=position, lanes=len(chains.tips), last_position=position)
