"""An erasure's scope as the ledger's readers match it (spec/erasure.md,
*Readers*): the tail, and the OTel live export, match the events they hold
against the scope an erasure event's payload names.

One home for the matching: a new kind of scope is one more case here. A
scope of a kind a reader does not know is None: the reader leaves it alone
(it must keep following the ledger, never fail on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from laneledger.contract.erasure import ERASURE_EVENT, ERASURE_RUN, LEDGER_SESSION


@dataclass(frozen=True, slots=True)
class ErasureScope:
    """One of: a session of the erasure's tenant (and maybe one run of it),
    the tenant's events naming a data subject, or the tenant's events
    committed before a time (retention)."""

    session_id: str | None = None
    run_id: str | None = None
    data_subject: str | None = None
    committed_before: str | None = None  # the ledger's own timestamp form: compares as text

    def covers(
        self, *, session_id: str, run_id: str, data_subject: Any = None, committed_at: Any = None
    ) -> bool:
        """Whether an event of the erasure's tenant is in the scope (the
        caller checks it was committed before the erasure). The tenant's
        ledger lane, its erasures, is in none."""
        if session_id == LEDGER_SESSION:
            return False
        if self.session_id is not None:
            return session_id == self.session_id and (self.run_id is None or run_id == self.run_id)
        if self.data_subject is not None:
            return bool(data_subject == self.data_subject)
        return isinstance(committed_at, str) and committed_at < str(self.committed_before)


def is_erasure(event_type: str, session_id: str, run_id: str) -> bool:
    """An erasure event: its type, in a tenant's ledger lane."""
    return event_type == ERASURE_EVENT and session_id == LEDGER_SESSION and run_id == ERASURE_RUN


def scope_of(scope: Any) -> ErasureScope | None:
    """The scope an erasure event's ``payload.scope`` names; None for one of
    a kind this reader does not know, or malformed."""
    if not isinstance(scope, dict) or not all(isinstance(v, str) and v for v in scope.values()):
        return None
    match sorted(scope):
        case ["session_id"] | ["run_id", "session_id"] if scope["session_id"] != LEDGER_SESSION:
            return ErasureScope(session_id=scope["session_id"], run_id=scope.get("run_id"))
        case ["data_subject"]:
            return ErasureScope(data_subject=scope["data_subject"])
        case ["committed_before"]:
            return ErasureScope(committed_before=scope["committed_before"])
        case _:
            return None
