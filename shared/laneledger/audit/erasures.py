"""The audit's view of erasure (spec/erasure.md, spec/verify.md): every
erased event names an erasure event that comes after it, is the ledger's own
(``ext.laneledger.erased`` in the tenant's ledger lane) and covers it (same
tenant, its session, and its run when the erasure names one). The erased
events' hashes are checked by the chain like any other (``LaneChains``,
sealed content); this checks who erased them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneledger.audit.faults import integrity_fault, show
from laneledger.contract.chain import ERASED
from laneledger.contract.erasure import ERASURE_EVENT, LEDGER_SESSION
from laneledger.contract.errors import IntegrityError


def is_erasure_event(record: Mapping[str, Any]) -> bool:
    """An erasure event: written by the sequencer, never by a producer (the
    ``laneledger`` namespace is refused on appends), unsigned."""
    return record.get("event_type") == ERASURE_EVENT and record.get("session_id") == LEDGER_SESSION


def covers(scope: Mapping[str, Any], session: Any, run: Any, data_subject: Any) -> bool:
    """Whether an erasure's scope (its payload's ``scope``) covers an event
    of its tenant with these ids (spec/erasure.md)."""
    if "data_subject" in scope:
        return data_subject is not None and data_subject == scope["data_subject"]
    return session == scope.get("session_id") and ("run_id" not in scope or run == scope["run_id"])


class ErasureChecks:
    """Erased events wait for their erasure event (it comes later); memory:
    the erased events not yet matched."""

    def __init__(self) -> None:
        # erasure position -> (position, lane, seq, tenant, session, run, data subject, event id named)
        self._waiting: dict[int, list[tuple[int, str, int, Any, Any, Any, Any, Any]]] = {}
        self.erased_events = 0
        self.erasures = 0

    def check(self, record: Mapping[str, Any], position: int, lane_id: str, seq: int) -> None:
        mark = record.get(ERASED)
        if isinstance(mark, Mapping):
            at = mark.get("position")
            if type(at) is not int or at <= position:
                raise integrity_fault(
                    "erasure_unknown",
                    f"the event is erased by {show(at)}, which is not a later position",
                    position,
                    lane_id,
                    seq,
                    field="erased",
                    found=dict(mark),
                )
            self.erased_events += 1
            self._waiting.setdefault(at, []).append(
                (
                    position,
                    lane_id,
                    seq,
                    record.get("tenant"),
                    record.get("session_id"),
                    record.get("run_id"),
                    record.get("data_subject"),
                    mark.get("event_id"),
                )
            )
        waiting = self._waiting.pop(position, None)
        if waiting is None:
            if is_erasure_event(record):
                self.erasures += 1
            return
        if not is_erasure_event(record):
            first = waiting[0]
            raise _unknown(first, f"position {position} holds no erasure event")
        self.erasures += 1
        payload = record.get("payload")
        found = payload.get("scope") if isinstance(payload, Mapping) else None
        scope: dict[str, Any] = dict(found) if isinstance(found, Mapping) else {}
        for erased in waiting:
            at, lane, erased_seq, tenant, session, run, subject, named = erased
            if named != record.get("id"):
                raise _unknown(erased, f"position {position} is erasure {show(record.get('id'))}")
            covered = tenant == record.get("tenant") and covers(scope, session, run, subject)
            if not covered:
                raise integrity_fault(
                    "erasure_out_of_scope",
                    f"the event is erased by erasure {show(named)} at {position}, whose scope "
                    f"{show(scope)} of tenant {show(record.get('tenant'))} does not cover it",
                    at,
                    lane,
                    erased_seq,
                    field="erased",
                    expected=scope,
                    found={"tenant": tenant, "session_id": session, "run_id": run, "data_subject": subject},
                )

    def finish(self) -> None:
        if self._waiting:
            erasure = min(self._waiting)
            raise _unknown(self._waiting[erasure][0], f"the ledger ends before position {erasure}")


def _unknown(erased: tuple[int, str, int, Any, Any, Any, Any, Any], why: str) -> IntegrityError:
    position, lane, seq, *_, named = erased
    return integrity_fault(
        "erasure_unknown",
        f"the event is erased by erasure {show(named)}, but {why}",
        position,
        lane,
        seq,
        field="erased",
        found=named,
    )
