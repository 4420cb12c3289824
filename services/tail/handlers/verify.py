"""``GET /api/v1/verify``: recompute the hash chains of a lane, a session or
the whole ledger, as the tail holds them.

What is verified is the tail's own copy: the committed events exactly as
they came off LEDGER_EVENTS and are served by the tail's other endpoints.
Each record is checked in the order ``laneledger.contract.chain.verify_chain`` checks
it (``not_chained`` → ``broken_link`` → ``content_tampered``), and then its
indexed columns against its body (``integrity_failure``, kind
``row_mismatch``), since the tail filters and pages on those columns. For the
whole ledger, positions must also run 1, 2, … up to the applied position
without a gap. The first fault ends the walk and is reported with its
position, lane, seq and kind; a chain keyed with HMAC needs the same key
(``--hmac-key-file``). These are the same checks, from the same code, as
``laneledger verify --db``; what needs the sequencer's database (receipts,
lane heads, actors and signatures, causation by id) or the blob bucket is
only there (``spec/verify.md``).

The answer is 200 either way: the request succeeded, the ledger may not have.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from msgspec import UNSET

from laneledger.audit.faults import decode_body, position_gap
from laneledger.contract.chain import LaneChains
from laneledger.contract.errors import (
    ChainFault,
    IntegrityError,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
)
from laneledger.contract.model import ErrorBody
from laneledger.runtime.access import Scope, scope_of
from laneledger.runtime.httpjson import json_response
from laneledger.sdk.client import LedgerClient
from laneledger.sqlite import failures_as

from ..answers.verify import VerifyReport, VerifyScope
from ..api import decode_parameters
from ..feed import Feed
from ..limits import ReadLimits
from ..projections import events
from ..projections.events import Row
from ..queries import VerifyQuery
from ..readmodel import ReadModel
from ..routes import ReadModelRoutes

WALK_PAGE = 5000  # rows checked per reader-thread call
_READ_FAILED = "read model read failed"

# Row column -> the body field it copies.
_COPIED = (
    ("event_id", "id"),
    ("tenant", "tenant"),
    ("session_id", "session_id"),
    ("run_id", "run_id"),
    ("lane_id", "lane_id"),
    ("seq", "seq"),
    ("actor_id", "actor_id"),
    ("subject_id", "subject_id"),
    ("event_type", "event_type"),
    ("position", "position"),
)


@dataclass
class Walk:
    """The state of one verification walk. The chain checks are
    ``laneledger.contract.chain.LaneChains`` and the body/position checks
    ``laneledger.audit.faults``', the very ones ``laneledger verify --db`` runs;
    only the read model's own columns are checked here."""

    key: bytes | None
    dense: bool  # positions must be 1, 2, …
    events: int = 0
    last_position: int = 0
    chains: LaneChains = field(init=False)

    def __post_init__(self) -> None:
        self.chains = LaneChains(key=self.key)

    @property
    def tips(self) -> dict[tuple[str, str], tuple[int, str]]:  # (tenant, lane) -> (seq, entry_hash)
        return self.chains.tips

    def check(self, row: Row) -> None:
        position = row.position
        if self.dense and position != self.last_position + 1:
            raise position_gap(self.last_position + 1, position, row.lane_id)
        record = decode_body(row.body, position, row.lane_id or None)
        lane_id = record.get("lane_id") if isinstance(record.get("lane_id"), str) else row.lane_id
        self.chains.check(record, position=position, lane=lane_id, tenant=row.tenant)
        seq = record["seq"]
        for column, name in _COPIED:
            if getattr(row, column) != record.get(name):
                raise IntegrityError(
                    f"position {position}: row_mismatch: the read model's {column} is "
                    f"{getattr(row, column)!r}, the event says {record.get(name)!r}",
                    kind="row_mismatch",
                    position=position,
                    lane_id=lane_id,
                    seq=seq,
                    field=column,
                    expected=record.get(name),
                    found=getattr(row, column),
                )
        self.events += 1
        self.last_position = max(self.last_position, position)


