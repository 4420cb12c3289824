"""SQLite, one home: how every laneledger database file is opened, changed
and read, and the one place where SQLite's errors become laneledger errors.

Five stores use it: the ledger (``laneledger.store``), the transparency
log's tree (``laneledger.tlog.store``) and the files the metrics, checkpoint
and tail services keep (its layer is just above ``contract``: see
laneledger.devtools.layers). Each keeps its own tables, meta keys and
messages; what they share is here:

* ``open_database``: WAL, a ``Durability``, a busy timeout, the DDL;
  ``open_readonly`` for readers that must never write;
* ``check_schema_version``: the ``meta`` table's ``schema_version``, written
  into a new file, migrated forward, or refused;
* ``transaction``: ``BEGIN IMMEDIATE`` … ``COMMIT``, ``ROLLBACK`` on any
  exception (``begin``/``commit``/``roll_back`` for a transaction that one
  call opens and a later call ends: the ledger's staged batch);
* ``applied_position``/``record_applied_position``: the last position of the
  committed stream a derived store applied, written in the same transaction
  as the rows it covers, so a restart neither skips nor repeats an event;
* ``failures_as``: ``sqlite3.Error`` → ``InternalError("<what>: <sqlite's
  message>", **details)``, for every store. (The whole-ledger audit reports
  a file it cannot read as ``integrity_failure``, kind ``unreadable``, as
  spec/verify.md says; that is its own finding, not a store's failure.)

Every connection is opened with ``isolation_level=None`` (transactions are
explicit, never implicit) and ``check_same_thread=False``: the owners make
sure a connection has one user at a time, which sqlite3 cannot see when that
user moves between the event loop and a worker thread.
"""

from __future__ import annotations

import enum
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from laneledger.contract.errors import InternalError

_log = logging.getLogger("laneledger.sqlite")

# How long a statement waits for another connection's lock before it fails
# with "database is locked" (every store has one writer; readers never lock
# in WAL, so this only covers checkpoints and a second process by mistake).
BUSY_TIMEOUT_MS = 5000


class Durability(enum.Enum):
    """``PRAGMA synchronous`` under WAL: when a ``COMMIT`` is on disk."""

    # Before COMMIT returns: what the ledger and the checkpoint store answer
    # with (a receipt, a saved revision) is never un-committed by a crash or
    # a power cut.
    FULL = "FULL"
    # At the next WAL checkpoint: a power cut may roll back the last
    # transactions, whole (rows with their applied position), and a store
    # derived from the committed stream reads them again from the stream.
    NORMAL = "NORMAL"


class failures_as:
    """``with failures_as("ledger read failed", position=7): ...``: an
    ``sqlite3.Error`` raised inside leaves as ``InternalError`` with the
    message ``"ledger read failed: <sqlite's message>"`` and these details,
    chained to the original. ``roll_back``: on any exception, first roll back
    that connection's open transaction (if any).

    The one place ``sqlite3.Error`` is translated (spec/errors.md: a broken
    disk is ``internal``, retryable). A class, not a generator: it wraps every
    read of the ledger writer's hot path."""

    __slots__ = ("_details", "_roll_back", "_what")

    def __init__(self, what: str, /, *, roll_back: sqlite3.Connection | None = None, **details: Any) -> None:
        self._what = what
        self._roll_back = roll_back
        self._details = details

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            return
        if self._roll_back is not None:
            try:
                roll_back(self._roll_back)
            except sqlite3.Error as failed:  # the file is in doubt now: name both failures
                raise InternalError(
                    f"{self._what}: {exc}; rolling back failed too: {failed}", **self._details
                ) from exc
        if isinstance(exc, sqlite3.Error):
            raise InternalError(f"{self._what}: {exc}", **self._details) from exc


# -- opening ---------------------------------------------------------------------------


