"""The seed (spec/replication.md, "Start-up and restore"): a ledger file that
predates its transaction log, or whose log was emptied, puts its rows on the
log before anything else, so a file rebuilt from the log alone equals it row
for row. Two writers with the same file put one seed there; a file that
differs from the seed is refused; a seed cut short is completed once."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from metrics_support import build_workload
from prometheus_client import CollectorRegistry
from test_tenant_leaks import as_version_2, ledger_of_two_tenants
from test_txlog import dump, start

from laneledger.audit.ledger import audit_ledger
from laneledger.cli import main as cli_main
from laneledger.contract.errors import IntegrityError
from laneledger.contract.model import CreateAction, CreateAttempt, CreateLane, CreateTurn, EnsureActor
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.services.sequencer.streams import ensure_stream, txlog_stream_config
from laneledger.store import LedgerWriter, open_ledger, txlogseed
from laneledger.store.txlog import (
    SEED_RECORD_VERSION,
    MemoryTxLog,
    TxRecord,
    decode_record,
    encode_record,
)
from laneledger.store.txlogstream import JetStreamTxLog
from laneledger.tlog import store as tree_store


class DyingLog:
    """Wraps a log: the ``die_at``-th append is stored, then the writer
    "dies" before it hears so (the record is on the log, the file lacks its
    position)."""

    def __init__(self, log, die_at: int) -> None:
        self.log, self.die_at, self.appends = log, die_at, 0

    def append(self, record: bytes, *, after: int) -> int:
        self.appends += 1
        seq = self.log.append(record, after=after)
        if self.appends == self.die_at:
            raise RuntimeError("killed between two seed appends")
        return seq

    def read_after(self, after: int):
        return self.log.read_after(after)


def copy_ledger(source: Path, target: Path) -> None:
    """A consistent copy (the WAL included), as a standby's file would be."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def records_of(log: MemoryTxLog) -> list[TxRecord]:
    return [decode_record(data, seq=seq) for seq, data in log.read_after(0)[0]]


def seed_slices(records: list[TxRecord]) -> list[tuple[int, int]]:
    return [(r.seed.first, r.seed.end) for r in records if r.seed is not None]


def structure_file(path: Path, *, extra_actor: bool = False) -> Path:
    """A ledger of structure rows only, written without a log."""
    writer = LedgerWriter(open_ledger(path))
    actor = writer.ensure_actor(EnsureActor(tenant="acme", key="agent:seed", kind="agent"))
    if extra_actor:
        writer.ensure_actor(EnsureActor(tenant="acme", key="agent:other", kind="agent"))
    for name in ("main", "side"):
        lane = writer.create_lane(
            CreateLane(tenant="acme", session_id="s", run_id="r", name=name, actor_id=actor.id)
        )
        turn = writer.create_turn(CreateTurn(lane_id=lane.id, turn_no=1, tenant="acme"))
        action = writer.create_action(
            CreateAction(
                lane_id=lane.id,
                turn_id=turn.id,
                action_type="tool_call",
                name="shell",
                effect="write",
                idempotency="none",
                tenant="acme",
            )
        )
        writer.create_attempt(
            CreateAttempt(lane_id=lane.id, action_id=action.id, attempt_no=1, tenant="acme")
        )
    return path


def with_log(path: Path, log, *, max_rows: int = txlogseed.MAX_ROWS, seed: bool = True) -> LedgerWriter:
    writer = LedgerWriter(open_ledger(path))
    writer.seed_max_rows = max_rows
    writer.use_txlog(log, seed=seed)
    return writer


# ------------------------------------------------------------ without NATS


def test_every_table_of_the_schema_is_seeded_or_derived(tmp_path: Path):
    conn = open_ledger(tmp_path / "fresh.db")
    names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert names == txlogseed.SEEDED_TABLES | txlogseed.NOT_SEEDED
    txlogseed.check_tables(conn)  # passes on the schema as it is


def test_a_table_the_seed_does_not_know_is_refused_not_skipped(tmp_path: Path):
    db = structure_file(tmp_path / "ledger.db")
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (x TEXT)")
    conn.execute("INSERT INTO notes VALUES ('kept nowhere else')")
    conn.commit()
    conn.close()
    log = MemoryTxLog()
    writer = with_log(db, log)
    with pytest.raises(IntegrityError) as refused:
        writer.catch_up()
    assert refused.value.details["kind"] == "txlog_seed_unknown_table"
    assert refused.value.details["tables"] == ["notes"]
    assert log.records == []


