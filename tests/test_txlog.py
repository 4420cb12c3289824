"""The transaction log (spec/replication.md): every writer transaction is on
LEDGER_TXLOG before the SQLite file commits it, so the file can be rebuilt
from the stream alone, a crash between the two loses nothing, and two
writers on one log can never both commit against the same state."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import msgspec
import pytest
from failure_logs import show_log_on_failure
from metrics_support import build_workload
from prometheus_client import CollectorRegistry
from sequencer_process import SequencerProcess
from service_process import REPO, ServiceProcess

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import compare_with_stream
from laneledger.cli import main as cli_main
from laneledger.contract.errors import IntegrityError, TransportError
from laneledger.contract.model import CreateLane, EnsureActor
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.services.sequencer.streams import ensure_stream, txlog_stream_config
from laneledger.store import LedgerWriter, open_ledger, txlogstream
from laneledger.store.txlog import TxLogMoved
from laneledger.store.txlogstream import PART_HEADER, JetStreamTxLog

TABLES = ("sessions", "actors", "lanes", "turns", "actions", "attempts", "events", "receipts", "tlog_hashes")


def dump(db: Path) -> dict[str, list[tuple]]:
    """Every row of every ledger table, and the log position the file holds."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in TABLES}
        rows["meta"] = conn.execute("SELECT value FROM meta WHERE key = 'txlog_seq'").fetchall()
        return rows
    finally:
        conn.close()


async def start(nc, db: Path, **settings) -> Sequencer:
    service = Sequencer(
        nc,
        LedgerWriter(open_ledger(db)),
        SequencerMetrics(CollectorRegistry()),
        SequencerSettings(**settings),
    )
    await service.start()
    return service


async def test_a_ledger_rebuilt_from_its_transaction_log_alone_equals_the_original(
    nats_server, nc, js, tmp_path: Path
):
    original = tmp_path / "original.db"
    service = await start(nc, original)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            workload = await build_workload(client)
            await workload.run()
            # A resend of a committed append: answered from its stored receipt.
            lane = await client.create_lane("acme", "s9", "r9", "again")
            actor = await client.ensure_actor("acme", "agent:txlog-tests", "agent")
            event = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "once"})
            first = await client.append(lane, 0, [event], append_id="append-once")
            again = await client.append(lane, 0, [event], append_id="append-once")
            assert again == msgspec.structs.replace(first, replayed=True)
    finally:
        await service.stop()
    want = dump(original)
    assert want["events"] and want["receipts"] and want["attempts"]

    # By the command, into a file that does not exist yet.
    restored = tmp_path / "restored" / "ledger.db"
    status = await asyncio.to_thread(cli_main, ["restore", "--db", str(restored), "--nats", nats_server.url])
    assert status == 0
    assert dump(restored) == want
    audit = audit_ledger(restored)
    assert audit.events == len(want["events"])
    verified = await asyncio.to_thread(cli_main, ["verify", "--db", str(restored), "--nats", nats_server.url])
    assert verified == 0

    # By a sequencer started on an empty file: it is the ledger, and goes on from there.
    fresh = tmp_path / "fresh.db"
    service = await start(nc, fresh)
    try:
        assert service.stream_fault is None  # LEDGER_EVENTS equals the rebuilt file
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            resent = await client.append(lane, 0, [event], append_id="append-once")
            assert resent == msgspec.structs.replace(first, replayed=True)
            more = await client.append(
                lane, 1, [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "on"})]
            )
            assert more.positions == [first.positions[-1] + 1]
    finally:
        await service.stop()
    after = dump(fresh)
    grown = {"events": 1, "receipts": 1, "tlog_hashes": 1}  # the one append after the rebuild
    for table in TABLES:
        if table != "lanes":  # one lane's head moved on
            assert set(want[table]) <= set(after[table]), table
            assert len(after[table]) == len(want[table]) + grown.get(table, 0), table
    assert await compare_with_stream(js, fresh) == len(want["events"]) + 1