def open_database(path: str | Path, *, durability: Durability, ddl: str, what: str) -> sqlite3.Connection:
    """Open (creating it if need be) a database file for writing: WAL, the
    given durability, the busy timeout, then ``ddl`` (``CREATE … IF NOT
    EXISTS`` statements). ``what`` names the file in the error:
    ``InternalError("cannot open <what>: …", path=...)``."""
    with failures_as(f"cannot open {what}", path=str(path)):
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {durability.value}")
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.executescript(ddl)
        except BaseException:
            conn.close()
            raise
    return conn


def open_readonly(path: str | Path, *, what: str) -> sqlite3.Connection:
    """Open an existing database file to read only (``mode=ro`` and
    ``query_only``): it is never created, never written, and under WAL never
    blocks the file's writer."""
    uri = f"{Path(path).absolute().as_uri()}?mode=ro"  # as_uri escapes '?', '#', '%'
    with failures_as(f"cannot open {what}", path=str(path)):
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except BaseException:
            conn.close()
            raise
    return conn


def shred_wal(conn: sqlite3.Connection) -> bool:
    """After erasing rows (with ``PRAGMA secure_delete`` on, so the freed
    cells and pages are zeroed in the database file): checkpoint the WAL
    into the file and truncate it to nothing, so the erased bytes leave the
    WAL file too. It does not wait for readers (the busy timeout is set to 0
    around it: a writer must not stall behind a long read): False when a
    reader's snapshot kept part of the WAL, for the caller to try again."""
    (timeout,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")
    return bool(busy == 0)


class WalCheckpointer:
    """Checkpoints a WAL database file from a thread and connection of its
    own, so that the connection that writes it need not.

    SQLite's auto-checkpoint runs on the committing connection, inside its
    ``COMMIT``: every ``wal_autocheckpoint`` pages (1000) a commit also copies
    the WAL into the file and fsyncs both, several milliseconds for the
    sequencer's heavier batches (bench/heavy_request.py), which every request
    behind that batch waits for. Here a ``PASSIVE`` checkpoint runs every
    ``every_s`` instead (little work when the WAL holds nothing new; it never
    blocks the writer), and the writer's own
    auto-checkpoint is raised to ``WRITER_FALLBACK_PAGES``: it still bounds the
    WAL should this one fall behind (or be stopped). The writer's
    ``shred_wal`` runs inside ``paused``: a round in hand would make it
    find the WAL busy."""

    WRITER_FALLBACK_PAGES = 10_000

    def __init__(self, writer: sqlite3.Connection, *, every_s: float = 0.1) -> None:
        (_, _, path) = writer.execute("PRAGMA database_list").fetchone()
        self._every_s = every_s
        what = "the WAL checkpointer's connection"
        self._conn = open_database(path, durability=Durability.NORMAL, ddl="", what=what)
        with failures_as(f"cannot set up {what}", path=path):
            self._conn.execute("PRAGMA busy_timeout = 0")  # never waits: the next round tries again
            writer.execute(f"PRAGMA wal_autocheckpoint = {self.WRITER_FALLBACK_PAGES}")
        self._stop = threading.Event()
        self._round = threading.Lock()  # held while a round runs (``paused``)
        self.rounds = 0  # checkpoints run (tests wait on it)
        self._thread = threading.Thread(target=self._run, name="sqlite-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            with self._round:
                try:
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:  # a busy file, a full disk: the next round, or the fallback
                    _log.debug("WAL checkpoint round failed: %s", exc)
                    continue
                self.rounds += 1

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No round runs inside (the one in hand ends first, a few ms at
        most): for the writer's own checkpoint that must not find this one
        busy, ``shred_wal`` after an erasure (spec/erasure.md: at once)."""
        with self._round:
            yield

    def close(self) -> None:
        """Stop (after the round in hand) and close its connection; the
        writer's raised auto-checkpoint stays until it is closed too."""
        self._stop.set()
        self._thread.join()
        self._conn.close()


def remove_database(path: str | Path) -> None:
    """Delete a closed database file with its WAL and shared-memory files
    (a derived store that starts again from nothing)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


# -- reading and writing ---------------------------------------------------------------


def fetch_all(
    conn: sqlite3.Connection, sql: str, params: Iterable[Any] = (), *, what: str
) -> list[tuple[Any, ...]]:
    """Every row of one query; ``InternalError("<what>: …")`` when SQLite fails."""
    with failures_as(what):
        return conn.execute(sql, tuple(params)).fetchall()


def begin(conn: sqlite3.Connection) -> None:
    """Open a write transaction. IMMEDIATE: the write lock is taken now, so
    a busy file fails here, before any work is done, not at ``COMMIT``.
    Raw: call it (and ``commit``) inside ``failures_as(..., roll_back=conn)``."""
    conn.execute("BEGIN IMMEDIATE")


def commit(conn: sqlite3.Connection) -> None:
    """End the open transaction with its changes (durable as the
    connection's ``Durability`` says once this returns)."""
    conn.execute("COMMIT")


def roll_back(conn: sqlite3.Connection) -> None:
    """End the open transaction without its changes (nothing if none is
    open: SQLite may have rolled back already, e.g. after a failed COMMIT)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


@contextmanager
def transaction(conn: sqlite3.Connection, what: str, **details: Any) -> Iterator[sqlite3.Connection]:
    """``with transaction(conn, "read model write failed") as db: ...``: one
    write transaction, committed when the block ends, rolled back when
    anything (a ``LedgerError`` a check raised included) leaves it; an
    ``sqlite3.Error`` leaves as ``InternalError("<what>: …", **details)``."""
    with failures_as(what, roll_back=conn, **details):
        begin(conn)
        yield conn
        commit(conn)


# -- the meta table: versions and the applied position ---------------------------------


def meta_value(conn: sqlite3.Connection, key: str) -> str | None:
    """A value of the ``meta (key TEXT PRIMARY KEY, value)`` table every
    store has, as text; None when absent. Raw (inside ``failures_as``)."""
    found = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if found is None else str(found[0])


def put_meta(conn: sqlite3.Connection, key: str, value: str | int) -> None:
    """Set a ``meta`` value (inside the caller's transaction). The column's
    affinity decides how it is stored: text in a ``value TEXT`` table, an
    integer in a ``value INTEGER`` one, as each store's files always had."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


Migration = Callable[[sqlite3.Connection], None]


def check_schema_version(
    conn: sqlite3.Connection,
    expected: int,
    *,
    what: str,
    path: str | Path,
    migrations: Mapping[int, Migration] | None = None,
    on_create: Migration | None = None,
) -> None:
    """The file's ``meta.schema_version``, in one transaction: a new file
    gets ``expected`` (and ``on_create``'s rows); a file at version ``v``
    with ``migrations[v]`` is migrated to ``v + 1``, and on, up to
    ``expected``; any other version raises ``InternalError("<what> has
    another schema version", path, found, expected)`` and changes nothing."""
    with transaction(conn, f"cannot open {what}", path=str(path)):
        found = meta_value(conn, "schema_version")
        if found is None:
            put_meta(conn, "schema_version", str(expected))
            if on_create is not None:
                on_create(conn)
            return
        version = int(found)
        while version != expected and migrations and version in migrations:
            migrations[version](conn)
            version += 1
        if version != expected:
            raise InternalError(
                f"{what} has another schema version", path=str(path), found=int(found), expected=expected
            )
        if version != int(found):
            put_meta(conn, "schema_version", str(version))


def applied_position(conn: sqlite3.Connection, key: str, *, what: str) -> int:
    """The last stream position a store applied, from ``meta.<key>`` (0:
    none yet). ``what``: the error's message, as for ``fetch_all``."""
    with failures_as(what):
        found = meta_value(conn, key)
    return 0 if found is None else int(found)


def record_applied_position(conn: sqlite3.Connection, key: str, position: int) -> None:
    """Store ``position`` as ``meta.<key>``, inside the transaction that
    writes the rows up to it: rows and position commit together or not at
    all, which is what lets a restart resume right after them. Refuses to
    run outside a transaction, where it would commit on its own."""
    if not conn.in_transaction:
        raise RuntimeError(f"the applied position ({key}) is written only with the rows it covers")
    put_meta(conn, key, position)
