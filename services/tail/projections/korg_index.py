"""The tail's Korg index: every committed event as Korg §8 sees it, indexed
(normative text: ``spec/korg-mapping.md``, "Indexed Korg view").

One row per event in the read model's ``korg_index``, folded in the same
transaction as the event (``ReadModel.apply``), so every §8 read is a range
of an index, never a scan of the journal, however large the ledger:

* ``source_agent``: a Korg call's as posted, a native event's actor id;
* ``triggered_by``: the position of the event its ``causation_id`` names; a
  native event naming none hangs off its session's root (Korg §4: the root is
  every event's originator), a Korg call naming none is a root;
* ``root``: the position of its Korg session's root — a Korg call's root is
  its cause's, or itself; a native event's is its laneledger session's first
  event (one laneledger session is one Korg session).

The queries below run on the reader threads (``Reads``: the read model).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

import msgspec

from laneledger.compat.korg_view import source_agent_of
from laneledger.history.causality import KORG_TOOL_CALL
from laneledger.sqlite import put_meta

from . import Reads
from .events import Row

DDL = """
CREATE TABLE IF NOT EXISTS korg_index (
    position     INTEGER PRIMARY KEY,
    tenant       TEXT NOT NULL,
    root         INTEGER NOT NULL,
    source_agent TEXT NOT NULL,
    triggered_by INTEGER
);
CREATE INDEX IF NOT EXISTS korg_by_tenant ON korg_index (tenant, position);
CREATE INDEX IF NOT EXISTS korg_by_root ON korg_index (tenant, root, position);
CREATE INDEX IF NOT EXISTS korg_by_agent ON korg_index (tenant, source_agent, position);
CREATE INDEX IF NOT EXISTS korg_by_cause ON korg_index (tenant, triggered_by, position);
CREATE INDEX IF NOT EXISTS korg_heads ON korg_index (tenant, position) WHERE root = position;
"""
FOLDED = "korg_index_position"  # meta key: the last position folded


class _Detail(msgspec.Struct):
    payload: dict[str, Any] = {}


_detail = msgspec.json.Decoder(_Detail)


def fold(db: sqlite3.Connection, rows: Iterable[Row]) -> None:
    """Index ``rows`` (in position order, already in ``events`` and the
    sessions index) in the caller's transaction."""
    last = 0
    for row in rows:
        last = row.position
        if not row.tenant:  # not a committed event (a foreign message): nothing to index
            continue
        try:
            payload = _detail.decode(row.body).payload
        except (msgspec.DecodeError, msgspec.ValidationError):
            payload = {}
        cause = _position_of(db, row.causation_id) if row.causation_id else None
        if cause is not None:
            root = _root_of(db, cause) or cause
        elif row.event_type == KORG_TOOL_CALL:
            root = row.position
        else:
            root = _session_first(db, row.tenant, row.session_id) or row.position
            cause = root if root != row.position else None
        db.execute(
            "INSERT OR REPLACE INTO korg_index (position, tenant, root, source_agent, triggered_by)"
            " VALUES (?,?,?,?,?)",
            (row.position, row.tenant, root, source_agent_of(row.event_type, payload, row.actor_id), cause),
        )
    if last:
        put_meta(db, FOLDED, last)


def forget_content(db: sqlite3.Connection, position: int, event_type: str, actor_id: str) -> None:
    """The event at ``position`` is erased (projections/erasure.py): its
    ``source_agent``, a Korg call's from its payload, becomes what an empty
    payload gives (its actor id)."""
    if event_type == KORG_TOOL_CALL:
        db.execute(
            "UPDATE korg_index SET source_agent = ? WHERE position = ?",
            (source_agent_of(event_type, {}, actor_id), position),
        )


def _position_of(db: sqlite3.Connection, event_id: str) -> int | None:
    found = db.execute("SELECT position FROM events WHERE event_id = ? LIMIT 1", (event_id,)).fetchone()
    return None if found is None else int(found[0])


def _root_of(db: sqlite3.Connection, position: int) -> int | None:
    found = db.execute("SELECT root FROM korg_index WHERE position = ?", (position,)).fetchone()
    return None if found is None else int(found[0])


def _session_first(db: sqlite3.Connection, tenant: str, session_id: str) -> int | None:
    found = db.execute(
        "SELECT first_position FROM session_index WHERE tenant = ? AND session_id = ?", (tenant, session_id)
    ).fetchone()
    return None if found is None else int(found[0])


# -- reads (reader threads) -----------------------------------------------------------------

Entry = tuple[int, bytes, str, int | None, int]  # position, body, source_agent, triggered_by, root
Page = tuple[list[Entry], bool]  # and whether more follow
PAGE_BYTES = 4 * 1024 * 1024
_ENTRY = (
    "SELECT k.position, e.body, k.source_agent, k.triggered_by, k.root"
    " FROM korg_index k JOIN events e USING (position)"
)


