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

from ..answers.sessions import SessionPage
from ..api import decode_parameters
from ..projections import session_index
from ..queries import SessionsQuery

if TYPE_CHECKING:
    from ..feed import Feed
    from ..readmodel import ReadModel


class Sessions:
    def __init__(self, model: ReadModel, readers: Executor, feed: Feed) -> None:
        self._model = model
        self._readers = readers
        self._feed = feed

    def route(self) -> web.RouteDef:
        return web.get("/api/v1/sessions", self.sessions, name="sessions")

    async def sessions(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, SessionsQuery)
        tenant = scope_of(request).narrow(query.tenant)  # access.py
        sessions, next_before = await asyncio.get_running_loop().run_in_executor(
            self._readers, session_index.page, self._model, query, tenant
        )
        applied = self._feed.applied
        return json_response(
            SessionPage(applied_position=applied, sessions=sessions, next_before=next_before)
        )
