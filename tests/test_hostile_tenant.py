"""acme, one tenant of a shared deployment (deploy/nats.conf rendered for acme
and globex, every service on its own NATS users), tries to turn the services
against the ledger: it names subjects it may not publish itself as where its
receipts and replies should go (a confused deputy), and it tries to unmake or
forge the content blobs its committed events reference. Nothing may land
where it aimed, the committed stream must still equal SQLite, committed
blobs stay served and verified, and the services keep serving.
spec/wire.md, "Replies" and "NATS users and tenants"; spec/content.md."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec
import nats
import nats.errors
import pytest
import pytest_asyncio
from deployment_support import SENTINEL, attempts, deployed_sequencer, refused, url_for
from nats.aio.client import Client as NATS
from nats.js.errors import ObjectNotFoundError
from polling import eventually
from prometheus_client import CollectorRegistry
from raw_appends import Inbox

from laneledger.audit.blobs import audit_ledger_with_blobs
from laneledger.audit.stream import check_stream
from laneledger.contract.errors import EntityNotFound
from laneledger.contract.ids import new_id
from laneledger.contract.model import AppendCommitted, AppendRejected
from laneledger.contract.subjects import TENANT_JS_API_PREFIX
from laneledger.devtools.natsserver import NatsServer
from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.blobstore import MAX_BLOB_BYTES, BlobBuckets, object_name, object_store_digest
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event
from laneledger.sdk.objectstores import open_object_store, read_chunks
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.services.tail.service import TailService, TailSettings
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


async def aim_replies(nc: NATS, targets: tuple[str, ...] | list[str]) -> None:
    """An ensure_actor command and a checkpoint info request for acme per
    target, each with the target as its reply subject."""
    for target in targets:
        await nc.publish(
            "ledger.cmd.acme.ensure_actor",
            msgspec.json.encode(
                {"op": "ensure_actor", "tenant": "acme", "key": f"agent:deputy/{target}@1", "kind": "agent"}
            ),
            reply=target,
        )
        await nc.publish("ledger.checkpoint.acme.info", msgspec.json.encode({"op": "info"}), reply=target)
    await nc.flush()


def deputies(deployment: Deployment) -> int:
    conn = open_ledger(deployment.db, readonly=True)
    try:
        (count,) = conn.execute("SELECT count(*) FROM actors WHERE key LIKE 'agent:deputy/%'").fetchone()
    finally:
        conn.close()
    return int(count)


def answered(deployment: Deployment, outcome: str) -> tuple[float, float]:
    return (
        deployment.sample("laneledger_sequencer_commands_total", {"op": "ensure_actor", "outcome": outcome}),
        deployment.sample("laneledger_checkpoint_requests_total", {"op": "info", "outcome": outcome}),
    )


async def test_a_tenants_aimed_replies_come_back_to_its_own_account(deployment):
    """acme's producer is in its own account: the server gives each of its
    requests a reply subject of its own (``_R_.…``) and maps the answer back
    into acme's account, where the aimed subject is nobody's. The services
    answer; nothing reaches the ledger's account."""
    await acme_lane(deployment)  # the services have answered acme before
    before = answered(deployment, "ok")
    await aim_replies(deployment.acme_raw, TARGETS)
    await eventually(
        lambda: answered(deployment, "ok"),
        until=lambda counts: counts == (before[0] + len(TARGETS), before[1] + len(TARGETS)),
        what="every command and checkpoint request of acme's answered",
    )
    assert answered(deployment, "reply_refused") == (0.0, 0.0)
    assert deputies(deployment) == len(TARGETS)  # run for acme, answered into its own account
    await deployment.assert_ledger_intact()
    assert deployment.globex_seen == []


