"""Erasure and the streams (spec/erasure.md, "The streams"): the log records
an erasure rewrites, the index that finds them, and (over NATS) the copies on
LEDGER_EVENTS and LEDGER_TXLOG removed from the JetStream store files while
every reader — a standby, ``laneledger restore``, a follower, verify — reads
the erased copies in their place."""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import msgspec
import nats
import pytest
from failure_logs import show_log_on_failure
from inprocess_ledger import InProcessLedgerClient
from ledger_fixtures import start_sequencer
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from test_erasure import EMAIL, encodings, holding, planted, stream_copies_removed

from laneledger.audit.stream import check_stream
from laneledger.cli.restore import _restore
from laneledger.contract.errors import IntegrityError
from laneledger.contract.ids import new_id
from laneledger.contract.model import Actor, AppendCommitted, Lane
from laneledger.contract.subjects import Subjects
from laneledger.devtools.natsserver import JETSTREAM_CONFIG, NatsServer
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.service import SequencerSettings
from laneledger.services.sequencer.streams import events_stream_config, txlog_stream_config
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append
from laneledger.store.erasedcopies import RewrittenRecord, publish_rewrite, record_copies, rewritten_record
from laneledger.store.recordrewrite import erased_record
from laneledger.store.txlog import MemoryTxLog, decode_record, encode_txrecord, record_holding
from laneledger.store.txlogstream import JetStreamTxLog

KEPT = "a note of another session, kept"
BLOB = "ab" * 32  # a blob each erased batch references (its ref is content too)


def rows_of(path: Path) -> dict[str, list[tuple]]:
    """Every table's rows, in a stable order (the file's whole state)."""
    with closing(sqlite3.connect(path)) as conn:
        tables = [
            t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        ]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}


def kept_event(lane: Lane, actor: Actor) -> dict:
    return make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"t": KEPT})


def holds(data: bytes, value: str) -> bool:
    return any(form in data for form in encodings(value))


async def two_sessions(client: LedgerClient) -> tuple[Actor, Lane, Lane]:
    """acme's agent, a lane of session s1 (erased by the tests) and one of s2 (kept)."""
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    other = await client.create_lane("acme", "s2", "r1", "main", actor_id=actor.id)
    return actor, lane, other


async def erased_ledger(tmp_path: Path) -> tuple[LedgerWriter, MemoryTxLog]:
    """Session s1's 30 events (in batches of 3, one with a blob ref) erased;
    session s2's kept."""
    log = MemoryTxLog()
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    writer.use_txlog(log)
    client = InProcessLedgerClient(writer)
    actor, lane, other = await two_sessions(client)
    for n in range(10):
        payloads = [planted(3 * n + i) for i in range(3)]
        payloads[0]["doc"] = {"_ref": f"sha256:{BLOB}", "size_bytes": 2000}
        events = [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=p) for p in payloads]
        # Straight to the writer: the SDK would look the made-up blob up first.
        request = {"lane_id": lane.id, "expected_last_seq": 3 * n, "append_id": new_id(), "events": events}
        [receipt] = writer.apply_batch([prepare_append(msgspec.json.encode(request))]).receipts
        assert isinstance(receipt, AppendCommitted)
        await client.append(
            other, n, [make_event(other.id, "stream.text_delta", actor_id=actor.id, payload={"t": KEPT})]
        )
    await client.erase("s1", actor_id=actor.id, reason="r")
    writer.blobs_deleted("acme", [BLOB])  # as the sequencer does, from the buckets
    return writer, log


def rewritten_log(writer: LedgerWriter, log: MemoryTxLog) -> tuple[MemoryTxLog, list[bytes]]:
    """``log`` with each record rewritten as the writer's file now holds it
    (as the sequencer's round does), and the records that changed."""
    rewritten, changed = MemoryTxLog(), []
    for seq, data in enumerate(log.records, start=1):
        new = erased_record(writer._db, decode_record(data, seq=seq))
        if new is None:
            rewritten.records.append(data)
            continue
        assert new.position_before == decode_record(data, seq=seq).position_before
        changed.append(encode_txrecord(new))
        rewritten.records.append(changed[-1])
    return rewritten, changed


def same_file(built: Path, original: Path) -> None:
    """Row for row, but for ``txlog_blob_records``: the records still to
    rewrite (which the sequencer's round empties) are the original log's,
    and a rewritten record names no erased blob."""
    built_rows, original_rows = rows_of(built), rows_of(original)
    built_rows.pop("txlog_blob_records"), original_rows.pop("txlog_blob_records")
    assert built_rows == original_rows


