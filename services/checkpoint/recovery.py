"""Recovery and inspection, derived from a run as the sequencer reports it.

Pure functions over a ``RunView`` (``load_run``: lanes, turns, actions,
attempts and events): which attempts are unresolved and whether retrying
each is safe, which events end the run, which events link checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from laneledger.checkpoints import LINKED_EVENT
from laneledger.model import Action, CheckpointInfo, CommittedEvent, RunView, UnresolvedAttempt
from laneledger.vocabulary import TERMINAL_EVENT_TYPES

ATTEMPT_REQUESTED = "attempt.requested"
ATTEMPT_TERMINAL = frozenset(TERMINAL_EVENT_TYPES["attempt"])
RUN_TERMINAL = frozenset(TERMINAL_EVENT_TYPES["run"])


def retry_safety(action: Action | None) -> tuple[bool, str]:
    """Whether an unresolved attempt of ``action`` may be retried without
    asking anyone, and why (spec/checkpoint.md, "Retry safety").

    The requested event was committed before the external call, so the call
    may or may not have happened. Repeating it is harmless only when it has
    no effect, only reads, or is idempotent by nature or by a key the callee
    deduplicates on. Anything else — a write or an unknown effect without
    that — is never safe, and neither is an attempt whose action is unknown.
    """
    if action is None:
        return False, "unknown_action"
    if action.effect in ("none", "read"):
        return True, f"effect_{action.effect}"
    if action.idempotency == "inherent":
        return True, "idempotent_inherent"
    if action.idempotency == "keyed":
        if action.idempotency_key:
            return True, "idempotent_keyed"
        return False, "keyed_without_key"
    return False, "side_effect_not_idempotent"


def unresolved_attempts(view: RunView, lane_id: str | None = None) -> list[UnresolvedAttempt]:
    """Attempts with ``attempt.requested`` and no ``attempt.completed`` or
    ``attempt.failed`` (attempt events name the attempt as their subject), in
    the order they were requested; only ``lane_id``'s when given."""
    requested: dict[str, CommittedEvent] = {}
    ended: set[str] = set()
    for event in view.events:
        if event.event_type == ATTEMPT_REQUESTED:
            requested.setdefault(event.subject_id, event)
        elif event.event_type in ATTEMPT_TERMINAL:
            ended.add(event.subject_id)
    actions = {action.id: action for action in view.actions}
    found = []
    for attempt in view.attempts:
        event = requested.get(attempt.id)
        if event is None or attempt.id in ended:
            continue
        if lane_id is not None and attempt.lane_id != lane_id:
            continue
        action = actions.get(attempt.action_id)
        safe, reason = retry_safety(action)
        found.append(UnresolvedAttempt(
            attempt_id=attempt.id, attempt_no=attempt.attempt_no, action_id=attempt.action_id,
            lane_id=attempt.lane_id,
            turn_id=action.turn_id if action else None,
            action_type=action.action_type if action else None,
            name=action.name if action else None,
            effect=action.effect if action else None,
            idempotency=action.idempotency if action else None,
            idempotency_key=action.idempotency_key if action else None,
            requested_event_id=event.id, requested_seq=event.seq,
            requested_position=event.position, retry_safe=safe, reason=reason,
        ))
    found.sort(key=lambda u: u.requested_position)
    return found


def terminal_events(view: RunView) -> list[CommittedEvent]:
    """The events that end the run: run.completed, run.failed, run.cancelled."""
    return [event for event in view.events if event.event_type in RUN_TERMINAL]


def linked_events(events: Iterable[CommittedEvent]) -> list[tuple[CommittedEvent, str | None]]:
    """Each ``lane.framework.checkpoint.linked`` event with the checkpoint id
    its payload names (None when it names none)."""
    found = []
    for event in events:
        if event.event_type == LINKED_EVENT:
            checkpoint_id = event.payload.get("checkpoint_id")
            found.append((event, checkpoint_id if isinstance(checkpoint_id, str) else None))
    return found


def link_problem(event: CommittedEvent, stored: CheckpointInfo | None) -> str | None:
    """None when the link names a stored checkpoint and whatever else it
    states about it (key, revision, digest) agrees; otherwise the problem."""
    if stored is None:
        return "unknown_checkpoint"
    said = event.payload
    for field in ("key", "revision", "digest"):
        if field in said and said[field] != getattr(stored, field):
            return "mismatch"
    return None


def lane_events_page(events: list[CommittedEvent], limit_bytes: int, fixed_bytes: int) -> int:
    """How many of ``events`` fit in ``limit_bytes`` next to ``fixed_bytes``
    of other reply content (their encoded sizes, conservatively summed)."""
    room = limit_bytes - fixed_bytes
    for n, event in enumerate(events):
        room -= len(msgspec.json.encode(event)) + 1
        if room < 0:
            return n
    return len(events)