async def test_command_and_checkpoint_replies_go_nowhere_but_the_requesters_inbox(deployment):
    """The first wall, for a requester in the ledger's own account (the
    shared producer): a reply subject outside its inbox is refused before
    the request runs, and counted."""
    await acme_lane(deployment)
    shared = await nats.connect(url_for(deployment.server, "producer", deployment.passwords))
    try:
        await aim_replies(shared, TARGETS)
        await eventually(
            lambda: answered(deployment, "reply_refused"),
            until=lambda counts: counts == (len(TARGETS), len(TARGETS)),
            what="every aimed command and checkpoint reply refused and counted",
        )
    finally:
        await shared.close()
    assert deployment.sample("laneledger_sequencer_refused_reply_subjects_total", {"kind": "reply"}) == len(
        TARGETS
    )
    assert deputies(deployment) == 0  # refused before running
    await deployment.assert_ledger_intact()
    assert deployment.globex_seen == []
    # Both keep answering acme on its own inbox.
    assert (await deployment.acme.ensure_actor("acme", "agent:acme/after@1", "agent")).key


async def test_jetstreams_own_answers_go_nowhere_but_the_tenants_account(deployment):
    """JetStream answers an API call and acknowledges a publish on a
    connection of its own, which no user permission restricts: a requester
    in the ledger's account could aim those answers at the committed stream.
    acme, in its own account, tries every way it has to a JetStream answer:
    an API call on its bucket, an append, an upload chunk, each with a
    target as its reply; and a push consumer delivering to a target. The
    answers come back into acme's account; the consumer is refused."""
    lane = await acme_lane(deployment)
    nc, errors = await acme_raw_with_errors(deployment)
    try:
        consumer_calls = [
            f"{p}.CONSUMER.CREATE.OBJ_LEDGER_UPLOADS_acme" for p in ("$JS.API", TENANT_JS_API_PREFIX)
        ]
        for target in TARGETS:
            await nc.publish(f"{TENANT_JS_API_PREFIX}.STREAM.INFO.OBJ_LEDGER_UPLOADS_acme", b"", reply=target)
            await nc.publish(f"ledger.append.acme.{lane.lane.id}", append_body(lane, new_id()), reply=target)
            await nc.publish("$O.LEDGER_UPLOADS_acme.C.aimed", b"chunk", reply=target)
            for call in consumer_calls:
                config = {"deliver_subject": target, "ack_policy": "none", "deliver_policy": "all"}
                await nc.publish(
                    call, msgspec.json.encode({"stream_name": "OBJ_LEDGER_UPLOADS_acme", "config": config})
                )
        await nc.publish(SENTINEL, b"")
        await nc.flush()
        await eventually(
            lambda: errors, until=lambda found: refused(found, SENTINEL), what="the sentinel refused"
        )
    finally:
        await nc.close()
    for call in consumer_calls:
        assert refused(errors, call), errors
    # The appends were stored and committed (or refused as lane conflicts);
    # their acknowledgements went back to acme's account, not to the targets.
    await eventually(
        lambda: deployment.seq_nc.jetstream().stream_info("LEDGER_APPEND"),
        until=lambda info: info.state.messages == 0,
        what="acme's aimed appends taken by the sequencer",
    )
    await deployment.assert_ledger_intact()
    assert deployment.globex_seen == []
    info = await deployment.seq_nc.jetstream().stream_info("OBJ_LEDGER_UPLOADS_acme")
    assert info.state.consumer_count == 0
    await lane.reload()
    receipt = await lane.append([started(lane)])
    assert receipt.positions


