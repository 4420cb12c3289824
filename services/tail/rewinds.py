"""``exclude_invalidated``: reads that leave out what a session's rewinds
invalidated (``session.rewound`` events, ``laneledger.rewind``).

Committed events are never deleted; a read with ``exclude_invalidated=true``
skips the events of the session that a ``session.rewound`` event committed
at or before the read's applied position covers. Normative text:
``spec/tail.md``, "Rewinds".
"""

from __future__ import annotations

import asyncio

import msgspec

from laneledger.causality import REWOUND
from laneledger.errors import InvalidRequest
from laneledger.rewind import Invalidation

from .api import Query
from .readmodel import ReadModel

PARAMETER = "exclude_invalidated"


def exclude_requested(query: Query) -> bool:
    return query.choice(PARAMETER, ("false", "true")) == "true"


def invalidation(model: ReadModel, session_id: str, applied: int) -> Invalidation:
    """What the session's rewinds up to ``applied`` invalidate (reader thread)."""
    rows = model.query(
        "SELECT body FROM events WHERE session_id = ? AND event_type = ? AND position <= ?"
        " ORDER BY position", [session_id, REWOUND, applied])
    return Invalidation(msgspec.json.decode(body).get("payload", {}) for (body,) in rows)


def excluding(where: str, params: list, gone: Invalidation) -> tuple[str, list]:
    """``where`` (over one session's events) without the invalidated ones."""
    for first, last in gone.spans():
        where += " AND position NOT BETWEEN ? AND ?"
        params = [*params, first, last]
    return where, params


def require_session(session_id: str | None) -> str:
    """The live tail excludes invalidated events of one followed session only."""
    if session_id is None:
        raise InvalidRequest(f"{PARAMETER}=true needs session_id (rewinds are per session)",
                             parameter=PARAMETER)
    return session_id


class InvalidationLookup:
    """``invalidation`` for the live tail, off the event loop."""

    def __init__(self, model: ReadModel, readers) -> None:
        self._model = model
        self._readers = readers

    async def __call__(self, session_id: str, applied: int) -> Invalidation:
        return await asyncio.get_running_loop().run_in_executor(
            self._readers, invalidation, self._model, session_id, applied)
