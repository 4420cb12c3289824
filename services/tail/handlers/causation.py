"""``GET /api/v1/events/{position}/causation``: an event's cause and what it caused.

For the console's event detail: the event its ``causation_id`` names (in
the same tenant; null when it names none, or one the read model does not
hold), and the events whose ``causation_id`` is this event's id, oldest
first, at most ``limit`` (more: ``more_caused``). Read from the read model's
``causation_id`` column and its index (``projections.events.causation``),
so it costs two index lookups however large the session is. Tenant-scoped like
``/api/v1/events/{position}``: another tenant's event is not there.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from aiohttp import web

from laneledger.contract.errors import EntityNotFound
from laneledger.runtime.access import scope_of
from laneledger.runtime.httpjson import json_response

from ..api import decode_parameters
from ..projections import events
from ..queries import CausationQuery
from ..readmodel import ReadModel


class Causation:
    def __init__(self, model: ReadModel, readers: Executor) -> None:
        self._model = model
        self._readers = readers

    def route(self) -> web.RouteDef:
        return web.get("/api/v1/events/{position}/causation", self.get, name="event_causation")

    async def get(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, CausationQuery)
        position, limit = query.position, query.limit
        loop = asyncio.get_running_loop()
        row = await loop.run_in_executor(self._readers, events.event_at, self._model, position)
        if not row.event_type or not scope_of(request).allows(row.tenant):  # as if it were not there
            raise EntityNotFound("no committed event at this position (yet)", kind="event", position=position)
        found = await loop.run_in_executor(self._readers, events.causation, self._model, row, limit)
        return json_response(found)
