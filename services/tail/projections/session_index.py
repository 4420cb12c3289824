"""The sessions index: one row per (tenant, session) in ``session_index``,
with its lasting members (runs, lanes, actors, what ended) in
``session_members`` and its cost per currency in ``session_costs``, folded
in the same transaction as the events it summarises, so listing sessions
costs a page of an index, not a scan of their events.

What a session row says, from its events alone:

* first and last event (position, ``committed_at``), event count, its runs,
  lanes and actors, its cost by currency;
* ``status``: ``failed`` once a run failed; ``completed`` once the session
  completed or every run it started ended (``vocabulary.TERMINAL_EVENT_TYPES``);
  otherwise ``running``;
* ``attempts_open``: attempts requested and not settled (completed or
  failed), and ``pauses_pending``: ``hitl.paused`` without a
  ``hitl.responded`` of the same ``pause_id``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from laneledger.contract.vocabulary import COST_SUM, TERMINAL_EVENT_TYPES
from laneledger.sqlite import put_meta

from ..answers.costs import Money
from ..answers.sessions import SessionSummary
from ..queries import SessionsQuery
from . import Reads
from .events import Row

DDL = """
CREATE TABLE IF NOT EXISTS session_index (
    tenant          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    first_position  INTEGER NOT NULL,
    last_position   INTEGER NOT NULL,
    first_at        TEXT NOT NULL,
    last_at         TEXT NOT NULL,
    events          INTEGER NOT NULL,
    runs            INTEGER NOT NULL DEFAULT 0,
    lanes           INTEGER NOT NULL DEFAULT 0,
    status          TEXT NOT NULL DEFAULT 'running',
    attempts_open   INTEGER NOT NULL DEFAULT 0,
    pauses_pending  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, session_id)
);
CREATE INDEX IF NOT EXISTS session_index_newest ON session_index (last_position);
CREATE INDEX IF NOT EXISTS session_index_by_id ON session_index (session_id);  -- owners.py
CREATE TABLE IF NOT EXISTS session_members (
    tenant     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    kind       TEXT NOT NULL,
    member     TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id, kind, member)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS session_members_by_member ON session_members (kind, member);
CREATE TABLE IF NOT EXISTS session_costs (
    tenant     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    currency   TEXT NOT NULL,
    amount     TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id, currency)
) WITHOUT ROWID;
"""

STATUSES = ("running", "completed", "failed")  # what ``status=`` filters on, but for those below
FOLDED = "sessions_folded_position"  # meta key: the last position folded into the index

_RUN_ENDS = frozenset(TERMINAL_EVENT_TYPES["run"])
_ATTEMPT_ENDS = frozenset(TERMINAL_EVENT_TYPES["attempt"])
_SESSION_ENDS = frozenset(TERMINAL_EVENT_TYPES["session"])


class _Detail(msgspec.Struct):
    """What the index reads of an event beyond the read model's columns."""

    committed_at: str = ""
    payload: dict[str, Any] = {}


_detail = msgspec.json.Decoder(_Detail)