def test_a_structure_only_file_is_seeded_and_rebuilt(tmp_path: Path):
    db = structure_file(tmp_path / "ledger.db")
    before = dump(db)
    assert before["attempts"] and not before["events"]
    log = MemoryTxLog()
    writer = with_log(db, log, max_rows=3)
    assert writer.catch_up() == 0
    records = records_of(log)
    assert all(r.version == SEED_RECORD_VERSION for r in records)
    rows = records[0].seed.rows
    assert rows == 10  # 1 actor, 1 session, 2 lanes, turns, actions, attempts; no heads moved
    assert seed_slices(records) == [(i, min(i + 3, rows)) for i in range(0, rows, 3)]
    assert writer.txlog_seq == len(log.records)
    assert dump(db) == {**before, "meta": [(str(len(log.records)),)]}  # only the log position moved

    rebuilt = with_log(tmp_path / "rebuilt.db", log, seed=False)
    assert rebuilt.catch_up() == len(log.records)
    assert dump(tmp_path / "rebuilt.db") == dump(db)
    # The original goes on writing after its seed, and the copy follows.
    writer.ensure_actor(EnsureActor(tenant="acme", key="agent:after", kind="agent"))
    assert records_of(log)[-1].seed is None
    rebuilt.catch_up()
    assert dump(tmp_path / "rebuilt.db") == dump(db)


def test_a_version_2_file_from_before_the_log_is_seeded_and_rebuilt_with_its_tree(tmp_path: Path):
    """A genuinely old file: version-2 schema, no Merkle tree, no log."""
    db = tmp_path / "old.db"
    ledger_of_two_tenants(db)
    as_version_2(db)
    copy_ledger(db, tmp_path / "copy.db")  # a standby's copy of it, also old
    log = MemoryTxLog()
    writer = with_log(db, log, max_rows=1)  # the open migrates it; one row a record
    writer.catch_up()
    records = records_of(log)
    events = [r for r in records if any(name == "insert_event" for name, _ in r.writes)]
    assert [(r.position_before, r.position) for r in events] == [(0, 1), (1, 2)]
    assert records[-1].position_before == records[-1].position == 2

    rebuilt = with_log(tmp_path / "rebuilt.db", log)
    assert rebuilt.catch_up() == len(records)
    assert dump(tmp_path / "rebuilt.db") == dump(db)
    assert tree_root(tmp_path / "rebuilt.db") == tree_root(db)
    assert audit_ledger(tmp_path / "rebuilt.db").events == 2

    copy = with_log(tmp_path / "copy.db", log)
    assert copy.catch_up() == 0  # its own rows: every seed record skipped
    assert copy.seeded_rows == 0 and len(log.records) == len(records)
    assert dump(tmp_path / "copy.db") == dump(db)


def test_ordinary_records_are_version_1_as_before():
    record = decode_record(encode_record([], position_before=4, position=4), seq=1)
    assert (record.version, record.seed) == (1, None)
    assert encode_record([], position_before=4, position=4) == b"\x94\x01\x04\x04\x90"


def test_a_seed_cut_short_is_completed_once_by_its_file(tmp_path: Path):
    db = structure_file(tmp_path / "ledger.db")
    before = dump(db)
    log = MemoryTxLog()
    dying = with_log(db, DyingLog(log, die_at=2), max_rows=2)
    with pytest.raises(RuntimeError):
        dying.catch_up()
    assert seed_slices(records_of(log)) == [(0, 2), (2, 4)]
    assert dump(db)["meta"] == [("1",)]  # it died before it recorded the second

    # An empty file takes what is there, and writes nothing after it.
    fresh = with_log(tmp_path / "fresh.db", log)
    assert fresh.catch_up() == 2
    with pytest.raises(IntegrityError) as refused:
        fresh.ensure_actor(EnsureActor(tenant="acme", key="agent:too-soon", kind="agent"))
    assert refused.value.details["kind"] == "txlog_seed_incomplete"
    assert len(log.records) == 2

    # The file it came from completes it from where it stopped (each row once).
    again = with_log(db, log, max_rows=5)
    assert again.catch_up() == 0
    slices = seed_slices(records_of(log))
    rows = records_of(log)[0].seed.rows
    assert [s[0] for s in slices] == [0] + [s[1] for s in slices[:-1]] and slices[-1][1] == rows
    assert dump(db) == {**before, "meta": [(str(len(log.records)),)]}
    assert again.catch_up() == 0 and len(log.records) == len(slices)  # nothing appended twice

    assert fresh.catch_up() == len(log.records) - 2
    assert dump(tmp_path / "fresh.db") == dump(db)
    fresh.ensure_actor(EnsureActor(tenant="acme", key="agent:now", kind="agent"))
    again.catch_up()
    assert dump(tmp_path / "fresh.db") == dump(db)


