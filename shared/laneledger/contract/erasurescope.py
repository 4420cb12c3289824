"""An erasure's scope as the ledger's readers match it (spec/erasure.md,
*Readers*): the tail, and the OTel live export, match the events they hold
against the scope an erasure event's payload names.

One home for the matching, so a new kind of scope is one more case here. A
scope of a kind a reader does not know is None: the reader leaves it alone
(it must keep following the ledger, never fail on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from laneledger.contract.erasure import ERASURE_EVENT, ERASURE_RUN, LEDGER_SESSION


@dataclass(frozen=True, slots=True)
class ErasureScope:
    """A session of the erasure's tenant, or one run of it."""

    session_id: str
    run_id: str | None = None

    def covers(self, session_id: str, run_id: str) -> bool:
        """Whether an event of the erasure's tenant, in this session and run,
        is in the scope (the caller checks it was committed before the erasure)."""
        return session_id == self.session_id and (self.run_id is None or run_id == self.run_id)


def is_erasure(event_type: str, session_id: str, run_id: str) -> bool:
    """An erasure event: its type, in a tenant's ledger lane."""
    return event_type == ERASURE_EVENT and session_id == LEDGER_SESSION and run_id == ERASURE_RUN


def scope_of(scope: Any) -> ErasureScope | None:
    """The scope an erasure event's ``payload.scope`` names; None for one of
    a kind this reader does not know, or malformed."""
    if not isinstance(scope, dict) or set(scope) - {"session_id", "run_id"}:
        return None
    session_id, run_id = scope.get("session_id"), scope.get("run_id")
    if not isinstance(session_id, str) or not session_id or session_id == LEDGER_SESSION:
        return None
    if run_id is not None and not isinstance(run_id, str):
        return None
    return ErasureScope(session_id, run_id)
