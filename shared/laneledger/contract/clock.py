"""The ledger's clock. Passed in, so tests can fix time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], str]


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds and a 'Z', the one form the ledger writes."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def system_clock() -> str:
    return format_timestamp(datetime.now(UTC))


def ledger_time(timestamp: str) -> str:
    """A valid RFC 3339 timestamp (``model.timestamp_problem`` is None) in the
    ledger's own form, which compares as text with every ``created_at`` and
    ``committed_at``; a leap second (``:60``) as the second before it."""
    if timestamp[17:19] == "60":
        timestamp = timestamp[:17] + "59" + timestamp[19:]
    return format_timestamp(datetime.fromisoformat(timestamp))