class Interleaving:
    """A's view of a shared log: before A's ``at``-th append, B runs."""

    def __init__(self, log: MemoryTxLog, at: int, meanwhile) -> None:
        self.log, self.at, self.meanwhile, self.appends = log, at, meanwhile, 0

    def append(self, record: bytes, *, after: int) -> int:
        self.appends += 1
        if self.appends == self.at:
            self.meanwhile()
        return self.log.append(record, after=after)

    def read_after(self, after: int):
        return self.log.read_after(after)


def test_two_writers_seeding_one_file_interleaved_put_each_row_on_the_log_once(tmp_path: Path):
    """A appends the seed's first record; B (a copy of the file) starts,
    skips it and appends the rest; A's next append is refused (the log
    moved), it reads B's records, skips them, and both go on equal."""
    db = structure_file(tmp_path / "a.db")
    copy_ledger(db, tmp_path / "b.db")
    log = MemoryTxLog()
    b = with_log(tmp_path / "b.db", log, max_rows=3)
    a = with_log(db, Interleaving(log, 2, b.catch_up), max_rows=2)
    assert a.catch_up() == 0
    assert (a.seeded_rows, b.seeded_rows) == (2, 8)
    assert seed_slices(records_of(log)) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert a.applied_from_log == b.applied_from_log == 0
    assert dump(db) == dump(tmp_path / "b.db")
    a.ensure_actor(EnsureActor(tenant="acme", key="agent:a", kind="agent"))
    b.catch_up()
    assert dump(db) == dump(tmp_path / "b.db")


def test_a_file_that_differs_from_the_seed_is_refused_whole(tmp_path: Path):
    log = MemoryTxLog()
    with_log(structure_file(tmp_path / "seeded.db"), log, max_rows=4).catch_up()
    other = structure_file(tmp_path / "other.db", extra_actor=True)
    before = dump(other)
    with pytest.raises(IntegrityError) as refused:
        with_log(other, log).catch_up()
    assert refused.value.details["kind"] == "txlog_seed_differs"
    assert dump(other) == before  # nothing of the seed applied, nor its position


# ------------------------------------------------------------- on JetStream


async def pre_log_ledger(nc, nats_server, db: Path) -> None:
    """A ledger as a deployment from before LEDGER_TXLOG wrote it."""
    service = await start(nc, db, txlog=False)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            workload = await build_workload(client)
            await workload.run()
    finally:
        await service.stop()


async def log_records(js, nc) -> list[TxRecord]:
    txlog = JetStreamTxLog(js, Subjects(), asyncio.get_running_loop(), max_payload=nc.max_payload)

    def read() -> list[TxRecord]:
        records, _ = txlog.read_after(0)
        return [decode_record(data, seq=seq) for seq, data in records]

    return await asyncio.to_thread(read)


async def restore(nats_server, db: Path) -> None:
    status = await asyncio.to_thread(cli_main, ["restore", "--db", str(db), "--nats", nats_server.url])
    assert status == 0


def tree_root(db: Path) -> bytes:
    conn = open_ledger(db, readonly=True)
    try:
        return tree_store.root(conn)
    finally:
        conn.close()


async def test_a_pre_log_ledger_is_seeded_and_restored_row_for_row(nats_server, nc, js, tmp_path: Path):
    original = tmp_path / "original.db"
    await pre_log_ledger(nc, nats_server, original)
    want = dump(original)
    assert want["events"] and want["receipts"] and want["attempts"] and want["meta"] == []

    service = await start(nc, original)
    try:
        assert service._writer.seeded_rows > 0
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:after-seed", "agent")
            lane = await client.create_lane("acme", "s8", "r8", "after", actor_id=actor.id)
            event = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "after"})
            await client.append(lane, 0, [event])
    finally:
        await service.stop()
    records = await log_records(js, nc)
    seed = [r for r in records if r.seed is not None]
    assert seed and records[: len(seed)] == seed  # the seed first, then the new transactions
    assert seed[0].seed.position == len(want["events"]) and seed[-1].seed.end == seed[0].seed.rows
    assert len(records) == len(seed) + 3

    restored = tmp_path / "restored.db"
    await restore(nats_server, restored)
    assert dump(restored) == dump(original)
    for table in want:
        if table not in ("lanes", "meta"):  # lanes: one new; meta: the log position
            assert set(want[table]) <= set(dump(restored)[table]), table
    assert tree_root(restored) == tree_root(original)
    assert audit_ledger(restored).events == len(want["events"]) + 1
    verified = await asyncio.to_thread(cli_main, ["verify", "--db", str(restored), "--nats", nats_server.url])
    assert verified == 0