class Verifier(ReadModelRoutes):
    def __init__(
        self,
        model: ReadModel,
        readers: Executor,
        feed: Feed,
        ledger: LedgerClient,
        hmac_key: bytes | None,
        limits: ReadLimits,
    ) -> None:
        super().__init__(model, readers, feed)
        self._ledger = ledger
        self._key = hmac_key
        self._limits = limits
        self.stopping = threading.Event()  # set at shutdown: a long walk gives up

    def route(self) -> web.RouteDef:
        return web.get("/api/v1/verify", self.handle, name="verify")

    async def handle(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, VerifyQuery)
        lane_id, session_id = query.lane_id, query.session_id
        if lane_id is not None and session_id is not None:
            raise InvalidRequest("give lane_id or session_id, not both", parameter="lane_id")
        applied = self._feed.applied
        access = await self._access(request, query.tenant, lane_id, session_id)
        scope: VerifyScope
        if lane_id is not None:
            scope, order = "lane", "seq"
        elif session_id is not None:
            scope, order = "session", "position"
        else:
            scope, order = "ledger", "position"
        # A tenant verifies its own lanes: every chain whole, but its
        # positions are not dense (other tenants' events sit between).
        selection = events.Selection(access.tenant, session_id, lane_id=lane_id)
        if access.tenant is not None and scope == "ledger":
            scope = "tenant"
        walk = Walk(self._key, dense=scope == "ledger")
        with self._limits.reads.slot(scope_of(request)):
            fault = await self._walk(request, walk, selection, order, applied)
        if scope == "ledger" and fault is None and walk.last_position != applied:
            fault = position_gap(walk.last_position + 1, None)
        if walk.events == 0 and fault is None:
            # Nothing in the read model: an empty lane or session, or no such thing.
            if lane_id is not None:  # scope "lane"
                lane = await self._ledger.get_lane(lane_id, tenant=access.tenant)
                access.not_found_unless(lane.tenant, "lane", id=lane_id)
            elif session_id is not None:  # scope "session"
                # One structure row, not load_session: that carries every event
                # and is refused past 1 MiB (a large session the tail has not
                # applied yet).
                page = await self._ledger.load_structure_page(session_id, limit=1, tenant=access.tenant)
                access.not_found_unless(page.tenant, "session", id=session_id)
        report = VerifyReport(
            scope=scope,
            intact=fault is None,
            events=walk.events,
            lanes=len(walk.tips),
            last_position=walk.last_position,
            applied_position=applied,
            keyed=self._key is not None,
            fault=ErrorBody(**fault.to_wire()) if fault else None,
            tenant=access.tenant if scope == "tenant" and access.tenant is not None else UNSET,
            lane_id=UNSET if lane_id is None else lane_id,
            session_id=UNSET if session_id is None else session_id,
            # One tenant's lanes (a tenant, session or lane walk), so lane ids are unique.
            lane_tips=UNSET
            if scope == "ledger"
            else {lane: tip for (_, lane), (_, tip) in walk.tips.items()},
        )
        return json_response(report)

    async def _access(
        self, request: web.Request, tenant: str | None, lane_id: str | None, session_id: str | None
    ) -> Scope:
        """The request's scope, narrowed to the tenant of the lane or session
        it names, or to the tenant the operator names (a tenant walk)."""
        if lane_id is not None:
            return await self._owner(request, tenant, "lane", lane_id)
        if session_id is not None:
            return await self._owner(request, tenant, "session", session_id)
        access = scope_of(request)
        named = access.narrow(tenant)
        return access if named is None else Scope(named, operator=access.operator)

    async def _walk(
        self, request: web.Request, walk: Walk, selection: events.Selection, order: str, applied: int
    ) -> LedgerError | None:
        """The walk a page at a time on a reader thread (each page's rows are
        checked as they come off SQLite and dropped): a client that leaves
        stops it at the next page, and other reads get the threads between
        pages."""
        after: Any = -(2**63)
        while True:
            if request.transport is None or request.transport.is_closing():
                raise ConnectionResetError("the client left")
            fault, after, done = await self._read(self._walk_page, walk, selection, order, applied, after)
            if fault is not None or done:
                return fault

    def _walk_page(
        self, walk: Walk, selection: events.Selection, order: str, applied: int, after: Any
    ) -> tuple[LedgerError | None, Any, bool]:
        """Checks up to WALK_PAGE rows after ``after`` (a key of ``order``):
        the first fault, the last key checked, and whether the walk is done."""
        n = 0
        conn = self._model.connection()
        page = events.walk(conn, selection, order, upto=applied, after=after, limit=WALK_PAGE)
        with failures_as(_READ_FAILED), closing(page):
            try:
                for row in page:
                    if self.stopping.is_set():
                        raise LedgerUnavailable("the tail is stopping; verify again later")
                    walk.check(row)
                    after = row.position if order == "position" else row.seq
                    n += 1
            except (ChainFault, IntegrityError) as fault:
                return fault, after, True
        return None, after, n < WALK_PAGE
