"""SQLite's one home (laneledger.sqlite) on real files: the pragmas each
store opens with, transactions that leave nothing behind, the applied
position committed with its rows, schema versions, and every sqlite3 failure
leaving as a typed ``InternalError`` naming what failed — the metrics store's
included (it let raw sqlite3 errors out, and its busy timeout was only
Python's default for ``sqlite3.connect``, set nowhere on purpose)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from laneledger.contract.errors import InternalError
from laneledger.services.checkpoint.store import CheckpointStore, LaneEvent
from laneledger.services.metrics.fold import LabelPolicy
from laneledger.services.metrics.store import MetricsStore, SavedRows
from laneledger.services.tail.readmodel import ReadModel
from laneledger.sqlite import (
    BUSY_TIMEOUT_MS,
    Durability,
    WalCheckpointer,
    applied_position,
    check_schema_version,
    open_database,
    record_applied_position,
    shred_wal,
    transaction,
)
from laneledger.store import open_ledger
from laneledger.store.schema import SCHEMA_VERSION

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rows (n INTEGER PRIMARY KEY, body TEXT NOT NULL);
"""
SYNCHRONOUS = {Durability.FULL: 2, Durability.NORMAL: 1}  # what PRAGMA synchronous reads back


def pragmas(conn: sqlite3.Connection) -> tuple[str, int, int]:
    return (
        conn.execute("PRAGMA journal_mode").fetchone()[0],
        conn.execute("PRAGMA synchronous").fetchone()[0],
        conn.execute("PRAGMA busy_timeout").fetchone()[0],
    )


def stored(path: Path, sql: str) -> list[tuple]:
    """What another connection reads: only what was committed."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def no_growth(conn: sqlite3.Connection) -> None:
    """SQLite's own size limit at the file's current size: the next write
    that needs a new page fails with a genuine SQLITE_FULL."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")


def saved_rows(position: int, series: int = 1) -> SavedRows:
    return SavedRows(
        position=position,
        series=[("laneledger_events", f'["t{i}"]', str(i)) for i in range(series)],
        histograms=[],
        open_put=[],
        open_del=[],
        admitted=[],
    )


# -- opening ----------------------------------------------------------------------------


@pytest.mark.parametrize("durability", list(Durability))
def test_a_file_opens_in_wal_with_its_durability_and_the_busy_timeout(tmp_path, durability):
    conn = open_database(tmp_path / "x.db", durability=durability, ddl=DDL, what="x database")
    try:
        assert pragmas(conn) == ("wal", SYNCHRONOUS[durability], BUSY_TIMEOUT_MS)
        assert conn.isolation_level is None  # transactions are explicit, never implicit
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'rows'").fetchone()
    finally:
        conn.close()


def test_each_store_opens_with_its_durability_and_a_busy_timeout(tmp_path):
    """FULL where an answer depends on it (ledger, checkpoints), NORMAL for
    the files rebuilt from the stream; the busy timeout everywhere."""
    ledger = open_ledger(tmp_path / "ledger.db")
    checkpoints = CheckpointStore.open(tmp_path / "checkpoints.db")
    metrics = MetricsStore(tmp_path / "metrics.db")
    tail = ReadModel(tmp_path / "tail.db")
    try:
        assert pragmas(ledger) == ("wal", SYNCHRONOUS[Durability.FULL], BUSY_TIMEOUT_MS)
        assert pragmas(checkpoints._db) == ("wal", SYNCHRONOUS[Durability.FULL], BUSY_TIMEOUT_MS)
        assert pragmas(metrics._db) == ("wal", SYNCHRONOUS[Durability.NORMAL], BUSY_TIMEOUT_MS)
        assert pragmas(tail._db) == ("wal", SYNCHRONOUS[Durability.NORMAL], BUSY_TIMEOUT_MS)
        reader = tail._conn()  # a reader thread's connection: read-only
        assert reader.execute("PRAGMA query_only").fetchone() == (1,)
        assert reader.execute("PRAGMA busy_timeout").fetchone() == (BUSY_TIMEOUT_MS,)
        with pytest.raises(InternalError, match="read model read failed: attempt to write a readonly"):
            tail.query("INSERT INTO meta (key, value) VALUES ('x', 1)")
    finally:
        ledger.close()
        checkpoints.close()
        metrics.close()
        tail.close()


