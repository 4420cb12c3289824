"""What the OpenTelemetry tests share: a demo session recorded through the
real guard (``laneledger.devtools.demo``), and the span tree its ledger
structure implies, computed from the structure, not by the mapping."""

from __future__ import annotations

from laneledger.contract.model import StructurePage
from laneledger.devtools.demo import run_agent
from laneledger.otel import ids

TENANT = "acme"
TAIL = "http://tail.test:8471"


async def record_demo_run(
    nats_url: str, session_id: str, run_id: str, *, seed: int, pace: float = 0.0, tenant: str = TENANT
) -> None:
    """One demo agent's run (3 turns: retried reads, a failed write, a
    sub-agent spawned by an ``Agent`` tool call, a pause), to its end."""
    await run_agent(nats_url, tenant, session_id, run_id, f"agent-{run_id}", 3, seed, pace)


def expected_tree(structure: StructurePage) -> dict[int, tuple[int | None, str]]:
    """span id -> (parent span id, name) for every run, sub-agent lane and
    model or tool attempt of ``structure``."""
    tenant, session = structure.tenant, structure.session_id
    lanes = {lane.id: lane for lane in structure.lanes}
    actions = {action.id: action for action in structure.actions}
    tree: dict[int, tuple[int | None, str]] = {}
    for lane in structure.lanes:
        if lane.parent_lane_id is None:
            tree[ids.run_span_id(tenant, session, lane.run_id)] = (None, f"invoke_agent {lane.name}")

    def container(lane_id: str) -> int:
        lane = lanes[lane_id]
        if lane.parent_lane_id is None:
            return ids.run_span_id(tenant, session, lane.run_id)
        return ids.lane_span_id(tenant, lane_id)

    for attempt in structure.attempts:
        action = actions[attempt.action_id]
        verb = {"model_call": "chat", "tool_call": "execute_tool"}[action.action_type]
        tree[ids.attempt_span_id(tenant, attempt.id)] = (container(attempt.lane_id), f"{verb} {action.name}")
    for lane in structure.lanes:
        if lane.parent_lane_id is None:
            continue
        # The demo spawns each sub-agent from the one `Agent` tool call of its
        # parent's lane in that run.
        (spawner,) = [
            a
            for a in structure.attempts
            if actions[a.action_id].name == "Agent" and a.lane_id == lane.parent_lane_id
        ]
        tree[ids.lane_span_id(tenant, lane.id)] = (
            ids.attempt_span_id(tenant, spawner.id),
            f"invoke_agent {lane.name}",
        )
    return tree
