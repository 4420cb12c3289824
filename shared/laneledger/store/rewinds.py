"""What a ``session.rewound`` event must name beyond its shape
(spec/object-model.md, "Rewind"): an earlier event of its own session, at
the position it says."""

from __future__ import annotations

from collections.abc import Callable

from laneledger.contract.errors import InvalidPayload
from laneledger.contract.model import ProposedEvent
from laneledger.store.batch import BatchState, LaneHead


def check_rewind(
    event: ProposedEvent,
    lane: LaneHead,
    state: BatchState,
    position: int,
    stored_event: Callable[[str, str], tuple[str, int] | None],
) -> None:
    """A ``session.rewound`` event (its shape is checked already) must name
    an event of its own session at the position it says, and cover only
    positions before its own: a rewind cannot reach future events."""
    payload = event.payload
    if payload["as_of_position"] >= position:
        raise InvalidPayload(
            "a rewind covers only events committed before it",
            field="payload.as_of_position",
            found=payload["as_of_position"],
            position=position,
        )
    target = payload["target_event_id"]
    found = state.events.get((lane.tenant, target))
    if found is None:
        found = stored_event(target, lane.tenant)
    if found is None or found[0] != lane.session_id:
        raise InvalidPayload(
            "the rewind target is not an event of this session",
            field="payload.target_event_id",
            found=target,
        )
    if found[1] != payload["target_position"]:
        raise InvalidPayload(
            "the rewind target is at another position",
            field="payload.target_position",
            found=payload["target_position"],
            expected=found[1],
        )
