"""Appends with derived ids: the part the hook and trace recorders share
(``claude_agent``, ``openai_agents``).

A recorder that sees a harness through callbacks names everything it writes
after what the harness calls it: every event, turn, action, attempt and
append id is ``derived_id(runtime, tenant, scope, *parts)``, ``scope`` being
the harness's session (Claude) or trace (OpenAI Agents). Doing the same work
twice (a resent hook, a job retried after the ledger came back) therefore
mints the same ids, and the ledger answers the second append with the first
one's receipt or refuses it as a duplicate: both mean "recorded".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from laneledger.contract.errors import DuplicateEvent, IdempotencyViolation, LaneConflict, LedgerError
from laneledger.contract.ids import derived_id
from laneledger.contract.model import Lane
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.sdk.content import prepared

MAX_LANE_CONFLICTS = 8


class DerivedRecorder:
    """Writes ``tenant``'s ledger with ids derived from ``runtime`` names."""

    runtime: ClassVar[str]

    def __init__(
        self,
        client: LedgerClient,
        *,
        tenant: str,
        timeout: float | None = None,
        data_subject: str | None = None,
    ) -> None:
        """``timeout``: how long one append waits for its receipt (default:
        the client's). ``data_subject``: whose personal data the recorded
        events hold, named on each (spec/erasure.md)."""
        self.client = client
        self.tenant = tenant
        self.timeout = timeout
        self.data_subject = data_subject
        self._actors: dict[str, str] = {}  # actor key -> id

    def _id(self, scope: str, *parts: str) -> str:
        return derived_id(self.runtime, self.tenant, scope, *parts)

    async def _actor(self, key: str, version: str = "unknown") -> str:
        """The agent actor ``agent:<runtime>/<key>@<version>`` (ensured once:
        an actor's id never changes)."""
        actor_key = f"agent:{self.runtime}/{key}@{version}"
        if actor_key not in self._actors:
            actor = await self.client.ensure_actor(
                self.tenant, actor_key, "agent", attributes={"runtime": self.runtime}
            )
            self._actors[actor_key] = actor.id
        return self._actors[actor_key]

    async def _human(self, key: str) -> str:
        if key not in self._actors:
            self._actors[key] = (await self.client.ensure_actor(self.tenant, key, "human")).id
        return self._actors[key]

    def _event(
        self,
        lane: Lane,
        scope: str,
        key: str,
        event_type: str,
        subject_id: str,
        payload: Mapping[str, Any],
        cause: str | None,
        actor_id: str,
        occurred_at: str | None = None,
    ) -> dict[str, Any]:
        return make_event(
            lane.id,
            event_type,
            actor_id=actor_id,
            subject_id=subject_id,
            payload=payload,
            causation_id=cause,
            event_id=self._id(scope, "event", key),
            occurred_at=occurred_at,
            data_subject=self.data_subject,
        )

    async def _append(
        self, lane: Lane, scope: str, key: str, events: list[dict[str, Any]], *, head: int | None = None
    ) -> int:
        """One append with the derived append id ``key``: at ``head`` when the
        caller knows the lane's head (one round trip fewer), else at the head
        it reads; again at the new head when another writer (a parallel tool
        call) moved the lane. Recorded already (a resend) counts as done.
        Returns the lane's head as this append left it, as far as it knows."""
        ready = [prepared(e, self.client.redactor) for e in events]
        append_id = self._id(scope, "append", key)
        for _ in range(MAX_LANE_CONFLICTS):
            if head is None:
                head = (await self.client.get_lane(lane.id, tenant=self.tenant)).last_seq
            try:
                receipt = await self.client.append(
                    lane, head, ready, append_id=append_id, retries=0, timeout=self.timeout
                )
            except LaneConflict:
                head = None
                continue
            except (DuplicateEvent, IdempotencyViolation):
                return (await self.client.get_lane(lane.id, tenant=self.tenant)).last_seq
            return max(head, receipt.last_seq)
        raise LaneConflict(f"lane {lane.id} kept moving ({MAX_LANE_CONFLICTS} tries)", lane_id=lane.id)

    async def _queue_behind(self, lane: Lane, scope: str, key: str, event: dict[str, Any], head: int) -> None:
        """Queue ``event`` to commit at ``head`` (``submit``, not awaiting the
        receipt): right behind an append whose receipt did not come, it
        commits only if that append does; otherwise it is refused for the
        head it expects."""
        try:
            await self.client.submit(
                lane, head, [prepared(event, self.client.redactor)], append_id=self._id(scope, "append", key)
            )
        except LedgerError:
            pass  # NATS itself is gone: the append before it did not get there either