async def test_the_replies_user_cannot_publish_where_a_requester_points_even_past_the_check(
    deployment, monkeypatch
):
    """The second wall: with the reply-subject check switched off (as if it
    had a bug), what the services send to the aimed subjects leaves on their
    replies users, which may publish to inboxes only: NATS refuses it and
    nothing lands."""
    import laneledger.runtime.requestserver as requestserver
    import laneledger.services.sequencer.service as sequencer_service

    monkeypatch.setattr(requestserver, "reply_refusal", lambda reply, tenant, **_: None)
    monkeypatch.setattr(sequencer_service, "reply_refusal", lambda reply, tenant, **_: None)
    lane = await acme_lane(deployment)
    js = deployment.acme_raw.jetstream()
    # Commands from the shared producer: acme's own reply subjects are
    # replaced by the server's (test_a_tenants_aimed_replies_…).
    shared = await nats.connect(url_for(deployment.server, "producer", deployment.passwords))
    aimed = [t for t in TARGETS if not t.startswith("_INBOX")]
    for target in aimed:
        await js.publish(
            f"ledger.append.acme.{lane.lane.id}",
            append_body(lane, new_id()),
            headers={"Ledger-Reply-To": target},
        )
        await shared.publish(
            "ledger.cmd.acme.get_lane",
            msgspec.json.encode({"op": "get_lane", "lane_id": lane.lane.id}),
            reply=target,
        )
    await shared.flush()
    await shared.close()
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


# -- committed blobs are the sequencer's (spec/content.md, "The blob buckets") ------

ACME_TOKEN = "acme-token-0123456789"  # the tail's bearer token for acme


def meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


async def acme_raw_with_errors(deployment: Deployment) -> tuple[NATS, list[str]]:
    """acme's producer user without the SDK, the permission violations the
    server reports to it collected (lowercased)."""
    errors: list[str] = []

    async def remember(exc: Exception) -> None:
        errors.append(str(exc).lower())

    nc = await nats.connect(
        url_for(deployment.server, "producer-acme", deployment.passwords),
        error_cb=remember,
        inbox_prefix="_INBOX_acme",
    )
    return nc, errors


async def tail_blob(port: int, ref: str) -> tuple[int, bytes]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
        async with http.get(
            f"/api/v1/blobs/{ref.removeprefix('sha256:')}", headers={"Authorization": f"Bearer {ACME_TOKEN}"}
        ) as response:
            return response.status, await response.read()


def referencing(lane: LaneRecorder, append_id: str, ref: str, size: int) -> bytes:
    """An append whose one event references the blob by hand (no bytes carried)."""
    assert lane.lane.actor_id is not None
    event = make_event(
        lane.lane.id,
        "ext.acme.output",
        actor_id=lane.lane.actor_id,
        payload={"v": {"_ref": ref, "size_bytes": size}},
    )
    return msgspec.json.encode(
        {"lane_id": lane.lane.id, "expected_last_seq": lane.head, "append_id": append_id, "events": [event]}
    )