async def test_two_writers_with_one_pre_log_file_put_one_seed_on_the_log(nats_server, nc, js, tmp_path: Path):
    await pre_log_ledger(nc, nats_server, tmp_path / "a.db")
    copy_ledger(tmp_path / "a.db", tmp_path / "b.db")
    want = dump(tmp_path / "a.db")
    subjects = Subjects()
    await ensure_stream(js, txlog_stream_config(subjects, 1))
    loop = asyncio.get_running_loop()
    writers = []
    for name in ("a.db", "b.db"):
        writer = LedgerWriter(open_ledger(tmp_path / name))
        writer.seed_max_rows = 7  # many records: the two interleave
        writer.use_txlog(JetStreamTxLog(js, subjects, loop, max_payload=nc.max_payload))
        writers.append(writer)
    a, b = writers
    assert await asyncio.gather(asyncio.to_thread(a.catch_up), asyncio.to_thread(b.catch_up)) == [0, 0]

    records = await log_records(js, nc)
    slices = seed_slices(records)
    assert len(records) == len(slices)
    assert [s[0] for s in slices] == [0] + [s[1] for s in slices[:-1]]  # each row once
    assert slices[-1][1] == records[0].seed.rows
    assert a.seeded_rows + b.seeded_rows == records[0].seed.rows
    assert a.applied_from_log == b.applied_from_log == 0  # neither applied rows it holds
    assert dump(tmp_path / "a.db") == dump(tmp_path / "b.db") == {**want, "meta": [(str(len(records)),)]}

    lane = await asyncio.to_thread(
        b.create_lane, CreateLane(tenant="acme", session_id="s", run_id="r", name="after-seed")
    )
    await asyncio.to_thread(a.catch_up)
    actor = await asyncio.to_thread(a.ensure_actor, EnsureActor(tenant="acme", key="agent:x", kind="agent"))
    await asyncio.to_thread(b.catch_up)
    assert dump(tmp_path / "a.db") == dump(tmp_path / "b.db")
    assert lane.id in {r[0] for r in dump(tmp_path / "a.db")["lanes"]}
    assert actor.id in {r[0] for r in dump(tmp_path / "b.db")["actors"]}

    restored = tmp_path / "restored.db"
    await restore(nats_server, restored)
    assert dump(restored) == dump(tmp_path / "a.db")


async def test_a_differing_pre_log_file_is_refused_by_the_log_seeded_from_another(
    nats_server, nc, js, tmp_path: Path
):
    await pre_log_ledger(nc, nats_server, tmp_path / "a.db")
    copy_ledger(tmp_path / "a.db", tmp_path / "b.db")
    conn = sqlite3.connect(tmp_path / "b.db")  # b went on alone: one more actor
    conn.execute("INSERT INTO actors (id, tenant, key, body) VALUES ('extra', 'acme', 'agent:extra', '{}')")
    conn.commit()
    conn.close()
    service = await start(nc, tmp_path / "a.db")
    await service.stop()
    before = dump(tmp_path / "b.db")
    refusing = Sequencer(
        nc, LedgerWriter(open_ledger(tmp_path / "b.db")), SequencerMetrics(CollectorRegistry())
    )
    with pytest.raises(IntegrityError) as refused:
        await refusing.start()
    await refusing.stop()
    assert refused.value.details["kind"] == "txlog_seed_differs"
    assert dump(tmp_path / "b.db") == before


async def test_a_seed_cut_short_on_the_stream_is_completed_on_the_next_start(
    nats_server, nc, js, tmp_path: Path
):
    db = tmp_path / "ledger.db"
    await pre_log_ledger(nc, nats_server, db)
    want = dump(db)
    subjects = Subjects()
    await ensure_stream(js, txlog_stream_config(subjects, 1))
    log = JetStreamTxLog(js, subjects, asyncio.get_running_loop(), max_payload=nc.max_payload)
    dying = with_log(db, DyingLog(log, die_at=3), max_rows=10)
    with pytest.raises(RuntimeError):
        await asyncio.to_thread(dying.catch_up)
    dying._db.close()
    assert len(await log_records(js, nc)) == 3

    service = await start(nc, db)  # the sequencer on the same file completes it
    await service.stop()
    records = await log_records(js, nc)
    slices = seed_slices(records)
    assert len(records) == len(slices) > 3
    assert [s[0] for s in slices] == [0] + [s[1] for s in slices[:-1]]
    assert slices[-1][1] == records[0].seed.rows
    assert dump(db) == {**want, "meta": [(str(len(records)),)]}

    restored = tmp_path / "restored.db"
    await restore(nats_server, restored)
    assert dump(restored) == dump(db)
