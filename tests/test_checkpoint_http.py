"""The checkpoint service's HTTP reads: the same answers as over NATS, errors
as {"error": ErrorBody} with spec/errors.md's status, and the ops endpoints.
The routes' logic runs twice (``checkpoints_under_test``: the service
in-process, and over NATS); artifacts (JetStream's object store) and
readiness over NATS alone."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import msgspec
import pytest
import pytest_asyncio
from checkpoint_fixtures import (
    CHECKPOINTS_OVER_NATS_ONLY,
    CheckpointsUnderTest,
    checkpoints_of_checkpoints_under_test,
    client_of_checkpoints_under_test,
)
from polling import eventually

from laneledger.contract.model import Checkpoint, RecoveryPlan, RevisionPage, RunInspection
from laneledger.runtime.opsserver import start_http
from laneledger.sdk.checkpoints import CheckpointClient, RevisionConflict, anchor_of, complete_run
from laneledger.sdk.client import LaneRecorder
from laneledger.services.checkpoint.http import checkpoint_app

FORMAT = "application/vnd.tests.loop-state+json;version=1"

client = pytest.fixture(client_of_checkpoints_under_test, name="client")
checkpoints = pytest.fixture(checkpoints_of_checkpoints_under_test, name="checkpoints")


@pytest_asyncio.fixture
async def http(checkpoints_under_test: CheckpointsUnderTest) -> AsyncIterator[aiohttp.ClientSession]:
    app = checkpoint_app(checkpoints_under_test.service)
    runner, port = await start_http(app, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
            yield session
    finally:
        await runner.cleanup()


async def get(session: aiohttp.ClientSession, path: str, **params) -> tuple[int, bytes]:
    async with session.get(path, params=params) as response:
        return response.status, await response.read()


async def test_reads_over_http(http, client, actor, checkpoints: CheckpointClient):
    session = http
    recorder = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
    receipt = await recorder.append([recorder.event("run.started", actor_id=actor.id, subject_id="r1")])
    first = await checkpoints.save(
        "s1/r1/main", expected_revision=0, format=FORMAT, state={"n": 1}, anchor=anchor_of(receipt)
    )
    await recorder.append([recorder.event("stream.text_delta", actor_id=actor.id, payload={"t": "x"})])
    done = await complete_run(
        recorder,
        checkpoints,
        key="s1/r1/main",
        expected_revision=1,
        format=FORMAT,
        actor_id=actor.id,
        state={"n": 2},
    )

    status, body = await get(session, f"/api/v1/checkpoints/{first.id}")
    assert status == 200 and msgspec.json.decode(body, type=Checkpoint) == first
    status, body = await get(session, "/api/v1/latest", key="s1/r1/main")  # a key with slashes
    assert status == 200 and msgspec.json.decode(body, type=Checkpoint) == done.checkpoint
    status, body = await get(session, "/api/v1/revisions", key="s1/r1/main", after_revision="1")
    page = msgspec.json.decode(body, type=RevisionPage)
    assert status == 200 and [r.revision for r in page.revisions] == [2]
    status, body = await get(session, "/api/v1/recovery-plan", key="s1/r1/main")
    plan = msgspec.json.decode(body, type=RecoveryPlan)
    assert status == 200 and plan.after_seq == 2 and [e.seq for e in plan.events] == [3, 4]
    status, body = await get(session, "/api/v1/inspect-run", session_id="s1", run_id="r1")
    inspection = msgspec.json.decode(body, type=RunInspection)
    assert status == 200 and [e.event_type for e in inspection.terminal_events] == ["run.completed"]
    assert [link.checkpoint_id for link in inspection.linked_checkpoints] == [done.checkpoint.id]
    status, body = await get(session, "/api/v1/reconcile")
    assert status == 200 and msgspec.json.decode(body)["unlinked"] == []
    status, body = await get(session, "/api/v1/info")
    assert status == 200 and msgspec.json.decode(body)["max_inline_bytes"] == 4096


@CHECKPOINTS_OVER_NATS_ONLY
async def test_an_artifact_over_http(http, checkpoints: CheckpointClient):
    session = http
    blob = b"artifact bytes over http"
    ref = await checkpoints.put_artifact(blob, "text/plain")
    async with session.get(f"/api/v1/artifacts/{ref.sha256}") as response:
        assert response.status == 200 and await response.read() == blob
        assert response.headers["ETag"] == f'"{ref.sha256}"'
    status, _ = await get(session, f"/api/v1/artifacts/{'0' * 64}")
    assert status == 404


async def test_errors_over_http(http, checkpoints: CheckpointClient):
    session = http
    status, body = await get(session, "/api/v1/checkpoints/nope")
    assert status == 404
    assert msgspec.json.decode(body)["error"]["code"] == "entity_not_found"
    status, body = await get(session, "/api/v1/latest")  # no key
    error = msgspec.json.decode(body)["error"]
    assert status == 400 and error["code"] == "invalid_request"
    status, body = await get(session, "/api/v1/revisions", key="k", limit="many")
    assert status == 400 and msgspec.json.decode(body)["error"]["details"]["path"] == "$.limit"
    status, body = await get(session, "/api/v1/artifacts/not-a-sha")
    error = msgspec.json.decode(body)["error"]
    assert status == 400 and error["details"]["parameter"] == "sha256", error
    # Typed answers where aiohttp alone would answer in plain text, and no
    # query parameter may change the operation a route runs.
    status, body = await get(session, "/api/v1/no-such-route")
    assert status == 404 and msgspec.json.decode(body)["error"]["details"]["kind"] == "route"
    async with session.post("/api/v1/info") as response:
        assert response.status == 405
        assert (await response.json())["error"]["details"]["allowed"] == ["GET", "HEAD"]
    for params in ({"op": "latest", "key": "k"}, {"checkpoint_id": "other"}):
        status, body = await get(session, "/api/v1/checkpoints/nope", **params)
        error = msgspec.json.decode(body)["error"]
        assert status == 400 and error["details"]["parameter"] in params, error
    async with session.get("/api/v1/latest", params=[("key", "a"), ("key", "b")]) as response:
        assert response.status == 400
        assert (await response.json())["error"]["details"]["parameter"] == "key"


@CHECKPOINTS_OVER_NATS_ONLY  # /readyz: connected to NATS
async def test_ops_endpoints_and_save_metrics(http, checkpoints: CheckpointClient, checkpoint_service):
    session = http
    await checkpoints.save("m", expected_revision=0, format=FORMAT, state=1)
    try:
        await checkpoints.save("m", expected_revision=0, format=FORMAT, state=2)
    except RevisionConflict:
        pass
    status, body = await get(session, "/healthz")
    assert status == 200 and msgspec.json.decode(body) == {"status": "ok"}
    await eventually(lambda: checkpoint_service.ready, what="the service to be ready")
    status, _ = await get(session, "/readyz")
    assert status == 200
    status, body = await get(session, "/metrics")
    text = body.decode()
    assert status == 200
    assert 'laneledger_checkpoint_saves_total{outcome="saved"} 1.0' in text
    assert 'laneledger_checkpoint_saves_total{outcome="revision_conflict"} 1.0' in text
    assert 'laneledger_checkpoint_conflicts_total{kind="revision"} 1.0' in text
    assert "laneledger_checkpoint_applied_position" in text
