"""A ledger file in step with its transaction log (store/txlog.py,
spec/replication.md).

Without a log, the writer's transactions commit to the file alone. With
one, each is stored on the log before its ``COMMIT``; what the log holds
beyond the file (a crash after the log's ack, an append whose outcome was
unknown, another writer's records) is applied to the file first
(``catch_up``); a log holding nothing of a non-empty file is first given
the file's rows as a seed (store/txlogseed.py), and a seed cut short is
completed. ``TxLogSync`` owns the file's position on the log and its last
committed position: whatever commits or applies a transaction moves them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from laneledger.contract.errors import IntegrityError
from laneledger.sqlite import (
    Durability,
    WalCheckpointer,
    applied_position,
    begin,
    commit,
    failures_as,
    meta_value,
    record_applied_position,
    roll_back,
    shred_wal,
    transaction,
)
from laneledger.store import txlogseed
from laneledger.store.txlog import (
    ERASING,
    TXLOG_KEY,
    AsyncTxLog,
    TxLog,
    TxLogMoved,
    TxLogUnavailable,
    TxRecord,
    Writes,
    apply_record,
    decode_record,
    encode_record,
    index_record,
    run_writes,
)
from laneledger.store.txlogseed import SEED_KEY, SeedProgress
from laneledger.store.usage import InlineUsage


class TxLogSync:
    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        last_position: int,
        inline_usage: InlineUsage,
        forget_lanes: Callable[[], None],
    ) -> None:
        self._db = conn
        self.last_position = last_position  # of the file's last committed event
        self._inline_usage = inline_usage  # the writer's, told of what the log's records add
        self._forget_lanes = forget_lanes  # lane heads moved: the writer's cache reloads them
        # The replicated log every transaction is stored on before its COMMIT
        # (store/txlog.py, ``use``); None: the file alone.
        self.txlog: TxLog | None = None
        # The same log where its append can be awaited on the event loop.
        self._async_log: AsyncTxLog | None = None
        self.txlog_seq = applied_position(conn, TXLOG_KEY, what="ledger read failed")
        # The log may hold what the file lacks (at start: a crash after the
        # log's ack; later: an append whose outcome was unknown, or another
        # writer's records): read it before anything is read or written.
        self.behind = False
        self.applied_from_log = 0  # records applied by ``catch_up``, in all
        # Whether the last erasure's WAL checkpoint emptied the WAL (``_shred_wal``);
        # while not, every commit tries again.
        self.wal_shredded = True
        # The file's WAL checkpointed from a thread of its own
        # (``LedgerWriter.checkpoint_aside``); None: inside the commits.
        self.checkpointer: WalCheckpointer | None = None
        self.log_restarted_after: int | None = None  # set when an empty log starts after this file
        # With a log that holds nothing of a non-empty file, seed it with the
        # file's rows (store/txlogseed.py) before anything else is appended;
        # ``use(seed=False)`` (``laneledger restore``) never appends.
        self._seed_allowed = True
        self.seed_max_rows = txlogseed.MAX_ROWS
        self.seed_max_bytes = txlogseed.MAX_BYTES
        with failures_as("ledger read failed"):
            self._seed = SeedProgress.decode(meta_value(conn, SEED_KEY))
        self.seeded_rows = 0  # rows this writer appended to the log as a seed

    def use(self, txlog: TxLog, *, seed: bool) -> None:
        """Store every transaction on ``txlog`` from now on (``LedgerWriter.use_txlog``)."""
        self.txlog = txlog
        self._async_log = txlog if isinstance(txlog, AsyncTxLog) else None
        self._seed_allowed = seed
        self.behind = True
        # The log, replicated, is what makes a commit durable now: the file
        # need not wait for the disk at every COMMIT. A power cut may roll
        # back its last transactions, whole (rows with their log position),
        # and the next start reads them back from the log.
        with failures_as("ledger write failed"):
            self._db.execute(f"PRAGMA synchronous = {Durability.NORMAL.value}")

    def open_writes(
        self, writes: Writes, what: str, *, leaves: list[bytes] | None = None, **details: Any
    ) -> None:
        """Run ``writes`` in a new transaction, left open for ``commit_writes``."""
        if self.txlog is not None and self._seed is not None:
            raise IntegrityError(
                "the transaction log's seed is not complete: nothing can be written after it until "
                "the sequencer whose file it was taken from (or an equal copy) completes it",
                kind="txlog_seed_incomplete",
                txlog_seq=self.txlog_seq,
                seed_rows=self._seed.rows,
                seed_rows_on_log=self._seed.end,
            )
        with failures_as(what, roll_back=self._db, **details):
            begin(self._db)
            run_writes(self._db, writes, leaves=leaves)

    def commit_writes(self, writes: Writes, position_before: int, position: int) -> None:
        """End the open transaction that ran ``writes``: with a log, store
        them on it first, and commit only once it holds them."""
        if self.txlog is None:
            with failures_as("ledger commit failed", roll_back=self._db, position=position):
                commit(self._db)
            self._committed(writes, position)
            return
        record = encode_record(writes, position_before=position_before, position=position)
        try:
            seq = self.txlog.append(record, after=self.txlog_seq)
        except (TxLogMoved, TxLogUnavailable):
            self._abandon(position)
            raise
        self._commit_logged(writes, seq, position)

    @property
    def logs_on_loop(self) -> bool:
        """Whether ``commit_writes_async`` may end the next transaction: a
        log whose append can be awaited on the event loop, and a file that
        need not read the log first (that read waits on a thread)."""
        return self._async_log is not None and not self.behind and self._seed is None

    async def commit_writes_async(self, writes: Writes, position_before: int, position: int) -> None:
        """``commit_writes`` through a log, the append awaited on the event
        loop that owns it rather than on a thread waiting for that loop.
        Whatever stops the append (a refusal, a timeout, a cancel) rolls the
        transaction back and makes the file read the log before its next use:
        the record may have landed."""
        assert self._async_log is not None
        record = encode_record(writes, position_before=position_before, position=position)
        try:
            seq = await self._async_log.append_async(record, after=self.txlog_seq)
        except BaseException:
            self._abandon(position)
            raise
        self._commit_logged(writes, seq, position)

    def _abandon(self, position: int) -> None:
        self.behind = True
        with failures_as("ledger rollback failed", position=position):
            roll_back(self._db)

    def _commit_logged(self, writes: Writes, seq: int, position: int) -> None:
        # From here the log holds the transaction: if the file fails to
        # take it, it is behind the log and reads it back before going on.
        db = self._db
        self.behind = True
        with failures_as("ledger commit failed", roll_back=db, position=position):
            record_applied_position(db, TXLOG_KEY, seq)
            index_record(db, [(st.name, rows) for st, rows in writes], seq)
            commit(db)
        self.txlog_seq = seq
        self.behind = False
        self._committed(writes, position)

    def _committed(self, writes: Writes, position: int) -> None:
        self.last_position = position
        if not self.wal_shredded or any(statement.name in ERASING for statement, _ in writes):
            self._shred_wal()

    def catch_up(self) -> int:
        """Apply the log's records after ``txlog_seq``, each in its own
        transaction with its position, and return how many. The cache of
        lane heads is dropped: it is reloaded from the file. A log holding
        nothing of this non-empty file is seeded with it, and a seed of
        this file's state left incomplete is completed (``_write_seed``)."""
        if self.txlog is None:
            return 0
        # Until this returns, the file may lack what the log holds (or a
        # seed it was appending may be unfinished): the next use reads again.
        self.behind = True
        applied, _ = self._read_log()
        idle = 0
        while self._seed_due():
            try:
                self._write_seed()
            except TxLogMoved:
                # Another writer appended first: its seed (taken or refused
                # as any), or the rest of this one's. Read it, then see.
                more, taken = self._read_log()
                applied += more
                idle = 0 if taken else idle + 1
                if idle == 3:
                    raise
        self.behind = False
        return applied

    def _read_log(self) -> tuple[int, int]:
        """Take the log's records after ``txlog_seq``: (applied, taken —
        applied or, a seed's this file holds, skipped)."""
        assert self.txlog is not None
        db = self._db
        records, end = self.txlog.read_after(self.txlog_seq)
        if end < self.txlog_seq:
            self._restart_log(end)
            records, end = self.txlog.read_after(self.txlog_seq)
        applied = taken = 0
        for seq, data in records:
            record = decode_record(data, seq=seq)
            taken += 1
            if record.seed is not None:
                applied += self._take_seed_record(record, seq)
                continue
            if self._seed is not None:
                raise IntegrityError(
                    "a transaction log record follows a seed that is not complete",
                    kind="txlog_seed_incomplete",
                    txlog_seq=seq,
                    seed_rows=self._seed.rows,
                    seed_rows_on_log=self._seed.end,
                )
            with transaction(db, "ledger commit failed", txlog_seq=seq):
                apply_record(db, record, seq=seq, last_position=self.last_position)
                record_applied_position(db, TXLOG_KEY, seq)
                index_record(db, record.writes, seq)
            self._inline_usage.add_logged(record.writes)
            if not self.wal_shredded or any(name in ERASING for name, _ in record.writes):
                self._shred_wal()
            self.txlog_seq = seq
            self.last_position = record.position
            self.applied_from_log += 1
            applied += 1
        # An unfinished record ends the log: the next append goes after it.
        self.txlog_seq = max(self.txlog_seq, end)
        if applied:
            self._forget_lanes()
        return applied, taken

    def _shred_wal(self) -> None:
        """An erasure committed: its bytes leave the WAL too (spec/erasure.md).
        Without waiting for a reader (``shred_wal``): while one holds an older
        snapshot, each later commit tries again, until the WAL is emptied."""
        with failures_as("ledger WAL checkpoint failed"), self._checkpoints_paused():
            self.wal_shredded = shred_wal(self._db)

    def _checkpoints_paused(self) -> AbstractContextManager[None]:
        return self.checkpointer.paused() if self.checkpointer is not None else nullcontext()

    def _take_seed_record(self, record: TxRecord, seq: int) -> int:
        """A seed's record (store/txlogseed.py): applied to a file that was
        empty when the seed began, skipped by a file whose state is the one
        the seed announces (its rows are there); any other file is refused,
        before anything of the seed is written to it. 1 if applied."""
        mark = record.seed
        assert mark is not None
        db = self._db
        progress = self._seed
        if mark.first == 0 and progress is None:
            if txlogseed.is_empty(db):
                applying = True
            else:
                txlogseed.check_tables(db)
                if txlogseed.quick_mismatch(db, self.last_position, mark) or not txlogseed.file_state(
                    db, self.last_position
                ).matches(mark):
                    raise IntegrityError(
                        "the transaction log begins with a seed of another ledger file than this one: "
                        "this file is not empty and differs from it (start on an empty file, or with "
                        "the file the log was seeded from)",
                        kind="txlog_seed_differs",
                        txlog_seq=seq,
                        seed_position=mark.position,
                        seed_counts=mark.counts,
                        file_position=self.last_position,
                        file_counts=txlogseed.counts(db),
                    )
                applying = False
        elif progress is None or progress.digest != mark.digest or progress.end != mark.first:
            raise IntegrityError(
                "a transaction log seed record does not continue the seed this file is in",
                kind="txlog_record",
                txlog_seq=seq,
                seed_first_row=mark.first,
                file_seed_rows=None if progress is None else progress.end,
            )
        else:
            applying = progress.applying
        done = mark.end == mark.rows
        after = None if done else SeedProgress(mark.digest, mark.end, mark.rows, applying)
        with transaction(db, "ledger commit failed", txlog_seq=seq):
            if applying:
                apply_record(db, record, seq=seq, last_position=self.last_position)
            record_applied_position(db, TXLOG_KEY, seq)
            index_record(db, record.writes, seq)
            txlogseed.record_progress(db, after)
        self.txlog_seq = seq
        self._seed = after
        if not applying:
            return 0
        self._inline_usage.add_logged(record.writes)
        self.last_position = record.position
        self.applied_from_log += 1
        return 1

    def _seed_due(self) -> bool:
        """Whether this writer appends (the rest of) a seed now: its file
        holds rows and the log nothing of them, or the log holds the start
        of a seed of this very file (one cut short by a crash)."""
        if not self._seed_allowed:
            return False
        if self._seed is not None:
            return not self._seed.applying
        return applied_position(
            self._db, TXLOG_KEY, what="ledger read failed"
        ) == 0 and not txlogseed.is_empty(self._db)

    def _write_seed(self) -> None:
        """Append this file's rows to the log as a seed, from the row where
        a seed of it stopped (0 for a new one), each record right after the
        last; the file records each as taken (it holds its rows)."""
        assert self.txlog is not None
        db = self._db
        txlogseed.check_tables(db)
        state = txlogseed.file_state(db, self.last_position)
        start = 0
        if self._seed is not None:
            if self._seed.digest != state.digest:
                raise IntegrityError(
                    "this ledger file changed since it began seeding the transaction log",
                    kind="txlog_seed_differs",
                    txlog_seq=self.txlog_seq,
                )
            start = self._seed.end
        for data, mark in txlogseed.seed_records(
            db, state, start=start, max_rows=self.seed_max_rows, max_bytes=self.seed_max_bytes
        ):
            seq = self.txlog.append(data, after=self.txlog_seq)
            after = None if mark.end == mark.rows else SeedProgress(mark.digest, mark.end, mark.rows, False)
            with transaction(db, "ledger write failed", txlog_seq=seq):
                record_applied_position(db, TXLOG_KEY, seq)
                index_record(db, decode_record(data, seq=seq).writes, seq)
                txlogseed.record_progress(db, after)
            self.txlog_seq = seq
            self._seed = after
            self.seeded_rows += mark.end - mark.first

    def _restart_log(self, end: int) -> None:
        """The log ends before what this file applied. Empty, it was lost or
        reset: the file is the only record of what came before, and the log
        starts again (``catch_up`` seeds it with the file). Beginning with a
        seed, it was lost and another writer seeded it again: this file
        reads it from the start (and skips it if it is this file's state).
        Otherwise it is another ledger's, or was cut: refused."""
        if end != 0 and not self._log_begins_with_seed():
            raise IntegrityError(
                "the transaction log ends before what this ledger file applied: the stream is "
                "not this ledger's, or it was cut short",
                kind="txlog_behind_file",
                stream_last_sequence=end,
                file_txlog_seq=self.txlog_seq,
            )
        with transaction(self._db, "ledger write failed") as db:
            record_applied_position(db, TXLOG_KEY, 0)
            txlogseed.record_progress(db, None)
        self.log_restarted_after = self.last_position
        self.txlog_seq = 0
        self._seed = None

    def _log_begins_with_seed(self) -> bool:
        assert self.txlog is not None
        records, _ = self.txlog.read_after(0)
        for seq, data in records:
            mark = decode_record(data, seq=seq).seed
            return mark is not None and mark.first == 0
        return False
