"""Keyset pagination over a read-only ledger file: every scan of the audit
and the export reads in pages, so memory never grows with the events."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

PAGE = 2000  # rows per query


def keyset_pages(db: sqlite3.Connection, sql: str, first_key: Any, page: int) -> Iterator[tuple[Any, ...]]:
    """Keyset pagination: ``sql`` takes (last key, limit) and returns rows whose
    first column is the key, ascending."""
    key = first_key
    while True:
        rows = db.execute(sql, (key, page)).fetchall()
        if not rows:
            return
        yield from rows
        if len(rows) < page:
            return
        key = rows[-1][0]