def test_a_read_only_opening_never_creates_nor_writes_the_file(tmp_path):
    missing = tmp_path / "missing.db"
    with pytest.raises(InternalError, match="cannot open ledger database: unable to open") as caught:
        open_ledger(missing, readonly=True)
    assert caught.value.details == {"path": str(missing)} and not missing.exists()

    odd = tmp_path / "a ?#% name.db"  # characters a file: URI must escape
    open_ledger(odd).close()
    conn = open_ledger(odd, readonly=True)
    try:
        assert conn.execute("PRAGMA query_only").fetchone() == (1,)
        with pytest.raises(InternalError, match="attempt to write a readonly database"):
            with transaction(conn, "ledger write failed"):
                conn.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")
    finally:
        conn.close()
    assert stored(odd, "SELECT value FROM meta WHERE key = 'x'") == []


@pytest.mark.parametrize(
    ("name", "open_store", "message"),
    [
        ("ledger", open_ledger, "cannot open ledger database"),
        ("checkpoints", CheckpointStore.open, "cannot open checkpoint database"),
        ("metrics", MetricsStore, "cannot open metrics database"),
        ("tail", ReadModel, "cannot open the tail's read model"),
    ],
)
def test_a_corrupt_file_is_refused_with_a_typed_error(tmp_path, name, open_store, message):
    path = tmp_path / f"{name}.db"
    path.write_bytes(b"this is not an SQLite database, only bytes " * 200)
    with pytest.raises(InternalError, match=f"{message}: file is not a database") as caught:
        open_store(path)
    assert caught.value.details["path"] == str(path)
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


# -- transactions ---------------------------------------------------------------------


@pytest.fixture
def db(tmp_path):
    conn = open_database(tmp_path / "x.db", durability=Durability.FULL, ddl=DDL, what="x database")
    yield conn
    conn.close()


def test_a_transaction_commits_when_its_block_ends(tmp_path, db):
    with transaction(db, "x write failed") as tx:
        tx.execute("INSERT INTO rows VALUES (1, 'one')")
        assert stored(tmp_path / "x.db", "SELECT n FROM rows") == []  # not before the end
    assert stored(tmp_path / "x.db", "SELECT n FROM rows") == [(1,)]


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(lambda tx: tx.execute("INSERT INTO rows VALUES (1, 'again')"), id="sqlite-error"),
        pytest.param(lambda tx: 1 / 0, id="any-exception"),
    ],
)
def test_a_transaction_that_fails_anywhere_leaves_nothing(tmp_path, db, failure):
    with transaction(db, "x write failed"):
        db.execute("INSERT INTO rows VALUES (1, 'one')")

    def batch() -> None:
        with transaction(db, "x write failed", batch=7) as tx:
            tx.execute("INSERT INTO rows VALUES (2, 'two')")
            failure(tx)

    with pytest.raises((InternalError, ZeroDivisionError)) as caught:
        batch()
    if isinstance(caught.value, InternalError):  # translated, naming what failed, chained
        assert caught.value.message == "x write failed: UNIQUE constraint failed: rows.n"
        assert caught.value.details == {"batch": 7}
        assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert not db.in_transaction
    assert stored(tmp_path / "x.db", "SELECT n FROM rows") == [(1,)]


def test_a_full_file_fails_the_transaction_with_a_typed_error_and_keeps_the_rest(tmp_path, db):
    with transaction(db, "x write failed"):
        db.execute("INSERT INTO rows VALUES (1, 'one')")
    no_growth(db)
    with pytest.raises(InternalError, match="x write failed: database or disk is full"):
        with transaction(db, "x write failed") as tx:
            tx.executemany("INSERT INTO rows VALUES (?, ?)", [(n, "x" * 5000) for n in range(2, 50)])
    assert not db.in_transaction
    assert stored(tmp_path / "x.db", "SELECT n FROM rows") == [(1,)]


# -- the applied position -------------------------------------------------------------


