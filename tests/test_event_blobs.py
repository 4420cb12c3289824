"""Where the bytes of an externalized payload value wait between make_event
and the submit that stores them: in the event itself (a ``PreparedEvent``,
sdk/content.py; spec/content.md, "Blob first"), not in a buffer the module,
the process's clients or its threads share. On a real nats-server, the real
sequencer and the real blob bucket."""

from __future__ import annotations

import json
import threading

import msgspec
import pytest

from laneledger.contract.canonical import canonicalize
from laneledger.contract.errors import BlobMissing
from laneledger.contract.signing import (
    check_signature,
    generate_private_key,
    sign_event,
    signed_bytes,
)
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.sdk.content import PreparedEvent

pytestmark = pytest.mark.timeout(60)


def content(tag: str) -> str:
    return f"{tag}: " + "blob bytes " * 300  # over 1 KiB: externalized


async def committed_payload(client: LedgerClient, lane_id: str, seq: int) -> dict:
    page = await client.load_lane(lane_id, after_seq=seq - 1, limit=1)
    return msgspec.to_builtins(page.events[0])["payload"]


async def test_two_clients_share_no_pending_blobs(nats_server, client, actor):
    other = await LedgerClient.connect(nats_server.url, timeout=5.0)
    try:
        lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
        event = make_event(lane.id, "ext.acme.file_written", actor_id=actor.id, payload={"c": content("a")})
        ref = event["payload"]["c"]["_ref"]
        assert set(event.blobs) == {ref}
        # The bytes are the event's: a copy without them, sent by another
        # client of this process, finds them nowhere.
        with pytest.raises(BlobMissing) as missing:
            await other.append(lane, 0, [dict(event)])
        assert missing.value.details["ref"] == ref
        assert (await client.get_lane(lane.id)).last_seq == 0
        # The event itself stores them, from whichever client sends it.
        receipt = await other.append(lane, 0, [event])
        assert (await committed_payload(client, lane.id, receipt.first_seq))["c"]["_ref"] == ref
        # Once stored, the bucket (the one shared place) satisfies a copy.
        again = make_event(lane.id, "ext.acme.file_written", actor_id=actor.id, payload={"c": content("a")})
        assert (await client.append(lane, 1, [dict(again)])).last_seq == 2
        assert (await (await client.blob_store()).get("acme", ref)).decode() == content("a")
    finally:
        await other.close()


def test_events_built_in_two_threads_carry_only_their_own_blobs():
    built: dict[str, PreparedEvent] = {}

    def build(tag: str) -> None:
        for _ in range(50):
            built[tag] = make_event("lane-1", "ext.acme.x", actor_id="a", payload={"c": content(tag)})

    threads = [threading.Thread(target=build, args=(tag,)) for tag in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for tag, event in built.items():
        ref = event["payload"]["c"]["_ref"]
        assert event.blobs == {ref: content(tag).encode()}


async def test_a_signed_event_built_by_make_event_stores_its_blobs(client):
    key = generate_private_key()
    signer = await client.ensure_actor("acme", "agent:signs-later@1", "agent", public_key=key)
    lane = await client.create_lane("acme", "s1", "r1", "signed", actor_id=signer.id)
    built = make_event(lane.id, "ext.acme.report", actor_id=signer.id, payload={"r": content("later")})
    signed = sign_event(built, key)  # signed after make_event, as a producer may
    assert isinstance(signed, PreparedEvent) and signed.blobs == built.blobs
    # The carried bytes are no part of the event's wire form or signed bytes.
    plain = dict(signed)
    assert msgspec.json.encode(signed) == msgspec.json.encode(plain)
    assert json.dumps(signed) == json.dumps(plain)
    assert canonicalize(signed) == canonicalize(plain)
    assert signed_bytes(signed) == signed_bytes(dict(built))
    assert check_signature(plain, key.public_key())
    at_once = make_event(
        lane.id, "ext.acme.report", actor_id=signer.id, payload={"r": content("at once")}, private_key=key
    )
    assert isinstance(at_once, PreparedEvent) and len(at_once.blobs) == 1

    receipt = await client.append(lane, 0, [signed, at_once])
    store = await client.blob_store()
    for seq, event, tag in ((1, signed, "later"), (2, at_once, "at once")):
        ref = (await committed_payload(client, lane.id, seq))["r"]["_ref"]
        assert ref == event["payload"]["r"]["_ref"]
        assert (await store.get("acme", ref)).decode() == content(tag)
    assert receipt.last_seq == 2


async def test_an_event_without_its_blobs_is_refused_locally_with_blob_missing(client, actor):
    """What an evicted buffer entry used to give: refused before sending."""
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    event = make_event(lane.id, "ext.acme.x", actor_id=actor.id, payload={"c": content("lost")})
    for copy in (json.loads(json.dumps(event)), {**event}):
        with pytest.raises(BlobMissing) as missing:
            await client.append(lane, 0, [copy])
        assert missing.value.details == {
            "ref": event["payload"]["c"]["_ref"],
            "size_bytes": len(content("lost")),
            "path": "$.events[0].payload",
        }
    # Bytes that do not hash to the reference satisfy nothing either.
    forged = PreparedEvent(event, {ref: b"x" * len(data) for ref, data in event.blobs.items()})
    with pytest.raises(BlobMissing):
        await client.append(lane, 0, [forged])
    assert (await client.get_lane(lane.id)).last_seq == 0
