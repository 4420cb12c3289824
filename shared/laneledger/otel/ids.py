"""Trace and span ids derived from ledger ids (normative text: ``spec/otel.md``).

The same ledger gives the same ids on every export: a re-export, or an
exporter restarted mid-stream, sends spans a receiver can de-duplicate by id.
An id is the leading bytes of the SHA-256 of the RFC 8785 bytes of a JSON
array of strings naming what the span stands for, so no two inputs share
their bytes (ids may hold any characters).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from laneledger.contract.canonical import canonicalize
from laneledger.contract.errors import InvalidRequest

TRACE_DOMAIN = "laneledger.otel.trace"
SPAN_DOMAIN = "laneledger.otel.span"


def _leading(parts: list[str], size: int) -> int:
    value = int.from_bytes(hashlib.sha256(canonicalize(parts)).digest()[:size], "big")
    return value or 1  # all-zero ids are invalid in OpenTelemetry; never hit in practice


def trace_id(tenant: str, session_id: str, run_id: str) -> int:
    """A run's trace: 128 bits."""
    return _leading([TRACE_DOMAIN, tenant, session_id, run_id], 16)


def run_span_id(tenant: str, session_id: str, run_id: str) -> int:
    return _leading([SPAN_DOMAIN, "run", tenant, session_id, run_id], 8)


def lane_span_id(tenant: str, lane_id: str) -> int:
    return _leading([SPAN_DOMAIN, "lane", tenant, lane_id], 8)


def attempt_span_id(tenant: str, attempt_id: str) -> int:
    return _leading([SPAN_DOMAIN, "attempt", tenant, attempt_id], 8)


_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)$")


def timestamp_ns(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 timestamp, every digit of
    its fraction kept (to nanoseconds)."""
    match = _TIMESTAMP.match(text)
    if match is None:
        raise InvalidRequest("not an RFC 3339 timestamp", field="occurred_at", found=text[:40])
    whole, fraction, offset = match.groups()
    seconds = datetime.fromisoformat(whole + ("+00:00" if offset in "Zz" else offset)).timestamp()
    return int(seconds) * 1_000_000_000 + int((fraction or "0")[:9].ljust(9, "0"))