def fold(db: sqlite3.Connection, rows: Iterable[Row]) -> None:
    """Fold ``rows`` (in position order) in the caller's transaction: one
    upsert per session of the batch, its lasting members in one statement,
    what opens and closes (attempts, pauses) in event order."""
    spans: dict[tuple[str, str], list[Any]] = {}  # key -> [first pos, first at, last pos, last at, n]
    lasting: set[tuple[str, str, str, str]] = set()
    changes: list[tuple[str, tuple[str, str, str, str]]] = []  # ("open" | "close", member row)
    last = 0
    for row in rows:
        last = row.position
        if not row.tenant:  # not a committed event (a foreign message): nothing to index
            continue
        key = (row.tenant, row.session_id)
        detail = _read_detail(row.body)
        span = spans.get(key)
        if span is None:
            spans[key] = [row.position, detail.committed_at, row.position, detail.committed_at, 1]
        else:
            span[2], span[3], span[4] = row.position, detail.committed_at, span[4] + 1
        lasting.update((*key, kind, member) for kind, member in _members(row) if member)
        event_type, payload = row.event_type, detail.payload
        if event_type == "attempt.requested":
            changes.append(("open", (*key, "open_attempt", row.subject_id)))
        elif event_type in _ATTEMPT_ENDS:
            changes.append(("close", (*key, "open_attempt", row.subject_id)))
        elif event_type in ("hitl.paused", "hitl.responded") and isinstance(payload.get("pause_id"), str):
            op = "open" if event_type == "hitl.paused" else "close"
            changes.append((op, (*key, "pending_pause", payload["pause_id"])))
        elif event_type == "cost.recorded":
            _add_cost(db, key, payload)
    db.executemany(
        "INSERT INTO session_index (tenant, session_id, first_position, first_at, last_position,"
        " last_at, events) VALUES (?,?,?,?,?,?,?) ON CONFLICT (tenant, session_id) DO UPDATE SET"
        " last_position = excluded.last_position, last_at = excluded.last_at,"
        " events = events + excluded.events",
        [(*key, *span) for key, span in spans.items()],
    )
    db.executemany("INSERT OR IGNORE INTO session_members VALUES (?,?,?,?)", sorted(lasting))
    for op, member in changes:
        if op == "open":
            db.execute("INSERT OR IGNORE INTO session_members VALUES (?,?,?,?)", member)
        else:
            db.execute(
                "DELETE FROM session_members WHERE tenant = ? AND session_id = ? AND kind = ? AND member = ?",
                member,
            )
    for key in spans:
        summarise(db, key)
    if last:
        put_meta(db, FOLDED, last)


def _members(row: Row) -> list[tuple[str, str]]:
    """What an event adds to its session for good: its run, lane and actor,
    and that its run ended (or failed), or the session did."""
    found = [("run", row.run_id), ("lane", row.lane_id), ("actor", row.actor_id)]
    if row.event_type in _RUN_ENDS:
        found.append(("run_ended", row.run_id))
        if row.event_type == "run.failed":
            found.append(("run_failed", row.run_id))
    elif row.event_type in _SESSION_ENDS:
        found.append(("session_ended", row.session_id))
    return found


def _read_detail(body: bytes) -> _Detail:
    try:
        return _detail.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _Detail()


def _add_cost(db: sqlite3.Connection, key: tuple[str, str], payload: dict[str, Any], sign: int = 1) -> None:
    """Add a cost's amount to its session's total in its currency (``sign``
    -1: take it out again, the cost erased; a total back at nothing is no row)."""
    try:
        amount, currency = Decimal(str(payload["amount"])), str(payload["currency"])
    except (KeyError, InvalidOperation):
        return  # the sequencer checks cost payloads; one that does not read adds nothing
    amount = amount.copy_negate() if sign < 0 else amount
    found = db.execute(
        "SELECT amount FROM session_costs WHERE tenant = ? AND session_id = ? AND currency = ?",
        (*key, currency),
    ).fetchone()
    if found is None and sign < 0:
        return
    total = COST_SUM.add(Decimal(found[0]), amount) if found else amount
    if sign < 0 and total.is_zero():
        db.execute(
            "DELETE FROM session_costs WHERE tenant = ? AND session_id = ? AND currency = ?", (*key, currency)
        )
        return
    db.execute("INSERT OR REPLACE INTO session_costs VALUES (?,?,?,?)", (*key, currency, str(total)))


def forget_content(
    db: sqlite3.Connection, key: tuple[str, str], event_type: str, payload: dict[str, Any]
) -> bool:
    """An event of the session ``key`` is erased (projections/erasure.py):
    take out what the index copied of its ``payload``, so the index is what
    folding its erased form (payload ``{}``) gives: its cost, its pending
    pause. Whether the session's summary is to be recomputed (``summarise``)."""
    if event_type == "cost.recorded":
        _add_cost(db, key, payload, sign=-1)
        return False
    if event_type == "hitl.paused" and isinstance(payload.get("pause_id"), str):
        db.execute(
            "DELETE FROM session_members WHERE tenant = ? AND session_id = ? AND kind = 'pending_pause'"
            " AND member = ?",
            (*key, payload["pause_id"]),
        )
        return True
    return False


