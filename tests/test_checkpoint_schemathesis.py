"""Schemathesis against the checkpoint service's HTTP reads, as served: a real
nats-server, the real sequencer, checkpoints saved (inline, as an artifact,
and a run's terminal one, linked) in two tenants, and the service as its own
OS process with a tokens file and an operator token.

Every operation of the OpenAPI document the service serves at
``/api/v1/openapi.json`` is fuzzed by ``schemathesis_support`` (no 5xx,
answers conform to the document, invalid requests refused with a 4xx),
twice: with the operator's bearer token and with acme's.
"""

from __future__ import annotations

import asyncio
import secrets

import pytest
import requests
import schemathesis
from checkpoint_support import CheckpointProcess
from polling import eventually
from schemathesis_support import bearer, fuzz_every_operation

from laneledger.sdk.checkpoints import CheckpointClient, anchor_of, complete_run
from laneledger.sdk.client import LaneRecorder, LedgerClient

pytestmark = pytest.mark.timeout(300)

FORMAT = "application/vnd.tests.fuzz-state+json;version=1"


async def saved_world(client: LedgerClient) -> dict[str, str]:
    """Checkpoints of acme and globex; the ids of acme's, for the fuzzer to aim at."""
    checkpoints = CheckpointClient(client)
    known: dict[str, str] = {}
    for tenant in ("globex", "acme"):
        who = await client.ensure_actor(tenant, f"agent:{tenant}/fuzz@1", "agent")
        lane = await LaneRecorder.open(client, tenant, f"s-{tenant}", "r1", "main", actor_id=who.id)
        receipt = await lane.append(
            [
                lane.event("run.started", actor_id=who.id, subject_id="r1"),
                lane.event("stream.text_delta", actor_id=who.id, payload={"text": "hi"}),
            ]
        )
        key = f"{tenant}/s/r1/main"  # a key with slashes: a query value, not a path
        first = await checkpoints.save(
            key,
            expected_revision=0,
            format=FORMAT,
            state={"n": 1},
            anchor=anchor_of(receipt),
            session_id=f"s-{tenant}",
            run_id="r1",
        )
        art = await checkpoints.save(
            f"{tenant}-artifact",
            expected_revision=0,
            format=FORMAT,
            data=secrets.token_bytes(64),
            media_type="application/octet-stream",
            session_id=f"s-{tenant}",
            run_id="r1",
        )
        await lane.append([lane.event("stream.text_delta", actor_id=who.id, payload={"text": "more"})])
        await complete_run(
            lane, checkpoints, key=key, expected_revision=1, format=FORMAT, actor_id=who.id, state={"n": 2}
        )
        known = {
            "checkpoint_id": first.id,
            "key": key,
            "session_id": f"s-{tenant}",
            "run_id": "r1",
            "lane_id": lane.lane.id,
            "sha256": art.artifact.sha256,
        }
    return known


@pytest.mark.slow
async def test_the_checkpoint_api_survives_schemathesis(client: LedgerClient, nats_server, tmp_path):
    token, tenant_token = secrets.token_hex(16), secrets.token_hex(16)
    (tmp_path / "operator.token").write_text(token + "\n")
    (tmp_path / "tokens").write_text(f"acme {tenant_token}\n")
    # A short anchor wait: reconcile waits that long for a min_position the
    # fuzzer makes up, and the saves below are anchored in committed events.
    proc = CheckpointProcess(
        nats_server.url,
        tmp_path / "checkpoint",
        extra_args=(
            "--tokens-file",
            str(tmp_path / "tokens"),
            "--operator-token-file",
            str(tmp_path / "operator.token"),
            "--anchor-wait-s",
            "1",
        ),
    )
    await asyncio.to_thread(proc.start)
    try:
        known = await saved_world(client)
        headers = bearer(token)
        url = proc.url
        await eventually(
            lambda: asyncio.to_thread(requests.get, f"{url}/readyz", timeout=10),
            until=lambda answer: answer.status_code == 200,
            what="the checkpoint process's /readyz to answer 200",
        )
        schema = schemathesis.openapi.from_url(f"{url}/api/v1/openapi.json")
        never_ok = await fuzz_every_operation(schema, url, headers, known, examples=30)
        # Authenticated and aimed at data that exists: every operation
        # succeeded at least once, so the bodies checked include real ones.
        assert never_ok == [], never_ok
        # acme's token: the same answers, narrowed to acme (known ids are acme's).
        never_ok = await fuzz_every_operation(schema, url, bearer(tenant_token), known, examples=30)
        assert never_ok == [], never_ok
        assert proc.running, proc.log_tail()
    finally:
        await asyncio.to_thread(proc.stop)