async def test_a_producer_cannot_delete_or_overwrite_a_committed_blob(deployment, tmp_path):
    """acme commits an event referencing a blob (the SDK uploads it, the
    sequencer copies it into LEDGER_BLOBS_acme), then tries to unmake it with
    its own credentials: an object store delete, an overwrite, a raw deleted
    meta, the stream API. NATS refuses each; the tail still serves the blob
    and the ledger verifies with its blobs. Deleting the upload afterwards
    changes nothing."""
    tail_nc = await nats.connect(url_for(deployment.server, "tail", deployment.passwords))
    tail = TailService(
        tail_nc,
        TailSettings(data_dir=tmp_path / "tail", access=AccessPolicy.from_tokens({"acme": ACME_TOKEN})),
    )
    port = await tail.start("127.0.0.1", 0)
    raw, errors = await acme_raw_with_errors(deployment)
    try:
        lane = await acme_lane(deployment)
        content = "acme's committed tool output " * 12_000  # ~340 KiB: three chunks to copy
        event = lane.event("ext.acme.output", actor_id=lane.lane.actor_id, payload={"text": content})
        receipt = await lane.append([event])
        assert receipt.positions == [1]
        ref = event["payload"]["text"]["_ref"]
        name = object_name("acme", ref)
        assert await tail_blob(port, ref) == (200, content.encode())

        # through the ledger account's API (refused requests are dropped: they time out)
        js = raw.jetstream(timeout=0.5, prefix=TENANT_JS_API_PREFIX)
        committed = await open_object_store(js, "LEDGER_BLOBS_acme")  # reading is allowed
        found = await committed.get_info(name)
        assert await read_chunks(js, "LEDGER_BLOBS_acme", found.nuid, found.size) == content.encode()
        with pytest.raises(nats.errors.TimeoutError):
            await committed.delete(name)
        with pytest.raises(nats.errors.TimeoutError):
            await committed.put(name, b"acme rewrites its history")
        info = await committed.get_info(name)
        deleted = {**info.as_dict(), "deleted": True, "size": 0, "chunks": 0, "digest": ""}
        forged_subject = meta_subject("LEDGER_BLOBS_acme", name)
        await raw.publish(forged_subject, json.dumps(deleted).encode(), headers={"Nats-Rollup": "sub"})
        await raw.publish(SENTINEL, b"")
        await raw.flush()
        await eventually(
            lambda: errors,
            until=lambda found: refused(found, SENTINEL),
            what="acme's raw publishes refused, up to the sentinel",
        )

        def violations_on(prefix: str) -> int:
            return sum("permissions violation" in e and f'"{prefix.lower()}' in e for e in errors)

        # The delete's meta and the raw one; the overwrite's first chunk; the
        # purges that followed each.
        assert violations_on(f'{forged_subject}"') == 2, errors
        assert violations_on("$O.LEDGER_BLOBS_acme.C.") == 1, errors
        assert violations_on(f'{TENANT_JS_API_PREFIX}.STREAM.PURGE.OBJ_LEDGER_BLOBS_acme"') == 2, errors
        api = [
            f"{prefix}.{call}.OBJ_LEDGER_BLOBS_acme"
            for prefix in ("$JS.API", TENANT_JS_API_PREFIX)
            for call in ("STREAM.MSG.DELETE", "STREAM.PURGE", "STREAM.DELETE", "STREAM.UPDATE")
        ]
        violations = await attempts(
            url_for(deployment.server, "producer-acme", deployment.passwords), publish=api
        )
        assert all(refused(violations, subject) for subject in api), violations

        # Still there, unchanged: as committed, as served, as verified.
        assert await committed.get_info(name) == info
        assert await tail_blob(port, ref) == (200, content.encode())
        audit = await audit_ledger_with_blobs(deployment.db, BlobBuckets(tail_nc.jetstream()))
        assert audit.blob_refs == 1

        # Once copied, the upload is gone (the sequencer discards it): there is
        # nothing left for acme to take back, and the committed copy stays.
        uploads = await open_object_store(js, "LEDGER_UPLOADS_acme")
        with pytest.raises(ObjectNotFoundError):
            await uploads.get_info(name)
        assert await tail_blob(port, ref) == (200, content.encode())
        assert (await audit_ledger_with_blobs(deployment.db, BlobBuckets(tail_nc.jetstream()))).blob_refs == 1
        # And the blob still serves later appends, with no upload at all.
        again = await lane.append(
            [lane.event("ext.acme.output", actor_id=lane.lane.actor_id, payload={"text": content})]
        )
        assert again.positions == [2]
        await deployment.assert_ledger_intact()
    finally:
        await raw.close()
        await tail.stop()
        await tail_nc.close()


async def test_an_upload_deleted_before_its_append_commits_is_blob_missing(deployment):
    lane = await acme_lane(deployment)
    data = b"an upload acme takes back " * 100
    blobs = await deployment.acme.blob_store()
    ref = await blobs.put("acme", data)
    uploads = await open_object_store(deployment.acme.js, "LEDGER_UPLOADS_acme")
    await uploads.delete(object_name("acme", ref))
    async with Inbox(deployment.acme_raw) as inbox:
        refusal = await inbox.ask(
            f"ledger.append.acme.{lane.lane.id}", referencing(lane, new_id(), ref, len(data))
        )
        assert isinstance(refusal, AppendRejected), refusal
        assert refusal.error.code == "blob_missing" and "reason" not in refusal.error.details
        # Uploaded again, the same append commits.
        assert await blobs.put("acme", data) == ref
        body = referencing(lane, new_id(), ref, len(data))
        assert isinstance(await inbox.ask(f"ledger.append.acme.{lane.lane.id}", body), AppendCommitted)
    assert deployment.sample("laneledger_sequencer_blob_lookups_total", {"result": "missing"}) == 1
    assert deployment.sample("laneledger_sequencer_blob_lookups_total", {"result": "copied"}) == 1
    await deployment.assert_ledger_intact()


