"""The worked example of Korg spec §2b/§3, recorded as a real session.

Seven Korg tool calls on three spines (one lane per source agent, as the
tail's Korg endpoint records them), appended through the real sequencer in
Korg's order, each naming its cause by ``causation_id``:

    seq=1  user_prompt    triggered_by=None  human:dusk
    seq=2  llm_inference  triggered_by=1     agent:main
    seq=3  user_prompt    triggered_by=2     agent:sub   (cross-spine)
    seq=4  llm_inference  triggered_by=3     agent:sub
    seq=5  Read           triggered_by=4     agent:sub
    seq=6  Agent          triggered_by=2     agent:main  (the spawn's result)
    seq=7  llm_inference  triggered_by=6     agent:main

On a fresh ledger, Korg's seq N is ledger position ``first + N - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

from laneledger.contract.model import Lane
from laneledger.sdk.client import LedgerClient, make_event

TENANT = "acme"
RUN = "r1"
SPINES = {
    "human": "human:dusk",
    "main": "agent:claude-code/main@2.1.150",
    "sub": "agent:claude-code/sub-toolu_01@2.1.150",
}
# (spine, tool_name, triggered_by as a Korg seq, args)
CALLS = [
    ("human", "user_prompt", None, {"prompt": "summarize the repo"}),
    ("main", "llm_inference", 1, {"model": "claude"}),
    ("sub", "user_prompt", 2, {"prompt": "read the README"}),
    ("sub", "llm_inference", 3, {"model": "claude"}),
    ("sub", "Read", 4, {"file_path": "README.md"}),
    ("main", "Agent", 2, {"description": "read the README"}),
    ("main", "llm_inference", 6, {"model": "claude"}),
]


@dataclass
class Recorded:
    session_id: str
    lanes: dict[str, Lane]  # spine -> lane
    actors: dict[str, str]  # spine -> actor id
    ids: dict[int, str]  # Korg seq -> event id
    positions: dict[int, int]  # Korg seq -> ledger position


async def record_worked_example(client: LedgerClient, session_id: str = "s2b") -> Recorded:
    lanes: dict[str, Lane] = {}
    actors: dict[str, str] = {}
    for spine, key in SPINES.items():
        kind = "human" if spine == "human" else "agent"
        actor = await client.ensure_actor(TENANT, key, kind)
        actors[spine] = actor.id
        lanes[spine] = await client.create_lane(
            TENANT, session_id, RUN, key, actor_id=actor.id, kind="subagent" if spine == "sub" else "main"
        )
    ids: dict[int, str] = {}
    positions: dict[int, int] = {}
    heads = {spine: 0 for spine in SPINES}
    for seq, (spine, tool, cause, args) in enumerate(CALLS, start=1):
        payload = {
            "source_agent": SPINES[spine],
            "tool_name": tool,
            "args": args,
            "result": {"ok": True},
            "success": True,
            "duration_ms": 5,
            "triggered_by": None if cause is None else positions[cause],
            "payload_refs": [],
        }
        event = make_event(
            lanes[spine].id,
            "ext.korg.agent_tool_call",
            actor_id=actors[spine],
            payload=payload,
            causation_id=None if cause is None else ids[cause],
        )
        receipt = await client.append(lanes[spine], heads[spine], [event])
        heads[spine] = receipt.last_seq
        ids[seq] = event["id"]
        positions[seq] = receipt.positions[0]
    return Recorded(session_id, lanes, actors, ids, positions)
