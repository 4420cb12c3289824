"""Ledger-owned identifiers: UUIDv7 (time-ordered), from ``uuid_utils``.

Session and run ids come from the host and are opaque strings; only ids the
ledger (or its SDK) mints are UUIDv7.
"""

from __future__ import annotations

import re

import uuid_utils

UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def new_id() -> str:
    """A fresh lowercase UUIDv7 string."""
    return str(uuid_utils.uuid7())


def is_uuid(value: str) -> bool:
    return UUID_PATTERN.match(value) is not None
