"""laneledger on a three-node nats-server cluster (loopback) with replicated
streams (``--replicas 3``): under load from four producer processes spread
over the nodes, SIGKILL the node that leads LEDGER_APPEND (or, every other
time in the long form, the node the services are connected to, so they must
fail over to another). Commits continue
on the other two, nothing is lost, the node rejoins on its store, its
replicas of both streams catch up, and — made the leader of LEDGER_EVENTS —
it serves every committed event exactly as SQLite holds it. Every invariant
holds (``ledger_invariants``).

Short form: one node killed once. Long form: five kills."""

from __future__ import annotations

import asyncio
import json

import nats
import nats.errors
import nats.js.errors
import pytest
from fault_harness import FaultRig, fault_timeout, scaled
from ledger_invariants import ledger_events
from polling import eventually

KILLS = scaled(1, 5)
STREAMS = ("LEDGER_APPEND", "LEDGER_EVENTS")


# While the cluster elects a leader after a node went away or came back, the
# JetStream API answers late, not at all, or "unavailable": ask again.
ELECTION_ERRORS = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
)


async def stream_info(js, stream: str, timeout: float = 60.0):
    """``js.stream_info``, retried (bounded) through an election."""
    return await eventually(
        lambda: js.stream_info(stream),
        what=f"info on {stream}",
        timeout=timeout,
        interval=0.2,
        retry_on=ELECTION_ERRORS,
    )


def is_current(cluster, node: str) -> bool:
    """``node`` leads the stream or is a current replica of it, with no lag."""
    peer = {p.name: p for p in cluster.replicas or []}.get(node)
    return cluster.leader == node or (peer is not None and peer.current and not peer.offline and not peer.lag)


async def wait_for_replica(js, stream: str, node: str, timeout: float = 60.0) -> None:
    await eventually(
        lambda: js.stream_info(stream),
        until=lambda info: is_current(info.cluster, node),
        what=f"{node}'s replica of {stream} to catch up",
        timeout=timeout,
        interval=0.1,
        retry_on=ELECTION_ERRORS,
    )


async def make_leader(nc, js, stream: str, node: str, timeout: float = 30.0) -> None:
    async def leader_or_step_down() -> str | None:
        leader = (await js.stream_info(stream)).cluster.leader
        if leader != node:
            try:
                await nc.request(
                    f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}",
                    json.dumps({"placement": {"preferred": node}}).encode(),
                    timeout=5,
                )
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                pass  # an election under way: ask again
        return leader

    await eventually(
        leader_or_step_down,
        until=lambda leader: leader == node,
        what=f"{node} to lead {stream}",
        timeout=timeout,
        interval=0.3,
        retry_on=ELECTION_ERRORS,
    )


@fault_timeout
@pytest.mark.slow
async def test_a_killed_node_loses_nothing_and_rejoins(cluster, tmp_path, request):
    nc = await nats.connect(cluster.urls, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
    js = nc.jetstream()
    killed: list[str] = []
    try:
        async with FaultRig(cluster.urls[0], tmp_path, request, replicas=3) as rig:
            for stream in STREAMS:
                assert (await stream_info(js, stream)).config.num_replicas == 3
            await rig.start_load(urls=cluster.urls)
            for k in range(KILLS):
                leader = (await stream_info(js, "LEDGER_APPEND")).cluster.leader
                if k % 2:
                    leader = cluster.node_name(0)  # the services' node
                i = int(leader.removeprefix("n"))
                before = rig.outcomes()
                cluster.kill(i)
                killed.append(leader)
                # Commits go on with two of three nodes.
                await rig.wait_for_outcomes(more=40)
                await asyncio.to_thread(cluster.start_node, i)
                for stream in STREAMS:
                    await wait_for_replica(js, stream, leader)
                assert rig.outcomes() > before
            await rig.wait_for_outcomes(more=20)
            summary = await rig.finish(js)
            for service in rig.services:
                assert service.running and service.starts == 1, f"{service} did not ride it out"

            # The last node killed holds a full copy: as the leader it serves
            # every committed event byte for byte as SQLite has it.
            await make_leader(nc, js, "LEDGER_EVENTS", killed[-1])
            for position, body in ledger_events(rig.db):
                assert (await js.get_msg("LEDGER_EVENTS", position)).data == body, position
            info = await stream_info(js, "LEDGER_EVENTS")
            assert info.state.last_seq == summary["events"] and info.cluster.leader == killed[-1]
    finally:
        await nc.close()
    print(f"nats cluster: killed {killed}, {summary}")
