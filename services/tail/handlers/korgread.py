"""``GET /api/korg/{ledger}/…``: the indexed reads behind Korg §8's MCP
resources (normative text: ``spec/korg-mapping.md``, "Indexed Korg view";
the MCP server, ``laneledger.mcp``, maps each ``korg://{ledger}/…`` URI to
one of these).

``{ledger}`` is a tenant; ``local`` is the tail's Korg tenant. A ledger the
token may not read is 404 ``entity_not_found`` (kind ``ledger``), exactly as
one that does not exist. Cursors are ledger positions (``seq_id``); tail
surfaces page newest→oldest (``seq_id < cursor``), head surfaces
oldest→newest (``seq_id > cursor``), as §8.3.1 says.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web
from msgspec import UNSET

from laneledger.compat import korg_view
from laneledger.contract.errors import EntityNotFound
from laneledger.runtime.access import scope_of
from laneledger.runtime.httpjson import json_response

from ..answers.korg import (
    KorgHeads,
    KorgLedgers,
    KorgPage,
    KorgRecord,
    KorgSession,
    KorgSkeleton,
    KorgSkeletonPage,
)
from ..api import decode_parameters
from ..projections import korg_index
from ..queries import (
    KorgAgentRecentQuery,
    KorgEventQuery,
    KorgEventsQuery,
    KorgHeadsQuery,
    KorgRecentQuery,
    KorgSessionQuery,
    KorgSummaryQuery,
    NoParameters,
)
from ..routes import ReadModelRoutes

LOCAL = "local"  # Korg §8.1: the one ledger of a v1 Korg server
MAX_AGENTS = 256  # session metadata lists at most this many agents (agent_count is exact)
MAX_LEDGERS = 1000

_decode = msgspec.json.Decoder(dict[str, Any])


class KorgRead(ReadModelRoutes):
    korg_tenant: str = "korg"

    def routes(self, korg_tenant: str) -> list[web.RouteDef]:
        self.korg_tenant = korg_tenant
        base = "/api/korg/{ledger}"
        return [
            web.get("/api/korg", self.list_ledgers, name="korg_ledgers"),
            web.get(f"{base}/ledger/recent", self.recent, name="korg_recent"),
            web.get(f"{base}/ledger/heads", self.heads, name="korg_heads"),
            web.get(f"{base}/agent/recent", self.agent_recent, name="korg_agent_recent"),
            web.get(f"{base}/session/{{root_seq}}", self.session, name="korg_session"),
            web.get(f"{base}/session/{{root_seq}}/summary", self.summary, name="korg_session_summary"),
            web.get(f"{base}/session/{{root_seq}}/events", self.events, name="korg_session_events"),
            web.get(f"{base}/event/{{seq_id}}", self.event, name="korg_event"),
        ]

    async def _tenant(self, request: web.Request, ledger: str) -> str:
        """The tenant ``ledger`` names, if this token may read it and it has events."""
        tenant = self.korg_tenant if ledger == LOCAL else ledger
        if not scope_of(request).allows(tenant) or not await self._read(
            korg_index.has_ledger, self._model, tenant
        ):
            raise EntityNotFound("no such ledger", kind="ledger", ledger=ledger[:256])
        return tenant

    async def list_ledgers(self, request: web.Request) -> web.Response:
        """The ledgers this token may read (``local`` for the Korg tenant,
        whose tenant is ``local_tenant`` when the token may read it)."""
        decode_parameters(request, NoParameters)
        scope = scope_of(request)
        tenants = await self._read(korg_index.ledgers, self._model, MAX_LEDGERS)
        names = [LOCAL if t == self.korg_tenant else t for t in tenants if scope.allows(t)]
        local = self.korg_tenant if scope.allows(self.korg_tenant) else None
        return json_response(KorgLedgers(ledgers=names, local_tenant=local))

    async def recent(self, request: web.Request) -> web.Response:
        return await self._recent(request, decode_parameters(request, KorgRecentQuery), None)

    async def agent_recent(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, KorgAgentRecentQuery)
        return await self._recent(request, query, query.source_agent)

    async def _recent(self, request: web.Request, query: KorgRecentQuery, agent: str | None) -> web.Response:
        tenant = await self._tenant(request, query.ledger)
        before, limit, cause = query.cursor, query.limit, query.triggered_by
        entries, more = await self._read(korg_index.recent, self._model, tenant, before, limit, agent, cause)
        records = [_full(e) for e in entries]
        page = KorgPage(
            events=records,
            next_cursor=records[-1].seq_id if records else None,
            has_more=more,
            # the agent's page names it, as Korg's own server's does
            source_agent=UNSET if agent is None else agent,
        )
        return json_response(page)

    async def heads(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, KorgHeadsQuery)
        tenant = await self._tenant(request, query.ledger)
        before, limit = query.cursor, query.limit
        roots = await self._read(korg_index.heads, self._model, tenant, before, limit + 1)
        more = len(roots) > limit
        roots = roots[:limit]
        return json_response(KorgHeads(heads=roots, next_cursor=roots[-1] if more else None, has_more=more))

    async def _root(self, tenant: str, root: int) -> korg_index.Entry:
        entry = await self._read(korg_index.event, self._model, tenant, root)
        if entry is None or entry[4] != entry[0]:
            raise EntityNotFound("no session has this root", kind="session", root_seq=root)
        return entry

    async def session(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, KorgSessionQuery)
        tenant = await self._tenant(request, query.ledger)
        root = await self._root(tenant, query.root_seq)
        count, last, agents = await self._read(
            korg_index.session_facts, self._model, tenant, root[0], MAX_AGENTS
        )
        last_entry = await self._read(korg_index.event, self._model, tenant, last)
        last_at = _decode.decode(last_entry[1])["committed_at"] if last_entry else None
        return json_response(
            KorgSession(
                root_seq=root[0],
                root_event=_full(root),
                total_events=count,
                agent_count=len(agents),
                agents=agents,
                first_seq=root[0],
                last_seq=last,
                last_event_at=last_at,
                last_event_seq=last,
            )
        )

    async def summary(self, request: web.Request) -> web.Response:
        return await self._session_page(decode_parameters(request, KorgSummaryQuery), request, skeleton=True)

    async def events(self, request: web.Request) -> web.Response:
        return await self._session_page(decode_parameters(request, KorgEventsQuery), request, skeleton=False)

    async def _session_page(
        self, query: KorgSummaryQuery | KorgEventsQuery, request: web.Request, *, skeleton: bool
    ) -> web.Response:
        tenant = await self._tenant(request, query.ledger)
        root = await self._root(tenant, query.root_seq)
        entries, more = await self._read(
            korg_index.session,
            self._model,
            tenant,
            root[0],
            query.cursor or 0,
            query.limit,
            query.source_agent,
        )
        next_cursor = entries[-1][0] if entries else None  # the last record's seq_id
        if skeleton:
            skeletons = [msgspec.convert(korg_view.skeleton(_record(e)), KorgSkeleton) for e in entries]
            return json_response(KorgSkeletonPage(events=skeletons, next_cursor=next_cursor, has_more=more))
        records = [_full(e) for e in entries]
        return json_response(KorgPage(events=records, next_cursor=next_cursor, has_more=more))

    async def event(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, KorgEventQuery)
        tenant = await self._tenant(request, query.ledger)
        seq_id = query.seq_id
        entry = await self._read(korg_index.event, self._model, tenant, seq_id)
        if entry is None:
            raise EntityNotFound("no event at this seq_id", kind="event", seq_id=seq_id)
        return json_response(_full(entry))


def _record(entry: korg_index.Entry) -> dict[str, Any]:
    _, body, agent, triggered_by, root = entry
    return korg_view.record(_decode.decode(body), agent, triggered_by, root)


def _full(entry: korg_index.Entry) -> KorgRecord:
    """The record of an index entry: ``korg_view``'s, read as the answer's
    Struct (so a record that drifted from the document fails here)."""
    return msgspec.convert(_record(entry), KorgRecord)