async def test_a_rewritten_record_holds_the_file_s_erased_rows_and_replays_to_the_same_file(tmp_path):
    writer, log = await erased_ledger(tmp_path)
    rewritten, changed = rewritten_log(writer, log)
    # Each batch of s1, and the erasure's record (which listed the blob by its
    # hash); s2's, the structure's and the blob deletion's (by id) untouched.
    assert len(changed) == 11
    whole = b"".join(rewritten.records)
    assert holds(b"".join(log.records), BLOB)
    assert not holds(whole, EMAIL) and not holds(whole, "481516") and not holds(whole, BLOB)
    assert holds(whole, KEPT)

    rebuilt = LedgerWriter(open_ledger(tmp_path / "rebuilt.db"))
    rebuilt.use_txlog(rewritten, seed=False)
    assert rebuilt.catch_up() == len(log.records)
    same_file(tmp_path / "rebuilt.db", tmp_path / "ledger.db")


@pytest.mark.parametrize("applied_before", [3, 20, 24, 25, 26])
async def test_a_reader_that_applied_the_originals_then_reads_the_rewrites_ends_with_the_same_file(
    tmp_path, applied_before
):
    """A standby following the log applies some records as written, and the
    rest as an erasure rewrote them (any split): its file is the writer's."""
    writer, log = await erased_ledger(tmp_path)
    rewritten, _ = rewritten_log(writer, log)
    original = MemoryTxLog()
    original.records = log.records[:applied_before]
    standby = LedgerWriter(open_ledger(tmp_path / "standby.db"))
    standby.use_txlog(original, seed=False)
    standby.catch_up()
    standby.use_txlog(rewritten, seed=False)
    standby.catch_up()
    assert standby.txlog_seq == len(log.records)
    same_file(tmp_path / "standby.db", tmp_path / "ledger.db")


async def test_a_record_with_nothing_erased_is_not_rewritten(tmp_path):
    writer, log = await erased_ledger(tmp_path)
    kept = [
        seq
        for seq, data in enumerate(log.records, start=1)
        if erased_record(writer._db, decode_record(data, seq=seq)) is None
    ]
    assert len(kept) == len(log.records) - 11


async def test_the_file_knows_which_log_record_holds_each_event_also_when_rebuilt(tmp_path):
    writer, log = await erased_ledger(tmp_path)
    for position in range(1, writer.last_position + 1):
        found = record_holding(writer._db, position)
        assert found is not None
        last, seq = found
        record = decode_record(log.records[seq - 1], seq=seq)
        assert record.position_before < position <= record.position == last
    assert record_holding(writer._db, writer.last_position + 1) is None
    rebuilt = LedgerWriter(open_ledger(tmp_path / "rebuilt.db"))
    rebuilt.use_txlog(log, seed=False)
    rebuilt.catch_up()
    assert (
        rows_of(tmp_path / "rebuilt.db")["txlog_records"] == rows_of(tmp_path / "ledger.db")["txlog_records"]
    )


async def test_an_erasure_lists_the_stream_copies_it_leaves_to_remove(tmp_path):
    writer, _ = await erased_ledger(tmp_path)
    listed = [
        p for (p,) in writer._db.execute("SELECT position FROM stream_copies_to_erase ORDER BY position")
    ]
    erased = [
        p
        for (p,) in writer._db.execute(
            "SELECT position FROM events WHERE session_id = 's1' ORDER BY position"
        )
    ]
    assert listed == erased and len(listed) == 30


# -- over NATS: the sequencer removes the copies ------------------------------------------


@pytest.fixture
def small_payload_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[NatsServer]:
    """A nats-server whose messages are at most 8 KiB: a request of a few KiB
    makes a log record of several parts, as a large batch does at 1 MiB."""
    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 8KB\n" + JETSTREAM_CONFIG)
    server = NatsServer(tmp_path / "nats", config=conf)
    show_log_on_failure(request, server)
    with server:
        yield server


def store_files(server: NatsServer) -> list[Path]:
    return [path for path in server.store_dir.rglob("*") if path.is_file()]


async def parts_of_records(js: JetStreamContext) -> list[str]:
    """The part headers of every message on LEDGER_TXLOG still there."""
    last = (await js.stream_info(Subjects().txlog_stream)).state.last_seq
    found = []
    for seq in range(1, last + 1):
        try:
            found.append((await js.get_msg(Subjects().txlog_stream, seq)).headers["Ledger-Txlog-Part"])
        except NotFoundError:
            pass
    return found


