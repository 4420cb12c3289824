"""A rejection tells a tenant nothing about another tenant (issue 19; spec/object-model.md,
"Append", and spec/wire.md, "NATS users and tenants").

On deploy/nats.conf rendered for acme and globex, acting with acme's producer
credentials only: everything acme names that is globex's — a lane, an actor,
a subject, a cause, an append id, a receipt — is answered exactly as an id
nobody has, and every id is each tenant's own (acme may use an event, lane or
append id globex used; tests/test_store_contract.py has the rest). Ledger
databases of schema versions 1 (append ids unique across tenants) and 2
(every other id unique across tenants) are migrated in place and still verify."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import nats
import pytest
import pytest_asyncio
from deployment_support import deployed_sequencer, url_for

from laneledger.audit.ledger import audit_ledger
from laneledger.compat.korg_export import export_session_from_db
from laneledger.contract import errors
from laneledger.contract.ids import new_id
from laneledger.contract.model import (
    Actor,
    AppendCommitted,
    CreateAction,
    CreateAttempt,
    CreateLane,
    CreateTurn,
    EnsureActor,
    Lane,
    encode,
)
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append
from laneledger.store.schema import SCHEMA_VERSION

pytestmark = pytest.mark.nats


@dataclass
class Tenants:
    acme: LedgerClient
    acme_actor: Actor
    acme_lane: Lane
    globex: LedgerClient
    globex_actor: Actor
    globex_lane: Lane
    db: Path


@pytest_asyncio.fixture
async def tenants(tenant_server, passwords, tmp_path) -> AsyncIterator[Tenants]:
    seq_nc = await nats.connect(url_for(tenant_server, "sequencer", passwords))
    replies = await nats.connect(url_for(tenant_server, "sequencer-replies", passwords))
    sequencer = deployed_sequencer(seq_nc, replies, tmp_path / "ledger.db")
    await sequencer.start()
    clients = [
        await LedgerClient.connect(url_for(tenant_server, f"producer-{t}", passwords), tenant=t, timeout=10.0)
        for t in ("acme", "globex")
    ]
    try:
        found = []
        for client, tenant in zip(clients, ("acme", "globex"), strict=True):
            actor = await client.ensure_actor(tenant, f"agent:{tenant}/main@1", "agent")
            found += [actor, await client.create_lane(tenant, f"s-{tenant}", "r1", "main", actor_id=actor.id)]
        yield Tenants(clients[0], found[0], found[1], clients[1], found[2], found[3], tmp_path / "ledger.db")
    finally:
        for client in clients:
            await client.close()
        await sequencer.stop()
        await replies.close()
        await seq_nc.close()


def event(lane: Lane, actor: Actor, **fields):
    return make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "x"}, **fields)


async def refusal(client: LedgerClient, lane: Lane, seq: int, events) -> errors.LedgerError:
    with pytest.raises(errors.LedgerError) as caught:
        await client.append(lane, seq, events, retries=0)
    return caught.value


def same_answer(foreign: errors.LedgerError, unknown: errors.LedgerError, *ids: str) -> None:
    """Identical but for the id asked about; and nothing names globex."""
    assert (foreign.code, foreign.message) == (unknown.code, unknown.message)
    assert set(foreign.details) == set(unknown.details)
    for key, value in foreign.details.items():
        if value not in ids:
            assert unknown.details[key] == value, key
    assert "globex" not in repr(foreign.to_wire())


async def test_what_is_another_tenants_is_answered_as_unknown(tenants: Tenants) -> None:
    t = tenants
    turn = await t.globex.create_turn(t.globex_lane.id, 1)
    committed = await t.globex.append(t.globex_lane, 0, [event(t.globex_lane, t.globex_actor)])
    globex_event = committed.event_ids[0]
    lane, actor = t.acme_lane, t.acme_actor

    # Another tenant's actor.
    foreign = await refusal(t.acme, lane, 0, [event(lane, t.globex_actor)])
    unknown = await refusal(t.acme, lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=new_id())])
    assert foreign.code == "entity_not_found"
    same_answer(foreign, unknown, t.globex_actor.id, unknown.details["id"])

    # A turn of another tenant's lane as the subject.
    foreign = await refusal(t.acme, lane, 0, [event(lane, actor, subject_id=turn.id)])
    unknown = await refusal(t.acme, lane, 0, [event(lane, actor, subject_id=new_id())])
    assert foreign.code == "subject_mismatch" and foreign.details["reason"] == "unknown_subject"
    same_answer(
        foreign,
        unknown,
        turn.id,
        unknown.details["subject_id"],
        foreign.details["event_id"],
        unknown.details["event_id"],
    )

    # Another tenant's event as the cause.
    foreign = await refusal(t.acme, lane, 0, [event(lane, actor, causation_id=globex_event)])
    unknown = await refusal(t.acme, lane, 0, [event(lane, actor, causation_id=new_id())])
    assert foreign.code == "causation_violation" and foreign.details["reason"] == "unknown"
    same_answer(
        foreign,
        unknown,
        globex_event,
        unknown.details["causation_id"],
        foreign.details["event_id"],
        unknown.details["event_id"],
    )

    # Another tenant's lane, named on acme's own subject (the SDK sends it there).
    theirs = msgspec.structs.replace(t.globex_lane, tenant="acme")
    ghost = msgspec.structs.replace(theirs, id=new_id())
    foreign = await refusal(t.acme, theirs, 1, [event(theirs, actor)])
    unknown = await refusal(t.acme, ghost, 1, [event(ghost, actor)])
    assert foreign.code == "entity_not_found"
    same_answer(foreign, unknown, theirs.id, ghost.id)

    assert (await t.acme.get_lane(lane.id)).last_seq == 0  # none of it was written

    # Event ids are each tenant's own: acme's event may have globex's id, and
    # a lane of acme globex's lane id.
    ours = await t.acme.append(lane, 0, [{**event(lane, actor), "id": globex_event}])
    assert ours.event_ids == [globex_event] and ours.positions == [2]
    twin = await t.acme.create_lane(
        "acme", "s-acme", "r1", "twin", actor_id=actor.id, lane_id=t.globex_lane.id
    )
    assert (twin.id, twin.tenant) == (t.globex_lane.id, "acme")
    assert (await t.globex.get_lane(t.globex_lane.id)).last_seq == 1  # globex's own, untouched


async def test_append_ids_are_each_tenants_own(tenants: Tenants) -> None:
    t = tenants
    theirs = await t.globex.append(t.globex_lane, 0, [event(t.globex_lane, t.globex_actor)], append_id="a-1")
    # acme uses the same append id for other events: its own append, not a
    # replay of globex's nor an idempotency violation naming globex's digest.
    sent = [event(t.acme_lane, t.acme_actor)]
    ours = await t.acme.append(t.acme_lane, 0, sent, append_id="a-1")
    assert not ours.replayed and ours.lane_id == t.acme_lane.id and ours.digest != theirs.digest
    assert (await t.acme.get_receipt("a-1")).positions == ours.positions
    assert (await t.globex.get_receipt("a-1")).positions == theirs.positions
    # Resent, each is its own tenant's replay.
    again = await t.acme.append(t.acme_lane, 0, sent, append_id="a-1")
    assert again.replayed and again.positions == ours.positions
    with pytest.raises(errors.EntityNotFound) as foreign:
        await t.acme.get_receipt(new_id())
    assert foreign.value.details["kind"] == "receipt"
    await t.globex.append(t.globex_lane, 1, [event(t.globex_lane, t.globex_actor)], append_id="g-only")
    with pytest.raises(errors.EntityNotFound) as caught:
        await t.acme.get_receipt("g-only")
    assert caught.value.message == foreign.value.message
    with pytest.raises(errors.TenantMismatch):
        await t.acme.get_receipt("g-only", tenant="globex")
    assert audit_ledger(t.db).events == 3


# The version-2 tables that version 3 keys by (id, tenant): turns, actions
# and attempts had no tenant column.
_V2_TABLES = {
    "sessions": "(id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_at TEXT NOT NULL)",
    "lanes": "(id TEXT PRIMARY KEY, tenant TEXT NOT NULL, session_id TEXT NOT NULL, run_id TEXT NOT NULL,"
    " name TEXT NOT NULL, body TEXT NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0, head_hash TEXT NOT NULL,"
    " UNIQUE (session_id, run_id, name))",
    "turns": "(id TEXT PRIMARY KEY, lane_id TEXT NOT NULL, turn_no INTEGER NOT NULL, body TEXT NOT NULL,"
    " UNIQUE (lane_id, turn_no))",
    "actions": "(id TEXT PRIMARY KEY, lane_id TEXT NOT NULL, turn_id TEXT NOT NULL, body TEXT NOT NULL)",
    "attempts": "(id TEXT PRIMARY KEY, lane_id TEXT NOT NULL, action_id TEXT NOT NULL,"
    " attempt_no INTEGER NOT NULL, body TEXT NOT NULL, UNIQUE (action_id, attempt_no))",
    "events": "(position INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, lane_id TEXT NOT NULL,"
    " seq INTEGER NOT NULL, tenant TEXT NOT NULL, session_id TEXT NOT NULL, run_id TEXT NOT NULL,"
    " event_type TEXT NOT NULL, append_id TEXT NOT NULL, body BLOB NOT NULL, UNIQUE (lane_id, seq))",
}


def ledger_of_two_tenants(db: Path) -> list[tuple]:
    """A current ledger file: per tenant an actor, a lane, a turn, an action,
    an attempt and one committed event. Returns its rows (``ledger_rows``)."""
    writer = LedgerWriter(open_ledger(db))
    for n, tenant in enumerate(("acme", "globex"), 1):
        actor = writer.ensure_actor(EnsureActor(tenant=tenant, key="agent:w@1", kind="agent"))
        lane = writer.create_lane(
            CreateLane(tenant=tenant, session_id=f"s-{tenant}", run_id="r", name="main")
        )
        turn = writer.create_turn(CreateTurn(lane_id=lane.id, turn_no=1))
        action = writer.create_action(
            CreateAction(
                lane_id=lane.id,
                turn_id=turn.id,
                action_type="tool_call",
                name="ls",
                effect="read",
                idempotency="inherent",
            )
        )
        writer.create_attempt(CreateAttempt(lane_id=lane.id, action_id=action.id, attempt_no=1))
        events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"n": n})]
        body = encode({"lane_id": lane.id, "expected_last_seq": 0, "append_id": f"x-{n}", "events": events})
        [receipt] = writer.apply_batch([prepare_append(body)]).receipts
        assert isinstance(receipt, AppendCommitted)
    rows = ledger_rows(writer._db)
    writer._db.close()
    return rows


def ledger_rows(conn: sqlite3.Connection) -> list[tuple]:
    """What a migration must keep: every stored object and committed event."""
    rows = list(conn.execute("SELECT id, tenant, created_at FROM sessions ORDER BY rowid"))
    for table in ("lanes", "turns", "actions", "attempts"):
        rows += conn.execute(f"SELECT body FROM {table} ORDER BY rowid").fetchall()
    rows += conn.execute(
        "SELECT position, id, lane_id, seq, tenant, body FROM events ORDER BY position"
    ).fetchall()
    return rows


def as_version_2(db: Path) -> None:
    """Rewrite a current file's tables into their version-2 shape."""
    conn = sqlite3.connect(db)
    try:
        for table, columns in _V2_TABLES.items():
            kept = [c for c in (r[1] for r in conn.execute(f"PRAGMA table_info({table})")) if c in columns]
            conn.execute(f"CREATE TABLE {table}_v2 {columns}")
            listed = ", ".join(kept)
            conn.execute(f"INSERT INTO {table}_v2 ({listed}) SELECT {listed} FROM {table} ORDER BY rowid")
            conn.execute(f"DROP TABLE {table}")
            conn.execute(f"ALTER TABLE {table}_v2 RENAME TO {table}")
        conn.execute("CREATE INDEX events_by_session ON events (session_id, position)")
        conn.execute("DROP TABLE tlog_hashes")  # the Merkle tree came with version 4
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        conn.commit()
    finally:
        conn.close()