def summarise(db: sqlite3.Connection, key: tuple[str, str]) -> None:
    """Recompute a session's counts and status from its members."""
    counts = dict(
        db.execute(
            "SELECT kind, count(*) FROM session_members WHERE tenant = ? AND session_id = ? GROUP BY kind",
            key,
        ).fetchall()
    )
    if counts.get("run_failed"):
        status = "failed"
    elif counts.get("session_ended") or (
        counts.get("run", 0) and counts.get("run_ended", 0) >= counts["run"]
    ):
        status = "completed"
    else:
        status = "running"
    db.execute(
        "UPDATE session_index SET runs = ?, lanes = ?, status = ?, attempts_open = ?, pauses_pending = ?"
        " WHERE tenant = ? AND session_id = ?",
        (
            counts.get("run", 0),
            counts.get("lane", 0),
            status,
            counts.get("open_attempt", 0),
            counts.get("pending_pause", 0),
            *key,
        ),
    )


def page(reads: Reads, query: SessionsQuery, tenant: str | None) -> tuple[list[SessionSummary], int | None]:
    """A page of the index, newest (last event) first, under the route's
    filters (``tenant``: the one its token allows), and the next page's
    ``before``: sessions whose last event is older than this page's oldest."""
    where: list[str] = []
    params: list[Any] = []
    if tenant is not None:
        where.append("s.tenant = ?")
        params.append(tenant)
    if query.status in STATUSES:
        where.append("s.status = ?")
        params.append(query.status)
    elif query.status == "unresolved":
        where.append("s.attempts_open > 0")
    elif query.status == "paused":
        where.append("s.pauses_pending > 0")
    if query.q is not None:
        where.append("instr(s.session_id, ?) > 0")
        params.append(query.q)
    if query.since is not None:  # active at or after
        where.append("s.last_at >= ?")
        params.append(query.since)
    if query.until is not None:  # active at or before
        where.append("s.first_at <= ?")
        params.append(query.until)
    if query.before is not None:
        where.append("s.last_position < ?")
        params.append(query.before)
    if query.actor_id is not None:
        where.append(
            "EXISTS (SELECT 1 FROM session_members m WHERE m.tenant = s.tenant"
            " AND m.session_id = s.session_id AND m.kind = 'actor' AND m.member = ?)"
        )
        params.append(query.actor_id)
    sql = (
        "SELECT s.tenant, s.session_id, s.first_position, s.last_position, s.first_at, s.last_at,"
        " s.events, s.runs, s.lanes, s.status, s.attempts_open, s.pauses_pending FROM session_index s"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY s.last_position DESC LIMIT ?"
    )
    rows = reads.query(sql, [*params, query.limit + 1])
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    costs = _costs(reads, [(row[0], row[1]) for row in rows])
    sessions = [_summary(row, costs.get((row[0], row[1]), [])) for row in rows]
    return sessions, sessions[-1].last_position if more else None


def _costs(reads: Reads, keys: list[tuple[str, str]]) -> dict[tuple[str, str], list[Money]]:
    """The cost per currency of each session of a page, in one query."""
    if not keys:
        return {}
    marks = ",".join("(?,?)" for _ in keys)
    found: dict[tuple[str, str], list[Money]] = {}
    for tenant, session_id, currency, amount in reads.query(
        "SELECT tenant, session_id, currency, amount FROM session_costs"
        f" WHERE (tenant, session_id) IN (VALUES {marks}) ORDER BY currency",
        [value for key in keys for value in key],
    ):
        found.setdefault((tenant, session_id), []).append(Money(currency=currency, amount=amount))
    return found


def _summary(row: tuple[Any, ...], cost: list[Money]) -> SessionSummary:
    return SessionSummary(
        tenant=row[0],
        session_id=row[1],
        first_position=row[2],
        last_position=row[3],
        first_event_at=row[4],
        last_event_at=row[5],
        events=row[6],
        runs=row[7],
        lanes=row[8],
        status=row[9],
        attempts_open=row[10],
        pauses_pending=row[11],
        cost=cost,
    )


# Which tenants the index knows with an id, by kind (at most two: one more
# than an answer needs; owners.py).
_TENANTS = {
    "session": "SELECT tenant FROM session_index WHERE session_id = ? LIMIT 2",
    "lane": "SELECT DISTINCT tenant FROM session_members WHERE kind = 'lane' AND member = ? LIMIT 2",
}


def tenants_with(reads: Reads, kind: str, entity_id: str) -> list[str]:
    return [tenant for (tenant,) in reads.query(_TENANTS[kind], [entity_id])]