async def test_an_upload_that_is_not_its_blob_is_refused(deployment):
    """Uploads whose content does not match their name: other bytes under
    the name, and objects whose metadata (acme wrote it too) lies about
    their chunks. Each append referencing one is refused blob_missing with
    reason upload_mismatch (one over the size limit: request_too_large),
    nothing is copied, and the real upload then commits."""
    lane = await acme_lane(deployment)
    data = b"the blob acme names " * 100
    ref = "sha256:" + hashlib.sha256(data).hexdigest()
    name = object_name("acme", ref)
    js = deployment.acme_raw.jetstream(prefix=TENANT_JS_API_PREFIX)
    uploads = await open_object_store(js, "LEDGER_UPLOADS_acme")
    subject = f"ledger.append.acme.{lane.lane.id}"

    async def forge(nuid: str, size: int, chunks: list[bytes]) -> None:
        """A meta that claims the blob's digest, over chunks of acme's choosing."""
        for chunk in chunks:
            await js.publish(f"$O.LEDGER_UPLOADS_acme.C.{nuid}", chunk)
        meta = {
            "name": name,
            "bucket": "LEDGER_UPLOADS_acme",
            "nuid": nuid,
            "size": size,
            "chunks": len(chunks),
            "digest": object_store_digest(hashlib.sha256(data).hexdigest()),
        }
        await js.publish(
            meta_subject("LEDGER_UPLOADS_acme", name),
            json.dumps(meta).encode(),
            headers={"Nats-Rollup": "sub"},
        )

    async with Inbox(deployment.acme_raw) as inbox:

        async def refusal(size: int = len(data)) -> AppendRejected:
            answer = await inbox.ask(subject, referencing(lane, new_id(), ref, size))
            assert isinstance(answer, AppendRejected), answer
            return answer

        await uploads.put(name, b"other bytes " * 100)  # the object store's own digest: of these bytes
        wrong = await refusal()
        assert (wrong.error.code, wrong.error.details["reason"]) == ("blob_missing", "upload_mismatch")
        assert wrong.error.details["ref"] == ref and not wrong.error.retryable
        await forge("forgedA", len(data), [b"x" * len(data)])  # the right digest claimed, other chunks
        assert (await refusal()).error.details["reason"] == "upload_mismatch"
        await forge("forgedB", len(data), [data[:100]])  # too few chunks
        assert (await refusal()).error.details["reason"] == "upload_mismatch"
        await forge(">", len(data), [])  # a wildcard for its chunks: the whole bucket
        assert (await refusal()).error.details["reason"] == "upload_mismatch"
        await forge("forgedC", MAX_BLOB_BYTES + 1, [data])
        too_large = await refusal(MAX_BLOB_BYTES + 1)
        assert too_large.error.code == "request_too_large"
        assert too_large.error.details["limit_bytes"] == MAX_BLOB_BYTES
        with pytest.raises(EntityNotFound):  # nothing was copied
            await BlobBuckets(deployment.seq_nc.jetstream()).get("acme", ref)

        await forge("forgedD", len(data), [data[:1000], data[1000:]])  # the right bytes, cut too fine
        assert (await refusal()).error.details["reason"] == "upload_mismatch"
        await forge("honest", len(data), [data])  # right chunk, by hand
        assert isinstance(
            await inbox.ask(subject, referencing(lane, new_id(), ref, len(data))), AppendCommitted
        )
    assert deployment.sample("laneledger_sequencer_blob_lookups_total", {"result": "refused"}) == 6
    assert await BlobBuckets(deployment.seq_nc.jetstream()).get("acme", ref) == data
    await deployment.assert_ledger_intact()