def has_ledger(reads: Reads, tenant: str) -> bool:
    return bool(reads.query("SELECT 1 FROM korg_index WHERE tenant = ? LIMIT 1", [tenant]))


def ledgers(reads: Reads, limit: int) -> list[str]:
    """Tenants with events, at most ``limit`` (an index skip-scan per tenant)."""
    found: list[str] = []
    after = ""
    while len(found) < limit:
        rows = reads.query("SELECT min(tenant) FROM korg_index WHERE tenant > ?", [after])
        if not rows or rows[0][0] is None:
            break
        after = rows[0][0]
        found.append(after)
    return found


def recent(
    reads: Reads, tenant: str, before: int | None, limit: int, agent: str | None, cause: int | None = None
) -> Page:
    """Newest first, ``position < before``; one agent's with ``agent``, the
    events ``cause`` triggered with ``cause``."""
    where, params = "k.tenant = ?", list[Any]([tenant])
    if agent is not None:
        where += " AND k.source_agent = ?"
        params.append(agent)
    if cause is not None:
        where += " AND k.triggered_by = ?"
        params.append(cause)
    if before is not None:
        where += " AND k.position < ?"
        params.append(before)
    return _entries(reads, f"{_ENTRY} WHERE {where} ORDER BY k.position DESC", params, limit)


def heads(reads: Reads, tenant: str, before: int | None, limit: int) -> list[int]:
    """Session roots, newest first (``limit`` + 1 to tell whether more follow)."""
    params: list[Any] = [tenant]
    where = "tenant = ? AND root = position"
    if before is not None:
        where += " AND position < ?"
        params.append(before)
    rows = reads.query(
        f"SELECT position FROM korg_index WHERE {where} ORDER BY position DESC LIMIT ?", [*params, limit]
    )
    return [int(p) for (p,) in rows]


def session(reads: Reads, tenant: str, root: int, after: int, limit: int, agent: str | None) -> Page:
    """A session's events oldest first, ``position > after``."""
    where, params = "k.tenant = ? AND k.root = ? AND k.position > ?", list[Any]([tenant, root, after])
    if agent is not None:
        where += " AND k.source_agent = ?"
        params.append(agent)
    return _entries(reads, f"{_ENTRY} WHERE {where} ORDER BY k.position", params, limit)


def event(reads: Reads, tenant: str, position: int) -> Entry | None:
    found, _ = _entries(reads, f"{_ENTRY} WHERE k.position = ? AND k.tenant = ?", [position, tenant])
    return found[0] if found else None


def session_facts(reads: Reads, tenant: str, root: int, max_agents: int) -> tuple[int, int, list[str]]:
    """(event count, last position, the first ``max_agents`` agents by name)."""
    count, last = reads.query(
        "SELECT count(*), coalesce(max(position), 0) FROM korg_index WHERE tenant = ? AND root = ?",
        [tenant, root],
    )[0]
    agents = reads.query(
        "SELECT DISTINCT source_agent FROM korg_index WHERE tenant = ? AND root = ?"
        " ORDER BY source_agent LIMIT ?",
        [tenant, root, max_agents],
    )
    return int(count), int(last), [a for (a,) in agents]


def _entries(reads: Reads, sql: str, params: list[Any], limit: int = 1) -> Page:
    """At most ``limit`` entries, fewer when their bodies reach ``PAGE_BYTES``
    (a page's memory is bounded however large events are), and whether more follow."""
    rows, more = reads.scan(sql, params, max_rows=limit, max_bytes=PAGE_BYTES, body_column=1)
    return [(int(p), bytes(b), str(a), None if t is None else int(t), int(r)) for p, b, a, t, r in rows], more


def journal(
    reads: Reads, tenant: str, session_id: str | None, after: int, upto: int, limit: int
) -> list[tuple[int, bytes, str, int | None]]:
    """``(position, body, source_agent, triggered_by)`` of up to ``limit``
    events of ``tenant`` (of one session, when named) in ``(after, upto]``,
    oldest first: the Korg journal's rows, tool calls and natively recorded
    events alike."""
    where, params = "e.tenant = ?", [tenant]
    if session_id is not None:
        where += " AND e.session_id = ?"
        params.append(session_id)
    return reads.query(
        "SELECT e.position, e.body, k.source_agent, k.triggered_by"
        f" FROM events e JOIN korg_index k USING (position) WHERE {where}"
        " AND e.position > ? AND e.position <= ? ORDER BY e.position LIMIT ?",
        [*params, after, upto, limit],
    )
