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