def test_the_applied_position_commits_with_its_rows_or_not_at_all(tmp_path, db):
    path = tmp_path / "x.db"
    assert applied_position(db, "applied_position", what="x read failed") == 0  # none yet
    with transaction(db, "x write failed") as tx:
        tx.executemany("INSERT INTO rows VALUES (?, 'r')", [(1,), (2,)])
        record_applied_position(tx, "applied_position", 2)

    def batch_failing_after_its_position() -> None:
        with transaction(db, "x write failed") as tx:
            tx.execute("INSERT INTO rows VALUES (3, 'r')")
            record_applied_position(tx, "applied_position", 4)
            tx.execute("INSERT INTO rows VALUES (3, 'again')")

    with pytest.raises(InternalError, match="UNIQUE constraint failed"):
        batch_failing_after_its_position()
    assert stored(path, "SELECT max(n) FROM rows") == [(2,)]
    assert applied_position(db, "applied_position", what="x read failed") == 2
    with pytest.raises(RuntimeError, match="only with the rows it covers"):
        record_applied_position(db, "applied_position", 9)  # alone, it would commit on its own
    assert stored(path, "SELECT value FROM meta WHERE key = 'applied_position'") == [("2",)]


def test_each_store_keeps_its_position_key_and_its_stored_type(tmp_path):
    """The files written before this module stay readable and unchanged:
    metrics has ``meta.position`` as text, checkpoints ``applied_position``
    as text, the tail ``applied_position`` as an integer."""
    metrics = MetricsStore(tmp_path / "metrics.db")
    metrics.save(saved_rows(3))
    metrics.close()
    assert stored(tmp_path / "metrics.db", "SELECT value FROM meta WHERE key = 'position'") == [("3",)]
    assert MetricsStore(tmp_path / "metrics.db").load(LabelPolicy()).position == 3

    checkpoints = CheckpointStore.open(tmp_path / "checkpoints.db")
    assert checkpoints.applied_position() == 0
    checkpoints.apply_events(
        5, [LaneEvent(position=5, lane_id="l", seq=1, event_id="e", session_id="s", run_id="r")]
    )
    checkpoints.close()
    path = tmp_path / "checkpoints.db"
    assert stored(path, "SELECT value FROM meta WHERE key = 'applied_position'") == [("5",)]

    tail = ReadModel(tmp_path / "tail.db")
    tail.apply([(1, b"{}"), (2, b"{}")])
    tail.close()
    assert stored(tmp_path / "tail.db", "SELECT value FROM meta WHERE key = 'applied_position'") == [(2,)]
    assert ReadModel(tmp_path / "tail.db").applied == 2


# -- schema versions ------------------------------------------------------------------


