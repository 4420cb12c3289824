"""`python -m laneledger.services.checkpoint` as a real process: the ready line, /readyz,
SIGKILL and restart on the same data (nothing saved is lost, the anchor index
resumes exactly where it was), SIGTERM as a clean stop."""

from __future__ import annotations

import aiohttp
from checkpoint_support import CheckpointProcess
from failure_logs import show_log_on_failure
from polling import eventually

from laneledger.sdk.checkpoints import CheckpointClient, anchor_of
from laneledger.sdk.client import LaneRecorder

FORMAT = "application/vnd.tests.state+json;version=1"


async def http_status(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status


async def test_the_service_process_survives_sigkill(nats_server, client, actor, tmp_path, request):
    proc = CheckpointProcess(nats_server.url, tmp_path / "checkpoint", extra_args=("--anchor-wait-s", "10"))
    show_log_on_failure(request, proc)
    try:
        proc.start()
        assert proc.position == 0
        checkpoints = CheckpointClient(client)
        recorder = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
        receipt = await recorder.append(
            [recorder.event("stream.text_delta", actor_id=actor.id) for _ in range(3)]
        )
        first = await checkpoints.save(
            "p", expected_revision=0, format=FORMAT, state={"n": 1}, anchor=anchor_of(receipt)
        )

        await eventually(
            lambda: http_status(f"{proc.http_url}/readyz"),
            until=lambda status: status == 200,
            what="the checkpoint process's /readyz to answer 200",
        )
        assert await http_status(f"{proc.http_url}/healthz") == 200

        proc.kill()  # SIGKILL: no chance to flush anything
        receipt = await recorder.append([recorder.event("stream.text_delta", actor_id=actor.id)])
        proc.start()
        assert proc.position >= 3  # the index's position survived with what it derived
        assert await checkpoints.get(first.id) == first
        # Events committed while it was down are consumed after the restart.
        second = await checkpoints.save(
            "p", expected_revision=1, format=FORMAT, state={"n": 2}, anchor=anchor_of(receipt)
        )
        assert second.revision == 2 and second.anchor.seq == 4
        assert proc.terminate() == 0  # SIGTERM: a clean stop
    finally:
        proc.stop()
