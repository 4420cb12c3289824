"""The audit's view of erasure (spec/erasure.md, spec/verify.md): every
erased event names an erasure event that comes after it, is the ledger's own
(``ext.laneledger.erased`` in the tenant's ledger lane) and covers it (same
tenant; its session, and its run when the erasure names one; or its data
subject; or, for retention, a time it was committed before). The erased
events' hashes are checked by the chain like any other (``LaneChains``,
sealed content); this checks who erased them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laneledger.audit.faults import integrity_fault, show
from laneledger.contract.chain import ERASED
from laneledger.contract.erasurescope import is_erasure, scope_of
from laneledger.contract.errors import IntegrityError


def is_erasure_event(record: Mapping[str, Any]) -> bool:
    """An erasure event: written by the sequencer, never by a producer (the
    ``laneledger`` namespace is refused on appends), unsigned."""
    return is_erasure(record.get("event_type", ""), record.get("session_id", ""), record.get("run_id", ""))


def covers(scope: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Whether an erasure's scope (its payload's ``scope``) covers an event
    of its tenant, as every reader matches it (``contract.erasurescope``);
    a scope of no known kind covers nothing."""
    known = scope_of(dict(scope))
    return known is not None and known.covers(
        session_id=event.get("session_id", ""),
        run_id=event.get("run_id", ""),
        data_subject=event.get("data_subject"),
        committed_at=event.get("committed_at"),
    )


@dataclass(frozen=True, slots=True)
class _Erased:
    position: int
    lane_id: str
    seq: int
    named: Any  # the erasure's event id, as the mark says
    ids: dict[str, Any]  # what a scope is matched against


_MATCHED = ("tenant", "session_id", "run_id", "data_subject", "committed_at")


class ErasureChecks:
    """Erased events wait for their erasure event (it comes later); memory:
    the erased events not yet matched."""

    def __init__(self) -> None:
        self._waiting: dict[int, list[_Erased]] = {}  # by the erasure's position
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
            ids = {k: record.get(k) for k in _MATCHED}
            self._waiting.setdefault(at, []).append(
                _Erased(position, lane_id, seq, mark.get("event_id"), ids)
            )
        waiting = self._waiting.pop(position, None)
        if is_erasure_event(record):
            self.erasures += 1
        if waiting is None:
            return
        if not is_erasure_event(record):
            raise _unknown(waiting[0], f"position {position} holds no erasure event")
        payload = record.get("payload")
        found = payload.get("scope") if isinstance(payload, Mapping) else None
        scope: dict[str, Any] = dict(found) if isinstance(found, Mapping) else {}
        for erased in waiting:
            if erased.named != record.get("id"):
                raise _unknown(erased, f"position {position} is erasure {show(record.get('id'))}")
            if erased.ids["tenant"] != record.get("tenant") or not covers(scope, erased.ids):
                raise integrity_fault(
                    "erasure_out_of_scope",
                    f"the event is erased by erasure {show(erased.named)} at {position}, whose scope "
                    f"{show(scope)} of tenant {show(record.get('tenant'))} does not cover it",
                    erased.position,
                    erased.lane_id,
                    erased.seq,
                    field="erased",
                    expected=scope,
                    found=erased.ids,
                )

    def finish(self) -> None:
        if self._waiting:
            erasure = min(self._waiting)
            raise _unknown(self._waiting[erasure][0], f"the ledger ends before position {erasure}")


def _unknown(erased: _Erased, why: str) -> IntegrityError:
    return integrity_fault(
        "erasure_unknown",
        f"the event is erased by erasure {show(erased.named)}, but {why}",
        erased.position,
        erased.lane_id,
        erased.seq,
        field="erased",
        found=erased.named,
    )
