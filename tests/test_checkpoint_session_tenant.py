"""A save that names only a session belongs to the session's tenant even
when the checkpoint service's index has not read that session yet
(spec/checkpoint.md, "Tenants"): the committed stream trails the receipts,
so a harness that saves right after its run's first append would otherwise
have its checkpoint land in the key's namespace (no tenant). Here the index
reads nothing at all: the tenant comes from the ledger."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from checkpoint_fixtures import new_checkpoint_service

from laneledger.contract.errors import InvalidRequest
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.checkpoint.anchors import AnchorIndex

pytestmark = pytest.mark.nats

FORMAT = "application/vnd.tests.state+json;version=1"


async def test_a_save_naming_an_unread_session_takes_its_tenant_from_the_ledger(
    nats_server, nc, sequencer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def reads_nothing(self: AnchorIndex) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(AnchorIndex, "run", reads_nothing)
    service = new_checkpoint_service(nc, tmp_path / "checkpoints.db")
    await service.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=30.0) as client:
            checkpoints = CheckpointClient(client)
            for tenant in ("acme", "globex"):
                actor = await client.ensure_actor(tenant, "agent:a", "agent")
                lane = await LaneRecorder.open(client, tenant, f"s-{tenant}", "r1", "main", actor_id=actor.id)
                await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r1")])
            saved = await checkpoints.save(
                "k", expected_revision=0, format=FORMAT, state={}, session_id="s-acme", run_id="r1"
            )
            assert service.anchors.applied == 0  # the index read nothing
            assert saved.tenant == "acme"
            unknown = await checkpoints.save(
                "k2", expected_revision=0, format=FORMAT, state={}, session_id="nobody"
            )
            assert unknown.tenant is None  # no tenant has it: the key's namespace, as before

            # Both tenants have a session of this id: the save must name one.
            actor = await client.ensure_actor("globex", "agent:a", "agent")
            await LaneRecorder.open(client, "globex", "s-acme", "r1", "main", actor_id=actor.id)
            with pytest.raises(InvalidRequest) as ambiguous:
                await checkpoints.save(
                    "k3", expected_revision=0, format=FORMAT, state={}, session_id="s-acme", run_id="r1"
                )
            assert ambiguous.value.details["path"] == "$.checkpoint.tenant"
            assert ambiguous.value.details["tenants"] == ["acme", "globex"]
    finally:
        await service.stop()
        service._store.close()
