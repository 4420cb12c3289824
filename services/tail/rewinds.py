"""``exclude_invalidated``: reads that leave out what a session's rewinds
invalidated (``session.rewound`` events, ``laneledger.history.rewind``).

Committed events are never deleted; a read with ``exclude_invalidated=true``
skips the events of the session that a ``session.rewound`` event committed
at or before the read's applied position covers. Normative text:
``spec/tail.md``, "Rewinds".
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import JsonObject
from laneledger.history.rewind import Invalidation

from .projections import events
from .readmodel import ReadModel

PARAMETER = "exclude_invalidated"  # each route's: queries.py


def invalidation(model: ReadModel, tenant: str | None, session_id: str, applied: int) -> Invalidation:
    """What the session's rewinds up to ``applied`` invalidate (reader
    thread). ``tenant``: whose session (ids are each tenant's own); None
    only where the read model knows one tenant with it (``owners``)."""
    rewound = events.rewinds_between(model, tenant, session_id, 0, applied)
    return Invalidation(payload for _, _, payload in rewound)


MAX_TRACKED_SPANS = 100_000  # what one live tail without session_id may hold


class ScopeInvalidation:
    """What the rewinds of every session in a live tail's scope invalidate.

    Without ``session_id`` the tail keeps one ``Invalidation`` per session
    that has a rewind: memory grows with the merged invalidated ranges of
    the rewinds in scope (rewinds are rare; events are not), capped at
    ``MAX_TRACKED_SPANS``; past it the subscriber is told to name a session."""

    def __init__(self) -> None:
        self.as_of = 0  # rewinds committed up to here are in
        self._sessions: dict[tuple[str, str], Invalidation] = {}  # by (tenant, session id)
        self.spans = 0

    def add(self, rewound: list[tuple[str, str, JsonObject]], as_of: int) -> None:
        for tenant, session_id, payload in rewound:
            gone = self._sessions.setdefault((tenant, session_id), Invalidation())
            before = len(gone.spans())
            gone.add(payload)
            self.spans += len(gone.spans()) - before
        self.as_of = max(self.as_of, as_of)
        if self.spans > MAX_TRACKED_SPANS:
            raise InvalidRequest(
                f"{PARAMETER}=true without session_id follows every rewind in scope, and "
                f"these invalidate more than {MAX_TRACKED_SPANS} ranges: name session_id",
                parameter=PARAMETER,
                ranges=self.spans,
            )

    def covers(self, tenant: str, session_id: str, position: int) -> bool:
        gone = self._sessions.get((tenant, session_id))
        return gone is not None and position in gone


class InvalidationLookup:
    """Keeps a live tail's ``ScopeInvalidation`` up to date, off the event loop."""

    def __init__(self, model: ReadModel, readers: Executor) -> None:
        self._model = model
        self._readers = readers

    async def refresh(
        self, gone: ScopeInvalidation, tenant: str | None, session_id: str | None, applied: int
    ) -> None:
        """Add the rewinds committed since ``gone.as_of``, up to ``applied``."""
        if applied <= gone.as_of:
            return
        rewound = await asyncio.get_running_loop().run_in_executor(
            self._readers, events.rewinds_between, self._model, tenant, session_id, gone.as_of, applied
        )
        gone.add(rewound, applied)
