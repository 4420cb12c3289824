"""Receipts on the wire, always within the server's max_payload (spec/wire.md,
"Receipts"): a request whose receipt could not fit one message is refused
before it commits (``check_receipt_fits``), and the receipts of one batch
for one reply subject go in as many messages as it takes
(``receipt_messages``), each a JSON array of whole receipts. Nothing is
dropped for its size: nats-py refuses to publish a message over max_payload.
"""

from __future__ import annotations

from collections.abc import Sequence

from laneledger.contract.errors import RequestTooLarge
from laneledger.contract.model import MAX_WIRE_INT, AppendCommitted, Receipt, encode
from laneledger.store.append import PreparedAppend

# The longest a committed_at may be (nanoseconds and an offset).
_LONGEST_TIME = "2026-01-01T00:00:00.000000000+00:00"
_HASH = "0" * 64


def receipt_bound(append: PreparedAppend) -> int:
    """Bytes the largest receipt of this request can take in a message: its
    committed receipt with every number and time at its longest (a
    rejection names far less of it)."""
    n = len(append.request.events)
    worst = AppendCommitted(
        append_id=append.request.append_id,
        lane_id=append.request.lane_id,
        digest=_HASH,
        first_seq=MAX_WIRE_INT,
        last_seq=MAX_WIRE_INT,
        event_ids=[event.id for event in append.request.events],
        positions=[MAX_WIRE_INT] * n,
        entry_hashes=[_HASH] * n,
        committed_at=_LONGEST_TIME,
        replayed=True,
    )
    return len(encode([worst]))


def check_receipt_fits(append: PreparedAppend, request_bytes: int, max_payload: int) -> None:
    """Refuse a request whose receipt might not fit one message. A receipt
    names of each event its id, as the request does, and under 100 bytes
    more, which the event's other fields outweigh: it is under twice the
    request, so only a request near half of max_payload is measured."""
    if 2 * request_bytes + 4096 < max_payload:
        return
    size = receipt_bound(append)
    if size > max_payload:
        raise RequestTooLarge(
            f"the append's receipt could take {size} bytes, more than the server's max_payload "
            f"({max_payload}): send fewer events, or shorter ids, in one append",
            limit="receipt_bytes",
            size_bytes=size,
            limit_bytes=max_payload,
        )


def receipt_messages(receipts: Sequence[Receipt], max_payload: int) -> list[bytes]:
    """``receipts`` as JSON arrays of whole receipts, in order, each message
    at most ``max_payload`` bytes (one receipt fits: ``check_receipt_fits``)."""
    whole = encode(list(receipts))
    if len(whole) <= max_payload:
        return [whole]
    messages: list[bytes] = []
    parts: list[bytes] = []
    size = 2  # the brackets
    for receipt in receipts:
        part = encode(receipt)
        if parts and size + len(part) + 1 > max_payload:
            messages.append(b"[" + b",".join(parts) + b"]")
            parts, size = [], 2
        parts.append(part)
        size += len(part) + (1 if len(parts) > 1 else 0)
    messages.append(b"[" + b",".join(parts) + b"]")
    return messages
