"""Every receipt a producer got names events the ledger file holds, byte for
byte (issue 21, item 5), and is the receipt the ledger stored for its request.

:func:`check_receipts_held` takes the receipts as the producers got them
(``AppendCommitted`` as builtins: ``msgspec.to_builtins(receipt)``) and the
ledger file, read-only, and fails naming the first receipt that differs:

* each (position, event id, entry hash) it reports is an event of the file
  at that position with that id, lane, seq, append id, ``entry_hash`` and
  ``committed_at``, read from ``events.body`` (the committed bytes);
* the ``receipts`` row of its (lane, append id) decodes to the same receipt,
  the ``replayed`` flag aside (a resend is answered with the stored receipt,
  marked replayed).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable


def _read(db: str | os.PathLike[str]) -> tuple[dict[int, dict], dict[tuple[str, str], dict]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        conn.execute("BEGIN")
        events = {p: json.loads(body) for p, body in conn.execute("SELECT position, body FROM events")}
        stored = {
            (lane, append_id): json.loads(body)
            for lane, append_id, body in conn.execute("SELECT lane_id, append_id, body FROM receipts")
        }
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return events, stored


def _without_replayed(receipt: dict) -> dict:
    return {k: v for k, v in receipt.items() if k != "replayed"}


def check_receipt(receipt: dict, events: dict[int, dict], stored: dict[tuple[str, str], dict]) -> None:
    append_id, lane_id = receipt["append_id"], receipt["lane_id"]
    what = f"receipt of append {append_id}"
    reported = list(zip(receipt["positions"], receipt["event_ids"], receipt["entry_hashes"], strict=True))
    assert reported, f"{what} names no event"
    assert len(reported) == receipt["last_seq"] - receipt["first_seq"] + 1, f"{what}: seqs and events differ"
    for k, (position, event_id, entry_hash) in enumerate(reported):
        body = events.get(position)
        assert body is not None, f"{what}: no event at position {position}"
        found = {
            "id": body["id"],
            "lane_id": body["lane_id"],
            "seq": body["seq"],
            "append_id": body["append_id"],
            "entry_hash": body["entry_hash"],
            "committed_at": body["committed_at"],
        }
        want = {
            "id": event_id,
            "lane_id": lane_id,
            "seq": receipt["first_seq"] + k,
            "append_id": append_id,
            "entry_hash": entry_hash,
            "committed_at": receipt["committed_at"],
        }
        differs = {key: (found[key], want[key]) for key in want if found[key] != want[key]}
        assert not differs, f"{what}: the event at position {position} differs (ledger, receipt): {differs}"
    kept = stored.get((lane_id, append_id))
    assert kept is not None, f"{what}: the ledger stored no receipt for it"
    assert _without_replayed(kept) == _without_replayed(receipt), (
        f"{what}: the stored receipt differs from the one the producer got: {kept} != {receipt}"
    )


def check_receipts_held(receipts: Iterable[dict], db: str | os.PathLike[str]) -> int:
    """Everything in the module docstring; returns how many receipts it checked."""
    try:
        events, stored = _read(db)
    except sqlite3.Error as exc:
        raise AssertionError(f"cannot read {db}: {exc}") from exc
    n = 0
    for receipt in receipts:
        check_receipt(receipt, events, stored)
        n += 1
    return n
