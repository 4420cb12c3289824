"""The sessions index's route: ``GET /api/v1/sessions``, the console's
landing page (the index itself: ``projections/session_index.py``).

Tenant-scoped like every other route (a tenant's token lists its own
sessions only), newest first (by last position), paged with ``before``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from aiohttp import web

from laneledger.runtime.access import scope_of
from laneledger.runtime.httpjson import json_response

from ..api import Query
from ..projections import session_index

if TYPE_CHECKING:
    from ..feed import Feed
    from ..readmodel import ReadModel

PARAMETERS = ("tenant", "status", "actor_id", "q", "since", "until", "before", "limit")
MAX_LIMIT = 500


class Sessions:
    def __init__(self, model: ReadModel, readers: Executor, feed: Feed) -> None:
        self._model = model
        self._readers = readers
        self._feed = feed

    def route(self) -> web.RouteDef:
        return web.get("/api/v1/sessions", self.sessions, name="sessions")

    async def sessions(self, request: web.Request) -> web.Response:
        query = Query(request, PARAMETERS)
        tenant = scope_of(request).narrow(query.text("tenant"))  # access.py
        filters = {
            "tenant": tenant,
            "status": query.optional_choice("status", session_index.FILTERS),
            "actor_id": query.text("actor_id"),
            "q": query.text("q"),
            "since": query.text("since"),
            "until": query.text("until"),
            "before": query.integer("before", None, low=1),
        }
        limit = query.integer("limit", 50, low=1, high=MAX_LIMIT)
        page = await asyncio.get_running_loop().run_in_executor(
            self._readers, session_index.page, self._model, filters, limit
        )
        return json_response({"applied_position": self._feed.applied, **page})
