"""What a producer does to an event's free-form content before it is signed
or sent: redact secrets, then move oversized payload values to blobs.

In that order, so a blob never holds a secret (normative text:
``spec/content.md``). ``make_event`` does it when it builds an event, before
an optional signature; the SDK's ``submit`` does it again for events built
some other way (a no-op on an event already done: both steps are
idempotent), then stores the blobs before it publishes.

Between the two, the bytes of the blobs ``make_event`` externalized wait in
``PENDING`` (bounded; an event submitted after its blob was evicted is
refused locally with ``blob_missing`` rather than sent).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache
from typing import Any

from laneledger.contract.contentref import externalize
from laneledger.contract.errors import NotCanonicalizable
from laneledger.contract.redaction import Redactor, redact_event

PENDING_MAX_BYTES = 256 << 20


class PendingBlobs:
    """Blob bytes waiting for their event's submit, oldest evicted first."""

    def __init__(self, max_bytes: int = PENDING_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # make_event may run in any thread

    def add(self, blobs: dict[str, bytes]) -> None:
        with self._lock:
            for ref, data in blobs.items():
                if ref in self._blobs:
                    self._blobs.move_to_end(ref)
                    continue
                self._blobs[ref] = data
                self._bytes += len(data)
            while self._bytes > self.max_bytes and self._blobs:
                _, dropped = self._blobs.popitem(last=False)
                self._bytes -= len(dropped)

    def get(self, ref: str) -> bytes | None:
        with self._lock:
            return self._blobs.get(ref)

    def discard(self, ref: str) -> None:
        with self._lock:
            data = self._blobs.pop(ref, None)
            if data is not None:
                self._bytes -= len(data)


PENDING = PendingBlobs()


@lru_cache(maxsize=1)
def default_redactor() -> Redactor:
    """The SDK's redactor: the defaults plus ``LANELEDGER_REDACT_*`` from the
    environment, read once."""
    return Redactor.from_env()


def prepare_content(
    event: dict[str, Any], redactor: Redactor | None = None
) -> tuple[dict[str, Any], dict[str, bytes], dict[str, int]]:
    """``(event, blobs, redactions per rule)``: ``event`` redacted and its
    payload externalized; ``event`` itself when nothing changed."""
    event, rules = redact_event(event, redactor or default_redactor())
    payload = event.get("payload")
    blobs: dict[str, bytes] = {}
    if isinstance(payload, dict):
        try:
            done = externalize(payload)
        except NotCanonicalizable:
            # Not hashable as it stands: the sequencer refuses it with the path.
            return event, blobs, rules
        if done.blobs:
            event, blobs = {**event, "payload": done.payload}, done.blobs
    return event, blobs, rules


def prepared(event: dict[str, Any], redactor: Redactor | None = None) -> dict[str, Any]:
    """``event`` redacted and externalized, its blobs held in ``PENDING``
    for the submit that stores them: what to sign."""
    event, blobs, _ = prepare_content(event, redactor)
    PENDING.add(blobs)
    return event