@pytest.mark.nats
async def test_an_erasure_leaves_no_byte_of_its_content_in_the_jetstream_store_and_a_restore_is_identical(
    small_payload_server, tmp_path
):
    server = small_payload_server
    nc = await nats.connect(server.url)
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings(pull_expires_s=0.2))
    client = await LedgerClient.connect(server.url, timeout=10.0)
    try:
        actor, lane, other = await two_sessions(client)
        # One request whose record takes several parts, half of it naming a data subject.
        events = [
            make_event(
                lane.id,
                "stream.text_delta",
                actor_id=actor.id,
                payload=planted(i),
                data_subject="ada" if i % 2 else None,
            )
            for i in range(12)
        ]
        await client.append(lane, 0, events)
        await client.append(
            lane, 12, [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=planted(99))]
        )
        await client.append(
            other, 0, [make_event(other.id, "stream.text_delta", actor_id=actor.id, payload={"t": KEPT})]
        )
        parts = await parts_of_records(client.js)
        assert any(not p.endswith("/1") for p in parts)  # a record of several parts
        values = [EMAIL, "481516", "a customer note nobody may keep"]
        assert holding(store_files(server), values)  # planted where the scan looks

        # The data subject first: the multi-part record is rewritten once, then again.
        await client.erase(data_subject="ada", actor_id=actor.id, reason="asked", tenant="acme")
        await client.erase("s1", actor_id=actor.id, reason="r")
        await stream_copies_removed(tmp_path / "ledger.db")  # by the sequencer's background round

        assert holding(store_files(server), values) == []
        assert holding(store_files(server), [KEPT])
        db = tmp_path / "ledger.db"
        with closing(sqlite3.connect(db)) as conn:
            erased = [p for (p,) in conn.execute("SELECT position FROM events WHERE session_id = 's1'")]
            records = sorted({seq for (seq,) in conn.execute("SELECT txlog_seq FROM txlog_records")})
            assert conn.execute("SELECT count(*) FROM stream_copies_to_erase").fetchone() == (0,)
        assert len(erased) == 13
        for position in erased:
            with pytest.raises(NotFoundError):
                await client.js.get_msg(Subjects().events_stream, position)
            copy = await client.js.get_last_msg(Subjects().erased_stream, Subjects().erased_event(position))
            assert b'"erased"' in copy.data
        # Each rewritten record is on LEDGER_ERASED once: the multi-part
        # record's first rewrite (the data subject's) went with the second.
        rewrites = [await rewritten_record(client.js, Subjects(), seq) for seq in records]
        copies = sum(len(r.copies) for r in rewrites if r is not None)
        assert len([r for r in rewrites if r is not None]) == 2  # the two records that held s1's events
        on_stream = await client.js.stream_info(
            Subjects().erased_stream, subjects_filter="ledger.erased.txlog.>"
        )
        assert sum((on_stream.state.subjects or {}).values()) == copies == 3  # 2 parts and 1

        # verify --nats reads every hole as its erased copy, equal to the file's event.
        with closing(sqlite3.connect(db)) as conn:
            (last,) = conn.execute("SELECT max(position) FROM events").fetchone()
        assert (await check_stream(client.js, db, wait_s=10)).messages == last

        # A file rebuilt from the log alone is the same file, row for row.
        await _restore(argparse.Namespace(db=str(tmp_path / "restored.db"), nats=server.url, prefix="ledger"))
        original, restored = rows_of(db), rows_of(tmp_path / "restored.db")
        original.pop("meta"), restored.pop("meta")
        assert restored == original
    finally:
        await client.close()
        await sequencer.stop()
        await nc.close()


async def test_streams_made_before_erasure_keep_their_copies_until_replaced_as_the_docs_say(
    nats_server, nc, tmp_path, caplog
):
    """Streams that deny deletes (an older sequencer's) are used as they are,
    with a warning; an erasure leaves its events on them, listed. Replaced as
    docs/erasure.md says (stop, delete both streams, start), nothing is left."""
    js = nc.jetstream()
    subjects = Subjects()
    for config in (
        events_stream_config(subjects.events_stream, subjects, 1),
        txlog_stream_config(subjects, 1),
    ):
        config.deny_delete = True  # what an older sequencer made
        await js.add_stream(config)
    db = tmp_path / "ledger.db"
    settings = SequencerSettings(pull_expires_s=0.2)
    sequencer = await start_sequencer(nc, db, settings)
    assert "denies message deletes" in caplog.text
    client = await LedgerClient.connect(nats_server.url, timeout=10.0)
    try:
        actor, lane, other = await two_sessions(client)
        events = [
            make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=planted(i)) for i in range(3)
        ]
        await client.append(lane, 0, events)
        await client.append(other, 0, [kept_event(other, actor)])
        values = [EMAIL, "481516"]
        assert (await client.erase("s1", actor_id=actor.id, reason="r")).erased == 3
        assert holding(store_files(nats_server), values)  # kept on the old streams
        # ...and nothing published in vain on LEDGER_ERASED each round.
        assert (await js.stream_info(subjects.erased_stream)).state.messages == 0
        with closing(sqlite3.connect(db)) as conn:
            assert conn.execute("SELECT count(*) FROM stream_copies_to_erase").fetchone() == (3,)

        await sequencer.stop()
        await js.delete_stream(subjects.txlog_stream)
        await js.delete_stream(subjects.events_stream)
        sequencer = await start_sequencer(nc, db, settings)
        await stream_copies_removed(db)  # the activation's round
        assert holding(store_files(nats_server), values) == []
        assert holding(store_files(nats_server), [KEPT])
        assert len((await client.load_lane(other.id)).events) == 1
    finally:
        await client.close()
        await sequencer.stop()


