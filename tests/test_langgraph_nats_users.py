"""The LangGraph saver and its erasure under deploy/nats.conf's
least-privilege users (spec/checkpoint.md, "Erasure"): the checkpoint
service as ``checkpoint`` erases an artifact blob (overwriting its chunks,
then deleting the object) with the rights the config grants it, and the
saver works as the plain ``producer``; no connection sees a permission
violation."""

from __future__ import annotations

import nats
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from prometheus_client import CollectorRegistry
from test_checkpoint_nats_users import secured_server  # noqa: F401 - the fixture

from laneledger.adapters.langgraph import LaneledgerSaver
from laneledger.adapters.langgraph_records import record_id
from laneledger.contract.errors import ArtifactMissing
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LedgerClient
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService, CheckpointSettings
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger


@pytest.mark.nats
async def test_erasure_under_least_privilege_users(secured_server: NatsServer, tmp_path) -> None:  # noqa: F811
    violations: list[Exception] = []

    async def remember(exc: Exception) -> None:
        violations.append(exc)

    urls = secured_server.urls  # type: ignore[attr-defined]  # set by the fixture
    conns = {
        u: await nats.connect(urls[u], error_cb=remember)
        for u in ("sequencer", "sequencer-replies", "checkpoint", "checkpoint-replies")
    }
    sequencer = Sequencer(
        conns["sequencer"],
        LedgerWriter(open_ledger(tmp_path / "ledger.db")),
        SequencerMetrics(CollectorRegistry()),
        reply_nc=conns["sequencer-replies"],
    )
    store = CheckpointStore.open(tmp_path / "checkpoints.db")
    service = CheckpointService(
        conns["checkpoint"],
        store,
        CheckpointMetrics(CollectorRegistry()),
        CheckpointSettings(anchor_wait_s=10.0, max_inline_bytes=1024),
        reply_nc=conns["checkpoint-replies"],
    )
    await sequencer.start()
    await service.start()
    try:
        producer_nc = await nats.connect(urls["producer"], error_cb=remember)
        async with LedgerClient(producer_nc, owns_connection=True, timeout=10.0) as client:
            saver = LaneledgerSaver(client, tenant="acme")
            await saver.setup()
            cp = empty_checkpoint()
            cp["channel_values"], cp["channel_versions"] = {"doc": "z" * 5000}, {"doc": 1}
            config = {"configurable": {"thread_id": "secured", "checkpoint_ns": ""}}
            stored = await saver.aput(config, cp, {"step": 0}, {"doc": 1})
            record = await saver.checkpoints.get(
                record_id("secured", "", stored["configurable"]["checkpoint_id"])
            )
            assert record.artifact is not None  # over 1024 bytes: a blob
            await saver.adelete_thread("secured")
            with pytest.raises(ArtifactMissing):
                await saver.checkpoints.read_artifact(record.artifact)
            assert await saver.aget_tuple(config) is None
    finally:
        await service.stop()
        await sequencer.stop()
        for connection in conns.values():
            await connection.close()
        store.close()
    assert not [v for v in violations if "permission" in str(v).lower()], violations
