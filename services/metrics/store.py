"""The metrics service's own SQLite file: the folded state and the position it
reached, written together in one transaction per batch.

That is the whole exactly-once argument: after any crash the file holds some
batch's state *and* that batch's last position, never one without the other,
so the service resumes from the position after it and folds nothing twice.
(``Durability.NORMAL``: a power cut may lose the last transactions, but state
and position together, and the stream still has those events.)

SQLite's failures leave as ``InternalError`` naming the file.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import msgspec

from laneledger.sqlite import (
    Durability,
    applied_position,
    failures_as,
    meta_value,
    open_database,
    put_meta,
    record_applied_position,
    transaction,
)

from .fold import (
    CAPPED_LABELS,
    DURATION_BUCKETS,
    METRICS,
    Changes,
    Histogram,
    LabelPolicy,
    PendingAction,
    State,
)

# Bump when the meaning of stored rows changes; a file with another version is
# refolded from position 0 (the committed stream keeps every event).
# 3: open items keyed by tenant (ids are each tenant's own).
FOLD_VERSION = f"3/{','.join(map(str, DURATION_BUCKETS))}"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series (
    metric TEXT NOT NULL, labels TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (metric, labels));
CREATE TABLE IF NOT EXISTS histograms (
    metric TEXT NOT NULL, labels TEXT NOT NULL, counts TEXT NOT NULL, sum_ns INTEGER NOT NULL,
    PRIMARY KEY (metric, labels));
CREATE TABLE IF NOT EXISTS open_items (
    kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (kind, key));
CREATE TABLE IF NOT EXISTS label_values (
    scope TEXT NOT NULL, label TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (scope, label, value));
"""
_TABLES = ("series", "histograms", "open_items", "label_values")
_POSITION = "position"  # the meta key of the last position folded

_json = msgspec.json.Encoder()


class MetricsStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Used from one thread at a time (the service's writer thread).
        self._db = open_database(
            self.path, durability=Durability.NORMAL, ddl=_SCHEMA, what="metrics database"
        )
        try:
            with transaction(self._db, "cannot open metrics database", path=str(self.path)) as db:
                if meta_value(db, "fold_version") != FOLD_VERSION:
                    # New, or folded with another meaning (maybe other columns):
                    # the tables anew, and fold again from 0.
                    for table in _TABLES:
                        db.execute(f"DROP TABLE IF EXISTS {table}")
                    for statement in filter(str.strip, _SCHEMA.split(";")):
                        db.execute(statement)
                    put_meta(db, "fold_version", FOLD_VERSION)
                    record_applied_position(db, _POSITION, 0)
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        self._db.close()

    # -- load -----------------------------------------------------------------------

    def load(self, policy: LabelPolicy) -> State:
        """The state as of the last committed batch."""
        state = State(policy=policy)
        state.position = applied_position(self._db, _POSITION, what="metrics database read failed")
        with failures_as("metrics database read failed", path=str(self.path)):
            self._load_rows(state)
        return state

    def _load_rows(self, state: State) -> None:
        db = self._db
        for metric, labels, value in db.execute("SELECT metric, labels, value FROM series"):
            if metric in state.values:
                number = Decimal(value) if METRICS[metric].exact else int(value)
                state.values[metric][tuple(msgspec.json.decode(labels))] = number
        for metric, labels, counts, sum_ns in db.execute(
            "SELECT metric, labels, counts, sum_ns FROM histograms"
        ):
            if metric in state.histograms:
                state.histograms[metric][tuple(msgspec.json.decode(labels))] = Histogram(
                    msgspec.json.decode(counts), sum_ns
                )
        for kind, key, value in db.execute("SELECT kind, key, value FROM open_items"):
            decoded = msgspec.json.decode(value)
            if kind == "attempt":
                state.attempts[key] = decoded
            elif kind == "pause":
                state.pauses[key] = decoded
            elif kind == "action":
                state.actions[key] = PendingAction(*decoded)
        for scope, label, value in db.execute("SELECT scope, label, value FROM label_values"):
            if label in CAPPED_LABELS:
                state.admitted.setdefault((scope, label), set()).add(value)

    # -- save -----------------------------------------------------------------------

    def save(self, rows: SavedRows) -> None:
        """One transaction: a batch's changed rows and its last position."""
        with transaction(self._db, "metrics database write failed", position=rows.position) as db:
            db.executemany("INSERT OR REPLACE INTO series VALUES (?, ?, ?)", rows.series)
            db.executemany("INSERT OR REPLACE INTO histograms VALUES (?, ?, ?, ?)", rows.histograms)
            db.executemany("INSERT OR REPLACE INTO open_items VALUES (?, ?, ?)", rows.open_put)
            db.executemany("DELETE FROM open_items WHERE kind = ? AND key = ?", rows.open_del)
            db.executemany("INSERT OR IGNORE INTO label_values VALUES (?, ?, ?)", rows.admitted)
            record_applied_position(db, _POSITION, rows.position)


class SavedRows(msgspec.Struct, frozen=True):
    """A batch's changes rendered as rows on the event loop, so the write can
    run in a thread while the loop keeps serving (and mutating nothing)."""

    position: int
    series: list[tuple[str, str, str]]
    histograms: list[tuple[str, str, str, int]]
    open_put: list[tuple[str, str, str]]
    open_del: list[tuple[str, str]]
    admitted: list[tuple[str, str, str]]


def rows_of(state: State, changes: Changes) -> SavedRows:
    def labels(key: tuple[str, ...]) -> str:
        return _json.encode(list(key)).decode()

    def open_value(value: object) -> str:
        if isinstance(value, PendingAction):
            value = [value.started_ns, value.action_type, value.name]
        return _json.encode(value).decode()

    return SavedRows(
        position=state.position,
        # Decimals in fixed notation ("0.000000000000000001", not "1E-18").
        series=[
            (m, labels(k), format(state.values[m][k], "f") if METRICS[m].exact else str(state.values[m][k]))
            for m, k in sorted(changes.values)
        ],
        histograms=[
            (m, labels(k), _json.encode(h.counts).decode(), h.sum_ns)
            for m, k in sorted(changes.histograms)
            for h in (state.histograms[m][k],)
        ],
        open_put=[(kind, key, open_value(v)) for (kind, key), v in changes.open_put.items()],
        open_del=sorted(changes.open_del),
        admitted=list(changes.admitted),
    )
