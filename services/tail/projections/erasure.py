"""Erasure in the read model (spec/erasure.md, *Readers*): when the tail
folds an erasure event, it erases what it holds of the erasure's scope as
the ledger erased its file.

The committed stream keeps the events whole, as published, and then the
erasure event (which only the sequencer can commit: the ``laneledger``
namespace is reserved). Folding one (``note``, in the apply transaction)
records it in ``erasures_pending``; ``erase_page`` then rewrites the scope's
events committed before it, a bounded page per transaction, into their
erased form (``chain.erased_form``: the bytes the ledger file holds), and
takes out of the indexes what they copied from those payloads (``korg_index``'s
``source_agent``, ``session_index``'s costs and pauses). Where each erasure
got to is kept with it, so a stop resumes.

An unsealed event (no ``content_salt``) and one already erased are left as
they are, as the ledger leaves them. A scope of a kind this tail does not
know is left alone (logged), never a failure: the tail must keep following.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.contract import erasurescope
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import CONTENT_SALT, ERASED, erased_form
from laneledger.sqlite import put_meta

from . import korg_index, session_index
from .events import Row, Selection

log = logging.getLogger("laneledger.tail")

DDL = """
-- The events that name a data subject (their ``data_subject``), so that a
-- data subject's erasure reads its events, not every event of the tenant.
CREATE TABLE IF NOT EXISTS event_subjects (
    tenant       TEXT NOT NULL,
    data_subject TEXT NOT NULL,
    position     INTEGER NOT NULL,
    PRIMARY KEY (tenant, data_subject, position)
);
CREATE TABLE IF NOT EXISTS erasures_pending (
    position     INTEGER PRIMARY KEY,  -- the erasure event's
    event_id     TEXT NOT NULL,
    tenant       TEXT NOT NULL,
    scope        BLOB NOT NULL,        -- its payload's scope, canonical JSON
    done_through INTEGER NOT NULL DEFAULT 0  -- the last position of the scope erased
);
"""

PAGE_ROWS = 200  # events one page looks at, at most
WINDOW = 20_000  # positions one page of a retention scope looks through, at most
PAGE_BYTES = 4 << 20  # and bodies read, at most (at least one event a page)


SUBJECTS_FOLDED = "event_subjects_position"  # meta key: the last position indexed


class _Erasure(msgspec.Struct):
    payload: dict[str, Any] = {}


class _Subject(msgspec.Struct):
    data_subject: str | None = None


_erasure = msgspec.json.Decoder(_Erasure)
_subject = msgspec.json.Decoder(_Subject)
_decode = msgspec.json.Decoder().decode


def is_erasure(row: Row) -> bool:
    """An erasure event of a tenant's ledger lane."""
    return bool(row.tenant) and erasurescope.is_erasure(row.event_type, row.session_id, row.run_id)


def _candidates(
    db: sqlite3.Connection, tenant: str, scope: erasurescope.ErasureScope, after: int, before: int
) -> tuple[list[tuple[int, int]], int]:
    """The next (position, body size) that may be in ``scope`` after
    ``after`` and before the erasure (``before``), at most ``PAGE_ROWS`` + 1
    (to tell whether more follow); and the position the read went up to. A
    session, and a data subject, are read off their index; a time by
    windows of ``WINDOW`` positions of every tenant's events, its events
    then checked one by one (``ErasureScope.covers``)."""
    if scope.data_subject is not None:
        rows = db.execute(
            "SELECT s.position, length(e.body) FROM event_subjects s JOIN events e ON e.position = s.position"
            " WHERE s.tenant = ? AND s.data_subject = ? AND s.position > ? AND s.position < ?"
            " ORDER BY s.position LIMIT ?",
            (tenant, scope.data_subject, after, before, PAGE_ROWS + 1),
        ).fetchall()
        return [(int(p), int(n)) for p, n in rows], before - 1
    if scope.session_id is not None:
        where, params = Selection(tenant, scope.session_id, scope.run_id).where()
        upto = before - 1
    else:
        where, params = "tenant = ?", [tenant]
        upto = min(before - 1, after + WINDOW)
    rows = db.execute(
        f"SELECT position, length(body) FROM events WHERE {where}"
        " AND position > ? AND position <= ? ORDER BY position LIMIT ?",
        [*params, after, upto, PAGE_ROWS + 1],
    ).fetchall()
    return [(int(p), int(n)) for p, n in rows], upto


# -- writing (the apply thread) ----------------------------------------------------------


def note(db: sqlite3.Connection, rows: list[Row]) -> bool:
    """Record the erasure events among ``rows`` (in the caller's
    transaction); whether there were any."""
    found = []
    for row in rows:
        if is_erasure(row):
            try:
                scope = _erasure.decode(row.body).payload.get("scope")
            except (msgspec.DecodeError, msgspec.ValidationError):
                scope = None
            found.append((row.position, row.event_id, row.tenant, canonicalize(scope)))
    db.executemany(
        "INSERT OR IGNORE INTO erasures_pending (position, event_id, tenant, scope) VALUES (?,?,?,?)", found
    )
    return bool(found)


