"""The committed stream against the ledger (``laneledger verify --nats``,
``laneledger repair-stream``).

:func:`check_stream` checks that LEDGER_EVENTS is an exact copy of the
ledger: stream sequence == position and message data byte-identical to the
stored body, for every event, and nothing more; on a live ledger it tells
the stream's normal lag (it catches up within a wait) from a fault. A
position an erasure deleted from the stream is read from its erased copy on
LEDGER_ERASED (spec/erasure.md, "The streams"), which must be the stored
event itself.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from laneledger.contract.errors import IntegrityError, LedgerUnavailable
from laneledger.store import open_ledger
from laneledger.store.erasure import same_event

STALL_S = 10.0  # a stream consumer answering but delivering nothing this long: stream_stalled
_T = TypeVar("_T")


@dataclass(frozen=True)
class StreamCheck:
    """What a clean stream comparison saw."""

    messages: int  # positions 1..messages compared, byte for byte
    lag: int = 0  # events the stream was behind the database when first read
    caught_up_s: float = 0.0  # how long the stream took to catch up with them


async def compare_with_stream(
    js: Any, db_path: str | Path, stream: str = "LEDGER_EVENTS", **options: Any
) -> int:
    """:func:`check_stream` of a quiescent ledger (no wait for lag); returns
    the number of events compared."""
    return (await check_stream(js, db_path, stream, **options)).messages


async def _direct_get(js: Any, stream: str, sequence: int, *, or_next: bool = False) -> Any:
    """``stream``'s message ``sequence`` (``or_next``: the first at or after
    it) by JetStream's message get, or None when there is none; NATS's own
    failures leave as ``LedgerUnavailable``."""
    import nats.errors
    from nats.js.errors import NotFoundError

    try:
        if or_next:
            return await js.get_msg(stream, sequence, subject=">", next=True)
        return await js.get_msg(stream, sequence)
    except NotFoundError:
        return None
    except (nats.errors.Error, TimeoutError) as exc:
        raise LedgerUnavailable(
            f"cannot read message {sequence} of {stream} directly: {exc!r}", stream=stream, sequence=sequence
        ) from exc


async def stream_message(js: Any, stream: str, sequence: int) -> bytes | None:
    """The data of ``stream``'s message ``sequence``, read directly (one
    message by its sequence: JetStream's message get, no consumer, nothing
    in flight to lose), or None when the stream holds none there."""
    msg = await _direct_get(js, stream, sequence)
    return None if msg is None else bytes(msg.data or b"")


async def erased_copies(js: Any, stream: str, positions: range) -> dict[int, bytes]:
    """The erased copies of ``positions`` of the committed stream ``stream``
    (those found), on the LEDGER_ERASED beside it."""
    from laneledger.store.erasedcopies import erased_events, ledger_of_stream  # NATS only with --nats

    ledger = await ledger_of_stream(js, stream)
    return {} if ledger is None else await erased_events(js, ledger, positions)


async def stream_difference(js: Any, db_path: str | Path, stream: str, position: int) -> str | None:
    """How ``stream`` differs from the ledger at ``position``, by direct reads
    only (no consumer: nothing in flight that a slow client could lose), or
    None when it does not: message ``position`` equals the stored body (or,
    deleted by an erasure, its erased copy is the stored event) or, past the
    ledger's end, the stream holds nothing from there on. The second
    opinion ``laneledger repair-stream`` asks before it deletes."""
    db = open_ledger(db_path, readonly=True)
    try:
        row = db.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()
    finally:
        db.close()
    if row is None:  # past the ledger's end: anything the stream holds from here is more
        beyond = await _direct_get(js, stream, position, or_next=True)
        return (
            None
            if beyond is None
            else f"the stream holds message {beyond.seq}, past the ledger's last position"
        )
    data = await stream_message(js, stream, position)
    if data is None:
        copy = (await erased_copies(js, stream, range(position, position + 1))).get(position)
        if copy is None:
            return f"message {position} is missing from the stream"
        if copy != bytes(row[0]):
            return (
                f"message {position} was erased from the stream, and its erased copy differs "
                "from the stored body"
            )
        return None
    if not same_event(data, bytes(row[0])):
        return f"message {position} differs from the stored body"
    return None


async def check_stream(
    js: Any,
    db_path: str | Path,
    stream: str = "LEDGER_EVENTS",
    *,
    wait_s: float = 0.0,
    batch: int = 500,
    read_bytes: int | None = None,
    timeout: float = 60.0,
    stall_s: float = STALL_S,
) -> StreamCheck:
    """Check that ``stream`` holds exactly the ledger's events: message ``k``
    has stream sequence ``k`` == position and data byte-identical to the
    stored body, and no message lies beyond the ledger. A message an
    erasure deleted counts as its erased copy on LEDGER_ERASED, which must
    be byte-identical to the stored (erased) event (``erased_copy_differs``).
    Raises ``IntegrityError`` naming the first differing position.

    Works on a live ledger. The stream's last sequence is read *before* the
    database snapshot: the sequencer publishes an event only after SQLite
    committed it, so a stream ending past the snapshot is a fault
    (``stream_ahead``), while one ending short of it may be the normal lag.
    Positions 1..min(both) are compared strictly; then, if the stream is
    behind, its last sequence is re-read until it reaches the snapshot's last
    position — within ``wait_s`` it is lag (``StreamCheck.lag``) and the rest
    is compared too; otherwise ``stream_behind``.

    The stream is read in order by a ``StreamFollower`` on ``js``'s
    connection, in pulls bounded by ``read_bytes`` (default the follower's
    ``READ_BUDGET_BYTES``; the database rows are read one at a time, so
    memory stays bounded), with gaps as findings (``on_gap="fail"``); the
    follower hands out an erased position's copy in its place. A gap (no
    copy either) is then read directly (``stream_message``): a sequence
    missing from the stream is ``sequence_mismatch`` at its position, never
    re-read; one the stream does hold was lost on the way to this reader (a
    slow consumer, a reconnect) and is ``LedgerUnavailable`` (kind
    ``stream_read_lost``): retry, nothing is known to be wrong. Sequences
    deleted from the stream's end (no message after them) are read on
    LEDGER_ERASED directly: one with no copy there is ``count_mismatch``.
    A consumer nobody serves (503: a cluster consumer without a leader) is
    retried until ``timeout`` (``stream_timeout``); one that answers but
    delivers nothing for ``stall_s`` is ``stream_stalled``.
    """
    from nats.js.errors import NotFoundError

    from laneledger.runtime.follow import StreamFollower, StreamGap  # NATS only with --nats

    async def stream_state() -> Any:
        try:
            return (await js.stream_info(stream)).state
        except NotFoundError:
            raise LedgerUnavailable(f"no stream {stream} on this NATS server", stream=stream) from None

    deadline = asyncio.get_running_loop().time() + timeout
    state = await stream_state()
    stream_last, available = state.last_seq, state.messages
    db = open_ledger(db_path, readonly=True)
    # nats-py offers a context's connection only as ``_nc``; the follower
    # pulls over the connection itself. Ephemeral, named so it can be deleted.
    follower = StreamFollower(
        js._nc,
        stream=stream,
        name=f"audit-{secrets.token_hex(8)}",
        batch_size=batch,
        max_bytes=read_bytes,
        on_gap="fail",
    )
    try:
        db.execute("BEGIN")
        (count,) = db.execute("SELECT count(*) FROM events").fetchone()
        (ledger_last,) = db.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()
        if stream_last > ledger_last:
            raise IntegrityError(
                f"position {ledger_last + 1}: stream_ahead: on the stream (up to sequence "
                f"{stream_last}) but not in the ledger, which ends at position {ledger_last}",
                kind="stream_ahead",
                position=ledger_last + 1,
                stream_sequence=stream_last,
                ledger_last_position=ledger_last,
            )

        # One row at a time (a body may be near 1 MiB), in this transaction's snapshot.
        rows: Iterator[tuple[int, bytes]] = iter(
            db.execute("SELECT position, body FROM events ORDER BY position")
        )
        compared = 0  # the last position compared
        copies = 0  # how many of positions 1..compared were erased copies (deleted from the stream)

        async def before_deadline(step: Awaitable[_T]) -> _T:
            try:
                async with asyncio.timeout_at(deadline):
                    return await step
            except TimeoutError:
                raise IntegrityError(
                    f"position {compared + 1}: stream_timeout: the stream did not deliver in {timeout:g}s",
                    kind="stream_timeout",
                    position=compared + 1,
                    stream=stream,
                ) from None

        def row_at(expected: int) -> tuple[int, bytes]:
            """The ledger's next row, which must be at position ``expected``."""
            row = next(rows, None)
            if row is None or row[0] != expected:
                raise IntegrityError(
                    f"position {expected}: ledger_gap: missing from the ledger (next "
                    f"stored is {row[0] if row else 'none'})",
                    kind="ledger_gap",
                    position=expected,
                )
            return row

        def erased_copy_differs(position: int) -> IntegrityError:
            return IntegrityError(
                f"position {position}: erased_copy_differs: deleted from the stream by an erasure, "
                "its erased copy on LEDGER_ERASED differs from the stored event",
                kind="erased_copy_differs",
                position=position,
                stream=stream,
            )

        async def compare_through(last: int, available: int) -> None:
            """Compare the stream's next messages up to position ``last``, while
            the stream has any (``available`` of them, the erased positions
            between them read from their copies)."""
            nonlocal compared, copies
            quiet_since = time.monotonic()
            while compared < min(last, available + copies):
                try:
                    msgs = await before_deadline(follower.read(min(last, available + copies) - compared))
                except StreamGap as gap:
                    row_at(gap.position)  # a gap on both sides is the ledger's
                    if await before_deadline(stream_message(js, stream, gap.position)) is not None:
                        raise LedgerUnavailable(
                            f"position {gap.position}: stream_read_lost: the stream holds the "
                            f"message, but it did not reach this reader (sequence {gap.sequence} "
                            "came instead: dropped on the way, by a slow consumer or a reconnect); "
                            "nothing is known to be wrong with the stream: run the check again",
                            kind="stream_read_lost",
                            position=gap.position,
                            stream_sequence=gap.sequence,
                            stream=stream,
                        ) from None
                    raise IntegrityError(
                        f"position {gap.position}: sequence_mismatch: the stream's message there "
                        f"has sequence {gap.sequence}",
                        kind="sequence_mismatch",
                        position=gap.position,
                        stream_sequence=gap.sequence,
                    ) from None
                now = time.monotonic()
                if msgs or follower.unavailable:
                    # Delivering, or refused with 503 (a cluster electing a
                    # leader after a node restart): transient, retried until
                    # the deadline above.
                    quiet_since = now
                elif now - quiet_since >= stall_s:
                    raise IntegrityError(
                        f"position {compared + 1}: stream_stalled: the stream stopped "
                        f"delivering after {compared} messages",
                        kind="stream_stalled",
                        position=compared + 1,
                        stream=stream,
                    )
                for position, data in msgs:  # the follower hands out position compared + 1 on
                    row = row_at(position)
                    if position in follower.from_erased:
                        copies += 1
                        if bytes(data) != bytes(row[1]):
                            raise erased_copy_differs(position)
                    elif not same_event(bytes(data), bytes(row[1])):
                        raise IntegrityError(
                            f"position {position}: data_mismatch: stream data differs from the stored body",
                            kind="data_mismatch",
                            position=position,
                        )
                    compared = position

        async def compare_deleted_end(stream_last: int, available: int) -> None:
            """Positions after the stream's last message, up to its last
            sequence: deleted from its end, so no message after them shows
            the follower where they were. An erasure's have their copies;
            any other is a message lost (count_mismatch). (A gap in either
            within what was compared is named above.)"""
            nonlocal compared, copies
            end = min(stream_last, ledger_last)
            while compared < end:
                wanted = range(compared + 1, min(end, compared + batch) + 1)
                found = await before_deadline(erased_copies(js, stream, wanted))
                for position in wanted:
                    row = row_at(position)
                    if position not in found:
                        raise IntegrityError(
                            f"position {position}: count_mismatch: the stream has {available} "
                            f"messages and {copies} erased copies up to sequence {stream_last}, "
                            f"the ledger {count} events up to position {ledger_last}",
                            kind="count_mismatch",
                            position=position,
                        )
                    if found[position] != bytes(row[1]):
                        raise erased_copy_differs(position)
                    compared, copies = position, copies + 1

        await before_deadline(follower.open(after=0))
        await compare_through(stream_last, available)
        await compare_deleted_end(stream_last, available)
        lag, caught_up_s = ledger_last - stream_last, 0.0
        if lag:
            started = time.monotonic()
            while stream_last < ledger_last:
                waited = time.monotonic() - started
                if waited >= wait_s:
                    raise IntegrityError(
                        f"position {stream_last + 1}: stream_behind: in the ledger but not on "
                        f"the stream, which ends at sequence {stream_last} "
                        f"({ledger_last - stream_last} behind after waiting {waited:.1f}s)",
                        kind="stream_behind",
                        position=stream_last + 1,
                        stream_last_sequence=stream_last,
                        ledger_last_position=ledger_last,
                        waited_s=round(waited, 3),
                    )
                await asyncio.sleep(min(0.02, wait_s - waited))
                state = await stream_state()
                stream_last, available = state.last_seq, state.messages
            caught_up_s = time.monotonic() - started
            await compare_through(ledger_last, available)
            await compare_deleted_end(stream_last, available)
        return StreamCheck(messages=compared, lag=lag, caught_up_s=caught_up_s)
    finally:
        await follower.close()
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        db.close()
