"""Checkpoint keys and ids are each tenant's own (issue 19; spec/checkpoint.md,
"Tenants"): acme and globex save under one key with one checkpoint id, and
each saves, reads, lists, recovers and erases its own; a tenant asking for
the other's key or id gets exactly the answer for an unknown one; the
operator (a trusted client, the operator token) is told to name the tenant
when several have the key or id, and then reads the named one; two tenants'
LangGraph threads of one thread id stay apart.

Real parts: nats-server, the sequencer and the checkpoint service (over NATS
on the tenants' subjects and the unscoped one, and over HTTP with tokens).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from langgraph.checkpoint.base import empty_checkpoint

from laneledger.adapters.langgraph import LaneledgerSaver
from laneledger.adapters.langgraph_records import ns_key
from laneledger.contract import errors
from laneledger.devtools.natsserver import NatsServer
from laneledger.runtime.access import AccessPolicy
from laneledger.runtime.opsserver import start_http
from laneledger.sdk.checkpoints import CheckpointClient, anchor_of
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.checkpoint.http import checkpoint_app
from laneledger.services.checkpoint.service import CheckpointService

pytestmark = pytest.mark.nats

FORMAT = "application/vnd.tests.state+json;version=1"
KEY, ID = "shared/key", "ck-shared-1"
TENANTS = ("acme", "globex")
TOKENS = {"acme": "acme-token-0123456789abcdef", "globex": "globex-token-0123456789abcdef"}
OPERATOR = "operator-token-0123456789abcdef"


@pytest_asyncio.fixture
async def twins(client: LedgerClient, checkpoint_service: CheckpointService) -> dict[str, Any]:
    """Each tenant's lane, and its tenant-scoped checkpoint client (its
    producer's subjects, ``<prefix>.checkpoint.<tenant>.<op>``); each saves
    revision 1 of ``KEY`` with id ``ID``, anchored in its own lane."""
    found: dict[str, Any] = {}
    for tenant in TENANTS:
        who = await client.ensure_actor(tenant, "agent:twin/main@1", "agent")
        lane = await LaneRecorder.open(client, tenant, f"s-{tenant}", "r1", "main", actor_id=who.id)
        receipt = await lane.append([lane.event("run.started", actor_id=who.id, subject_id="r1")])
        own = CheckpointClient(LedgerClient(client.nc, tenant=tenant))
        saved = await own.save(
            KEY,
            expected_revision=0,
            format=FORMAT,
            state={"who": tenant},
            anchor=anchor_of(receipt),
            session_id=f"s-{tenant}",
            run_id="r1",
            terminal=True,
            checkpoint_id=ID,
        )
        assert (saved.tenant, saved.revision, saved.id) == (tenant, 1, ID)
        found[tenant] = {"client": own, "lane": lane.lane.id, "saved": saved}
    return found


async def test_each_tenant_saves_reads_lists_recovers_and_erases_its_own(twins):
    for tenant in TENANTS:
        own: CheckpointClient = twins[tenant]["client"]
        assert (await own.get(ID)).state == {"who": tenant}
        # A replay and the conflicts are judged among the tenant's own.
        again = await own.save(
            KEY,
            expected_revision=0,
            format=FORMAT,
            state={"who": tenant},
            anchor=twins[tenant]["saved"].anchor,
            session_id=f"s-{tenant}",
            run_id="r1",
            terminal=True,
            checkpoint_id=ID,
        )
        assert again == twins[tenant]["saved"]
        with pytest.raises(errors.IdempotencyViolation) as violation:
            await own.save(KEY, expected_revision=1, format=FORMAT, state={"other": 1}, checkpoint_id=ID)
        assert violation.value.details["stored_digest"] != violation.value.details["digest"]
        second = await own.save(KEY, expected_revision=1, format=FORMAT, state={"who": tenant, "n": 2})
        assert (second.revision, second.tenant) == (2, tenant)
        with pytest.raises(errors.RevisionConflict) as conflict:
            await own.save(KEY, expected_revision=1, format=FORMAT, state={})
        assert conflict.value.details["actual_revision"] == 2

    for tenant in TENANTS:
        own = twins[tenant]["client"]
        latest = await own.latest(KEY)
        assert latest is not None and latest.state == {"who": tenant, "n": 2}
        page = await own.revisions(KEY)
        assert [(r.revision, r.tenant) for r in page.revisions] == [(1, tenant), (2, tenant)]
        plan = await own.recovery_plan(KEY)
        assert plan.checkpoint is not None and (plan.checkpoint.tenant, plan.checkpoint.revision) == (
            tenant,
            2,
        )
        by_lane = await own.recovery_plan(lane_id=twins[tenant]["lane"])
        assert by_lane.checkpoint is not None and (by_lane.checkpoint.id, by_lane.checkpoint.tenant) == (
            ID,
            tenant,
        )
        assert by_lane.session_id == f"s-{tenant}"
        unlinked = await own.reconcile()
        assert [(info.id, info.tenant) for info in unlinked.unlinked] == [(ID, tenant)]
        inspection = await own.inspect_run(f"s-{tenant}", "r1")
        assert [(info.id, info.tenant) for info in inspection.unlinked_revisions] == [(ID, tenant)]

    # acme erases its key: globex's revisions of the same key and id stay.
    acme, globex = twins["acme"]["client"], twins["globex"]["client"]
    report = await acme.erase(keys=[KEY])
    assert sorted((i.tenant, i.revision) for i in report.erased) == [("acme", 1), ("acme", 2)]
    with pytest.raises(errors.EntityNotFound) as gone:
        await acme.get(ID)
    assert gone.value.details["reason"] == "erased"
    assert (await globex.get(ID)).state == {"who": "globex"}
    assert [r.revision for r in (await globex.revisions(KEY)).revisions] == [1, 2]
    # acme's revision numbers are never reused; globex's are its own.
    with pytest.raises(errors.RevisionConflict) as conflict:
        await acme.save(KEY, expected_revision=0, format=FORMAT, state={})
    assert conflict.value.details["actual_revision"] == 2
    assert (await acme.save(KEY, expected_revision=2, format=FORMAT, state={})).revision == 3
    assert (await globex.save(KEY, expected_revision=2, format=FORMAT, state={})).revision == 3


def answer_of(err: errors.LedgerError, name: str) -> tuple[str, str, dict[str, Any]]:
    """An error with the name it was asked for replaced, to compare two answers."""
    details = {k: ("X" if v == name else v) for k, v in err.details.items()}
    return err.code, err.message.replace(name, "X"), details


async def test_another_tenants_key_or_id_is_answered_as_unknown(twins, checkpoints):
    acme, globex = twins["acme"]["client"], twins["globex"]["client"]
    await acme.save("acme/only", expected_revision=0, format=FORMAT, state={}, checkpoint_id="ck-acme")

    async def refusal(call) -> errors.LedgerError:
        try:
            await call
        except errors.LedgerError as err:
            return err
        raise AssertionError("not refused")

    theirs = await refusal(globex.get("ck-acme"))
    nobody = await refusal(globex.get("ck-nobody"))
    assert answer_of(theirs, "ck-acme") == answer_of(nobody, "ck-nobody")
    assert await globex.latest("acme/only") is None
    assert (await globex.revisions("acme/only")).revisions == []
    plan = await globex.recovery_plan("acme/only")
    assert plan.checkpoint is None and plan.events == []
    assert (await globex.erase(keys=["acme/only"], checkpoint_ids=["ck-acme"])).erased == []
    theirs = await refusal(globex.save("acme/only", expected_revision=1, format=FORMAT, state={}))
    nobody = await refusal(globex.save("no/one", expected_revision=1, format=FORMAT, state={}))
    assert answer_of(theirs, "acme/only") == answer_of(nobody, "no/one")
    assert theirs.details["reason"] == "revision_conflict" and theirs.details["actual_revision"] == 0
    # Under the same key and id, globex's save simply works in its own namespace.
    mine = await globex.save(
        "acme/only", expected_revision=0, format=FORMAT, state={}, checkpoint_id="ck-acme"
    )
    assert (mine.tenant, mine.revision) == ("globex", 1)
    # Naming another tenant than the subject's is refused, whatever exists.
    with pytest.raises(errors.TenantMismatch):
        await globex.save("x", expected_revision=0, format=FORMAT, state={}, tenant="acme")
    with pytest.raises(errors.TenantMismatch) as named:
        await globex.get("ck-acme", tenant="acme")
    assert named.value.details["path"] == "$.tenant"
    assert (await acme.get("ck-acme")).key == "acme/only"  # untouched


async def test_the_operator_names_the_tenant(twins, checkpoints: CheckpointClient):
    async def ambiguous(call) -> list[str]:
        with pytest.raises(errors.InvalidRequest) as caught:
            await call
        assert caught.value.details["path"] == "$.tenant", caught.value.details
        tenants: list[str] = caught.value.details["tenants"]
        return tenants

    both = list(TENANTS)
    assert await ambiguous(checkpoints.get(ID)) == both
    assert await ambiguous(checkpoints.latest(KEY)) == both
    assert await ambiguous(checkpoints.revisions(KEY)) == both
    assert await ambiguous(checkpoints.recovery_plan(KEY)) == both
    assert await ambiguous(checkpoints.erase(keys=[KEY], dry_run=True)) == both
    for tenant in TENANTS:
        assert (await checkpoints.get(ID, tenant=tenant)).state == {"who": tenant}
        latest = await checkpoints.latest(KEY, tenant=tenant)
        assert latest is not None and latest.tenant == tenant
        page = await checkpoints.revisions(KEY, tenant=tenant)
        assert [r.tenant for r in page.revisions] == [tenant]
        plan = await checkpoints.recovery_plan(KEY, tenant=tenant)
        assert plan.checkpoint is not None and plan.checkpoint.tenant == tenant
        assert plan.lane_id == twins[tenant]["lane"]
        dry = await checkpoints.erase(keys=[KEY], dry_run=True, tenant=tenant)
        assert [i.tenant for i in dry.erased] == [tenant]
    # A save naming no tenant and deriving none takes its key's only when
    # one tenant has the key.
    with pytest.raises(errors.InvalidRequest) as unnamed:
        await checkpoints.save(KEY, expected_revision=1, format=FORMAT, state={})
    assert unnamed.value.details["path"] == "$.checkpoint.tenant"
    assert unnamed.value.details["tenants"] == both
    await twins["acme"]["client"].save("acme/own", expected_revision=0, format=FORMAT, state={})
    inherited = await checkpoints.save("acme/own", expected_revision=1, format=FORMAT, state={})
    assert inherited.tenant == "acme"
    # The checkpoints of no tenant are a namespace of their own, named "".
    nobodys = await checkpoints.save("legacy", expected_revision=0, format=FORMAT, state={"n": 0})
    assert nobodys.tenant is None
    assert await twins["acme"]["client"].latest("legacy") is None
    await twins["acme"]["client"].save("legacy", expected_revision=0, format=FORMAT, state={"n": "acme"})
    assert await ambiguous(checkpoints.latest("legacy")) == ["", "acme"]
    assert (await checkpoints.latest("legacy", tenant="")) == nobodys
    assert (await checkpoints.latest("legacy", tenant="acme")).state == {"n": "acme"}  # type: ignore[union-attr]


async def test_over_http_the_tenant_parameter_names_whose(twins, checkpoint_service):
    policy = AccessPolicy.from_tokens(TOKENS, operator=OPERATOR)
    runner, port = await start_http(checkpoint_app(checkpoint_service, policy), "127.0.0.1", 0)
    base = f"http://127.0.0.1:{port}/api/v1"

    async def get(path: str, token: str, **params: str) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(base + path, params=params, headers={"Authorization": f"Bearer {token}"}) as r,
        ):
            return r.status, await r.json()

    try:
        for path, params in (
            (f"/checkpoints/{ID}", {}),
            ("/latest", {"key": KEY}),
            ("/revisions", {"key": KEY}),
        ):
            status, body = await get(path, OPERATOR, **params)
            assert status == 400, (path, body)
            assert body["error"]["details"]["parameter"] == "tenant"
            assert body["error"]["details"]["tenants"] == list(TENANTS)
            for tenant in TENANTS:
                status, body = await get(path, OPERATOR, **params, tenant=tenant)
                assert status == 200 and tenant in str(body), (path, body)
                status, own = await get(path, TOKENS[tenant], **params)
                assert status == 200 and own == body, path
            status, body = await get(path, TOKENS["acme"], **params, tenant="globex")
            assert status == 403 and body["error"]["details"]["parameter"] == "tenant", body
            status, body = await get(path, TOKENS["acme"], **params, tenant="acme")
            assert status == 200
        status, plan = await get("/recovery-plan", OPERATOR, key=KEY, tenant="globex")
        assert status == 200 and plan["lane_id"] == twins["globex"]["lane"]
    finally:
        await runner.cleanup()


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def test_two_tenants_langgraph_threads_of_one_thread_id(
    nats_server: NatsServer, checkpoint_service: CheckpointService
):
    async with (
        LaneledgerSaver.connect(nats_server.url, tenant="acme", scoped=True) as acme,
        LaneledgerSaver.connect(nats_server.url, tenant="globex", scoped=True) as globex,
    ):
        stored = {}
        for saver, value in ((acme, "a"), (globex, "g")):
            cp = empty_checkpoint()
            cp["channel_values"], cp["channel_versions"] = {"doc": value * 3}, {"doc": 1}
            stored[value] = await saver.aput(config("thread-1"), cp, {"step": 0}, {"doc": 1})
            await saver.aput_writes(stored[value], [("doc", value)], task_id="t1")
        for saver, value in ((acme, "a"), (globex, "g")):
            found = await saver.aget_tuple(config("thread-1"))
            assert found is not None and found.checkpoint["channel_values"] == {"doc": value * 3}
            assert [w[2] for w in found.pending_writes or []] == [value]
            assert len([c async for c in saver.alist(config("thread-1"))]) == 1
            latest = await saver.checkpoints.latest(ns_key("thread-1", ""))
            assert latest is not None and latest.tenant == saver.tenant
        await acme.adelete_thread("thread-1")
        assert await acme.aget_tuple(config("thread-1")) is None
        kept = await globex.aget_tuple(config("thread-1"))
        assert kept is not None and kept.checkpoint["channel_values"] == {"doc": "ggg"}