def fold_subjects(db: sqlite3.Connection, rows: list[Row]) -> None:
    """Index the events of ``rows`` (in position order) that name a data
    subject, in the caller's transaction."""
    named = []
    for row in rows:
        if not row.tenant:  # not a committed event (a foreign message)
            continue
        try:
            subject = _subject.decode(row.body).data_subject
        except (msgspec.DecodeError, msgspec.ValidationError):
            subject = None
        if subject:
            named.append((row.tenant, subject, row.position))
    db.executemany(
        "INSERT OR IGNORE INTO event_subjects (tenant, data_subject, position) VALUES (?,?,?)", named
    )
    if rows:
        put_meta(db, SUBJECTS_FOLDED, rows[-1].position)


def pending(db: sqlite3.Connection) -> int:
    ((count,),) = db.execute("SELECT count(*) FROM erasures_pending").fetchall()
    return int(count)


@dataclass(frozen=True, slots=True)
class Page:
    """What one page did: the positions it erased (the feed forgets them),
    whether an erasure finished (its WAL is to be shredded) and whether more
    work is pending."""

    erased: list[int]
    finished: bool
    more: bool


def erase_page(db: sqlite3.Connection) -> Page:
    """Erase the next page of the oldest pending erasure, in the caller's
    transaction."""
    found = db.execute(
        "SELECT position, event_id, tenant, scope, done_through FROM erasures_pending"
        " ORDER BY position LIMIT 1"
    ).fetchone()
    if found is None:
        return Page([], False, False)
    position, event_id, tenant, scope_json, done_through = found
    scope = erasurescope.scope_of(_decode(scope_json))
    if scope is None:
        log.warning(
            "erasure %s at position %d: a scope this tail does not know, left alone", event_id, position
        )
        db.execute("DELETE FROM erasures_pending WHERE position = ?", (position,))
        return Page([], False, pending(db) > 0)
    # Positions and sizes first, each body then read alone: a page holds
    # one body at a time, however large the events are.
    rows, upto = _candidates(db, tenant, scope, done_through, position)
    mark = {"position": position, "event_id": event_id}
    erased: list[int] = []
    sessions: set[tuple[str, str]] = set()
    read = 0
    last = done_through  # the last position looked at
    stopped = ended = False  # by the byte bound; at the end of a retention scope
    for at, size in rows[:PAGE_ROWS]:
        if read >= PAGE_BYTES:  # never before the first event: a page always moves on
            stopped = True
            break
        read += size
        last = at
        ((body,),) = db.execute("SELECT body FROM events WHERE position = ?", (at,)).fetchall()
        event = _decode(body)
        if not _covered(scope, event):
            if scope.committed_before is not None and not _older(scope, event):
                ended = True  # the clock moves forward: no later event is older
                break
            continue
        if ERASED in event or CONTENT_SALT not in event:
            continue  # as the ledger leaves it
        try:
            gone = canonicalize(erased_form(event, mark))
        except ValueError:
            continue  # no well-formed salt: not an event the ledger sealed, left as it is
        db.execute("UPDATE events SET body = ? WHERE position = ?", (gone, at))
        event_type, session_id = event.get("event_type", ""), event.get("session_id", "")
        payload = event.get("payload")
        if isinstance(payload, dict) and payload:
            korg_index.forget_content(db, at, event_type, event.get("actor_id", ""))
            if session_index.forget_content(db, (tenant, session_id), event_type, payload):
                sessions.add((tenant, session_id))
        erased.append(at)
    for key in sessions:
        session_index.summarise(db, key)
    # A window whose candidates were all looked at is done up to its end.
    reached = last if stopped or len(rows) > PAGE_ROWS else upto
    complete = ended or reached >= position - 1
    if complete:
        db.execute("DELETE FROM erasures_pending WHERE position = ?", (position,))
    else:
        db.execute("UPDATE erasures_pending SET done_through = ? WHERE position = ?", (reached, position))
    return Page(erased, complete, not complete or pending(db) > 0)


def _covered(scope: erasurescope.ErasureScope, event: dict[str, Any]) -> bool:
    return scope.covers(
        session_id=event.get("session_id", ""),
        run_id=event.get("run_id", ""),
        data_subject=event.get("data_subject"),
        committed_at=event.get("committed_at"),
    )


def _older(scope: erasurescope.ErasureScope, event: dict[str, Any]) -> bool:
    """Committed before a retention scope's time (whatever its session)."""
    committed_at = event.get("committed_at")
    return isinstance(committed_at, str) and committed_at < str(scope.committed_before)
