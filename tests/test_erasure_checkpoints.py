"""An erasure in the ledger erases checkpoints too (spec/erasure.md,
*Readers*; spec/checkpoint.md, *Erasure*): the checkpoint service, following
the committed stream, erases the revisions of the erasure's scope, state and
artifacts, when it meets the erasure event: those saved for a session (a
run), those naming a data subject, those created before a retention's time.
A real nats-server, sequencer and checkpoint service."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime, timedelta, timezone
from typing import Any, TypedDict

import pytest
from test_erasure import CODE, EMAIL, holding

from laneledger.contract import errors
from laneledger.contract.clock import system_clock
from laneledger.contract.model import Checkpoint
from laneledger.sdk.checkpoints import CheckpointClient, complete_run
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.checkpoint import service as checkpoint_service_module
from laneledger.services.checkpoint.service import CheckpointService

pytestmark = pytest.mark.nats


async def test_erasing_a_session_erases_its_checkpoint_state(
    client, checkpoints: CheckpointClient, checkpoint_service, tmp_path
):
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    await client.create_lane("acme", "s2", "r1", "main", actor_id=actor.id)
    state = {"memory": f"{EMAIL} said {CODE}"}
    gone = [
        await checkpoints.save(
            f"k-{run}",
            expected_revision=0,
            format="json",
            state=state,
            session_id="s1",
            run_id=run,
            tenant="acme",
        )
        for run in ("r1", "r2")
    ]
    kept = await checkpoints.save(
        "k-s2", expected_revision=0, format="json", state={"kept": 1}, session_id="s2", tenant="acme"
    )
    big = await checkpoints.save(
        "k-big",
        expected_revision=0,
        format="json",
        state={"text": EMAIL * 5000},
        session_id="s1",
        tenant="acme",
    )  # spilled to an artifact
    assert big.artifact is not None

    done = await client.erase("s1", actor_id=actor.id, reason="Art. 17")
    assert done.erasure is not None
    assert await checkpoint_service.anchors.wait_applied(done.erasure.position, timeout=10)

    for checkpoint in (*gone, big):
        with pytest.raises(errors.EntityNotFound) as caught:
            await checkpoints.get(checkpoint.id, tenant="acme")
        assert caught.value.details["reason"] == "erased"
    assert (await checkpoints.get(kept.id, tenant="acme")).state == {"kept": 1}
    files = [tmp_path / "checkpoints.db", tmp_path / "checkpoints.db-wal"]
    assert holding(files, [EMAIL, CODE]) == []
    # Nor is the state's digest (an unkeyed hash of it) kept in a tombstone.
    assert holding(files, [c.digest for c in (*gone, big)]) == []
    # The spilled state's artifact, in an object store bucket's stream files.
    buckets = [f for d in (tmp_path / "nats").rglob("OBJ_*") for f in d.rglob("*") if f.is_file()]
    assert buckets and holding(buckets, [EMAIL * 4]) == []


async def test_a_reader_of_the_checkpoint_file_delays_its_wal_truncate_until_the_next_write(
    client, checkpoints: CheckpointClient, checkpoint_service, tmp_path
):
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    await checkpoints.save(
        "k", expected_revision=0, format="json", state={"m": EMAIL}, session_id="s1", tenant="acme"
    )
    reader = sqlite3.connect(tmp_path / "checkpoints.db")
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM checkpoints").fetchone()  # a snapshot from before the erase
    done = await client.erase("s1", actor_id=actor.id, reason="r")
    assert done.erasure is not None
    assert await checkpoint_service.anchors.wait_applied(done.erasure.position, timeout=10)
    wal = [tmp_path / "checkpoints.db-wal"]
    assert holding(wal, [EMAIL])  # kept while the reader reads
    reader.execute("COMMIT")
    reader.close()
    await checkpoints.save("k2", expected_revision=0, format="json", state={"n": 1}, tenant="acme")
    assert holding([*wal, tmp_path / "checkpoints.db"], [EMAIL]) == []


async def erased(checkpoints: CheckpointClient, *gone: Checkpoint) -> None:
    """Each is read as erased, never as an error of another kind or as state."""
    for checkpoint in gone:
        with pytest.raises(errors.EntityNotFound) as caught:
            await checkpoints.get(checkpoint.id, tenant=checkpoint.tenant or "")
        assert caught.value.details["reason"] == "erased"


async def ledger_erasure(checkpoint_service: CheckpointService, client: LedgerClient, **scope: Any) -> None:
    """Erase in the ledger, and wait until the checkpoint service met it."""
    done = await client.erase(reason="Art. 17", **scope)
    assert done.erasure is not None
    assert await checkpoint_service.anchors.wait_applied(done.erasure.position, timeout=10)


async def test_erasing_a_data_subject_erases_the_checkpoints_naming_it_and_no_others(
    client, checkpoints: CheckpointClient, checkpoint_service, tmp_path
):
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    lane = await LaneRecorder.open(
        client, "acme", "s1", "r1", "main", actor_id=actor.id, data_subject="cust-1"
    )
    await lane.append([lane.event("stream.text_delta", actor_id=actor.id, payload={"text": EMAIL})])

    async def save(key: str, state: Any, revision: int = 0, **fields: Any) -> Checkpoint:
        fields.setdefault("tenant", "acme")
        return await checkpoints.save(key, expected_revision=revision, format="json", state=state, **fields)

    private = {"memory": f"{EMAIL} said {CODE}"}
    gone = [
        await save("k-s1", private, session_id="s1", data_subject="cust-1"),
        await save("k-s2", private, session_id="s2", data_subject="cust-1"),  # any session of the tenant
        await save("k-big", {"text": EMAIL * 5000}, data_subject="cust-1"),  # spilled to an artifact
        # The shared namespace (a trusted save naming and deriving no tenant), as for a session.
        await save("k-op", private, data_subject="cust-1", tenant=None),
    ]
    assert gone[2].artifact is not None and gone[3].tenant is None
    assert gone[0].data_subject == "cust-1"
    # The terminal pattern names the run's data subject (its recorder's).
    ended = await complete_run(
        lane, checkpoints, key="k-end", expected_revision=0, format="json", actor_id=actor.id, state=private
    )
    assert ended.checkpoint.data_subject == "cust-1"
    gone.append(ended.checkpoint)
    # A key whose older revision names the subject and whose newer one another.
    gone.append(await save("k-mixed", private, data_subject="cust-1"))
    newer = await save("k-mixed", {"kept": "newer"}, revision=1, data_subject="cust-2")
    kept = [
        await save("k-other", {"kept": "cust-2"}, data_subject="cust-2"),
        await save("k-none", {"kept": "nobody"}),
        await save("k-s1", {"kept": "globex"}, data_subject="cust-1", tenant="globex"),  # another tenant's
    ]

    await ledger_erasure(checkpoint_service, client, data_subject="cust-1", actor_id=actor.id, tenant="acme")

    await erased(checkpoints, *gone)
    for checkpoint in (*kept, newer):
        assert (await checkpoints.get(checkpoint.id, tenant=checkpoint.tenant)).state == checkpoint.state
    assert await checkpoints.latest("k-s1", tenant="acme") is None
    assert (await checkpoints.latest("k-mixed", tenant="acme")).id == newer.id
    assert [r.revision for r in (await checkpoints.revisions("k-mixed", tenant="acme")).revisions] == [2]
    files = [tmp_path / "checkpoints.db", tmp_path / "checkpoints.db-wal"]
    assert holding(files, [EMAIL, CODE]) == []
    assert holding(files, [c.digest for c in gone]) == []
    buckets = [f for d in (tmp_path / "nats").rglob("OBJ_*") for f in d.rglob("*") if f.is_file()]
    assert buckets and holding(buckets, [EMAIL * 4]) == []


async def test_retention_erases_the_tenants_checkpoints_created_before_its_time(
    client, checkpoints: CheckpointClient, checkpoint_service, tmp_path, monkeypatch
):
    monkeypatch.setattr(checkpoint_service_module, "LEDGER_ERASURE_PAGE", 1)  # a page per revision
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    lane = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
    await lane.append([lane.event("stream.text_delta", actor_id=actor.id, payload={"text": "old"})])
    old = [
        await checkpoints.save("k", expected_revision=0, format="json", state={"m": EMAIL}, tenant="acme"),
        await checkpoints.save("k-old", expected_revision=0, format="json", state={"c": CODE}, tenant="acme"),
        await checkpoints.save(
            "z-old", expected_revision=0, format="json", state={"z": EMAIL}, tenant="acme"
        ),
    ]
    theirs = await checkpoints.save("k", expected_revision=0, format="json", state={"t": 1}, tenant="globex")
    shared = await checkpoints.save("k-op", expected_revision=0, format="json", state={"o": 1})
    await asyncio.sleep(0.01)
    cutoff = system_clock()
    await asyncio.sleep(0.01)
    new = await checkpoints.save("k", expected_revision=1, format="json", state={"fresh": 1}, tenant="acme")

    await ledger_erasure(
        checkpoint_service, client, committed_before=cutoff, tenant="acme", actor_id=actor.id
    )

    await erased(checkpoints, *old)
    assert (await checkpoints.latest("k", tenant="acme")).state == {"fresh": 1}
    assert [r.id for r in (await checkpoints.revisions("k", tenant="acme")).revisions] == [new.id]
    # Another tenant's, and the shared namespace's (no tenant's to age out), stay.
    assert (await checkpoints.get(theirs.id, tenant="globex")).state == {"t": 1}
    assert (await checkpoints.get(shared.id, tenant="")).state == {"o": 1}
    assert holding([tmp_path / "checkpoints.db", tmp_path / "checkpoints.db-wal"], [EMAIL, CODE]) == []


async def test_the_erase_command_selects_by_data_subject_and_by_creation_time(
    client, checkpoints: CheckpointClient, checkpoint_service
):
    first = await checkpoints.save(
        "a", expected_revision=0, format="json", state={}, tenant="acme", data_subject="cust-9"
    )
    await checkpoints.save("b", expected_revision=0, format="json", state={}, tenant="acme")
    plan = await checkpoints.erase(data_subject="cust-9", dry_run=True, tenant="acme")
    assert [c.id for c in plan.erased] == [first.id]
    assert plan.erased[0].data_subject == "cust-9"

    # A time with an offset is the instant it names; "before" is strict.
    at = datetime.fromisoformat(first.created_at).astimezone(timezone(timedelta(hours=2)))
    same, later = at.isoformat(), (at + timedelta(microseconds=1)).isoformat()
    assert same.endswith("+02:00")
    assert (await checkpoints.erase(created_before=same, dry_run=True, tenant="acme")).erased == []
    selected = await checkpoints.erase(created_before=later, dry_run=True, tenant="acme")
    assert [c.id for c in selected.erased] == [first.id]

    with pytest.raises(errors.InvalidRequest) as caught:
        await checkpoints.erase(created_before="2026-02-30T00:00:00Z", tenant="acme")
    assert caught.value.details["path"] == "$.created_before"
    # A trusted caller naming no tenant: what it selects must be one tenant's.
    await checkpoints.save(
        "a", expected_revision=0, format="json", state={}, tenant="globex", data_subject="cust-9"
    )
    with pytest.raises(errors.InvalidRequest) as several:
        await checkpoints.erase(data_subject="cust-9", dry_run=True)
    assert several.value.details["path"] == "$.tenant"

    done = await checkpoints.erase(data_subject="cust-9", tenant="acme")
    assert [c.id for c in done.erased] == [first.id]
    await erased(checkpoints, first)


class Notes(TypedDict):
    notes: str


async def test_a_langgraph_thread_of_a_data_subject_is_erased_with_it(
    client, saver, checkpoint_service, tmp_path
):
    from langgraph.graph import END, START, StateGraph  # LangGraph only here

    def answer(state: Notes) -> Notes:
        return {"notes": state["notes"] + " (seen)"}

    graph = StateGraph(Notes).add_node("answer", answer)
    graph = graph.add_edge(START, "answer").add_edge("answer", END).compile(checkpointer=saver)
    mine, other = "marker-subject-4be1c9", "marker-other-77d0a2"
    await graph.ainvoke({"notes": mine}, {"configurable": {"thread_id": "t-1", "data_subject": "cust-1"}})
    await graph.ainvoke({"notes": other}, {"configurable": {"thread_id": "t-2"}})
    records = await saver.store.thread_records("t-1")
    formats = {r.format.split(";")[0] for r in records}
    assert len(formats) == 3  # checkpoints, writes and the thread's record: each names the subject
    assert {r.data_subject for r in records} == {"cust-1"}
    lane = await client.create_lane("acme", "t-1", "langgraph", "main", actor_id=saver.actor_id)
    events = (await client.load_lane(lane.id)).events
    assert events and {e.data_subject for e in events} == {"cust-1"}  # they name its records' digests

    await ledger_erasure(
        checkpoint_service, client, data_subject="cust-1", actor_id=saver.actor_id, tenant="acme"
    )

    config: Any = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
    assert await saver.aget_tuple(config) is None
    assert [t async for t in saver.alist({"configurable": {"thread_id": "t-1"}})] == []
    assert await saver.store.thread_records("t-1") == []
    kept = await saver.aget_tuple({"configurable": {"thread_id": "t-2", "checkpoint_ns": ""}})
    assert kept is not None and kept.checkpoint["channel_values"]["notes"] == other + " (seen)"
    assert all(e.payload == {} for e in (await client.load_lane(lane.id)).events)
    files = [tmp_path / "checkpoints.db", tmp_path / "checkpoints.db-wal"]
    assert holding(files, [mine, mine.encode().hex()]) == []
    assert holding(files, [other.encode().hex()])  # the search finds what is there
