"""The LangGraph saver's edges and the checkpoint service's erase op
(spec/langgraph.md, spec/checkpoint.md "Erasure"): bad input is a typed
error with nothing written; the sync API works from another thread and
refuses its own loop; an erase is scoped to its tenant, can be a dry run,
and is idempotent."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry

from laneledger.adapters.langgraph import LaneledgerSaver
from laneledger.adapters.langgraph_records import ns_key, record_id, thread_key, writes_key
from laneledger.contract.errors import ArtifactMissing, EntityNotFound, IntegrityError, InvalidRequest
from laneledger.contract.redaction import Redactor
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService, CheckpointSettings
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.service import Sequencer


def config(thread: str, **more: Any) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", **more}}


async def put(saver: LaneledgerSaver, thread: str) -> Any:
    return await saver.aput(config(thread), empty_checkpoint(), {"source": "input", "step": -1}, {})


async def test_bad_input_is_a_typed_error_and_writes_nothing(saver: LaneledgerSaver) -> None:
    with pytest.raises(InvalidRequest) as no_thread:
        await saver.aput({"configurable": {}}, empty_checkpoint(), {}, {})
    assert no_thread.value.details["path"] == "$.configurable.thread_id"

    long_thread = "t" * 250  # a valid session id, but its checkpoint key would pass 256 characters
    with pytest.raises(InvalidRequest) as too_long:
        await put(saver, long_thread)
    assert too_long.value.details["limit"] == 256
    with pytest.raises(EntityNotFound):
        await saver.client.load_session(long_thread)  # no lane, no event

    stored = await put(saver, "t-1")
    with pytest.raises(InvalidRequest):
        await saver.aput_writes(config("t-1"), [("ch", 1)], "task")  # no checkpoint_id
    with pytest.raises(InvalidRequest):
        await saver.aprune(["t-1"], strategy="keep_oldest")
    with pytest.raises(InvalidRequest):
        [t async for t in saver.alist(None)]
    found = await saver.aget_tuple(stored)
    assert found is not None and found.pending_writes == []


async def test_sync_api_from_another_thread_and_not_from_its_loop(saver: LaneledgerSaver) -> None:
    stored = await asyncio.to_thread(saver.put, config("sync-1"), empty_checkpoint(), {"step": 0}, {})
    await asyncio.to_thread(saver.put_writes, stored, [("ch", "v")], "task")
    found = await asyncio.to_thread(saver.get_tuple, stored)
    assert found is not None and found.pending_writes == [("task", "ch", "v")]
    assert [t.config for t in await asyncio.to_thread(lambda: list(saver.list(config("sync-1"))))] == [
        found.config
    ]
    with pytest.raises(InvalidRequest, match="own event loop"):
        saver.get_tuple(stored)
    await asyncio.to_thread(saver.delete_thread, "sync-1")
    assert await saver.aget_tuple(config("sync-1")) is None


async def test_erase_is_scoped_dry_runnable_and_idempotent(
    saver: LaneledgerSaver, client: LedgerClient, checkpoints: CheckpointClient
) -> None:
    await put(saver, "scoped")
    key = ns_key("scoped", "")
    latest = await checkpoints.latest(key)
    assert latest is not None and latest.tenant == "acme"

    # Another tenant's erase does not see acme's checkpoint.
    globex = CheckpointClient(LedgerClient(client.nc, tenant="globex"))
    assert (await globex.erase(keys=[key])).erased == []
    # A dry run names it and erases nothing.
    plan = await checkpoints.erase(keys=[key], dry_run=True)
    assert [i.id for i in plan.erased] == [latest.id]
    assert await checkpoints.latest(key) is not None
    # Erased once; the resend finds nothing left.
    assert [i.id for i in (await checkpoints.erase(keys=[key])).erased] == [latest.id]
    assert (await checkpoints.erase(keys=[key])).erased == []
    assert await checkpoints.latest(key) is None


async def test_delete_thread_erases_writes_whose_checkpoint_was_never_stored(saver: LaneledgerSaver) -> None:
    # LangGraph may store a step's writes while that step's checkpoint is still
    # being saved; a crash then leaves writes under a checkpoint id never stored.
    await put(saver, "orphans")
    never = config("orphans", checkpoint_id="1f0-never-stored")
    await saver.aput_writes(never, [("ch", "orphaned value")], "task")
    key = writes_key("orphans", "", "1f0-never-stored")
    assert await saver.checkpoints.latest(key) is not None
    await saver.adelete_thread("orphans")
    assert await saver.checkpoints.latest(key) is None
    assert await saver.aget_tuple(config("orphans")) is None


async def test_a_tenant_scoped_saver_erases_from_its_own_bucket(
    nats_server: NatsServer, checkpoint_service: CheckpointService, client: LedgerClient
) -> None:
    async with LaneledgerSaver.connect(nats_server.url, tenant="acme", scoped=True) as scoped:
        assert scoped.client.tenant == "acme"
        cp = empty_checkpoint()
        cp["channel_values"], cp["channel_versions"] = {"doc": "w" * 6000}, {"doc": 1}
        stored = await scoped.aput(config("tenanted"), cp, {"step": 0}, {"doc": 1})
        record = await scoped.checkpoints.get(
            record_id("tenanted", "", stored["configurable"]["checkpoint_id"])
        )
        assert record.artifact is not None and record.tenant == "acme"
        assert (await scoped.checkpoints.info()).artifact_bucket.endswith("_acme")
        # Another tenant's scoped erase by run or key finds nothing of acme's.
        globex = CheckpointClient(LedgerClient(client.nc, tenant="globex"))
        assert (await globex.erase(key_prefixes=["langgraph/"])).erased == []
        await scoped.adelete_thread("tenanted")
        with pytest.raises(ArtifactMissing):
            await scoped.checkpoints.read_artifact(record.artifact)
        assert await scoped.aget_tuple(config("tenanted")) is None


async def test_a_rule_matching_the_encoding_refuses_the_save_instead_of_corrupting_it(
    client: LedgerClient, checkpoint_service: CheckpointService
) -> None:
    # A configured pattern broad enough to match hex text: redacting the
    # record would rewrite its bytes, so the saver refuses to save it.
    redactor = Redactor.from_config('{"too_broad": "[0-9a-f]{40}"}', None)
    saver = LaneledgerSaver(LedgerClient(client.nc, redactor=redactor), tenant="acme")
    await saver.setup()
    with pytest.raises(InvalidRequest) as refused:
        await put(saver, "broad")
    assert refused.value.details["rules"] == ["too_broad"]
    assert await saver.checkpoints.latest(ns_key("broad", "")) is None
    assert await saver.checkpoints.latest(thread_key("broad")) is None
    with pytest.raises(EntityNotFound):
        await client.load_session("broad")  # no event either


async def test_a_service_whose_rules_rewrite_the_record_is_an_integrity_error(
    nc: NATS, sequencer: Sequencer, client: LedgerClient, tmp_path: Path
) -> None:
    # The service redacts inline state with its own rules, which may be
    # configured beyond the SDK's: the saver sees the stored digest differ.
    store = CheckpointStore.open(tmp_path / "checkpoints.db")
    broad = Redactor.from_config('{"too_broad": "[0-9a-f]{40}"}', None)
    service = CheckpointService(
        nc,
        store,
        CheckpointMetrics(CollectorRegistry()),
        CheckpointSettings(anchor_wait_s=10.0, refresh_interval_s=0.2, redactor=broad),
    )
    await service.start()
    try:
        saver = LaneledgerSaver(client, tenant="acme")
        await saver.setup()
        with pytest.raises(IntegrityError) as rewritten:
            await put(saver, "rewritten")
        assert rewritten.value.details["digest"] != rewritten.value.details["stored_digest"]
    finally:
        await service.stop()
        store.close()


async def test_erase_pages_past_one_reply(checkpoints: CheckpointClient) -> None:
    # More revisions than one erase reply lists (500): the SDK pages on, a
    # dry run after the last revision listed, a real erase until none is left.
    total = 520
    for revision in range(total):
        key = f"paged/{revision % 3}"
        await checkpoints.save(
            key, expected_revision=revision // 3, format="application/json", state={"n": revision}
        )
    plan = await checkpoints.erase(key_prefixes=["paged/"], dry_run=True)
    assert len(plan.erased) == total and len({i.id for i in plan.erased}) == total
    done = await checkpoints.erase(key_prefixes=["paged/"])
    assert sorted(i.id for i in done.erased) == sorted(i.id for i in plan.erased)
    assert (await checkpoints.erase(key_prefixes=["paged/"], dry_run=True)).erased == []


async def test_two_savers_on_one_thread_lose_nothing(
    client: LedgerClient, checkpoint_service: CheckpointService
) -> None:
    # Two processes' savers (their own revision and lane-head caches) write
    # one thread at once: lost revision and lane races are saved again on
    # top, writes to one checkpoint are merged, every record has its event.
    savers = [LaneledgerSaver(LedgerClient(client.nc), tenant="acme") for _ in range(2)]
    for saver in savers:
        await saver.setup()
    first = await put(savers[0], "shared")

    async def puts(saver: LaneledgerSaver) -> list[str]:
        return [(await put(saver, "shared"))["configurable"]["checkpoint_id"] for _ in range(12)]

    async def writes(saver: LaneledgerSaver, task: str) -> None:
        for i in range(4):
            await saver.aput_writes(first, [(f"ch{i}", f"{task}-{i}")], f"{task}-{i}")

    ids = await asyncio.gather(
        puts(savers[0]), puts(savers[1]), writes(savers[0], "a"), writes(savers[1], "b")
    )
    listed = [t async for t in savers[1].alist(config("shared"))]
    assert {t.checkpoint["id"] for t in listed} == {*ids[0], *ids[1], first["configurable"]["checkpoint_id"]}
    found = await savers[0].aget_tuple(first)
    assert found is not None
    assert sorted(w[0] for w in found.pending_writes or []) == sorted(
        f"{t}-{i}" for t in "ab" for i in range(4)
    )

    session = await client.load_session("shared")
    events = [e for lane in session.lanes for e in (await client.load_lane(lane.id)).events]
    anchored = {e.id for e in events}
    for t in listed:
        stored = await savers[0].checkpoints.get(record_id("shared", "", t.checkpoint["id"]))
        assert stored.anchor is not None and stored.anchor.event_id in anchored
