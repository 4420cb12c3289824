"""The erased copies on JetStream (spec/erasure.md, "The streams").

An erasure removes the content it erases from the two streams that hold it
as published: LEDGER_EVENTS (one message per event) and LEDGER_TXLOG (the
writer's records, each one or more parts). A message is deleted with
JetStream's secure delete (``$JS.API.STREAM.MSG.DELETE``, its bytes
overwritten in the stream's files), and what readers need in its place is
first published on LEDGER_ERASED:

- an erased event's erased form, on ``<prefix>.erased.event.<position>``:
  the stream keeps its sequence = position, and a reader that meets the
  hole reads the event there (``erased_events``);
- a log record rewritten as the file now holds its rows (erased bodies,
  receipts without digest, no blob refs of erased events), on
  ``<prefix>.erased.txlog.<last part's sequence>.<part>``, its parts tied by
  ``Ledger-Erasure-Version`` and naming the original's first part
  (``Ledger-Txlog-First``): a log reader that meets deleted parts reads the
  record there (``rewritten_record``). A record erased again is rewritten
  again, and every older rewrite of it deleted (``record_copies``).

Only the sequencer publishes on LEDGER_ERASED and deletes from the three
streams (nats-config grants no one else either): the copy always exists
before the original is deleted, so a reader finds one of the two.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable
from typing import NamedTuple

from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from laneledger.contract.errors import IntegrityError
from laneledger.contract.subjects import Subjects

PART_HEADER = "Ledger-Txlog-Part"  # "<i>/<n>", as on the log itself
FIRST_SEQ_HEADER = "Ledger-Txlog-First"
VERSION_HEADER = "Ledger-Erasure-Version"
SEQUENCE_NOT_FOUND = 10043  # a delete of a message that is not there
# A rewrite read while the sequencer replaces it: read again this often.
_READ_TRIES = 3
# Erased events read at once: a session's erasure leaves holes of thousands.
LOOKUPS_AT_ONCE = 64


class RewrittenRecord(NamedTuple):
    first_seq: int  # the original record's first part on the log
    data: bytes
    headers: dict[str, str]  # its first part's
    copies: list[int]  # the LEDGER_ERASED sequences of its parts


async def erased_event(js: JetStreamContext, subjects: Subjects, position: int) -> bytes | None:
    """The erased form of the event at ``position``, if an erasure removed it
    from LEDGER_EVENTS; None if there is none."""
    msg = await _last(js, subjects.erased_stream, subjects.erased_event(position))
    return None if msg is None else msg[1]


async def erased_events(
    js: JetStreamContext, subjects: Subjects, positions: Iterable[int]
) -> dict[int, bytes]:
    """``erased_event`` for several positions, fetched concurrently
    (``LOOKUPS_AT_ONCE`` at a time): those found."""
    wanted = list(positions)
    copies: dict[int, bytes] = {}
    for start in range(0, len(wanted), LOOKUPS_AT_ONCE):
        chunk = wanted[start : start + LOOKUPS_AT_ONCE]
        found = await asyncio.gather(*(erased_event(js, subjects, p) for p in chunk))
        copies.update((p, body) for p, body in zip(chunk, found, strict=True) if body is not None)
    return copies


async def ledger_of_stream(js: JetStreamContext, events_stream: str) -> Subjects | None:
    """The subjects of the ledger whose committed stream is ``events_stream``,
    read from the one subject it is made with (``<prefix>.events.>``): where
    a reader that knows only the stream's name finds its erased copies. None
    if the stream is not made so (no ledger's: nothing erased is there)."""
    info = await js.stream_info(events_stream)
    found = info.config.subjects or []
    if len(found) != 1 or not found[0].endswith(".events.>"):
        return None
    return Subjects(found[0].removesuffix(".events.>"))


async def rewritten_record(js: JetStreamContext, subjects: Subjects, last_seq: int) -> RewrittenRecord | None:
    """The rewrite of the log record whose last part was at ``last_seq``,
    None if it was never rewritten."""
    for _ in range(_READ_TRIES):
        first = await _last(js, subjects.erased_stream, subjects.erased_record(last_seq, 1))
        if first is None:
            return None
        headers, data, copy = first
        n = _parts(headers, last_seq)
        parts, copies = [data], [copy]
        for i in range(2, n + 1):
            part = await _last(js, subjects.erased_stream, subjects.erased_record(last_seq, i))
            if part is None or part[0].get(VERSION_HEADER) != headers.get(VERSION_HEADER):
                break  # replaced while read: read it again
            parts.append(part[1])
            copies.append(part[2])
        else:
            first_seq = headers.get(FIRST_SEQ_HEADER, "")
            if not first_seq.isdigit() or not 1 <= int(first_seq) <= last_seq:
                raise _bad_rewrite(last_seq, f"{FIRST_SEQ_HEADER}: {first_seq!r}")
            return RewrittenRecord(int(first_seq), b"".join(parts), headers, copies)
    raise IntegrityError(
        "a rewritten transaction log record kept changing while it was read",
        kind="txlog_rewrite",
        txlog_seq=last_seq,
    )


async def record_copies(js: JetStreamContext, subjects: Subjects, last_seq: int) -> list[int]:
    """The LEDGER_ERASED sequences of every rewrite of the record at
    ``last_seq`` there, current and older (one left by a round cut short)."""
    found: list[int] = []
    after = 0
    parts = subjects.erased_record(last_seq, "*")
    while True:
        try:
            msg = await js.get_msg(subjects.erased_stream, seq=after + 1, subject=parts, next=True)
        except NotFoundError:
            return found
        after = int(msg.seq or 0)
        found.append(after)


async def publish_rewrite(
    js: JetStreamContext,
    subjects: Subjects,
    *,
    first_seq: int,
    last_seq: int,
    parts: list[bytes],
    stamp: dict[str, str],
    timeout_s: float,
) -> None:
    """Publish the rewrite of the log record at ``first_seq``..``last_seq``
    (its parts; ``stamp``: the chain key header the log's parts carry)."""
    version = secrets.token_hex(8)
    for i, part in enumerate(parts, start=1):
        headers = {
            **stamp,
            PART_HEADER: f"{i}/{len(parts)}",
            FIRST_SEQ_HEADER: str(first_seq),
            VERSION_HEADER: version,
        }
        await js.publish(
            subjects.erased_record(last_seq, i),
            part,
            stream=subjects.erased_stream,
            headers=headers,
            timeout=timeout_s,
        )


async def publish_erased_event(
    js: JetStreamContext, subjects: Subjects, position: int, body: bytes, *, timeout_s: float
) -> None:
    # The same copy twice (an erasure retried) is one message.
    await js.publish(
        subjects.erased_event(position),
        body,
        stream=subjects.erased_stream,
        headers={"Nats-Msg-Id": f"erased-event-{position}"},
        timeout=timeout_s,
    )


async def shred(js: JetStreamContext, stream: str, seq: int) -> bool:
    """Delete message ``seq`` of ``stream``, its bytes overwritten in the
    stream's files (JetStream's default delete, not ``no_erase``). False if
    it was gone already."""
    try:
        return bool(await js.delete_msg(stream, seq))
    except NotFoundError:
        return False
    except APIError as exc:
        if exc.err_code == SEQUENCE_NOT_FOUND:
            return False
        raise


async def _last(js: JetStreamContext, stream: str, subject: str) -> tuple[dict[str, str], bytes, int] | None:
    try:
        msg = await js.get_last_msg(stream, subject)
    except NotFoundError:  # no such message, or no stream yet: nothing was erased
        return None
    return dict(msg.headers or {}), msg.data or b"", int(msg.seq or 0)


def _parts(headers: dict[str, str], last_seq: int) -> int:
    i, _, n = headers.get(PART_HEADER, "").partition("/")
    if i != "1" or not n.isdigit() or int(n) < 1:
        raise _bad_rewrite(last_seq, f"{PART_HEADER}: {headers.get(PART_HEADER)!r}")
    return int(n)


def _bad_rewrite(last_seq: int, found: str) -> IntegrityError:
    return IntegrityError(
        "a rewritten transaction log record on LEDGER_ERASED is malformed",
        kind="txlog_rewrite",
        txlog_seq=last_seq,
        found=found,
    )
