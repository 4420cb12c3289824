"""Rewind: which events a rewind to one event invalidates (Korg spec §3).

Pure computation over a session's ``causality.Graph``; recording the result as
a ``session.rewound`` event is ``branching.rewind_session``. Committed events
are never deleted: the rewind event names what readers may leave out.

An event S later than the target N is invalidated when any of these holds,
applied to a fixpoint (what an invalidated event invalidates is invalidated
too):

1. S's cause chain reaches N;
2. S is an inference whose prompt consumed an invalidated tool call's result:
   the tool call is S's sibling (same spine, same cause) and earlier than S;
3. S belongs to a sub-agent spine spawned by an invalidated tool call (and
   comes after it: a spawn result recorded when the sub-agent returned did
   not start it);
4. S is the spawn tool call (or, through 1 and 2, an inference consuming its
   return value) of a sub-agent spine that holds an invalidated event — or
   N itself.

Rules 2 and 4 are content-aware: they follow what a prompt consumed, not only
``causation_id`` edges (spec/object-model.md, "Rewind").
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from typing import Any

from laneledger.contract.errors import EntityNotFound, InvalidRequest
from laneledger.history.causality import INFERENCE, REWIND, TOOL, Graph


def invalidated(graph: Graph, target: int) -> list[int]:
    """Positions invalidated by a rewind to the event at position ``target``,
    ascending. ``EntityNotFound`` when the session has no event there,
    ``InvalidRequest`` when that event is itself a rewind."""
    node = graph.nodes.get(target)
    if node is None:
        raise EntityNotFound("the session has no event at this position", kind="event", position=target)
    if node.role == REWIND:
        raise InvalidRequest("cannot rewind to a rewind event", path="$.target", position=target)
    down: set[int] = set()
    queue = [target]
    expanded: set[int] = set()

    def mark(position: int) -> None:
        found = graph.nodes.get(position)
        if position > target and position not in down and found is not None and found.role != REWIND:
            down.add(position)
            queue.append(position)

    def consumers(position: int) -> Iterable[int]:
        """Rule 2: the later sibling inferences that read this tool call's
        result. A call recorded as several events (a request, its outcome,
        retries pointing at failures) is a chain of tool nodes: its siblings
        are those of the chain's first event."""
        tool = graph.nodes[position]
        if tool.role != TOOL:
            return ()
        anchor = tool
        while anchor.cause is not None:
            parent = graph.nodes.get(anchor.cause)
            if parent is None or parent.role != TOOL or parent.lane_id != tool.lane_id:
                break
            anchor = parent
        if anchor.cause is None:
            return ()
        return [
            p
            for p in graph.children.get(anchor.cause, ())
            if p > position and graph.nodes[p].role == INFERENCE and graph.nodes[p].lane_id == tool.lane_id
        ]

    while queue:
        position = queue.pop()
        if position in expanded:
            continue
        expanded.add(position)
        node = graph.nodes[position]
        for child in graph.children.get(position, ()):  # rule 1
            mark(child)
        for consumer in consumers(position):  # rule 2
            mark(consumer)
        for spine in graph.spawned.get(position, ()):  # rule 3
            for member in graph.spines.get(spine, ()):
                # A spawn recorded when the sub-agent returned (Korg §2b) did
                # not start it: only what ran after the call depends on it.
                if member > position:
                    mark(member)
        for spawner in graph.spawners.get(node.lane_id, ()):  # rule 4
            if spawner > target:
                mark(spawner)
            else:
                # The spawn call was recorded before the target (when it was
                # made, not when it returned): it stays, but what consumed its
                # return value does not.
                for later in [*graph.children.get(spawner, ()), *consumers(spawner)]:
                    mark(later)
    return sorted(down)


def ranges(session_positions: Iterable[int], invalid: Iterable[int]) -> list[list[int]]:
    """``invalid`` as ``[first, last]`` position ranges over the session's own
    events: consecutive invalidated events of the session (whatever other
    sessions committed in between) make one range."""
    bad = set(invalid)
    out: list[list[int]] = []
    open_range = False
    for position in sorted(session_positions):
        if position in bad:
            if open_range:
                out[-1][1] = position
            else:
                out.append([position, position])
                open_range = True
        else:
            open_range = False
    return out


def rewind_payload(graph: Graph, target: int, *, reason: str | None = None) -> dict[str, Any]:
    """The payload of the ``session.rewound`` event for a rewind to ``target``
    (spec/vocabulary.md)."""
    down = invalidated(graph, target)
    payload: dict[str, Any] = {
        "target_event_id": graph.nodes[target].event_id,
        "target_position": target,
        "as_of_position": max(graph.nodes),
        "invalidated": ranges(graph.nodes, down),
        "invalidated_count": len(down),
    }
    if reason is not None:
        payload["reason"] = reason
    return payload


class Invalidation:
    """What the ``session.rewound`` events of one session invalidate: a range
    covers the session's events between its bounds (the events of other
    sessions in between are not the rewind's business)."""

    def __init__(self, payloads: Iterable[Mapping[str, Any]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self.rewinds = 0
        for payload in payloads:
            self.add(payload)

    def add(self, payload: Mapping[str, Any]) -> None:
        self.rewinds += 1
        spans = sorted(zip(self._starts, self._ends, strict=True))
        spans.extend(tuple(r) for r in payload.get("invalidated", ()))
        merged: list[list[int]] = []
        for first, last in sorted(spans):
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        self._starts = [m[0] for m in merged]
        self._ends = [m[1] for m in merged]

    def __contains__(self, position: int) -> bool:
        at = bisect.bisect_right(self._starts, position) - 1
        return at >= 0 and position <= self._ends[at]

    def __bool__(self) -> bool:
        return bool(self._starts)

    def spans(self) -> list[list[int]]:
        return [[a, b] for a, b in zip(self._starts, self._ends, strict=True)]
