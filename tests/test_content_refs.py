"""Content references end to end (spec/content.md), on a real nats-server and
the real sequencer: the blob bucket, the SDK storing blobs first, the
sequencer refusing an event whose blob is absent."""

from __future__ import annotations

import hashlib
import json

import msgspec
import nats
import pytest
from raw_appends import Inbox

from laneledger.contract.errors import BlobMissing, EntityNotFound, IntegrityError, InvalidRequest
from laneledger.contract.model import AppendCommitted, AppendRejected
from laneledger.contract.signing import generate_private_key, sign_event
from laneledger.contract.subjects import Subjects, token
from laneledger.sdk.blobstore import BlobStore, bucket_name, object_name
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event

pytestmark = pytest.mark.timeout(60)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def committed_payload(client: LedgerClient, lane_id: str, seq: int) -> dict:
    page = await client.load_lane(lane_id, after_seq=seq - 1, limit=1)
    return msgspec.to_builtins(page.events[0])["payload"]


async def test_the_bucket_is_per_tenant_deduplicated_and_checked(js):
    store = await BlobStore.open(js)
    assert store.bucket == bucket_name() == "LEDGER_BLOBS"
    data = b"x" * 5000
    ref = await store.put("acme", data)
    assert ref == "sha256:" + sha(data)
    assert await store.put("acme", data) == ref  # the same bytes again: no second object
    assert [r async for r in store.refs("acme")] == [(ref, 5000)]
    assert await store.has("acme", ref) and await store.has("acme", ref, 5000)
    assert not await store.has("acme", ref, 4999)
    assert await store.get("acme", ref) == data
    # Another tenant has no such blob, even knowing its hash.
    assert not await store.has("globex", ref)
    with pytest.raises(EntityNotFound) as absent:
        await store.get("globex", ref)
    assert absent.value.details == {"kind": "blob", "ref": ref}
    # A tenant id that is not a verbatim token is hashed into the object name.
    assert object_name(token("acme corp/eu"), ref).startswith("_")
    # Bytes stored under a name they do not hash to are refused on read.
    bucket = await js.object_store(store.bucket)
    await bucket.put(object_name(token("acme"), ref), b"tampered")
    assert not await store.has("acme", ref)
    with pytest.raises(IntegrityError) as bad:
        await store.get("acme", ref)
    assert bad.value.details["kind"] == "blob_mismatch"
    with pytest.raises(InvalidRequest):
        await store.get("acme", "sha256:XYZ")


async def test_a_tenant_scoped_producer_stores_in_its_own_bucket_which_readers_read_first(
    nats_server, client, actor, js
):
    """The sequencer creates LEDGER_BLOBS_<token> on the tenant's first scoped
    command (the SDK sends one when asked for a store it lacks); the
    tenant's producer stores there; readers look there first and
    fall back to the shared bucket (blobs written before tenant buckets)."""
    from nats.js.errors import NotFoundError

    from laneledger.sdk.blobstore import BlobBuckets, tenant_bucket_name

    tenant = "acme corp/eu"  # not a verbatim token: the bucket is named by its hash
    name = tenant_bucket_name(token(tenant))
    assert name == "LEDGER_BLOBS_" + token(tenant)
    await client.ensure_actor(tenant, "agent:unscoped@1", "agent")  # the trusted client's: no bucket
    with pytest.raises(NotFoundError):
        await js.stream_info(f"OBJ_{name}")
    scoped = await LedgerClient.connect(nats_server.url, tenant=tenant, timeout=5.0)
    try:
        # Asked for its store first, the scoped client has the sequencer make
        # its buckets (with a command that changes nothing).
        assert (await scoped.blob_store()).bucket == name
        await js.stream_info(f"OBJ_{name}")
        own = await scoped.ensure_actor(tenant, "agent:scoped@1", "agent")
        recorder = await LaneRecorder.open(scoped, tenant, "s1", "r1", "main", actor_id=own.id)
        content = "tenant-bucket content " * 100
        receipt = await recorder.append(
            [recorder.event("ext.acme.file_written", actor_id=own.id, payload={"content": content})]
        )
        ref = (await committed_payload(scoped, recorder.lane.id, receipt.first_seq))["content"]["_ref"]
        assert (await scoped.blob_store()).bucket == name
        shared = await BlobStore.open(js)
        assert not await shared.has(tenant, ref)  # only in the tenant's bucket
        readers = BlobBuckets(js)
        assert (await readers.get(tenant, ref)).decode() == content
        assert await readers.missing(token(tenant), [(ref, len(content))]) == []
        # A blob stored before tenant buckets (in the shared bucket) still reads.
        old = await shared.put(tenant, b"o" * 2000)
        assert await readers.get(tenant, old) == b"o" * 2000
        # The tenant's bucket is read first: a good copy in the shared bucket
        # does not mask a tampered one there.
        await shared.put(tenant, content.encode())
        await (await js.object_store(name)).put(object_name(token(tenant), ref), b"tampered")
        with pytest.raises(IntegrityError):
            await readers.get(tenant, ref)
        # Another tenant reads neither.
        with pytest.raises(EntityNotFound):
            await readers.get("globex", ref)
    finally:
        await scoped.close()