async def test_a_crash_after_the_log_took_a_transaction_loses_nothing(
    nats_server, js, tmp_path: Path, request: pytest.FixtureRequest
):
    """The process dies right after LEDGER_TXLOG acknowledged the first
    append's transaction, before its SQLite COMMIT: the file lacks what the
    log holds. The restarted sequencer applies it first, so the producer's
    resend gets the receipt of that very commit, and nothing is doubled."""
    db = tmp_path / "ledger.db"
    # Appends to the log: the actor, the lane, then the events' batch.
    crashing = ServiceProcess(
        "txlog_crash_sequencer",
        ["--nats", nats_server.url, "--db", str(db), "--http-host", "127.0.0.1", "--http-port", "0"],
        tmp_path,
        env={"PYTHONPATH": str(REPO / "tests"), "LANELEDGER_TEST_DIE_AFTER_TXLOG_APPEND": "3"},
    )
    show_log_on_failure(request, crashing)
    crashing.start()
    async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
        actor = await client.ensure_actor("acme", "agent:crash", "agent")
        lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
        events = [
            make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": f"part {i}"})
            for i in range(3)
        ]
        with pytest.raises(TransportError):  # no receipt: the process is gone
            await client.append(lane, 0, events, append_id="crash-append", retries=0, timeout=3.0)
        for _ in range(50):
            if not crashing.running:
                break
            await asyncio.sleep(0.1)
        assert not crashing.running
        conn = sqlite3.connect(db)
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0  # the file never got it
        conn.close()
        assert (await js.stream_info("LEDGER_TXLOG")).state.last_seq == 3  # the log did

        restarted = SequencerProcess(nats_server.url, db, log_dir=tmp_path / "restarted")
        show_log_on_failure(request, restarted)
        restarted.start()
        try:
            receipt = await client.append(lane, 0, events, append_id="crash-append", timeout=10.0)
            assert receipt.positions == [1, 2, 3]
            again = await client.append(lane, 0, events, append_id="crash-append", timeout=10.0)
            assert again == msgspec.structs.replace(receipt, replayed=True)
        finally:
            restarted.stop()
    rows = dump(db)
    assert [r[1] for r in rows["events"]] == [e["id"] for e in events]
    assert rows["meta"] == [("3",)]
    audit_ledger(db)
    assert await compare_with_stream(js, db) == 3


async def test_two_writers_on_one_log_are_serialized_by_it(nats_server, nc, js, tmp_path: Path):
    """Writer B has not seen A's transaction: the log refuses B's (nothing of
    it is written), B reads A's from the log before its next use, and then
    commits on top of it. Neither can commit against a state it has not seen."""
    subjects = Subjects()
    await ensure_stream(js, txlog_stream_config(subjects, 1))
    loop = asyncio.get_running_loop()
    a = LedgerWriter(open_ledger(tmp_path / "a.db"))
    b = LedgerWriter(open_ledger(tmp_path / "b.db"))
    for writer in (a, b):
        writer.use_txlog(JetStreamTxLog(js, subjects, loop, max_payload=nc.max_payload))
    await asyncio.to_thread(a.catch_up)
    await asyncio.to_thread(b.catch_up)

    actor_a = await asyncio.to_thread(a.ensure_actor, EnsureActor(tenant="acme", key="agent:a", kind="agent"))
    with pytest.raises(TxLogMoved):
        await asyncio.to_thread(b.ensure_actor, EnsureActor(tenant="acme", key="agent:b", kind="agent"))
    assert dump(tmp_path / "b.db")["actors"] == []  # refused: nothing of it written

    actor_b = await asyncio.to_thread(b.ensure_actor, EnsureActor(tenant="acme", key="agent:b", kind="agent"))
    lane = await asyncio.to_thread(
        b.create_lane, CreateLane(tenant="acme", session_id="s", run_id="r", name="main", actor_id=actor_a.id)
    )
    assert lane.actor_id == actor_a.id  # B knows A's actor: it read it from the log
    await asyncio.to_thread(a.catch_up)
    assert dump(tmp_path / "a.db") == dump(tmp_path / "b.db")
    assert {r[2] for r in dump(tmp_path / "a.db")["actors"]} == {"agent:a", "agent:b"}
    assert actor_b.key == "agent:b"
    assert (await js.stream_info("LEDGER_TXLOG")).state.last_seq == 3