async def test_a_rewrite_left_by_a_round_cut_short_is_deleted_with_the_original(
    nats_server, sequencer, client, actor, tmp_path
):
    """A round that published a record's rewrite and stopped before deleting
    the original (a crash) leaves that rewrite on LEDGER_ERASED, holding what
    a later erasure erases: the next rewrite of the record deletes it too."""
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    await client.append(
        lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload=planted(0))]
    )
    db = tmp_path / "ledger.db"
    with closing(sqlite3.connect(db)) as conn:
        ((last_seq,),) = conn.execute("SELECT max(txlog_seq) FROM txlog_records").fetchall()
    original = await client.js.get_msg(Subjects().txlog_stream, last_seq)
    await publish_rewrite(  # what the cut-short round left: content still in it
        client.js,
        Subjects(),
        first_seq=last_seq,
        last_seq=last_seq,
        parts=[original.data],
        stamp={},
        timeout_s=5,
    )
    stale = await record_copies(client.js, Subjects(), last_seq)
    assert len(stale) == 1

    await client.erase("s1", actor_id=actor.id, reason="r")
    await stream_copies_removed(db)

    current = await rewritten_record(client.js, Subjects(), last_seq)
    assert current is not None and await record_copies(client.js, Subjects(), last_seq) == current.copies
    assert stale[0] not in current.copies
    assert holding(store_files(nats_server), [EMAIL, "481516"]) == []


def test_a_version_5_file_s_listed_blobs_get_the_ids_they_are_taken_off_the_list_by(tmp_path):
    path = tmp_path / "ledger.db"
    open_ledger(path).close()
    with closing(sqlite3.connect(path)) as conn:  # the table as schema 5 made it
        conn.executescript(
            "DROP TABLE blobs_to_erase;"
            " CREATE TABLE blobs_to_erase"
            " (tenant TEXT NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY (tenant, sha256));"
            f" INSERT INTO blobs_to_erase VALUES ('acme', '{BLOB}');"
            " UPDATE meta SET value = '5' WHERE key = 'schema_version';"
        )
    writer = LedgerWriter(open_ledger(path))
    ((listed_id,),) = writer._db.execute("SELECT id FROM blobs_to_erase").fetchall()
    assert len(listed_id) == 32
    assert writer.blobs_to_erase() == [("acme", BLOB)]
    writer.blobs_deleted("acme", [BLOB])
    assert writer.blobs_to_erase() == []


# -- reading a log with rewritten records (JetStreamTxLog._records), in-process ---------------


def part(i: int, n: int, data: bytes) -> tuple[dict[str, str], bytes]:
    return {"Ledger-Txlog-Part": f"{i}/{n}"}, data


def records_of(fetched: list) -> list[tuple[int, bytes]]:
    reader = object.__new__(JetStreamTxLog)  # _records reads nothing but what it is given here
    return list(reader._records(iter(enumerate(fetched, start=1))))


def rewrite(first_seq: int, data: bytes) -> RewrittenRecord:
    return RewrittenRecord(first_seq, data, {}, [])


def test_a_record_whose_parts_are_all_deleted_is_read_from_its_rewrite():
    assert records_of([part(1, 1, b"a"), None, None, rewrite(2, b"B"), part(1, 1, b"d")]) == [
        (1, b"a"),
        (4, b"B"),
        (5, b"d"),
    ]


def test_a_record_read_while_its_parts_were_being_deleted_last_first_is_read_from_its_rewrite():
    # Its first part still there, its others deleted: the rewrite replaces all of it.
    assert records_of([part(1, 3, b"x"), None, rewrite(1, b"X")]) == [(3, b"X")]


def test_a_record_cut_short_before_a_rewritten_one_is_skipped_as_before():
    assert records_of([part(1, 3, b"cut"), None, rewrite(2, b"R")]) == [(3, b"R")]


def test_a_rewrite_that_does_not_begin_where_the_deleted_parts_do_is_refused():
    with pytest.raises(IntegrityError) as refused:
        records_of([part(1, 1, b"a"), None, None, rewrite(3, b"B")])
    assert refused.value.details["kind"] == "txlog_deleted"
