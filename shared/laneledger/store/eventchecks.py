"""Step 5 of the append algorithm (spec/object-model.md): what each event of
a request must be before it is committed — its schema version, a real
instant, its lane, a known type and payload, an unused id, an actor of the
lane's tenant, a subject of the lane, a cause earlier in its session.
Signatures (store/signatures.py) and rewinds (store/rewinds.py) are checked
apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from msgspec import UNSET

from laneledger.contract.errors import (
    CausationViolation,
    DuplicateEvent,
    EntityNotFound,
    InvalidRequest,
    SubjectMismatch,
)
from laneledger.contract.model import ProposedEvent, timestamp_problem
from laneledger.contract.vocabulary import SCHEMA_VERSION, check_event_type, check_payload
from laneledger.store.batch import BatchState, LaneHead


def check_event(
    event: ProposedEvent,
    index: int,
    lane: LaneHead,
    state: BatchState,
    known: dict[tuple[str, str], tuple[str, int]],
    subjects: dict[tuple[str, str], str],
    in_request: dict[str, int],
    request_events: Sequence[ProposedEvent],
    actor_tenants: Mapping[str, str],
) -> None:
    where = f"$.events[{index}]"
    if event.schema_version != SCHEMA_VERSION:
        raise InvalidRequest(
            f"schema_version must be {SCHEMA_VERSION!r}",
            path=f"{where}.schema_version",
            found=event.schema_version,
        )
    problem = timestamp_problem(event.occurred_at)
    if problem is not None:
        raise InvalidRequest(
            f"occurred_at is not a real instant: {problem}",
            path=f"{where}.occurred_at",
            found=event.occurred_at,
        )
    if event.lane_id != lane.id:
        raise SubjectMismatch(
            "event names another lane than the append request",
            event_id=event.id,
            event_lane_id=event.lane_id,
            lane_id=lane.id,
        )
    check_event_type(event.event_type)
    check_payload(event.event_type, event.payload)
    key = (lane.tenant, event.id)  # event ids are the tenant's own
    if key in known or key in state.events or event.id in in_request:
        committed = known.get(key) or state.events.get(key)
        raise DuplicateEvent(
            "event id already used",
            event_id=event.id,
            position=committed[1] if committed else None,  # None: it repeats within the request
        )
    # Actor ids are the ledger's (minted unique); another tenant's actor is
    # answered as a missing one.
    actor_tenant = actor_tenants.get(event.actor_id)
    if actor_tenant != lane.tenant:
        raise EntityNotFound("no such actor", kind="actor", id=event.actor_id)
    subject = event.subject_id
    if subject not in (lane.id, lane.session_id, lane.run_id):
        owner = subjects.get((lane.tenant, subject))
        if owner != lane.id:
            raise SubjectMismatch(
                "subject is not part of the target lane",
                event_id=event.id,
                subject_id=subject,
                lane_id=lane.id,
                reason="unknown_subject" if owner is None else "other_lane",
            )
    cause = event.causation_id
    if cause is not UNSET:
        if cause in in_request:
            return  # an earlier event of this request: same lane, earlier
        found = known.get((lane.tenant, cause)) or state.events.get((lane.tenant, cause))
        if found is None:
            # itself or a later event of this request, or nothing at all
            reason = "not_earlier" if any(e.id == cause for e in request_events) else "unknown"
            raise CausationViolation(
                "causation names no earlier event",
                event_id=event.id,
                causation_id=cause,
                reason=reason,
            )
        if found[0] != lane.session_id:
            raise CausationViolation(
                "causation crosses sessions",
                event_id=event.id,
                causation_id=cause,
                reason="other_session",
            )
