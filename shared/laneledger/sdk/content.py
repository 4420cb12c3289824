"""What a producer does to an event's free-form content before it is signed
or sent: redact secrets, then move oversized payload values to blobs.

In that order, so a blob never holds a secret (normative text:
``spec/content.md``). ``make_event`` does it when it builds an event, before
an optional signature; the SDK's ``submit`` does it again for events built
some other way (a no-op on an event already done: both steps are
idempotent), then stores the blobs before it publishes.

Between the two, the bytes of the blobs ``make_event`` externalized travel
with the event itself: it is a ``PreparedEvent``, a dict carrying them as an
attribute. Nothing is held by the module or shared between clients or
threads; the bytes live exactly as long as the event does.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from laneledger.contract.contentref import externalize
from laneledger.contract.errors import NotCanonicalizable
from laneledger.contract.redaction import Redactor, redact_event


class PreparedEvent(dict[str, Any]):
    """A proposed event whose content was redacted and externalized, carrying
    ``blobs`` (``"sha256:<hex>"`` -> bytes) for the references its payload
    now holds, until ``LedgerClient.submit`` stores them.

    It *is* the plain JSON object it holds: the bytes are an attribute, never
    an item, so they change neither its canonical bytes (what a signature
    covers) nor what is sent. ``sign_event`` returns a ``PreparedEvent``
    carrying the same blobs. A plain-dict copy (``dict(event)``,
    ``{**event, ...}``, a JSON round trip) is the same event without them:
    ``submit`` then accepts it only if its blobs are already stored, and
    refuses it locally with ``blob_missing`` otherwise."""

    __slots__ = ("blobs",)

    def __init__(self, event: Mapping[str, Any], blobs: Mapping[str, bytes] | None = None) -> None:
        super().__init__(event)
        self.blobs: dict[str, bytes] = dict(blobs or {})


def blobs_of(event: Mapping[str, Any]) -> Mapping[str, bytes]:
    """The blob bytes ``event`` carries: a ``PreparedEvent``'s, else none."""
    return event.blobs if isinstance(event, PreparedEvent) else {}


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


def prepared(event: Mapping[str, Any], redactor: Redactor | None = None) -> PreparedEvent:
    """``event`` redacted and externalized, as a ``PreparedEvent`` carrying
    the bytes of its blobs (those ``event`` carried already, too): what to sign."""
    done, blobs, _ = prepare_content(dict(event), redactor)
    return PreparedEvent(done, {**blobs_of(event), **blobs})
