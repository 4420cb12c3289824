"""``GET /api/v1/verify``: recompute the hash chains of a lane, a session or
the whole ledger, as the tail holds them.

What is verified is the tail's own copy: the committed events exactly as
they came off LEDGER_EVENTS and are served by the tail's other endpoints.
Each record is checked in the order ``laneledger.chain.verify_chain`` checks
it (``not_chained`` → ``broken_link`` → ``content_tampered``), and then its
indexed columns against its body (``integrity_failure``, kind
``row_mismatch``), since the tail filters and pages on those columns. For the
whole ledger, positions must also run 1, 2, … up to the applied position
without a gap. The first fault ends the walk and is reported with its
position, lane, seq and kind; a chain keyed with HMAC needs the same key
(``--hmac-key-file``).

The answer is 200 either way: the request succeeded, the ledger may not have.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiohttp import web

from laneledger.chain import GENESIS_HASH, LANELEDGER, entry_hash
from laneledger.client import LedgerClient
from laneledger.errors import (
    ChainFault,
    IntegrityError,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
)

from .api import Query, json_response
from .feed import Feed
from .readmodel import COLUMNS, ReadModel, Row

_HEX64 = re.compile(r"[0-9a-f]{64}")
# Row column -> the body field it copies.
_COPIED = (("event_id", "id"), ("tenant", "tenant"), ("session_id", "session_id"),
           ("run_id", "run_id"), ("lane_id", "lane_id"), ("seq", "seq"),
           ("actor_id", "actor_id"), ("subject_id", "subject_id"), ("event_type", "event_type"),
           ("position", "position"))


@dataclass
class Walk:
    """The state of one verification walk."""

    key: bytes | None
    dense: bool  # positions must be 1, 2, …
    events: int = 0
    last_position: int = 0
    tips: dict[str, tuple[int, str]] = field(default_factory=dict)  # lane -> (seq, entry_hash)

    def check(self, row: Row) -> None:
        position = row.position
        if self.dense and position != self.last_position + 1:
            raise _fault("broken_link", self.last_position + 1, row.lane_id, None, "position",
                         self.last_position + 1, position)
        try:
            record = msgspec.json.decode(row.body)
        except msgspec.DecodeError as exc:
            raise _fault("not_chained", position, row.lane_id or None, None, "body",
                         "a JSON object", f"undecodable: {exc}") from None
        if not isinstance(record, dict):
            raise _fault("not_chained", position, row.lane_id or None, None, "body",
                         "a JSON object", type(record).__name__)
        lane_id = record.get("lane_id") if isinstance(record.get("lane_id"), str) else row.lane_id
        prev_seq, prev_hash = self.tips.get(lane_id, (0, GENESIS_HASH))
        seq = record.get("seq")
        if type(seq) is not int:
            raise _fault("not_chained", position, lane_id, None, "seq", "an integer", seq)
        for name in ("prev_hash", "entry_hash"):
            value = record.get(name)
            if not isinstance(value, str) or not _HEX64.fullmatch(value):
                raise _fault("not_chained", position, lane_id, seq, name, "64 lowercase hex", value)
        if seq != prev_seq + 1:
            raise _fault("broken_link", position, lane_id, seq, "seq", prev_seq + 1, seq)
        if record["prev_hash"] != prev_hash:
            raise _fault("broken_link", position, lane_id, seq, "prev_hash", prev_hash,
                         record["prev_hash"])
        try:
            recomputed = entry_hash(record, profile=LANELEDGER, key=self.key)
        except LedgerError as exc:
            raise _fault("content_tampered", position, lane_id, seq, "entry_hash",
                         f"uncomputable: {exc}", record["entry_hash"]) from None
        if recomputed != record["entry_hash"]:
            raise _fault("content_tampered", position, lane_id, seq, "entry_hash", recomputed,
                         record["entry_hash"])
        for column, name in _COPIED:
            if getattr(row, column) != record.get(name):
                raise IntegrityError(
                    f"position {position}: row_mismatch: the read model's {column} is "
                    f"{getattr(row, column)!r}, the event says {record.get(name)!r}",
                    kind="row_mismatch", position=position, lane_id=lane_id, seq=seq,
                    field=column, expected=record.get(name), found=getattr(row, column))
        self.tips[lane_id] = (seq, record["entry_hash"])
        self.events += 1
        self.last_position = max(self.last_position, position)


def _fault(kind: str, position: int, lane_id: str | None, seq: int | None, fld: str,
           expected: Any, found: Any) -> ChainFault:
    where = f"position {position}" + (f" (lane {lane_id} seq {seq})" if seq is not None else "")
    return ChainFault(f"{where}: {kind} ({fld} expected {expected!r}, found {found!r})",
                      kind=kind, position=position, lane_id=lane_id, seq=seq, field=fld,
                      expected=expected, found=found)


class Verifier:
    def __init__(self, model: ReadModel, readers, feed: Feed, ledger: LedgerClient,
                 hmac_key: bytes | None) -> None:
        self._model = model
        self._readers = readers
        self._feed = feed
        self._ledger = ledger
        self._key = hmac_key
        self.stopping = threading.Event()  # set at shutdown: a long walk gives up

    def route(self) -> web.RouteDef:
        return web.get("/api/v1/verify", self.handle, name="verify")

    async def handle(self, request: web.Request) -> web.Response:
        query = Query(request, ("lane_id", "session_id"))
        lane_id, session_id = query.text("lane_id"), query.text("session_id")
        if lane_id is not None and session_id is not None:
            raise InvalidRequest("give lane_id or session_id, not both", parameter="lane_id")
        applied = self._feed.applied
        if lane_id is not None:
            scope, where, params, order = "lane", "lane_id = ?", [lane_id], "seq"
        elif session_id is not None:
            scope, where, params, order = "session", "session_id = ?", [session_id], "position"
        else:
            scope, where, params, order = "ledger", "1 = 1", [], "position"
        walk = Walk(self._key, dense=scope == "ledger")
        loop = asyncio.get_running_loop()
        fault = await loop.run_in_executor(self._readers, self._walk, walk, where, params, order,
                                           applied)
        if scope == "ledger" and fault is None and walk.last_position != applied:
            fault = _fault("broken_link", walk.last_position + 1, None, None, "position",
                           walk.last_position + 1, None)
        if walk.events == 0 and fault is None:
            # Nothing in the read model: an empty lane or session, or no such thing.
            if scope == "lane":
                await self._ledger.get_lane(lane_id)  # type: ignore[arg-type]
            elif scope == "session":
                await self._ledger.load_session(session_id)  # type: ignore[arg-type]
        report: dict[str, Any] = {
            "scope": scope, "intact": fault is None, "events": walk.events,
            "lanes": len(walk.tips), "last_position": walk.last_position,
            "applied_position": applied, "keyed": self._key is not None,
            "fault": fault.to_wire() if fault else None,
        }
        if lane_id is not None:
            report["lane_id"] = lane_id
        if session_id is not None:
            report["session_id"] = session_id
        if scope != "ledger":
            report["lane_tips"] = {lane: tip for lane, (_, tip) in walk.tips.items()}
        return json_response(report)

    def _walk(self, walk: Walk, where: str, params: list, order: str,
              applied: int) -> LedgerError | None:
        rows = self._model.iterate(
            f"SELECT {COLUMNS} FROM events WHERE {where} AND position <= ?"
            f" AND {order} > ? ORDER BY {order} LIMIT ?",
            [*params, applied], key_index=0 if order == "position" else 6,
        )
        try:
            for n, values in enumerate(rows):
                if n % 1000 == 0 and self.stopping.is_set():
                    raise LedgerUnavailable("the tail is stopping; verify again later")
                walk.check(Row(*values))
        except (ChainFault, IntegrityError) as fault:
            return fault
        return None

