"""The checkpoint service and the SDK under deploy/nats.conf's least-privilege
users: the service as ``checkpoint``, the harness as ``producer``.

Artifacts live in a JetStream object store bucket, so both need a few
JetStream subjects of that bucket's stream. ``NEEDED`` is exactly that list;
the test checks deploy/nats.conf grants each of them, then runs saves,
artifacts, a recovery plan and an inspection with no permission violation on
any connection.
"""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import msgspec
import nats
import pytest
from deployment_support import USERS
from failure_logs import show_log_on_failure
from prometheus_client import CollectorRegistry

from laneledger.devtools.natsserver import NatsServer
from laneledger.runtime.access import AccessPolicy
from laneledger.runtime.opsserver import start_http
from laneledger.sdk.checkpoints import CheckpointClient, anchor_of, complete_run
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.checkpoint.http import checkpoint_app
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService, CheckpointSettings
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger

# Tests that start a nats-server themselves, not through the nats_server
# fixture (which marks its users), are marked `nats` by hand.
CONF = Path(__file__).resolve().parents[1] / "deploy" / "nats.conf"
OBJ = "OBJ_LEDGER_CHECKPOINT_ARTIFACTS"

# What each user must be allowed to publish for artifacts (spec/checkpoint.md).
NEEDED = {
    "checkpoint": [
        f"$JS.API.STREAM.INFO.{OBJ}",
        f"$JS.API.STREAM.CREATE.{OBJ}",  # open or create the bucket
        f"$JS.API.STREAM.MSG.GET.{OBJ}",  # an object's metadata
        # read its chunks: nats-py looks the stream up by subject, then
        # reads with an ordered consumer and answers its flow control
        "$JS.API.STREAM.NAMES",
        f"$JS.API.CONSUMER.CREATE.{OBJ}",
        f"$JS.FC.{OBJ}.>",
    ],
    "producer": [
        f"$JS.API.STREAM.INFO.{OBJ}",
        f"$JS.API.STREAM.MSG.GET.{OBJ}",
        # upload: chunks and metadata. Not STREAM.PURGE, which would let a
        # producer empty the whole bucket (nats-py only purges when replacing).
        # An artifact is read back by message (STREAM.MSG.GET, from a store
        # bound to its stream: laneledger.sdk.objectstores), never by a consumer.
        "$O.LEDGER_CHECKPOINT_ARTIFACTS.>",
    ],
}
# What a producer must not be allowed: STREAM.NAMES lists every stream, other
# tenants' buckets among them; a consumer delivers where its creator says.
DENIED = {
    "producer": [
        "$JS.API.STREAM.NAMES",
        "$JS.API.STREAM.LIST",
        f"$JS.API.STREAM.PURGE.{OBJ}",
        f"$JS.API.CONSUMER.CREATE.{OBJ}",
        f"$JS.FC.{OBJ}.>",
    ]
}


def test_the_config_grants_what_artifacts_need():
    text = CONF.read_text()
    for user, subjects in NEEDED.items():
        block = re.search(rf"user: {user}\n(.*?)\n      }}", text, re.S)
        assert block, f"no user {user} in {CONF}"
        assert [s for s in subjects if f'"{s}"' not in block.group(1)] == [], user
        assert [s for s in DENIED.get(user, []) if f'"{s}"' in block.group(1)] == [], user


@pytest.fixture
def secured_server(tmp_path, monkeypatch, request):
    passwords = {user: f"test-{user}-secret" for user in USERS}
    for user, password in passwords.items():
        monkeypatch.setenv(f"LANELEDGER_{user.upper().replace('-', '_')}_PASSWORD", password)
    server = NatsServer(tmp_path / "nats", config=CONF, extra_args=("-m", "-1"))
    show_log_on_failure(request, server)
    with server:
        server.urls = {u: f"nats://{u}:{p}@127.0.0.1:{server.port}" for u, p in passwords.items()}
        yield server


