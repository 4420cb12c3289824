"""What the routes answered from the tail's read model share: its SQLite
reads run on the reader threads (never on the event loop), and a route that
names a session or a lane answers for one tenant (``owners``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple

from aiohttp import web

from laneledger.runtime.access import Scope

from .owners import owner_scope

if TYPE_CHECKING:
    from .feed import Feed
    from .readmodel import ReadModel

R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class ReadModelRoutes:
    def __init__(self, model: ReadModel, readers: Executor, feed: Feed) -> None:
        self._model = model
        self._readers = readers
        self._feed = feed

    async def _read(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        """``fn(*args)`` on a reader thread."""
        return await asyncio.get_running_loop().run_in_executor(self._readers, fn, *args)

    async def _owner(self, request: web.Request, tenant: str | None, kind: str, entity_id: str) -> Scope:
        """The request's scope narrowed to the tenant whose ``kind`` ``entity_id``
        it means; ``tenant``: the request's ``tenant`` parameter."""
        return await owner_scope(request, tenant, self._read, self._model, kind, entity_id)
