"""Ledger-owned identifiers: UUIDv7 (time-ordered), from ``uuid_utils``.

Session and run ids come from the host and are opaque strings; only ids the
ledger (or its SDK) mints are UUIDv7.
"""

from __future__ import annotations

import hashlib
import re

import uuid_utils

UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def new_id() -> str:
    """A fresh lowercase UUIDv7 string."""
    return str(uuid_utils.uuid7())


def is_uuid(value: str) -> bool:
    return UUID_PATTERN.match(value) is not None


def derived_id(*parts: str, at_ms: int = 0) -> str:
    """A deterministic UUIDv7-shaped id: the 48-bit time field is ``at_ms``,
    the rest comes from SHA-256 of ``parts``. For importers, whose re-run must
    mint the very same ids so the ledger answers with the original receipts
    (spec/claude-code.md)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    value = (at_ms & (2**48 - 1)) << 80 | int.from_bytes(digest[:10], "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # RFC 9562 variant
    hexed = f"{value:032x}"
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"