@pytest.mark.slow
async def test_two_sequencers_on_one_log_commit_every_request_once(nats_server, nc, js, tmp_path: Path):
    """Both pull from the same append queue and write their own files; the
    log orders their transactions. Every append gets one receipt, every lane
    stays dense, and both files end equal to each other and to the stream."""
    one = await start(nc, tmp_path / "one.db")
    two = await start(nc, tmp_path / "two.db")
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=10.0) as client:
            actor = await client.ensure_actor("acme", "agent:two-writers", "agent")
            lanes = [
                await client.create_lane("acme", "s", "r", f"lane-{i}", actor_id=actor.id) for i in range(8)
            ]

            async def producer(lane) -> list[int]:
                positions = []
                for seq in range(12):
                    event = make_event(
                        lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": str(seq)}
                    )
                    receipt = await client.append(lane, seq, [event], timeout=20.0)
                    assert receipt.last_seq == seq + 1
                    positions.extend(receipt.positions)
                return positions

            positions = [p for got in await asyncio.gather(*(producer(lane) for lane in lanes)) for p in got]
            assert sorted(positions) == list(range(1, 8 * 12 + 1))
    finally:
        await one.stop()
        await two.stop()
    # Whichever wrote last, each file takes the other's transactions on its next start.
    for db in ("one.db", "two.db"):
        service = await start(nc, tmp_path / db)
        await service.stop()
    assert dump(tmp_path / "one.db") == dump(tmp_path / "two.db")
    assert audit_ledger(tmp_path / "one.db").events == 8 * 12
    assert await compare_with_stream(js, tmp_path / "one.db") == 8 * 12


async def test_a_record_larger_than_a_message_is_split_and_one_cut_short_is_skipped(nc, js):
    subjects = Subjects()
    await ensure_stream(js, txlog_stream_config(subjects, 1))
    txlog = JetStreamTxLog(js, subjects, asyncio.get_running_loop(), max_payload=1536)
    big = bytes(range(256)) * 40  # 10 KiB: ten parts of 1 KiB
    end = await txlog.append_async(big, after=0)
    assert end == 10
    # A writer that died after two parts of three: the next record follows them.
    for i in (1, 2):
        await js.publish(
            subjects.txlog,
            b"cut",
            headers={PART_HEADER: f"{i}/3", "Nats-Expected-Last-Sequence": str(end + i - 1)},
        )
    small = await txlog.append_async(b"after the cut", after=12)

    def read_all() -> tuple[list[tuple[int, bytes]], int]:  # as the writer does, off the loop
        records, last = txlog.read_after(0)
        return list(records), last

    records, last = await asyncio.to_thread(read_all)
    assert records == [(10, big), (small, b"after the cut")]
    assert last == small == 13
    # Only a record's own position counts as "after": the log moved on past 10.
    with pytest.raises(TxLogMoved):
        await txlog.append_async(b"stale", after=10)


