"""Per-tenant limits from the tenants file (spec/wire.md, "Tenants and limits"):
one append stream per declared tenant, read fairly and at the tenant's rate,
bounded by its backlog; the shared stream retired when a file comes (and the
tenants' streams when it goes) with nothing it held lost."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from ledger_fixtures import start_sequencer
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.contract import errors
from laneledger.contract.subjects import Subjects
from laneledger.runtime.tenants import TenantLimits, TenantsFileError, parse_tenants
from laneledger.sdk.blobstore import BlobBuckets
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService, CheckpointSettings
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.intake import TokenBucket
from laneledger.services.sequencer.service import SequencerSettings
from laneledger.services.sequencer.streams import SEQUENCER_CONSUMER, sequencer_consumer_config

pytestmark = pytest.mark.nats

SUBJECTS = Subjects()


def tenants_file(acme: str = "", globex: str = "") -> str:
    return f"[tenants.acme]\n{acme}\n[tenants.globex]\n{globex}\n"


# -------------------------------------------------------------- the file


def test_the_file_gives_each_tenant_the_defaults_and_its_own_values() -> None:
    tenants = parse_tenants(
        '[defaults]\nappend_rate = 50\nblob_bytes = "2GiB"\n'
        '[tenants.acme]\nblob_bytes = "512MiB"\nappend_backlog = 7\n[tenants.globex]\n'
    )
    assert tenants.names == ["acme", "globex"]
    assert tenants.limits["acme"] == TenantLimits(
        blob_bytes=512 << 20, append_rate=50.0, append_backlog=7, artifact_bytes=1 << 30
    )
    assert tenants.limits["globex"].blob_bytes == 2 << 30
    assert tenants.limits["globex"].append_backlog == TenantLimits().append_backlog


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[tenants.acme]\nblob_byte = 5\n", "'blob_byte'"),  # a typo must not leave acme unlimited
        ('[tenants.acme]\nblob_bytes = "5 gigs"\n', "blob_bytes"),
        ("[tenants.acme]\nappend_rate = 0\n", "append_rate"),
        ("[tenants.acme]\nappend_backlog = true\n", "append_backlog"),
        ("[tenants.acme]\nappend_backlog = 2.5\n", "append_backlog"),
        ('[tenants."a.b"]\n', "'a.b'"),
        ("[limits]\n", "'limits'"),
        ("[tenants\n", "not TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_what_is_wrong(text: str, named: str) -> None:
    with pytest.raises(TenantsFileError, match=named):
        parse_tenants(text, "tenants.toml")


def test_the_token_bucket_allows_the_burst_then_the_rate() -> None:
    now = [100.0]
    bucket = TokenBucket(rate=10.0, burst=5, clock=lambda: now[0])
    assert bucket.available() == 5
    bucket.take(5)
    assert bucket.available() == 0
    assert bucket.wait_s() == pytest.approx(0.1)
    now[0] += 0.35
    assert bucket.available() == 3
    now[0] += 60
    assert bucket.available() == 5  # never more than the burst


# -------------------------------------------------------- the sequencer


async def _lane(client: LedgerClient, tenant: str, name: str = "main"):
    agent = await client.ensure_actor(tenant, f"agent:{tenant}", "agent")
    return agent, await client.create_lane(tenant, f"s-{tenant}", "r1", name, actor_id=agent.id)


def _event(lane, agent, text: str):
    return make_event(lane.id, "stream.text_delta", actor_id=agent.id, payload={"text": text})


async def _stream_names(js) -> set[str]:
    return {info.config.name for info in await js.streams_info()}


async def test_each_declared_tenant_appends_through_its_own_stream(
    nats_server, nc, js, tmp_path: Path
) -> None:
    settings = SequencerSettings(tenants=parse_tenants(tenants_file()))
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        names = await _stream_names(js)
        assert {"LEDGER_APPEND_acme", "LEDGER_APPEND_globex"} <= names
        assert SUBJECTS.append_stream not in names  # it would overlap theirs
        async with await LedgerClient.connect(nats_server.url, timeout=5.0, tenant_inboxes=True) as client:
            for tenant in ("acme", "globex"):
                agent, lane = await _lane(client, tenant)
                committed = await client.append(lane, 0, [_event(lane, agent, tenant)])
                assert committed.last_seq == 1
            # A tenant the file does not declare has no stream to append to.
            agent, lane = await _lane(client, "initech")
            with pytest.raises(errors.LedgerUnavailable, match="no stream"):
                await client.append(lane, 0, [_event(lane, agent, "x")], retries=0)
    finally:
        await sequencer.stop()


async def test_a_tenant_over_its_backlog_gets_quota_exceeded_and_others_are_unaffected(
    nats_server, nc, js, tmp_path: Path
) -> None:
    # acme is taken from once a second at most; four requests may wait.
    settings = SequencerSettings(
        tenants=parse_tenants(tenants_file(acme="append_rate = 1\nappend_burst = 1\nappend_backlog = 4\n"))
    )
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=30.0, tenant_inboxes=True) as client:
            acme, acme_lane = await _lane(client, "acme")
            globex, globex_lane = await _lane(client, "globex")
            # The first request is taken at once (the burst) and answered
            # before the rest are sent: its ack frees no slot while they are.
            first = await client.submit(acme_lane, 0, [_event(acme_lane, acme, "a0")])
            await first.receipt(timeout=30)
            accepted, refused = [first], []
            for i in range(1, 12):
                try:
                    handle = await client.submit(acme_lane, i, [_event(acme_lane, acme, f"a{i}")])
                    accepted.append(handle)
                except errors.QuotaExceeded as exc:
                    refused.append(exc)
            assert refused, "acme's backlog limit never refused a request"
            err = refused[0]
            assert err.code == "quota_exceeded" and err.retryable and err.http_status == 429
            assert err.details["limit"] == "append_backlog"
            assert err.details["tenant"] == "acme"
            assert err.details["stream"] == "LEDGER_APPEND_acme"
            # globex appends at once while acme waits on its rate.
            committed = await client.append(globex_lane, 0, [_event(globex_lane, globex, "g")])
            assert committed.last_seq == 1
            pending = await js.stream_info("LEDGER_APPEND_acme")
            assert pending.state.messages >= 2, "acme's requests were taken faster than its rate"
            # Nothing accepted is lost: every one commits, in order.
            seqs = [(await handle.receipt(timeout=60)).last_seq for handle in accepted]
            assert seqs == list(range(1, len(accepted) + 1))
    finally:
        await sequencer.stop()


async def test_a_deep_backlog_delays_another_tenant_by_a_batch_not_by_its_length(
    nats_server, nc, js, tmp_path: Path
) -> None:
    settings = SequencerSettings(tenants=parse_tenants(tenants_file()), batch_size=100)
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    async with await LedgerClient.connect(nats_server.url, timeout=60.0, tenant_inboxes=True) as client:
        acme, acme_lanes = (await _lane(client, "acme"))[0], []
        for i in range(20):
            acme_lanes.append((await _lane(client, "acme", f"lane-{i}"))[1])
        globex, globex_lane = await _lane(client, "globex")
        await sequencer.stop()  # requests queue up while nothing takes them
        handles = [
            await client.submit(lane, seq, [_event(lane, acme, f"{seq}")])
            for seq in range(50)
            for lane in acme_lanes
        ]  # 1000 of acme's, queued first
        late = await client.submit(globex_lane, 0, [_event(globex_lane, globex, "late")])
        sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
        try:
            globex_position = (await late.receipt()).positions[0]
            acme_positions = [(await handle.receipt()).positions[-1] for handle in handles]
        finally:
            await sequencer.stop()
    # Taken in turns: globex's request is in one of the first batches (its feed
    # may start a batch or two after acme's), not after acme's thousand.
    behind = sum(position < globex_position for position in acme_positions)
    assert behind <= 3 * settings.batch_size, f"{behind} of acme's requests committed before globex's"


async def test_the_shared_stream_is_retired_when_a_file_comes_and_back_when_it_goes(
    nats_server, nc, js, tmp_path: Path
) -> None:
    db = tmp_path / "ledger.db"
    tenants = SequencerSettings(tenants=parse_tenants(tenants_file()))
    sequencer = await start_sequencer(nc, db, SequencerSettings())
    async with await LedgerClient.connect(nats_server.url, timeout=30.0, tenant_inboxes=True) as client:
        agent, lane = await _lane(client, "acme")
        await sequencer.stop()
        queued = [await client.submit(lane, i, [_event(lane, agent, f"{i}")]) for i in range(5)]
        assert (await js.stream_info(SUBJECTS.append_stream)).state.messages == 5

        sequencer = await start_sequencer(nc, db, tenants)  # the shared stream retired: drained, deleted
        try:
            assert [(await handle.receipt()).last_seq for handle in queued] == [1, 2, 3, 4, 5]
            await eventually(
                lambda: _stream_names(js),
                until=lambda names: SUBJECTS.append_stream not in names,
                what="the retired shared stream deleted",
                timeout=20,
            )
            assert (await client.append(lane, 5, [_event(lane, agent, "5")])).last_seq == 6
        finally:
            await sequencer.stop()

        queued = [await client.submit(lane, 6 + i, [_event(lane, agent, f"t{i}")]) for i in range(3)]
        sequencer = await start_sequencer(nc, db, SequencerSettings())  # and back, the same way
        try:
            assert [(await handle.receipt()).last_seq for handle in queued] == [7, 8, 9]
            await eventually(
                lambda: _stream_names(js),
                until=lambda names: not names & {"LEDGER_APPEND_acme", "LEDGER_APPEND_globex"},
                what="the retired tenant streams deleted",
                timeout=20,
            )
            assert (await client.append(lane, 9, [_event(lane, agent, "9")])).last_seq == 10
        finally:
            await sequencer.stop()


async def test_a_changed_limit_is_applied_to_the_tenant_stream(nats_server, nc, js, tmp_path: Path) -> None:
    for backlog in (100, 250):
        settings = SequencerSettings(tenants=parse_tenants(tenants_file(acme=f"append_backlog = {backlog}")))
        sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
        await sequencer.stop()
        assert (await js.stream_info("LEDGER_APPEND_acme")).config.max_msgs == backlog


async def test_a_tenant_artifact_bucket_holds_no_more_than_its_artifact_bytes(
    nats_server, nc, tmp_path: Path
) -> None:
    tenants = parse_tenants(tenants_file(acme='artifact_bytes = "64KiB"'))
    store = CheckpointStore.open(tmp_path / "checkpoints.db")
    service = CheckpointService(
        nc, store, CheckpointMetrics(CollectorRegistry()), CheckpointSettings(tenants=tenants)
    )
    await service.start()
    try:
        async with await LedgerClient.connect(nats_server.url, tenant="acme", timeout=10.0) as acme:
            artifacts = CheckpointClient(acme)
            small = await artifacts.put_artifact(b"s" * 20_000, "application/octet-stream")
            assert await artifacts.read_artifact(small) == b"s" * 20_000
            with pytest.raises(errors.QuotaExceeded) as refused:
                await artifacts.put_artifact(b"l" * 80_000, "application/octet-stream")
            assert refused.value.details["limit"] == "artifact_bytes"
            assert refused.value.details["tenant"] == "acme"
            assert refused.value.details["bucket"] == "LEDGER_CHECKPOINT_ARTIFACTS_acme"
            assert await artifacts.read_artifact(small) == b"s" * 20_000  # what fitted stays
    finally:
        await service.stop()
        store.close()


async def test_a_tenant_blob_buckets_hold_no_more_than_its_blob_bytes(
    nats_server, nc, js, tmp_path: Path
) -> None:
    settings = SequencerSettings(tenants=parse_tenants(tenants_file(acme='blob_bytes = "64KiB"')))
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        async with await LedgerClient.connect(nats_server.url, tenant="acme", timeout=10.0) as acme:
            agent, lane = await _lane(acme, "acme")  # its first command: the sequencer makes its buckets
            blobs = await acme.blob_store()
            with pytest.raises(errors.QuotaExceeded) as refused:  # more than the uploads bucket holds
                await blobs.put("acme", b"u" * 80_000)
            assert refused.value.details["limit"] == "blob_bytes"
            assert refused.value.details["bucket"] == "LEDGER_UPLOADS_acme"
            # What fits commits; the sequencer discards the upload once copied,
            # so the upload does not count twice against the tenant.
            first = await acme.append(lane, 0, [_event(lane, agent, "a" * 40_000)])
            assert first.last_seq == 1
            uploads = await js.stream_info("OBJ_LEDGER_UPLOADS_acme")
            assert uploads.state.bytes < 1_000, "the copied upload still holds space"
            # A second one fits the uploads bucket but not the committed one: refused, typed.
            with pytest.raises(errors.QuotaExceeded) as refused:
                await acme.append(lane, 1, [_event(lane, agent, "b" * 40_000)])
            assert refused.value.details["limit"] == "blob_bytes"
            assert refused.value.details["bucket"] == "LEDGER_BLOBS_acme"
            assert (await acme.get_lane(lane.id)).last_seq == 1
    finally:
        await sequencer.stop()


@pytest.mark.slow
async def test_a_tenants_blob_copy_delays_its_own_requests_not_another_tenants(
    nats_server, nc, js, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sequencer copies a tenant's new uploads before the append that
    references them commits. The copy runs ahead of the batch: while acme's
    is held (paused here, as a slow copy of a large blob would be), globex's
    appends commit, and acme's later requests wait behind it, in order, and
    are not redelivered however long the copy takes."""
    copy_started, release = asyncio.Event(), asyncio.Event()
    commit_upload = BlobBuckets.commit_upload

    async def paused(self: BlobBuckets, tenant_token: str, ref: str, size_bytes: int, **kw) -> bool:
        copy_started.set()
        await release.wait()
        return await commit_upload(self, tenant_token, ref, size_bytes, **kw)

    monkeypatch.setattr(BlobBuckets, "commit_upload", paused)
    settings = SequencerSettings(tenants=parse_tenants(tenants_file()))
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        async with (
            await LedgerClient.connect(nats_server.url, tenant="acme", timeout=30.0) as acme,
            await LedgerClient.connect(nats_server.url, tenant="globex", timeout=30.0) as globex,
        ):
            agent, lane = await _lane(acme, "acme")
            _, other_lane = await _lane(acme, "acme", "other")
            g_agent, g_lane = await _lane(globex, "globex")
            big = await acme.submit(lane, 0, [_event(lane, agent, "a large tool output " * 4000)])
            await asyncio.wait_for(copy_started.wait(), 30)
            behind = await acme.submit(other_lane, 0, [_event(other_lane, agent, "small")])
            # globex is not held up by acme's copy.
            assert (await globex.append(g_lane, 0, [_event(g_lane, g_agent, "g")])).last_seq == 1
            # acme's own later request is: it waits behind the held one.
            assert (await acme.get_lane(other_lane.id)).last_seq == 0
            # Held past the consumer's ack wait, neither is redelivered: the
            # intake marks them in progress while the copy runs.
            ack_wait = sequencer_consumer_config().ack_wait
            assert ack_wait is not None
            await asyncio.sleep(ack_wait + 2)
            info = await js.consumer_info("LEDGER_APPEND_acme", SEQUENCER_CONSUMER)
            assert info.num_redelivered == 0 and info.num_ack_pending == 2
            release.set()
            first, second = await big.receipt(), await behind.receipt()
            assert first.positions[-1] < second.positions[0]
            assert (await acme.get_lane(lane.id)).last_seq == 1
    finally:
        release.set()
        await sequencer.stop()


