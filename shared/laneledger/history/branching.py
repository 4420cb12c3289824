"""Branching history without changing it: rewind a session, fork a lane.

Both only ever append. ``rewind_session`` records a ``session.rewound`` event
naming what a rewind invalidates (computed by ``laneledger.history.rewind``);
``fork_lane`` creates a lane that starts from another lane's event and
references, rather than copies, the events before it (spec/object-model.md,
"Rewind and forks").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.contract.errors import EntityNotFound, LaneConflict
from laneledger.contract.model import AppendCommitted, CommittedEvent, ForkPoint, Lane, SessionView
from laneledger.contract.vocabulary import REWOUND
from laneledger.history.causality import Graph, nodes_of, subjects_of
from laneledger.history.rewind import rewind_payload
from laneledger.sdk.client import LedgerClient, make_event

APPEND_TRIES = 3  # a lane head that keeps moving under us is someone else's busy lane


@dataclass(frozen=True)
class Rewound:
    payload: dict[str, Any]  # the session.rewound payload
    lane_id: str  # where it was recorded
    receipt: AppendCommitted | None  # None for a dry run


def session_graph(view: SessionView) -> Graph:
    """The causal graph of a loaded session."""
    bodies = [msgspec.to_builtins(event) for event in view.events]
    return Graph.of(nodes_of(bodies, subjects_of(view.actions, view.attempts)))


def resolve_target(graph: Graph, target: int | str) -> int:
    """The position of ``target``: a position of the session, or an event id."""
    if isinstance(target, int):
        if target not in graph.nodes:
            raise EntityNotFound("the session has no event at this position", kind="event", position=target)
        return target
    for position, node in graph.nodes.items():
        if node.event_id == target:
            return position
    raise EntityNotFound("the session has no event with this id", kind="event", id=target)


async def rewind_session(
    client: LedgerClient,
    session_id: str,
    target: int | str,
    *,
    actor_id: str,
    lane_id: str | None = None,
    reason: str | None = None,
    dry_run: bool = False,
    tenant: str | None = None,
) -> Rewound:
    """Rewind ``session_id`` to ``target`` (a position or an event id): compute
    the invalidation set (Korg §3, all four rules) and record it as a
    ``session.rewound`` event by ``actor_id`` on ``lane_id`` (default: the
    target's lane). Events committed after the computation are not covered
    (``as_of_position``). ``tenant``: whose session (ids are each tenant's
    own; needed only when several tenants have the id)."""
    view = await client.load_session(session_id, tenant=tenant)
    graph = session_graph(view)
    position = resolve_target(graph, target)
    payload = rewind_payload(graph, position, reason=reason)
    lane_id = lane_id or graph.nodes[position].lane_id
    if dry_run:
        return Rewound(payload, lane_id, None)
    for attempt in range(APPEND_TRIES):
        lane = await client.get_lane(lane_id, tenant=view.tenant)
        if lane.session_id != session_id:
            raise EntityNotFound(
                "no such lane in this session", kind="lane", id=lane_id, session_id=session_id
            )
        event = make_event(lane.id, REWOUND, actor_id=actor_id, subject_id=session_id, payload=payload)
        try:
            receipt = await client.append(lane, lane.last_seq, [event])
            return Rewound(payload, lane.id, receipt)
        except LaneConflict:
            if attempt == APPEND_TRIES - 1:
                raise
    raise AssertionError("unreachable")


async def fork_lane(
    client: LedgerClient,
    lane_id: str,
    at_seq: int,
    name: str,
    *,
    actor_id: str,
    kind: str = "branch",
    run_id: str | None = None,
    new_lane_id: str | None = None,
    tenant: str | None = None,
) -> Lane:
    """Fork lane ``lane_id`` at its event ``at_seq`` into a new lane ``name``
    of the same session (and run, unless ``run_id``). The ledger records the
    origin in the lane (``forked_from``); the fork's first event is
    ``lane.created`` naming it, caused by the origin event. Idempotent: a
    retry returns the same lane and records the first event once.
    ``tenant``: whose lane (needed only when several tenants have the id)."""
    origin = await client.get_lane(lane_id, tenant=tenant)
    lane = await client.create_lane(
        origin.tenant,
        origin.session_id,
        run_id or origin.run_id,
        name,
        kind=kind,
        actor_id=actor_id,
        lane_id=new_lane_id,
        fork_of=ForkPoint(lane_id=lane_id, seq=at_seq),
    )
    if lane.last_seq == 0:
        fork = lane.forked_from
        assert fork is not None  # create_lane with fork_of always resolves it
        event = make_event(
            lane.id,
            "lane.created",
            actor_id=actor_id,
            causation_id=fork.event_id,
            payload={
                "name": lane.name,
                "kind": lane.kind,
                "parent_lane_id": lane.parent_lane_id,
                "forked_from": msgspec.to_builtins(fork),
            },
        )
        try:
            await client.append(lane, 0, [event])
        except LaneConflict:
            pass  # a concurrent retry of this fork recorded it first
    return await client.get_lane(lane.id, tenant=lane.tenant)


async def fork_history(
    client: LedgerClient, lane_id: str, *, page: int = 1000, tenant: str | None = None
) -> AsyncIterator[CommittedEvent]:
    """A lane's full history, oldest first: the events of the lane it was
    forked from up to the fork point (recursively, for a fork of a fork),
    then its own. For a lane that is not a fork, just its events. Read page
    by page (``load_lane``), so any length streams in bounded memory."""
    segments: list[tuple[str, int | None]] = [(lane_id, None)]
    lane = await client.get_lane(lane_id, tenant=tenant)
    fork = lane.forked_from
    while fork is not None:  # forks stay in the lane's tenant
        segments.append((fork.lane_id, fork.seq))
        fork = (await client.get_lane(fork.lane_id, tenant=lane.tenant)).forked_from
    for segment, last in reversed(segments):
        after = 0
        while True:
            limit = page if last is None else min(page, last - after)
            if limit <= 0:
                break
            got = await client.load_lane(segment, after_seq=after, limit=limit, tenant=lane.tenant)
            for event in got.events:
                yield event
            if not got.events or not got.has_more:
                break
            after = got.events[-1].seq