async def test_the_sdk_stores_the_blob_first_and_the_event_carries_the_reference(client, actor):
    recorder = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
    content = "def main():\n    pass\n" * 100  # 2100 bytes
    event = recorder.event(
        "ext.acme.file_written", actor_id=actor.id, payload={"file_path": "src/main.py", "content": content}
    )
    receipt = await recorder.append([event])
    payload = await committed_payload(client, recorder.lane.id, receipt.first_seq)
    ref = "sha256:" + sha(content.encode())
    assert payload["file_path"] == "src/main.py"  # paths stay verbatim
    assert payload["content"] == {"_ref": ref, "size_bytes": len(content)}
    assert payload["payload_refs"] == [
        {
            "sha256": sha(content.encode()),
            "size_bytes": 2100,
            "label": "content",
            "media_type": "text/plain; charset=utf-8",
        }
    ]
    store = await client.blob_store()
    assert (await store.get("acme", ref)).decode() == content


async def test_two_producers_with_the_same_bytes_make_the_same_reference(nats_server, client, actor):
    other = await LedgerClient.connect(nats_server.url, timeout=5.0)
    try:
        value = {"rows": [[i, f"row-{i}"] for i in range(200)]}  # structured: RFC 8785 bytes
        payloads = []
        for producer, name in ((client, "one"), (other, "two")):
            recorder = await LaneRecorder.open(producer, "acme", "s1", "r1", name, actor_id=actor.id)
            # Built by hand (not make_event): submit externalizes it.
            event = {
                **make_event(recorder.lane.id, "ext.acme.table", actor_id=actor.id),
                "payload": {"table": json.loads(json.dumps(value))},
            }
            receipt = await recorder.append([event])
            payloads.append(await committed_payload(producer, recorder.lane.id, receipt.first_seq))
        assert payloads[0] == payloads[1]
        assert payloads[0]["table"]["rows"]["_ref"].startswith("sha256:")  # leaves first
        store = await client.blob_store()
        assert len([r async for r in store.refs("acme")]) == 1
    finally:
        await other.close()