def test_a_request_that_may_reference_a_blob_is_never_missed() -> None:
    """The intake decodes only requests that may reference a blob: however
    a producer spells the keys in JSON, none that does is passed over."""
    from laneledger.contract.contentref import request_may_reference

    assert not request_may_reference(b'{"events":[{"payload":{"text":"plain"}}]}')
    for spelled in (b'"_ref"', b'"\\u005fref"', b'"_\\u0072ef"', b'"payload_refs"', b'"payload\\u005frefs"'):
        assert request_may_reference(b'{"events":[{"payload":{' + spelled + b":1}}]}"), spelled


async def test_korg_blob_uploads_count_against_the_korg_tenants_blob_bytes(
    nats_server, nc, js, tmp_path: Path, start_tail
) -> None:
    """The ingest service stores Korg's blobs as the Korg tenant: uploaded into
    the tenant's uploads bucket, bounded by the tenant's blob_bytes; the tail
    serves an upload not yet referenced."""
    text = tenants_file() + '[tenants.korg]\nblob_bytes = "64KiB"\n'
    sequencer = await start_sequencer(
        nc, tmp_path / "ledger.db", SequencerSettings(tenants=parse_tenants(text))
    )
    try:
        tail = await start_tail()
        small = b"s" * 40_000
        digest = hashlib.sha256(small).hexdigest()
        stored = await tail.ingest.request("PUT", f"/api/blob/{digest}", data=small)
        assert stored.status == 200, stored.body
        assert (await js.stream_info("OBJ_LEDGER_UPLOADS_korg")).state.bytes > len(small)
        assert (await tail.api.get(f"/api/blob/{digest}")).body == small  # uploaded, served
        large = b"l" * 80_000
        refused = await tail.ingest.request(
            "PUT", f"/api/blob/{hashlib.sha256(large).hexdigest()}", data=large
        )
        assert refused.status == 429, refused.body
        assert refused.error["code"] == "quota_exceeded"
        assert refused.error["details"]["limit"] == "blob_bytes"
        assert refused.error["details"]["bucket"] == "LEDGER_UPLOADS_korg"
    finally:
        await sequencer.stop()


async def test_a_request_nested_past_any_limit_is_left_to_the_batch(js) -> None:
    """The intake's look at a request must not fail on what the batch refuses
    with a typed receipt (found by tests/test_bad_input_fuzz.py)."""
    from laneledger.services.sequencer.blobcheck import BlobCheck
    from laneledger.services.sequencer.metrics import SequencerMetrics

    check = BlobCheck(BlobBuckets(js), SequencerMetrics(CollectorRegistry()))
    deep = b'{"events":[{"payload":{"_ref":' + b"[" * 100_000 + b"]" * 100_000 + b"}}]}"
    assert check.warming("acme", deep) is None
    assert check.warming("acme", b'{"events": not json') is None
