"""A rejection tells a tenant nothing about another tenant (issue 19; spec/object-model.md,
"Append", and spec/wire.md, "NATS users and tenants").

On deploy/nats.conf rendered for acme and globex, acting with acme's producer
credentials only: everything acme names that is globex's — a lane, an actor,
a subject, a cause, an append id, a receipt — is answered exactly as an id
nobody has, and append ids are each tenant's own (acme may use one globex
used). Event ids stay one namespace: reusing globex's is refused, without its
position. A ledger database of schema version 1 (append ids unique across
tenants) is migrated in place and still verifies."""

from __future__ import annotations

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
from laneledger.contract import errors
from laneledger.contract.ids import new_id
from laneledger.contract.model import Actor, AppendCommitted, CreateLane, EnsureActor, Lane, encode
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

    # Event ids are one namespace: globex's is refused, but its position is not told.
    foreign = await refusal(t.acme, lane, 0, [{**event(lane, actor), "id": globex_event}])
    assert foreign.code == "duplicate_event" and foreign.details["position"] is None
    assert "globex" not in repr(foreign.to_wire())
    assert (await t.acme.get_lane(lane.id)).last_seq == 0  # none of it was written


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


def test_a_version_1_ledger_is_migrated_and_still_verifies(tmp_path: Path) -> None:
    # A version-1 file: receipts keyed by append id alone (made from a current
    # one, as the migration's input would look).
    db = tmp_path / "ledger.db"
    conn = open_ledger(db)
    writer = LedgerWriter(conn)
    for n, tenant in enumerate(("acme", "globex"), 1):
        actor = writer.ensure_actor(EnsureActor(tenant=tenant, key="agent:w@1", kind="agent"))
        lane = writer.create_lane(
            CreateLane(tenant=tenant, session_id=f"s-{tenant}", run_id="r", name="main")
        )
        events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"n": n})]
        body = encode({"lane_id": lane.id, "expected_last_seq": 0, "append_id": f"x-{n}", "events": events})
        [receipt] = writer.apply_batch([prepare_append(body)]).receipts
        assert isinstance(receipt, AppendCommitted)
    conn.close()
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
    open_ledger(db).close()  # the writer's open migrates it
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
        assert conn.execute("SELECT tenant, append_id FROM receipts ORDER BY append_id").fetchall() == [
            ("acme", "x-1"),
            ("globex", "x-2"),
        ]
    finally:
        conn.close()
    assert audit_ledger(db).events == 2
