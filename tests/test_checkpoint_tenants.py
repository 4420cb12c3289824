"""Checkpoints carry a tenant (spec/checkpoint.md, "Tenants"): derived from
the anchor's lane or the session's lanes, or named; keys and ids are each
tenant's own; a schema-1, schema-3 or schema-4 database is migrated in place."""

from __future__ import annotations

import sqlite3

import pytest
from checkpoint_fixtures import (
    checkpoints_of_checkpoints_under_test,
    client_of_checkpoints_under_test,
)

from laneledger.contract.errors import EntityNotFound, RevisionConflict
from laneledger.contract.model import ArtifactRef, Checkpoint, ProposedCheckpoint, encode
from laneledger.sdk.checkpoints import AnchorNotCommitted, anchor_of
from laneledger.sdk.client import LaneRecorder
from laneledger.services.checkpoint.store import SCHEMA_VERSION, CheckpointStore, LaneEvent

# The checkpoint contract, run in-process and over NATS (checkpoint_fixtures.py).
client = pytest.fixture(client_of_checkpoints_under_test, name="client")
checkpoints = pytest.fixture(checkpoints_of_checkpoints_under_test, name="checkpoints")

FORMAT = "application/vnd.tests.state+json;version=1"


async def test_a_checkpoint_takes_its_tenant_from_what_it_names(client, actor, checkpoints):
    lane = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
    receipt = await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r1")])

    anchored = await checkpoints.save(
        "k1",
        expected_revision=0,
        format=FORMAT,
        state={"n": 1},
        anchor=anchor_of(receipt),
        session_id="s1",
        run_id="r1",
    )
    assert anchored.tenant == "acme"
    by_session = await checkpoints.save("k2", expected_revision=0, format=FORMAT, state={}, session_id="s1")
    assert by_session.tenant == "acme"
    named = await checkpoints.save(
        "k3", expected_revision=0, format=FORMAT, state={}, tenant="globex"
    )  # nothing derives one: the named is kept
    assert named.tenant == "globex"
    nameless = await checkpoints.save("k4", expected_revision=0, format=FORMAT, state={})
    assert nameless.tenant is None  # the operator's alone
    inherited = await checkpoints.save("k1", expected_revision=1, format=FORMAT, state={"n": 2})
    assert inherited.tenant == "acme"  # the key's tenant

    # Naming globex, the anchor is in globex's lane of that id: there is none
    # (ids are each tenant's own), so nothing is committed there.
    with pytest.raises(AnchorNotCommitted) as unanchored:
        await checkpoints.save(
            "k5",
            expected_revision=0,
            format=FORMAT,
            state={},
            anchor=anchor_of(receipt),
            tenant="globex",
            anchor_wait_s=0.2,
        )
    assert unanchored.value.details["lane_last_seq"] == 0
    # Keys are each tenant's own: globex has no k1, so this is its revision 1.
    with pytest.raises(RevisionConflict) as caught:
        await checkpoints.save("k1", expected_revision=2, format=FORMAT, state={}, tenant="globex")
    assert caught.value.details["actual_revision"] == 0
    theirs = await checkpoints.save("k1", expected_revision=0, format=FORMAT, state={}, tenant="globex")
    assert (theirs.tenant, theirs.revision) == ("globex", 1)
    assert (await checkpoints.latest("k1", tenant="acme")).revision == 2  # acme's untouched


V1_DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE checkpoints (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, revision INTEGER NOT NULL,
    content_digest TEXT NOT NULL, session_id TEXT, run_id TEXT, terminal INTEGER NOT NULL,
    anchor_lane_id TEXT, state_bytes INTEGER NOT NULL, body BLOB NOT NULL,
    UNIQUE (key, revision));
