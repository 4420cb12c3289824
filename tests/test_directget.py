"""Batched direct get (sdk/directget.py) against a real nats-server: the last
message of many subjects in one answer, chunked past the server's limit,
subjects without a message absent, a stream without direct gets refused."""

from __future__ import annotations

import dataclasses

import pytest
from nats.js.api import StreamConfig

from laneledger.contract.subjects import token
from laneledger.sdk.blobstore import BlobStore
from laneledger.sdk.directget import MULTI_LAST_MAX, NoDirectGet, last_messages

pytestmark = [pytest.mark.nats, pytest.mark.timeout(60)]


async def test_last_message_of_each_subject(nc, js):
    await js.add_stream(StreamConfig(name="S", subjects=["s.>"], allow_direct=True))
    await js.publish("s.a", b"a1")
    await js.publish("s.a", b"a2")
    await js.publish("s.b", b"b1")
    found = await last_messages(nc, "S", ["s.a", "s.b", "s.none", "s.a"])
    assert {subject: msg.data for subject, msg in found.items()} == {"s.a": b"a2", "s.b": b"b1"}


async def test_nothing_found_is_empty(nc, js):
    await js.add_stream(StreamConfig(name="S", subjects=["s.>"], allow_direct=True))
    assert await last_messages(nc, "S", ["s.x", "s.y"]) == {}
    assert await last_messages(nc, "S", []) == {}


async def test_more_subjects_than_one_request_may_name(nc, js):
    await js.add_stream(StreamConfig(name="S", subjects=["s.>"], allow_direct=True))
    n = MULTI_LAST_MAX + 30
    for i in range(0, n, 7):
        await js.publish(f"s.{i}", str(i).encode())
    found = await last_messages(nc, "S", [f"s.{i}" for i in range(n)])
    assert {subject: msg.data for subject, msg in found.items()} == {
        f"s.{i}": str(i).encode() for i in range(0, n, 7)
    }


async def test_a_stream_without_direct_gets_is_refused(nc, js):
    await js.add_stream(StreamConfig(name="S", subjects=["s.>"], allow_direct=False))
    await js.publish("s.a", b"a")
    with pytest.raises(NoDirectGet):
        await last_messages(nc, "S", ["s.a"], timeout_s=5)


@pytest.mark.parametrize("direct", [True, False], ids=["batched", "one-lookup-per-ref"])
async def test_blob_lookups_find_what_is_stored_either_way(nc, js, direct: bool) -> None:
    """BlobStore.infos: batched where the bucket allows direct gets, one
    lookup per ref where it does not (a bucket made otherwise); the same answer."""
    store = await BlobStore.open(js, bucket="B")
    ref = await store.put("acme", b"stored bytes " * 200)
    other = await store.put("globex", b"globex's bytes " * 200)
    if not direct:
        info = await js.stream_info("OBJ_B")
        await js.update_stream(dataclasses.replace(info.config, allow_direct=False))
    made_up = "sha256:" + "0" * 64
    tenant = token("acme")
    infos = await store.infos(tenant, [ref, made_up, other])
    assert infos[ref] is not None and infos[ref].size == 2600
    assert infos[made_up] is None and infos[other] is None  # globex's blob is not acme's
    assert await store.missing(tenant, [(ref, 2600), (ref, 1), (made_up, 5)]) == [(ref, 1), (made_up, 5)]
