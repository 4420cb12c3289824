"""How many bytes each tenant's events take in the ledger: its ``inline_bytes`` quota.

The count is derived from the ledger file itself (the length of every stored
event body, by tenant), never kept beside it: a restart, a standby that
replicated the file through the transaction log, and a file restored from
the log all count exactly what they hold. It is summed once (one scan of the
events table, which the sequencer runs on its writer thread as it becomes
active), then kept current by the writer's own commits and by the rows it
applies from the log, never summed again. Normative text: spec/wire.md,
"Tenants and limits".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from laneledger.contract.errors import QuotaExceeded
from laneledger.sqlite import failures_as
from laneledger.store.txlog import INSERT_EVENT

_TENANT = 4  # an INSERT_EVENT row's tenant; its body is the last value
# A tenant's limit by its name; None: unlimited (no tenants file).
InlineLimit = Callable[[str], int | None]


class InlineUsage:
    """Bytes of stored event bodies per tenant, and the check against a limit."""

    def __init__(self, limit: InlineLimit = lambda tenant: None) -> None:
        self.limit = limit
        self._used: dict[str, int] | None = None  # None: not summed since the last forget

    def used(self, db: sqlite3.Connection) -> dict[str, int]:
        """Every tenant's bytes, summed from the file when not known."""
        if self._used is None:
            with failures_as("ledger read failed"):
                rows = db.execute("SELECT tenant, SUM(length(body)) FROM events GROUP BY tenant").fetchall()
            self._used = {tenant: int(total) for tenant, total in rows}
        return self._used

    def check(self, db: sqlite3.Connection, tenant: str, pending: int, adding: int) -> None:
        """``QuotaExceeded`` when ``adding`` more bytes (after ``pending``
        ones of the same batch) would take ``tenant`` past its limit. The
        details give the tenant's own figures only."""
        limit = self.limit(tenant)
        if limit is None:
            return
        used = self.used(db).get(tenant, 0) + pending
        if used + adding > limit:
            raise QuotaExceeded(
                f"the tenant's events would take {used + adding} bytes in the ledger, more than its "
                f"inline_bytes limit of {limit}: nothing of this append was stored",
                limit="inline_bytes",
                tenant=tenant,
                used_bytes=used,
                request_bytes=adding,
                limit_bytes=limit,
            )

    def add(self, by_tenant: dict[str, int]) -> None:
        """A commit of this writer stored these bytes."""
        if self._used is not None:
            for tenant, n in by_tenant.items():
                self._used[tenant] = self._used.get(tenant, 0) + n

    def add_logged(self, writes: list[tuple[str, list[list[Any]]]]) -> None:
        """A record of the log (``TxRecord.writes``) was applied: its events' bytes."""
        added: dict[str, int] = {}
        for name, rows in writes:
            if name == INSERT_EVENT.name:
                for row in rows:
                    added[row[_TENANT]] = added.get(row[_TENANT], 0) + len(row[-1])
        self.add(added)