CREATE TABLE lanes (lane_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, run_id TEXT NOT NULL,
                    last_seq INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta VALUES ('schema_version', '1'), ('applied_position', '7');
"""


def test_a_schema_1_database_is_migrated_in_place(tmp_path):
    path = tmp_path / "checkpoints.db"
    old = sqlite3.connect(path)
    old.executescript(V1_DDL)
    sha = "ab" * 32
    checkpoint = Checkpoint(
        id="c1",
        key="k",
        revision=1,
        format=FORMAT,
        digest=sha,
        artifact=ArtifactRef(sha256=sha, size_bytes=3, media_type="x/y"),
        created_at="2026-01-01T00:00:00Z",
    )
    old.execute("INSERT INTO checkpoints VALUES ('c1','k',1,'d',NULL,NULL,0,NULL,0,?)", (encode(checkpoint),))
    old.execute("INSERT INTO lanes VALUES ('l1','s1','r1',3)")
    old.commit()
    old.close()

    store = CheckpointStore.open(path)
    try:
        assert store.get("c1", "").tenant is None  # saved before tenants: the operator's
        # The stream index is rebuilt keyed by tenant (schema 3): read again
        # from the stream's start, the old rows gone.
        assert store.applied_position() == 0
        assert store.lane(None, "l1") is None
        assert store._rows("PRAGMA table_info(lane_events)")[1][1] == "tenant"
        rows = store._rows("SELECT tenant, artifact_sha256 FROM checkpoints")
        assert rows == [("", sha)]  # backfilled from the body; '' is no tenant's (schema 4)
        assert not store.artifact_of_tenant(sha, "acme")
        version = store._rows("SELECT value FROM meta WHERE key = 'schema_version'")[0][0]
        assert int(version) == SCHEMA_VERSION == 5
    finally:
        store.close()
    again = CheckpointStore.open(path)  # opening a migrated database again changes nothing
    try:
        assert again._rows("SELECT tenant, artifact_sha256 FROM checkpoints") == [("", sha)]
        again.apply_events(4, [LaneEvent(4, "l1", 1, "e1", "s1", "r1", tenant="acme")])
    finally:
        again.close()
    third = CheckpointStore.open(path)  # nor a third time: what was applied stays
    try:
        assert third.applied_position() == 4 and third.lane("acme", "l1") == ("s1", "r1", 1)
    finally:
        third.close()


# Version 3's checkpoint tables (its stream index is version 4's).
V3_DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE checkpoints (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, revision INTEGER NOT NULL,
    content_digest TEXT NOT NULL, session_id TEXT, run_id TEXT, terminal INTEGER NOT NULL,
    anchor_lane_id TEXT, state_bytes INTEGER NOT NULL, body BLOB NOT NULL,
    tenant TEXT, artifact_sha256 TEXT, UNIQUE (key, revision));
CREATE INDEX checkpoints_by_run ON checkpoints (session_id, run_id);
CREATE TABLE erased (id TEXT PRIMARY KEY, key TEXT NOT NULL, revision INTEGER NOT NULL,
    digest TEXT NOT NULL, tenant TEXT, erased_at TEXT NOT NULL);
CREATE INDEX erased_by_key ON erased (key);
INSERT INTO meta VALUES ('schema_version', '3'), ('applied_position', '9');
"""


def test_a_schema_3_database_keeps_every_checkpoint_and_tombstone(tmp_path):
    path = tmp_path / "checkpoints.db"
    old = sqlite3.connect(path)
    old.executescript(V3_DDL)
    for rowid, (cid, key, revision, tenant) in enumerate(
        (("c1", "k", 1, "acme"), ("c2", "k", 2, "acme"), ("c3", "legacy", 1, None)), 1
    ):
        body = Checkpoint(
            id=cid,
            key=key,
            revision=revision,
            format=FORMAT,
            digest="cd" * 32,
            tenant=tenant,
            state={"n": revision},
            created_at="2026-01-01T00:00:00Z",
        )
        old.execute(
            "INSERT INTO checkpoints (rowid, id, key, revision, content_digest, terminal, state_bytes,"
            " body, tenant) VALUES (?,?,?,?,'d',0,7,?,?)",
            (rowid, cid, key, revision, encode(body), tenant),
        )
    old.execute("INSERT INTO erased VALUES ('c0', 'k', 3, ?, 'acme', '2026-01-02T00:00:00Z')", ("ef" * 32,))
    old.execute("INSERT INTO erased VALUES ('c9', 'gone', 1, ?, NULL, '2026-01-02T00:00:00Z')", ("ef" * 32,))
    old.commit()
    old.close()

    store = CheckpointStore.open(path)
    try:
        assert store.applied_position() == 9  # the stream index is kept
        rows = store._rows("SELECT rowid, tenant, id, key, revision FROM checkpoints ORDER BY rowid")
        assert rows == [(1, "acme", "c1", "k", 1), (2, "acme", "c2", "k", 2), (3, "", "c3", "legacy", 1)]
        assert store._rows("SELECT tenant, id, revision FROM erased ORDER BY id") == [
            ("acme", "c0", 3),
            ("", "c9", 1),
        ]
        assert store.get("c2", "acme").state == {"n": 2}
        assert store.get("c3", "").tenant is None
        with pytest.raises(EntityNotFound) as erased:
            store.get("c9", "")
        assert erased.value.details["reason"] == "erased"
        assert store.namespaces("id", "c0") == ["acme"]
        # Revisions are never reused per (tenant, key): acme's k is at 3, erased.
        with pytest.raises(RevisionConflict) as conflict:
            store.precheck(ProposedCheckpoint(id="c4", key="k", format=FORMAT), "x", 2, "acme")
        assert conflict.value.details["actual_revision"] == 3
        # Another tenant's k and c1 are its own: revision 1, the same id.
        proposal = ProposedCheckpoint(id="c1", key="k", format=FORMAT, state={})
        saved, replayed = store.save(
            proposal,
            content="y",
            digest="ab" * 32,
            state_bytes=2,
            expected_revision=0,
            created_at="2026-01-03T00:00:00Z",
            tenant="globex",
        )
        assert (saved.tenant, saved.revision, replayed) == ("globex", 1, False)
        assert sorted(store.namespaces("key", "k")) == ["acme", "globex"]
        version = store._rows("SELECT value FROM meta WHERE key = 'schema_version'")[0][0]
        assert int(version) == SCHEMA_VERSION == 5
    finally:
        store.close()
    again = CheckpointStore.open(path)  # opening it again changes nothing
    try:
        assert len(again._rows("SELECT 1 FROM checkpoints")) == 4
        assert len(again._rows("SELECT 1 FROM erased")) == 2
    finally:
        again.close()


# Version 4's checkpoint table: no data_subject, no created_at column.
V4_DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE checkpoints (
    id TEXT NOT NULL, key TEXT NOT NULL, revision INTEGER NOT NULL, content_digest TEXT NOT NULL,
    session_id TEXT, run_id TEXT, terminal INTEGER NOT NULL, anchor_lane_id TEXT,
    state_bytes INTEGER NOT NULL, body BLOB NOT NULL, tenant TEXT NOT NULL DEFAULT '',
    artifact_sha256 TEXT, PRIMARY KEY (tenant, id), UNIQUE (tenant, key, revision));
INSERT INTO meta VALUES ('schema_version', '4'), ('applied_position', '5');
"""


def test_a_schema_4_database_gains_what_an_erasure_by_subject_or_age_selects(tmp_path):
    path = tmp_path / "checkpoints.db"
    old = sqlite3.connect(path)
    old.executescript(V4_DDL)
    body = Checkpoint(
        id="c1",
        key="k",
        revision=1,
        format=FORMAT,
        digest="cd" * 32,
        tenant="acme",
        state={},
        created_at="2026-01-01T01:00:00+01:00",
    )
    old.execute(
        "INSERT INTO checkpoints (id, key, revision, content_digest, terminal, state_bytes, body, tenant)"
        " VALUES ('c1', 'k', 1, 'd', 0, 2, ?, 'acme')",
        (encode(body),),
    )
    old.commit()
    old.close()

    store = CheckpointStore.open(path)
    try:
        assert store.applied_position() == 5
        # created_at from the body, in the ledger's form (it compares as text).
        rows = store._rows("SELECT data_subject, created_at FROM checkpoints")
        assert rows == [(None, "2026-01-01T00:00:00.000000Z")]

        def plan(**scope: str) -> list[str]:
            return [info.id for info in store.erasure_plan([], [], "acme", **scope)[0]]

        assert plan(created_before="2026-01-01T00:00:00.000000Z") == []  # before is strict
        assert plan(created_before="2026-01-01T00:00:00.000001Z") == ["c1"]
        proposal = ProposedCheckpoint(id="c2", key="k2", format=FORMAT, state={}, data_subject="cust-1")
        store.save(
            proposal,
            content="x",
            digest="ab" * 32,
            state_bytes=2,
            expected_revision=0,
            created_at="2026-01-02T00:00:00.000000Z",
            tenant="acme",
        )
        assert plan(data_subject="cust-1") == ["c2"]
        assert store.get("c2", "acme").data_subject == "cust-1"
        assert [info.id for info in store.erasure_plan([], [], "globex", data_subject="cust-1")[0]] == []
        version = store._rows("SELECT value FROM meta WHERE key = 'schema_version'")[0][0]
        assert int(version) == SCHEMA_VERSION == 5
    finally:
        store.close()