def test_a_schema_version_is_written_migrated_forward_or_refused(tmp_path, db):
    path = tmp_path / "x.db"
    ran: list[int] = []

    def step(version: int):
        def migrate(conn: sqlite3.Connection) -> None:
            conn.execute(f"ALTER TABLE rows ADD COLUMN v{version + 1} TEXT")
            ran.append(version)

        return migrate

    check_schema_version(db, 1, what="x database", path=path)  # a new file: written
    assert stored(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [("1",)]
    migrations = {1: step(1), 2: step(2)}
    check_schema_version(db, 3, what="x database", path=path, migrations=migrations)
    assert ran == [1, 2]
    assert stored(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [("3",)]
    check_schema_version(db, 3, what="x database", path=path, migrations=migrations)  # nothing to do
    assert ran == [1, 2]
    with pytest.raises(InternalError, match="x database has another schema version") as caught:
        check_schema_version(db, 2, what="x database", path=path, migrations=migrations)
    assert caught.value.details == {"path": str(path), "found": 3, "expected": 2}


def test_a_failed_migration_changes_nothing(tmp_path, db):
    path = tmp_path / "x.db"
    check_schema_version(db, 1, what="x database", path=path)

    def half_done(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE rows ADD COLUMN extra TEXT")
        conn.execute("INSERT INTO nowhere VALUES (1)")

    with pytest.raises(InternalError, match="cannot open x database: no such table: nowhere"):
        check_schema_version(db, 2, what="x database", path=path, migrations={1: half_done})
    assert stored(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [("1",)]
    assert [c[1] for c in stored(path, "PRAGMA table_info(rows)")] == ["n", "body"]


def test_a_ledger_of_another_schema_version_is_refused(tmp_path):
    path = tmp_path / "ledger.db"
    open_ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(InternalError, match="ledger database has another schema version") as caught:
        open_ledger(path)
    assert caught.value.details == {"path": str(path), "found": 99, "expected": SCHEMA_VERSION}


# -- the metrics store ----------------------------------------------------------------


def test_the_metrics_store_raises_typed_errors_and_keeps_its_last_batch(tmp_path):
    store = MetricsStore(tmp_path / "metrics.db")
    try:
        store.save(saved_rows(1))
        no_growth(store._db)
        with pytest.raises(InternalError, match="metrics database write failed: database or disk is full"):
            store.save(saved_rows(2, series=2000))
        assert store.load(LabelPolicy()).position == 1  # the failed batch left nothing
        store._db.execute("PRAGMA max_page_count = 1073741823")
        store.save(saved_rows(2, series=2000))
        assert store.load(LabelPolicy()).position == 2
    finally:
        store.close()


def test_the_metrics_store_waits_for_a_lock_instead_of_failing(tmp_path):
    """Another connection holds the write lock for a moment (a WAL
    checkpoint, an operator's sqlite3 shell): the save waits for it, within
    the busy timeout, instead of failing with "database is locked"."""
    store = MetricsStore(tmp_path / "metrics.db")
    other = sqlite3.connect(tmp_path / "metrics.db", isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        releasing = threading.Timer(0.3, other.execute, ("COMMIT",))
        releasing.start()
        store.save(saved_rows(1))  # without a busy timeout: sqlite3.OperationalError at once
        releasing.join()
        assert store.load(LabelPolicy()).position == 1
    finally:
        other.close()
        store.close()


# -- WAL checkpoints -----------------------------------------------------------------------


def write_pages(db: sqlite3.Connection, pages: int, *, per_commit: int = 100) -> None:
    """About ``pages`` pages of new rows, ``per_commit`` rows a transaction."""
    first = db.execute("SELECT coalesce(max(n), 0) FROM rows").fetchone()[0] + 1
    for start in range(first, first + pages, per_commit):
        with transaction(db, "x write failed") as tx:
            tx.executemany(
                "INSERT INTO rows VALUES (?, ?)", [(n, "x" * 4000) for n in range(start, start + per_commit)]
            )


def test_the_wal_is_checkpointed_aside_and_not_in_the_writers_commits(tmp_path, db):
    """With a ``WalCheckpointer`` the writer's commits no longer copy the WAL
    into the file every 1000 pages (SQLite's default, inside the COMMIT):
    its own auto-checkpoint waits for ``WRITER_FALLBACK_PAGES``, and the
    checkpointer's thread copies the WAL in instead."""
    file = tmp_path / "x.db"
    idle = WalCheckpointer(db, every_s=3600)  # started, never coming round in this test
    assert db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == WalCheckpointer.WRITER_FALLBACK_PAGES
    before = file.stat().st_size
    write_pages(db, 1500)
    assert file.stat().st_size == before  # 1500 pages in the WAL, none copied by the commits
    assert Path(f"{file}-wal").stat().st_size > 1500 * 4096
    idle.close()  # at once: its wait ends with the stop

    aside = WalCheckpointer(db, every_s=0.02)
    try:
        deadline = time.monotonic() + 10
        while aside.rounds == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert aside.rounds > 0
        assert file.stat().st_size > before + 1500 * 4096  # copied in by the thread
        assert stored(file, "SELECT count(*) FROM rows") == [(1500,)]
    finally:
        aside.close()


def test_without_a_checkpointer_the_writer_checkpoints_in_its_commits(tmp_path, db):
    """The contrast the test above relies on: SQLite's default copies the
    WAL into the file inside a commit once it holds 1000 pages."""
    file = tmp_path / "x.db"
    before = file.stat().st_size
    write_pages(db, 1500)
    assert file.stat().st_size > before + 900 * 4096


def test_no_round_runs_while_paused_so_the_writers_shred_never_finds_the_wal_busy(tmp_path, db):
    """An erasure's ``shred_wal`` runs on the writer's connection inside
    ``paused``: the round in hand ends first and no other starts, so the
    WAL is emptied at once (spec/erasure.md), every time, however often the
    checkpointer comes round."""
    aside = WalCheckpointer(db, every_s=0.001)
    try:
        for _ in range(30):
            write_pages(db, 20, per_commit=20)
            with aside.paused():
                rounds = aside.rounds
                assert shred_wal(db)
                time.sleep(0.01)  # ten of its periods
                assert aside.rounds == rounds
            assert Path(f"{tmp_path / 'x.db'}-wal").stat().st_size == 0
    finally:
        aside.close()
    assert aside.rounds > 0
