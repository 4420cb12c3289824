"""The tail's projections: one module per read-model table (or family of
tables kept together), each holding its DDL, its fold of committed events
(run in the apply transaction, ``readmodel.ReadModel.apply``) and the
queries the routes ask of it.

* ``events``: one row per committed event, the table the others fold from;
* ``session_index``: a summary per session (the sessions index);
* ``korg_index``: every event as Korg §8 sees it;
* ``tlog``: the transparency log's tree, checkpoints and cosignatures.

A projection imports nothing of the tail above it: ``readmodel`` composes
them, the routes read through it (``Reads``), and none knows HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol


class Reads(Protocol):
    """What a projection's queries read through: ``readmodel.ReadModel``, on a
    reader thread."""

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[tuple[Any, ...]]: ...

    def scan(
        self,
        sql: str,
        params: tuple[Any, ...] | list[Any],
        *,
        max_rows: int,
        max_bytes: int,
        body_column: int,
    ) -> tuple[list[tuple[Any, ...]], bool]: ...

    def iterate(
        self, sql: str, params: tuple[Any, ...] | list[Any], key_index: int = 0, page: int = 2000
    ) -> Iterator[tuple[Any, ...]]: ...
