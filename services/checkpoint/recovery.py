"""Recovery and inspection, derived from a run as the sequencer reports it.

A ``RunFacts`` holds a run's structure (lanes, actions, attempts) and, of its
events, only what recovery looks at, folded in as they are read
(``runread.py`` reads them page by page). Pure functions over it: which
attempts are unresolved and whether retrying each is safe, which events end
the run, which events link checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from laneledger.contract.model import (
    Action,
    Attempt,
    CheckpointInfo,
    CommittedEvent,
    Lane,
    UnresolvedAttempt,
)
from laneledger.contract.vocabulary import TERMINAL_EVENT_TYPES
from laneledger.sdk.checkpoints import LINKED_EVENT

ATTEMPT_REQUESTED = "attempt.requested"
ATTEMPT_TERMINAL = frozenset(TERMINAL_EVENT_TYPES["attempt"])
RUN_TERMINAL = frozenset(TERMINAL_EVENT_TYPES["run"])


@dataclass
class RunFacts:
    """A run's structure, and what recovery needs of its events: kept
    instead of the events themselves, so a run of any length costs memory
    in proportion to its attempts and its terminal and link events."""

    session_id: str
    run_id: str
    tenant: str
    lanes: list[Lane]
    actions: list[Action]
    attempts: list[Attempt]
    requested: dict[str, CommittedEvent] = field(default_factory=dict)  # attempt id: first request
    ended: set[str] = field(default_factory=set)  # attempts completed or failed
    terminal: list[CommittedEvent] = field(default_factory=list)  # run.completed/failed/cancelled
    links: list[CommittedEvent] = field(default_factory=list)  # checkpoint.linked
    last_position: int = 0  # of the events read

    def fold(self, event: CommittedEvent) -> None:
        """Take in one event of the run (lanes are read one after another,
        so events arrive in position order within a lane only)."""
        self.last_position = max(self.last_position, event.position)
        kind = event.event_type
        if kind == ATTEMPT_REQUESTED:
            first = self.requested.get(event.subject_id)
            if first is None or event.position < first.position:
                self.requested[event.subject_id] = event
        elif kind in ATTEMPT_TERMINAL:
            self.ended.add(event.subject_id)
        elif kind in RUN_TERMINAL:
            self.terminal.append(event)
        elif kind == LINKED_EVENT:
            self.links.append(event)

    def settle(self) -> None:
        """Once every lane is read: the collected events in position order."""
        self.terminal.sort(key=lambda event: event.position)
        self.links.sort(key=lambda event: event.position)


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


def unresolved_attempts(run: RunFacts, lane_id: str | None = None) -> list[UnresolvedAttempt]:
    """Attempts with ``attempt.requested`` and no ``attempt.completed`` or
    ``attempt.failed`` (attempt events name the attempt as their subject), in
    the order they were requested; only ``lane_id``'s when given."""
    actions = {action.id: action for action in run.actions}
    found = []
    for attempt in run.attempts:
        event = run.requested.get(attempt.id)
        if event is None or attempt.id in run.ended:
            continue
        if lane_id is not None and attempt.lane_id != lane_id:
            continue
        action = actions.get(attempt.action_id)
        safe, reason = retry_safety(action)
        found.append(
            UnresolvedAttempt(
                attempt_id=attempt.id,
                attempt_no=attempt.attempt_no,
                action_id=attempt.action_id,
                lane_id=attempt.lane_id,
                turn_id=action.turn_id if action else None,
                action_type=action.action_type if action else None,
                name=action.name if action else None,
                effect=action.effect if action else None,
                idempotency=action.idempotency if action else None,
                idempotency_key=action.idempotency_key if action else None,
                requested_event_id=event.id,
                requested_seq=event.seq,
                requested_position=event.position,
                retry_safe=safe,
                reason=reason,
            )
        )
    found.sort(key=lambda u: u.requested_position)
    return found


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
    for name in ("key", "revision", "digest"):
        if name in said and said[name] != getattr(stored, name):
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