@pytest.mark.nats
async def test_artifacts_and_checkpoints_work_under_least_privilege_users(secured_server, tmp_path):
    violations: list[Exception] = []

    async def remember(exc: Exception) -> None:
        violations.append(exc)

    urls = secured_server.urls
    seq_nc = await nats.connect(urls["sequencer"], error_cb=remember)
    ckpt_nc = await nats.connect(urls["checkpoint"], error_cb=remember)
    # What they send to requesters leaves as their replies users (deploy/nats.conf).
    seq_replies = await nats.connect(urls["sequencer-replies"], error_cb=remember)
    ckpt_replies = await nats.connect(urls["checkpoint-replies"], error_cb=remember)
    sequencer = Sequencer(
        seq_nc,
        LedgerWriter(open_ledger(tmp_path / "ledger.db")),
        SequencerMetrics(CollectorRegistry()),
        reply_nc=seq_replies,
    )
    store = CheckpointStore.open(tmp_path / "checkpoints.db")
    service = CheckpointService(
        ckpt_nc,
        store,
        CheckpointMetrics(CollectorRegistry()),
        CheckpointSettings(anchor_wait_s=10.0, max_inline_bytes=1024),
        reply_nc=ckpt_replies,
    )
    await sequencer.start()
    await service.start()
    try:
        producer_nc = await nats.connect(urls["producer"], error_cb=remember)
        async with LedgerClient(producer_nc, owns_connection=True, timeout=10.0) as client:
            checkpoints = CheckpointClient(client)
            actor = await client.ensure_actor("acme", "agent:secured@1", "agent")
            lane = await LaneRecorder.open(client, "acme", "s", "r", "main", actor_id=actor.id)
            receipt = await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r")])
            inline = await checkpoints.save(
                "k", expected_revision=0, format="application/json", state={"n": 1}, anchor=anchor_of(receipt)
            )
            spilled = await checkpoints.save(
                "k", expected_revision=1, format="application/json", state={"text": "y" * 5000}
            )  # larger than 1024: an artifact
            assert inline.revision == 1 and spilled.artifact is not None
            assert await checkpoints.load_state(spilled) == {"text": "y" * 5000}
            blob = bytes(range(256)) * 12_000  # 3 MiB: many chunks, flow-controlled reads
            big = await checkpoints.save(
                "blob",
                expected_revision=0,
                format="application/x-tests",
                data=blob,
                media_type="application/octet-stream",
            )
            assert await checkpoints.load_state(big) == blob
            plan = await checkpoints.recovery_plan("k", lane_id=lane.lane.id)
            assert plan.checkpoint == spilled
            # A tenant token reads its artifact over HTTP from the shared
            # bucket: the service looks for acme's own bucket only through
            # STREAM.NAMES, which this config (rendered for no tenant) allows.
            app = checkpoint_app(service, AccessPolicy.from_tokens({"acme": "acme-token-0123456789"}))
            runner, port = await start_http(app, "127.0.0.1", 0)
            try:
                async with (
                    aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http,
                    http.get(
                        f"/api/v1/artifacts/{spilled.artifact.sha256}",
                        headers={"Authorization": "Bearer acme-token-0123456789"},
                    ) as response,
                ):
                    assert response.status == 200, await response.text()
                    assert msgspec.json.decode(await response.read()) == {"text": "y" * 5000}
            finally:
                await runner.cleanup()
            done = await complete_run(
                lane,
                checkpoints,
                key="k",
                expected_revision=2,
                format="application/json",
                actor_id=actor.id,
                state={"n": 2},
            )
            inspection = await checkpoints.inspect_run("s", "r")
            assert [c.checkpoint_id for c in inspection.linked_checkpoints] == [done.checkpoint.id]
    finally:
        await service.stop()
        await sequencer.stop()
        for connection in (ckpt_nc, seq_nc, ckpt_replies, seq_replies):
            await connection.close()
        store.close()
    assert not [v for v in violations if "permission" in str(v).lower()], violations