def schema_version(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        conn.close()


def test_a_version_2_ledger_is_migrated_and_still_verifies(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    rows = ledger_of_two_tenants(db)
    as_version_2(db)
    assert audit_ledger(db).events == 2  # verify reads a version-2 file as it is
    conn = open_ledger(db)  # the writer's open migrates it
    try:
        assert ledger_rows(conn) == rows
        assert conn.execute("SELECT DISTINCT tenant FROM turns ORDER BY tenant").fetchall() == [
            ("acme",),
            ("globex",),
        ]
        # Now keyed by (id, tenant): globex may have a turn of acme's turn id.
        acme_turn = conn.execute("SELECT id, lane_id FROM turns WHERE tenant = 'acme'").fetchone()
        conn.execute("INSERT INTO turns VALUES (?, 'globex', ?, 2, '{}')", acme_turn)
        conn.execute("DELETE FROM turns WHERE tenant = 'globex' AND turn_no = 2")
    finally:
        conn.close()
    assert schema_version(db) == str(SCHEMA_VERSION)
    assert audit_ledger(db).events == 2


def test_a_version_1_ledger_is_migrated_and_still_verifies(tmp_path: Path) -> None:
    # A version-1 file: a version-2 one whose receipts are keyed by append id
    # alone (made from a current one, as the migration's input would look).
    db = tmp_path / "ledger.db"
    rows = ledger_of_two_tenants(db)
    as_version_2(db)
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE r1 (append_id TEXT PRIMARY KEY, lane_id TEXT NOT NULL, digest TEXT NOT NULL,"
        " body BLOB NOT NULL);"
        "INSERT INTO r1 SELECT append_id, lane_id, digest, body FROM receipts;"
        "DROP TABLE receipts; ALTER TABLE r1 RENAME TO receipts;"
        "UPDATE meta SET value = '1' WHERE key = 'schema_version';"
    )
    conn.commit()
    conn.close()
    assert audit_ledger(db).events == 2  # verify reads a version-1 file as it is
    conn = open_ledger(db)  # the writer's open migrates it, through version 2
    try:
        assert ledger_rows(conn) == rows
        assert conn.execute("SELECT tenant, append_id FROM receipts ORDER BY append_id").fetchall() == [
            ("acme", "x-1"),
            ("globex", "x-2"),
        ]
    finally:
        conn.close()
    assert schema_version(db) == str(SCHEMA_VERSION)
    assert audit_ledger(db).events == 2


def test_a_reader_of_todays_tables_refuses_an_older_file_until_it_is_migrated(tmp_path: Path) -> None:
    # The Korg export reads a ledger file read-only through LedgerReader: it
    # cannot migrate an older file, so it says so instead of failing on a
    # column the old tables lack.
    db = tmp_path / "ledger.db"
    ledger_of_two_tenants(db)
    as_version_2(db)
    with pytest.raises(errors.InternalError) as refused:
        export_session_from_db(db, "s-acme", io.BytesIO())
    assert "older schema version" in refused.value.message
    assert refused.value.details == {"path": str(db), "found": "2", "expected": SCHEMA_VERSION}
    assert schema_version(db) == "2"  # the reader wrote nothing
    open_ledger(db).close()  # the sequencer's open migrates it
    out = io.BytesIO()
    assert export_session_from_db(db, "s-acme", out) == 1
    sessions = [msgspec.json.decode(line)["metadata"]["session_id"] for line in out.getvalue().splitlines()]
    assert sessions == ["s-acme"]


def test_a_reader_of_todays_tables_refuses_a_file_of_an_unknown_version(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    ledger_of_two_tenants(db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(errors.InternalError) as refused:
        export_session_from_db(db, "s-acme", io.BytesIO())
    assert refused.value.message == "ledger database has another schema version"
    assert refused.value.details["found"] == "99"
