"""An erasure of a session in the ledger erases its checkpoints too
(spec/erasure.md, *Readers*): the checkpoint service, following the committed
stream, erases the revisions saved for that session (that run), state and
artifacts, when it meets the erasure event. A real nats-server, sequencer and
checkpoint service."""

from __future__ import annotations

import sqlite3

import pytest
from test_erasure import CODE, EMAIL, holding

from laneledger.contract import errors
from laneledger.sdk.checkpoints import CheckpointClient

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
