"""acme, one tenant of a shared deployment (deploy/nats.conf rendered for acme
and globex, every service on its own NATS users), tries to turn the services
against the ledger: it names subjects it may not publish itself as where its
receipts and replies should go (a confused deputy). Nothing may land there,
the committed stream must still equal SQLite, and the services keep serving.
spec/wire.md, "Replies"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import nats
import pytest
import pytest_asyncio
from deployment_support import deployed_sequencer, url_for
from nats.aio.client import Client as NATS
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.audit.ledger import check_stream
from laneledger.contract.errors import EntityNotFound
from laneledger.contract.ids import new_id
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import open_ledger

pytestmark = pytest.mark.nats

# Where acme aims the services: the committed stream (a foreign message there
# displaces the next committed event), the JetStream API, globex's inbox.
TARGETS = (
    "ledger.events.globex.s.r.forged",
    "$JS.API.STREAM.DELETE.LEDGER_EVENTS",
    "$JS.API.STREAM.PURGE.LEDGER_APPEND",
    "_INBOX_globex.stolen",
)


@dataclass
class Deployment:
    server: NatsServer
    passwords: dict[str, str]
    db: Path
    seq_nc: NATS
    sequencer: Sequencer
    seq_metrics: SequencerMetrics
    ckpt_metrics: CheckpointMetrics
    acme: LedgerClient
    acme_raw: NATS  # acme's producer user, without the SDK
    globex_seen: list[str]  # every message globex's producer received on its inbox
    reply_violations: list[str] = field(default_factory=list)  # refused to the replies users

    def sample(self, name: str, labels: dict[str, str]) -> float:
        for registry in (self.seq_metrics.registry, self.ckpt_metrics.registry):
            value = registry.get_sample_value(name, labels)
            if value is not None:
                return value
        return 0.0

    async def assert_ledger_intact(self) -> None:
        """The committed stream still exists and equals SQLite, message for
        message; nothing foreign on it."""
        check = await check_stream(self.seq_nc.jetstream(), self.db, wait_s=10)
        conn = open_ledger(self.db, readonly=True)
        try:
            (count,) = conn.execute("SELECT count(*) FROM events").fetchone()
        finally:
            conn.close()
        assert check.messages == count


@pytest_asyncio.fixture
async def deployment(tenant_server, passwords, tmp_path) -> AsyncIterator[Deployment]:
    violations: list[str] = []

    async def remember(exc: Exception) -> None:
        violations.append(str(exc).lower())

    seq_nc = await nats.connect(url_for(tenant_server, "sequencer", passwords))
    seq_replies = await nats.connect(
        url_for(tenant_server, "sequencer-replies", passwords), error_cb=remember
    )
    ckpt_nc = await nats.connect(url_for(tenant_server, "checkpoint", passwords))
    ckpt_replies = await nats.connect(
        url_for(tenant_server, "checkpoint-replies", passwords), error_cb=remember
    )
    seq_metrics = SequencerMetrics(CollectorRegistry())
    sequencer = deployed_sequencer(seq_nc, seq_replies, tmp_path / "ledger.db", seq_metrics)
    store = CheckpointStore.open(tmp_path / "checkpoints.db")
    ckpt_metrics = CheckpointMetrics(CollectorRegistry())
    checkpoint = CheckpointService(ckpt_nc, store, ckpt_metrics, reply_nc=ckpt_replies)
    await sequencer.start()
    await checkpoint.start()
    acme = await LedgerClient.connect(url_for(tenant_server, "producer-acme", passwords), tenant="acme")
    acme_raw = await nats.connect(
        url_for(tenant_server, "producer-acme", passwords), inbox_prefix="_INBOX_acme"
    )
    globex_raw = await nats.connect(
        url_for(tenant_server, "producer-globex", passwords), inbox_prefix="_INBOX_globex"
    )
    globex_seen: list[str] = []

    async def on_globex_inbox(msg: nats.aio.msg.Msg) -> None:
        globex_seen.append(msg.subject)

    await globex_raw.subscribe("_INBOX_globex.>", cb=on_globex_inbox)
    await globex_raw.flush()
    try:
        yield Deployment(
            tenant_server,
            passwords,
            tmp_path / "ledger.db",
            seq_nc,
            sequencer,
            seq_metrics,
            ckpt_metrics,
            acme,
            acme_raw,
            globex_seen,
            violations,
        )
    finally:
        for client in (acme,):
            await client.close()
        await checkpoint.stop()
        await sequencer.stop()
        for connection in (acme_raw, globex_raw, ckpt_replies, ckpt_nc, seq_replies, seq_nc):
            await connection.close()
        store.close()


async def acme_lane(deployment: Deployment) -> LaneRecorder:
    actor = await deployment.acme.ensure_actor("acme", "agent:acme/main@1", "agent")
    return await LaneRecorder.open(deployment.acme, "acme", "s-acme", "r1", "main", actor_id=actor.id)


def started(lane: LaneRecorder) -> dict[str, object]:
    assert lane.lane.actor_id is not None
    return lane.event("run.started", actor_id=lane.lane.actor_id, subject_id="r1")


def append_body(lane: LaneRecorder, append_id: str) -> bytes:
    event = started(lane)
    return msgspec.json.encode(
        {
            "lane_id": lane.lane.id,
            "expected_last_seq": lane.head,
            "append_id": append_id,
            "events": [dict(event)],
        }
    )


async def test_receipts_go_nowhere_but_the_requesters_inbox(deployment):
    lane = await acme_lane(deployment)
    js = deployment.acme_raw.jetstream()
    refused_ids = [new_id() for _ in TARGETS]
    for target, append_id in zip(TARGETS, refused_ids, strict=True):
        await js.publish(
            f"ledger.append.acme.{lane.lane.id}",
            append_body(lane, append_id),
            headers={"Ledger-Reply-To": target},
        )
    await eventually(
        lambda: deployment.sample("laneledger_sequencer_refused_reply_subjects_total", {"kind": "receipt"}),
        until=lambda n: n == len(TARGETS),
        what="every aimed receipt refused and counted",
    )
    # Refused, not committed: no receipt is stored under those ids, and each
    # refusal is counted as a rejection nobody was told of.
    for append_id in refused_ids:
        with pytest.raises(EntityNotFound):
            await deployment.acme.get_receipt(append_id)
    assert deployment.sample(
        "laneledger_sequencer_rejections_unanswered_total", {"code": "invalid_request"}
    ) == len(TARGETS)
    await deployment.assert_ledger_intact()
    assert deployment.globex_seen == []
    # The sequencer keeps serving acme, on its own inbox.
    receipt = await lane.append([started(lane)])
    assert receipt.positions == [1]
    await deployment.assert_ledger_intact()


async def test_command_and_checkpoint_replies_go_nowhere_but_the_requesters_inbox(deployment):
    await acme_lane(deployment)  # the services have answered acme before
    for target in TARGETS:
        await deployment.acme_raw.publish(
            "ledger.cmd.acme.ensure_actor",
            msgspec.json.encode(
                {"op": "ensure_actor", "tenant": "acme", "key": f"agent:deputy/{target}@1", "kind": "agent"}
            ),
            reply=target,
        )
        await deployment.acme_raw.publish(
            "ledger.checkpoint.acme.info", msgspec.json.encode({"op": "info"}), reply=target
        )
    await deployment.acme_raw.flush()
    await eventually(
        lambda: (
            deployment.sample(
                "laneledger_sequencer_commands_total", {"op": "ensure_actor", "outcome": "reply_refused"}
            ),
            deployment.sample(
                "laneledger_checkpoint_requests_total", {"op": "info", "outcome": "reply_refused"}
            ),
        ),
        until=lambda counts: counts == (len(TARGETS), len(TARGETS)),
        what="every aimed command and checkpoint reply refused and counted",
    )
    assert deployment.sample("laneledger_sequencer_refused_reply_subjects_total", {"kind": "reply"}) == len(
        TARGETS
    )
    # Refused before running: none of those actors exists.
    conn = open_ledger(deployment.db, readonly=True)
    try:
        deputies = conn.execute("SELECT count(*) FROM actors WHERE key LIKE 'agent:deputy/%'").fetchone()
    finally:
        conn.close()
    assert deputies == (0,)
    await deployment.assert_ledger_intact()
    assert deployment.globex_seen == []
    # Both keep answering acme on its own inbox.
    assert (await deployment.acme.ensure_actor("acme", "agent:acme/after@1", "agent")).key


async def test_the_replies_user_cannot_publish_where_a_requester_points_even_past_the_check(
    deployment, monkeypatch
):
    """The second wall: with the reply-subject check switched off (as if it
    had a bug), what the services send to the aimed subjects leaves on their
    replies users, which may publish to inboxes only: NATS refuses it and
    nothing lands."""
    import laneledger.runtime.requestserver as requestserver
    import laneledger.services.sequencer.service as sequencer_service

    monkeypatch.setattr(requestserver, "reply_refusal", lambda reply, tenant: None)
    monkeypatch.setattr(sequencer_service, "reply_refusal", lambda reply, tenant: None)
    lane = await acme_lane(deployment)
    js = deployment.acme_raw.jetstream()
    aimed = [t for t in TARGETS if not t.startswith("_INBOX")]
    for target in aimed:
        await js.publish(
            f"ledger.append.acme.{lane.lane.id}",
            append_body(lane, new_id()),
            headers={"Ledger-Reply-To": target},
        )
        await deployment.acme_raw.publish(
            "ledger.cmd.acme.get_lane",
            msgspec.json.encode({"op": "get_lane", "lane_id": lane.lane.id}),
            reply=target,
        )
    await deployment.acme_raw.flush()
    await eventually(
        lambda: deployment.reply_violations,
        until=lambda found: all(
            sum(f'"{target.lower()}"' in v and "permissions violation" in v for v in found) >= 2
            for target in aimed
        ),
        what="NATS refusing the replies users' publishes to every aimed subject (receipt and reply)",
    )
    # The first append committed (the check was off; its receipt was refused
    # by NATS), the others were lane conflicts: the stream equals SQLite.
    await deployment.assert_ledger_intact()
    assert (await deployment.seq_nc.jetstream().stream_info("LEDGER_EVENTS")).state.messages >= 1
    await lane.reload()
    receipt = await lane.append([started(lane)])
    assert receipt.positions
    await deployment.assert_ledger_intact()
