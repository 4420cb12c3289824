"""The one checker every fault scenario ends with (tests/fault/).

:func:`check_invariants` takes what the producers recorded, the ledger file
and the consumers' data directories, and checks, failing with the first
difference it finds:

1. every request a producer made has exactly one outcome, every committed
   append is in the ledger exactly once where its receipt said, nothing else
   is, lanes are dense, and every receipt a producer got names events the
   file holds byte for byte (position, id, entry hash from ``events.body``)
   and is the receipt stored for its request (``producer_proc.check_against_ledger``,
   ``receipt_check.check_receipts_held``);
2. every chain verifies and every receipt matches its events
   (``laneledger.audit.ledger.audit_ledger``);
3. LEDGER_EVENTS equals SQLite: sequence == position, byte-identical bodies,
   nothing more (``compare_with_stream``);
4. each consumer's derived state equals a fold of the ledger, once it has
   caught up (bounded wait): the tail's read model holds exactly the ledger's
   events with their columns read from the bodies; the metrics service's
   stored state equals ``laneledger.services.metrics.fold`` run over the ledger from
   scratch; the checkpoint service's lane index holds exactly every
   (lane, seq) -> event id and every lane's run and last seq.

The consumers' files are read read-only; stop the consumers (or let them go
idle) first so the comparison sees a settled state.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from polling import eventually
from producer_proc import check_against_ledger
from sequencer_process import wait_for_stream

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import compare_with_stream
from laneledger.services.metrics.fold import LabelPolicy, State, fold_message
from laneledger.services.metrics.store import rows_of

CATCH_UP_S = 60.0  # bounded wait for a consumer to reach the ledger's last position


@dataclass(frozen=True)
class Consumers:
    """The consumers' data directories (None: that consumer is not running)."""

    tail: Path | None = None
    metrics: Path | None = None
    checkpoint: Path | None = None

    @property
    def files(self) -> dict[str, Path]:
        found = {
            "tail": (self.tail, "tail.db"),
            "metrics": (self.metrics, "metrics.db"),
            "checkpoint": (self.checkpoint, "checkpoints.db"),
        }
        return {name: Path(d) / f for name, (d, f) in found.items() if d is not None}


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _rows(path: Path, sql: str) -> list[tuple]:
    conn = _ro(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


_POSITION_SQL = {
    "tail": "SELECT value FROM meta WHERE key = 'applied_position'",
    "metrics": "SELECT value FROM meta WHERE key = 'position'",
    "checkpoint": "SELECT value FROM meta WHERE key = 'applied_position'",
}


def consumer_position(name: str, path: Path) -> int:
    """The position a consumer's file says it has applied (0 if none yet)."""
    try:
        found = _rows(path, _POSITION_SQL[name])
    except sqlite3.Error:
        return 0
    return int(found[0][0]) if found else 0


async def wait_for_consumers(consumers: Consumers, last_position: int, timeout: float = CATCH_UP_S) -> None:
    """Until every consumer has applied ``last_position``; none may be past it."""
    positions = await eventually(
        lambda: {name: consumer_position(name, path) for name, path in consumers.files.items()},
        until=lambda found: min(found.values(), default=last_position) >= last_position,
        what=f"every consumer at position {last_position}",
        timeout=timeout,
        interval=0.1,
    )
    past = {name: found for name, found in positions.items() if found != last_position}
    assert not past, f"consumers past the ledger's position {last_position}: {past}"


def ledger_events(db: Path) -> list[tuple[int, bytes]]:
    """(position, body) of every committed event, in position order."""
    rows = _rows(db, "SELECT position, body FROM events ORDER BY position")
    return [(p, b if isinstance(b, bytes) else b.encode()) for p, b in rows]


# -- each consumer against a fold of the ledger -----------------------------------


def check_tail(events: list[tuple[int, bytes]], tail_db: Path) -> None:
    """The read model: one row per ledger event, its columns read from the
    body, the body byte-identical."""
    want = []
    for position, body in events:
        e = json.loads(body)
        want.append(
            (
                position,
                e["id"],
                e["tenant"],
                e["session_id"],
                e["run_id"],
                e["lane_id"],
                e["seq"],
                e["actor_id"],
                e["subject_id"],
                e["event_type"],
                body,
            )
        )
    found = [
        (*r[:-1], bytes(r[-1]) if not isinstance(r[-1], str) else r[-1].encode())
        for r in _rows(
            tail_db,
            "SELECT position, event_id, tenant, session_id, run_id, lane_id,"
            " seq, actor_id, subject_id, event_type, body FROM events"
            " ORDER BY position",
        )
    ]
    assert len(found) == len(want), f"the tail holds {len(found)} events, the ledger {len(want)}"
    for got, expected in zip(found, want, strict=True):
        assert got == expected, f"tail row at position {expected[0]} differs from the ledger"


def check_metrics(
    events: list[tuple[int, bytes]], metrics_db: Path, policy: LabelPolicy | None = None
) -> State:
    """The stored fold equals the fold of the whole ledger from scratch
    (labelled by ``policy``, the service's default unless given)."""
    state = State(policy=policy or LabelPolicy())
    for position, body in events:
        fold_message(state, position, body)
    want = rows_of(state, state.take_changes())

    def as_set(rows: Iterable[tuple]) -> set[tuple]:
        return {tuple(str(x) for x in row) for row in rows}

    assert consumer_position("metrics", metrics_db) == state.position
    for table, expected in (
        ("series", want.series),
        ("histograms", want.histograms),
        ("open_items", want.open_put),
        ("label_values", want.admitted),
    ):
        found = as_set(_rows(metrics_db, f"SELECT * FROM {table}"))
        missing, extra = as_set(expected) - found, found - as_set(expected)
        assert not missing and not extra, (
            f"metrics {table} differs from the fold of the ledger: missing {sorted(missing)[:3]}, "
            f"extra {sorted(extra)[:3]}"
        )
    return state


def check_checkpoint_index(events: list[tuple[int, bytes]], checkpoint_db: Path) -> None:
    """The checkpoint service's lane index: every (lane, seq) -> event id,
    every lane's session, run and last seq."""
    lane_events, lanes = set(), {}
    for _, body in events:
        e = json.loads(body)
        lane_events.add((e["lane_id"], e["seq"], e["id"]))
        lanes[e["lane_id"]] = (
            e["session_id"],
            e["run_id"],
            max(e["seq"], lanes.get(e["lane_id"], ("", "", 0))[2]),
        )
    found_events = set(_rows(checkpoint_db, "SELECT lane_id, seq, event_id FROM lane_events"))
    assert found_events == lane_events, (
        f"checkpoint lane index: {len(lane_events - found_events)} events missing, "
        f"{len(found_events - lane_events)} not in the ledger"
    )
    found_lanes = {
        lane: (s, r, n)
        for lane, s, r, n in _rows(checkpoint_db, "SELECT lane_id, session_id, run_id, last_seq FROM lanes")
    }
    assert found_lanes == lanes, "checkpoint lanes differ from the ledger's"


# -- all of it ----------------------------------------------------------------------


async def check_invariants(
    lines: list[dict], db: Path, js, consumers: Consumers = Consumers(), *, stream: str = "LEDGER_EVENTS"
) -> dict[str, int]:
    """Everything in the module docstring; returns counts for the test's summary line."""
    summary = check_against_ledger(lines, db)
    audit = audit_ledger(db)
    assert audit.events == audit.last_position == summary["events"]
    await wait_for_stream(js, audit.last_position, stream=stream, timeout=CATCH_UP_S)
    assert await compare_with_stream(js, db, stream=stream) == summary["events"]
    await wait_for_consumers(consumers, audit.last_position)
    events = ledger_events(db)
    files = consumers.files
    if "tail" in files:
        check_tail(events, files["tail"])
    if "metrics" in files:
        state = check_metrics(events, files["metrics"])
        summary["cost_series"] = len(state.values["laneledger_cost"])
    if "checkpoint" in files:
        check_checkpoint_index(events, files["checkpoint"])
    summary["consumers_checked"] = len(files)
    return summary
