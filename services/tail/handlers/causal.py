"""``GET /api/v1/sessions/{session_id}/causal-tree``: a session's causal tree.

Nodes are the session's events with their cause (``causation_id`` resolved
to a position), role and a short summary (``laneledger.history.causality``), paged
by position so a huge session is read in bounded pieces; spines are the
session's lanes (main agent, each sub-agent, forks), each with the position
its first event points at — where it hangs off its parent (Korg §2b). The
session's rewinds say which events are invalidated; ``exclude_invalidated``
leaves those out. Normative text: ``spec/tail.md``.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import EntityNotFound
from laneledger.contract.model import JsonObject, Lane
from laneledger.contract.vocabulary import REWOUND
from laneledger.history.causality import REWIND, Subject, node_of, subjects_of
from laneledger.history.rewind import Invalidation
from laneledger.runtime.httpjson import json_response
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.spine import spawned_by

from ..answers import causal as answer
from ..api import decode_parameters
from ..feed import Feed
from ..projections import events
from ..queries import CausalTreeQuery
from ..readmodel import ReadModel
from ..routes import ReadModelRoutes

SCAN_CHUNK = 1000  # rows read per query while skipping invalidated events


class CausalTree(ReadModelRoutes):
    def __init__(self, model: ReadModel, readers: Executor, feed: Feed, ledger: LedgerClient) -> None:
        super().__init__(model, readers, feed)
        self._ledger = ledger

    def route(self) -> web.RouteDef:
        return web.get("/api/v1/sessions/{session_id}/causal-tree", self.get, name="causal_tree")

    async def get(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, CausalTreeQuery)
        cursor, limit, session_id = query.cursor or 0, query.limit, query.session_id
        exclude = query.exclude_invalidated == "true"
        applied = self._feed.applied
        scope = await self._owner(request, query.tenant, "session", session_id)
        selection = events.Selection(scope.tenant, session_id)
        spines = await self._read(self._spines, selection, applied)
        if not spines:  # none, or another tenant's: the same answer
            raise EntityNotFound("no such session", kind="session", id=session_id)
        lanes, subjects = await self._structure(session_id, scope.tenant)
        rewound, nodes, more = await self._read(
            self._nodes, selection, applied, cursor, limit, exclude, subjects
        )
        for lane_id, spine in spines.items():
            lane = lanes.get(lane_id)
            spine.update(
                name=lane.name if lane else None,
                kind=lane.kind if lane else None,
                parent_lane_id=lane.parent_lane_id if lane else None,
                actor_id=lane.actor_id if lane else None,
                forked_from=msgspec.to_builtins(lane.forked_from) if lane else None,
            )
        # The parts are built as dicts by the reads below; read as the answer's
        # Structs here, so a part that drifted from the document fails.
        return json_response(
            answer.CausalTree(
                session_id=session_id,
                applied_position=applied,
                structure_complete=True,
                exclude_invalidated=exclude,
                spines=msgspec.convert(list(spines.values()), list[answer.CausalSpine]),
                rewinds=msgspec.convert(rewound, list[answer.CausalRewind]),
                roots=[n["position"] for n in nodes if n["cause"] is None and n["role"] != REWIND],
                nodes=msgspec.convert(nodes, list[answer.CausalNode]),
                next_cursor=nodes[-1]["position"] if nodes else None,
                has_more=more,
            )
        )

    async def _structure(
        self, session_id: str, tenant: str | None
    ) -> tuple[dict[str, Lane], dict[str, Subject]]:
        """Lanes by id, and the subjects of actions and attempts: read page by
        page (``load_structure``, no events), so complete however large the
        session is."""
        view = await self._ledger.load_structure(session_id, tenant=tenant)
        return {lane.id: lane for lane in view.lanes}, subjects_of(view.actions, view.attempts)

    # -- reader threads ----------------------------------------------------------------------

    def _spines(self, selection: events.Selection, applied: int) -> dict[str, dict[str, Any]]:
        spines: dict[str, dict[str, Any]] = {
            e.lane_id: {
                "lane_id": e.lane_id,
                "events": e.events,
                "first_position": e.first_position,
                "last_position": e.last_position,
            }
            for e in events.lane_extents(self._model, selection, upto=applied)
        }
        firsts = events.rows_at(self._model, [s["first_position"] for s in spines.values()])
        links: dict[int, tuple[Any, str | None]] = {}
        for position, row in firsts.items():
            body = msgspec.json.decode(row.body)
            links[position] = (
                body.get("causation_id"),
                spawned_by(body["event_type"], body.get("payload") or {}),
            )
        known = events.positions_of(
            self._model, selection, {i for pair in links.values() for i in pair if i is not None}
        )
        for spine in spines.values():
            cause, spawner = links[spine["first_position"]]
            spine["first_cause"] = known.get(cause) if cause else None
            spine["spawned_by"] = known.get(spawner) if spawner else None
        return spines

    def _nodes(
        self,
        selection: events.Selection,
        applied: int,
        cursor: int,
        limit: int,
        exclude: bool,
        subjects: dict[str, Subject],
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        rewinds: list[dict[str, Any]] = []
        gone = Invalidation()
        for row in events.rows_of_types(self._model, selection, (REWOUND,), upto=applied):
            payload = msgspec.json.decode(row.body).get("payload", {})
            gone.add(payload)
            rewinds.append(
                {
                    "position": row.position,
                    "actor_id": row.actor_id,
                    "target_position": payload.get("target_position"),
                    "invalidated": payload.get("invalidated", []),
                    "invalidated_count": payload.get("invalidated_count", 0),
                }
            )
        bodies: list[JsonObject] = []
        more = False
        while not more:
            rows = events.bodies_after(self._model, selection, after=cursor, upto=applied, limit=SCAN_CHUNK)
            for position, raw in rows:
                if exclude and position in gone:
                    continue
                if len(bodies) == limit:
                    more = True
                    break
                bodies.append(msgspec.json.decode(raw))
            if len(rows) < SCAN_CHUNK:
                break
            cursor = rows[-1][0]
        # The sequencer keeps causes in the session, and event ids are each tenant's own.
        positions = events.positions_of(
            self._model, selection, {cause for b in bodies if (cause := b.get("causation_id")) is not None}
        )
        nodes: list[dict[str, Any]] = []
        for body in bodies:
            node = node_of(body, subjects, positions)
            nodes.append(
                {
                    "position": node.position,
                    "event_id": node.event_id,
                    "lane_id": node.lane_id,
                    "seq": node.seq,
                    "actor_id": node.actor_id,
                    "event_type": node.event_type,
                    "role": node.role,
                    "name": node.name,
                    "summary": node.summary,
                    "cause": node.cause,
                    "cause_id": node.cause_id,
                    "invalidated": node.position in gone,
                }
            )
        return rewinds, nodes, more