async def test_a_records_parts_go_out_as_one_atomic_batch_where_the_stream_allows_it(nc, js, monkeypatch):
    """The same parts at the same sequences, read back the same, with one
    ack; fenced by the first part's expected sequence; and one by one again
    once the stream stops allowing batches."""
    subjects = Subjects()
    await ensure_stream(js, txlog_stream_config(subjects, 1, atomic=True))
    txlog = JetStreamTxLog(js, subjects, asyncio.get_running_loop(), max_payload=1536, nc=nc)
    assert await txlog.last_seq() == 0 and txlog.atomic
    sent: list[tuple[int | None, int]] = []
    publish = txlogstream.publish_batch

    async def spy(nc, messages, *, expected_last_sequence, **kwargs):
        sent.append((expected_last_sequence, len(messages)))
        return await publish(nc, messages, expected_last_sequence=expected_last_sequence, **kwargs)

    monkeypatch.setattr(txlogstream, "publish_batch", spy)
    big = bytes(range(256)) * 40  # ten parts of 1 KiB
    assert await txlog.append_async(big, after=0) == 10
    assert await txlog.append_async(b"one part", after=10) == 11  # alone: no batch
    assert sent == [(0, 10)]
    assert (await js.get_msg(subjects.txlog_stream, 4)).headers[PART_HEADER] == "4/10"
    with pytest.raises(TxLogMoved):
        await txlog.append_async(big, after=10)
    assert sent == [(0, 10), (10, 10)]
    config = (await js.stream_info(subjects.txlog_stream)).config
    config.allow_atomic = False
    await js.update_stream(config)
    assert await txlog.append_async(big, after=11) == 21
    assert not txlog.atomic and sent == [(0, 10), (10, 10), (11, 10)]  # refused once, then one by one

    def read_all() -> list[tuple[int, bytes]]:
        return list(txlog.read_after(0)[0])

    assert await asyncio.to_thread(read_all) == [(10, big), (11, b"one part"), (21, big)]


async def test_an_emptied_log_is_seeded_again_from_the_file(nats_server, nc, js, tmp_path: Path):
    """The stream lost (deleted, or a NATS store wiped) while the file stays:
    the file's rows go back on the log first (a seed, store/txlogseed.py),
    then the ledger goes on. A rebuild from the log alone equals the file,
    and a standby's copy from before the loss takes the seed as its own."""
    db = tmp_path / "ledger.db"
    service = await start(nc, db)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:emptied-log", "agent")
            lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
            event = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "before"})
            await client.append(lane, 0, [event])
    finally:
        await service.stop()
    standby = tmp_path / "standby.db"
    source, copy = sqlite3.connect(db), sqlite3.connect(standby)
    source.backup(copy)
    source.close()
    copy.close()
    await js.delete_stream("LEDGER_TXLOG")
    service = await start(nc, db)
    try:
        assert service._writer.log_restarted_after == 1
        assert service._writer.seeded_rows == 6  # actor, session, lane, event, receipt, the lane's head
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            event = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "after"})
            assert (await client.append(lane, 1, [event])).positions == [2]
    finally:
        await service.stop()
    assert dump(db)["meta"] == [("2",)]  # the seed, then the append
    rebuilt = tmp_path / "rebuilt.db"
    status = await asyncio.to_thread(cli_main, ["restore", "--db", str(rebuilt), "--nats", nats_server.url])
    assert status == 0
    assert dump(rebuilt) == dump(db)
    # The copy had applied 3 records of the lost log, more than the new one
    # holds: it starts over on it, skips the seed (its rows) and takes the rest.
    service = await start(nc, standby)
    try:
        assert service._writer.log_restarted_after == 1
        assert service._writer.applied_from_log == 1
    finally:
        await service.stop()
    assert dump(standby) == dump(db)


async def test_a_log_shorter_than_the_file_is_refused_at_start(nats_server, nc, js, tmp_path: Path):
    db = tmp_path / "ledger.db"
    service = await start(nc, db)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            for i in range(3):
                await client.ensure_actor("acme", f"agent:short-log-{i}", "agent")
    finally:
        await service.stop()
    await js.delete_stream("LEDGER_TXLOG")
    other = await start(nc, tmp_path / "other.db")  # another ledger's log, one record long
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            await client.ensure_actor("acme", "agent:other-ledger", "agent")
    finally:
        await other.stop()
    refusing = Sequencer(nc, LedgerWriter(open_ledger(db)), SequencerMetrics(CollectorRegistry()))
    with pytest.raises(IntegrityError) as refused:
        await refusing.start()
    await refusing.stop()
    assert refused.value.details["kind"] == "txlog_behind_file"
    assert refused.value.details["file_txlog_seq"] == 3
    assert refused.value.details["stream_last_sequence"] == 1