async def test_a_signed_event_is_signed_after_its_content_is_externalized(client):
    key = generate_private_key()
    signer = await client.ensure_actor("acme", "agent:signed-blobs@1", "agent", public_key=key)
    recorder = await LaneRecorder.open(
        client, "acme", "s1", "r1", "signed", actor_id=signer.id, signers={signer.id: key}
    )
    big = {"report": "r" * 3000, "api_key": "plainApiKeyValue-73a1"}
    by_hand = {**make_event(recorder.lane.id, "ext.acme.report", actor_id=signer.id), "payload": big}
    receipt = await recorder.append(
        [recorder.event("ext.acme.report", actor_id=signer.id, payload=big), by_hand]
    )
    for seq in (receipt.first_seq, receipt.last_seq):
        payload = await committed_payload(client, recorder.lane.id, seq)
        assert payload["api_key"] == "[REDACTED:secret_key]" and "_ref" in payload["report"]
    # Signed already, with content the SDK would change: refused before sending.
    presigned = sign_event(
        {**make_event(recorder.lane.id, "ext.acme.report", actor_id=signer.id), "payload": big}, key
    )
    with pytest.raises(InvalidRequest) as refused:
        await client.append(recorder.lane, receipt.last_seq, [presigned])
    assert refused.value.details["path"] == "$.events[0]"
    with pytest.raises(InvalidRequest):
        await recorder.append([presigned])


async def test_a_reference_the_sdk_cannot_satisfy_is_refused_before_sending(client, actor):
    recorder = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
    ref = {"_ref": "sha256:" + "ab" * 32, "size_bytes": 10}
    with pytest.raises(BlobMissing) as missing:
        await recorder.append([recorder.event("ext.acme.x", actor_id=actor.id, payload={"v": ref})])
    assert missing.value.details["ref"] == ref["_ref"]
    assert (await client.get_lane(recorder.lane.id)).last_seq == 0


async def test_the_sequencer_refuses_an_event_whose_blob_is_absent(nats_server, sequencer, client, actor):
    lane = await client.create_lane("acme", "s1", "r1", "raw", actor_id=actor.id)
    data = b"blob bytes " * 200
    ref = {"_ref": "sha256:" + sha(data), "size_bytes": len(data)}
    event = make_event(lane.id, "ext.acme.x", actor_id=actor.id, payload={"v": ref})
    body = {"lane_id": lane.id, "expected_last_seq": 0, "append_id": "raw-1", "events": [event]}
    subject, request = Subjects().append("acme", lane.id), json.dumps(body).encode()
    nc = await nats.connect(nats_server.url)
    try:
        async with Inbox(nc) as raw:
            refused = await raw.ask(subject, request)
            assert isinstance(refused, AppendRejected)
            assert refused.error.code == "blob_missing" and not refused.error.retryable
            assert refused.error.details == {
                "event_id": event["id"],
                "ref": ref["_ref"],
                "size_bytes": len(data),
                "path": "$.events[0].payload",
            }
            assert (await client.get_lane(lane.id)).last_seq == 0
            # Stored under another tenant, or with another size, it is still absent.
            store = await client.blob_store()
            await store.put("globex", data)
            assert (await raw.ask(subject, request)).error.code == "blob_missing"
            # A descriptor in payload_refs is a reference too (Korg §6.4).
            described = {
                **event,
                "id": make_event(lane.id, "x.y.z", actor_id="a")["id"],
                "payload": {"payload_refs": [{"sha256": sha(data), "size_bytes": 1}]},
            }
            wrong_size = json.dumps({**body, "append_id": "raw-2", "events": [described]})
            assert (await raw.ask(subject, wrong_size.encode())).error.code == "blob_missing"
            # Blob first: the same append now commits.
            await store.put("acme", data)
            committed = await raw.ask(subject, request)
            assert isinstance(committed, AppendCommitted) and committed.first_seq == 1
    finally:
        await nc.close()
    registry = sequencer._metrics.registry
    assert (
        registry.get_sample_value(
            "laneledger_sequencer_append_requests_total", {"outcome": "rejected", "code": "blob_missing"}
        )
        == 3
    )
    assert registry.get_sample_value("laneledger_sequencer_blob_lookups_total", {"result": "missing"}) == 3
    assert registry.get_sample_value("laneledger_sequencer_blob_lookups_total", {"result": "present"}) == 1
