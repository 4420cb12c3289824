"""The transaction log on JetStream: the stream LEDGER_TXLOG (spec/replication.md;
its settings are the sequencer's, services/sequencer/streams.py).

Each writer transaction (``store/txlog.py``) is one record; a record larger
than a message may be (the server's ``max_payload``) is split into parts
published one after another, each with ``Nats-Expected-Last-Sequence`` =
the sequence of the part before it (of the record before it, for the first).
So the stream is one chain: a part lands only right after the one its writer
last saw, and a writer that is behind — another sequencer wrote — is refused
(error 10071) instead of forking the log. A record is complete when all its
parts are there; a record cut short (its writer died or was refused midway)
is followed by a new record's first part, and readers skip it.

A record of several parts goes out as atomic batches (``store/atomicbatch.py``,
ADR-50) when the writer gives its NATS client (``nc``), the server is 2.12+
and the stream allows them: its parts, with the same headers (the expected
sequence on a batch's first part only), stored together with one ack instead
of one round trip each, and never cut short within a batch. A one-part
record, and every record where batches are refused, is published as before.

Given ``chain_key`` (a sequencer's, ``store/chainkey.py``), every part it
appends carries that fingerprint, and every part it reads must carry the
same one or none (``ChainKeyDiffers``); without it (``laneledger restore``,
which hashes nothing) parts are neither stamped nor checked.

The writer is synchronous and runs on the sequencer's writer thread; this
class runs its JetStream calls on the event loop (it is made on the loop's
thread) and waits for them on the writer's. It refuses to wait on the loop's
own thread, where it would deadlock.

Reading is pipelined: the log's messages are fetched ``READ_WINDOW`` at a
time, concurrently on the loop, and the next window is in flight while the
writer applies the one before. Fetched one message per round trip (writer
thread -> loop -> NATS and back), a sequencer back from a network cut on a
loaded machine applied about 33 records/s while the active one kept writing,
and was still not a current standby 30 s later (spec/replication.md,
"Reading"; bench/txlog_catchup.py measures the read rate).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from laneledger.contract.errors import IntegrityError
from laneledger.contract.subjects import Subjects
from laneledger.store.atomicbatch import (
    ATOMIC_DISABLED,
    BatchUnanswered,
    batches,
    publish_batch,
    supports_atomic,
)
from laneledger.store.chainkey import CHAIN_KEY_HEADER, chain_key_stamp, check_chain_key
from laneledger.store.erasedcopies import PART_HEADER, RewrittenRecord, rewritten_record
from laneledger.store.txlog import TxLogMoved, TxLogUnavailable

T = TypeVar("T")
WRONG_LAST_SEQUENCE = 10071
# Room left in a message for its headers (the part and the expected sequence).
_HEADER_ROOM = 512
# Log messages fetched at once when reading; with the next window in flight,
# at most twice this many are held (each at most ``max_payload`` bytes).
READ_WINDOW = 16
Message = tuple[dict[str, str] | None, bytes]  # a stored part: its headers and data
# What a log position holds: a part; a record an erasure rewrote, at its last
# part's position; or None, a part an erasure deleted whose record's rewrite
# is at a later position (store/erasedcopies.py).
Fetched = Message | RewrittenRecord | None


def part_bytes(max_payload: int) -> int:
    """The bytes of a record in one part: a message, less room for its headers."""
    return max(max_payload - _HEADER_ROOM, 1024)


def split_record(record: bytes, part_bytes: int) -> list[bytes]:
    return [record[i : i + part_bytes] for i in range(0, len(record), part_bytes)] or [b""]


def part_of(headers: dict[str, str] | None, seq: int) -> tuple[int, int]:
    """(i, n) of a stored message; IntegrityError if it is not a part."""
    value = (headers or {}).get(PART_HEADER, "")
    i, _, n = value.partition("/")
    if not (i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
        raise IntegrityError(
            "transaction log message is not a record part",
            kind="txlog_record",
            txlog_seq=seq,
            header=value,
        )
    return int(i), int(n)


class JetStreamTxLog:
    def __init__(
        self,
        js: JetStreamContext,
        subjects: Subjects,
        loop: asyncio.AbstractEventLoop,
        *,
        max_payload: int,
        timeout_s: float = 10.0,
        chain_key: str | None = None,
        nc: NATS | None = None,
    ) -> None:
        self._js = js
        self._nc = nc
        # Multi-part records as atomic batches: known at each look at the
        # stream (``last_seq``); off for good once the stream refuses one.
        self.atomic = False
        self._subjects = subjects
        self._stream = subjects.txlog_stream
        self._subject = subjects.txlog
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop's thread
        self._part_bytes = part_bytes(max_payload)
        self._timeout_s = timeout_s
        self._chain_key = chain_key
        self._stamp = chain_key_stamp(chain_key)

    # -- the writer's side (TxLog), on the writer thread

    def append(self, record: bytes, *, after: int) -> int:
        return self._wait(self.append_async(record, after=after))

    def read_after(self, after: int) -> tuple[Iterator[tuple[int, bytes]], int]:
        last = self._wait(self.last_seq())
        if last <= after:
            return iter(()), last
        return self._records(self._messages(after, last)), last

    def _messages(self, after: int, last: int) -> Iterator[tuple[int, Fetched]]:
        """Messages after..last in order, checked, a window at a time: the
        next window is fetched while the caller takes this one's."""

        def fetch(first: int) -> Future[list[Fetched]] | None:
            seqs = range(first, min(first + READ_WINDOW, last + 1))
            return self._submit(self._get_window(seqs)) if seqs else None

        window = None
        ahead = fetch(after + 1)
        try:
            while ahead is not None:
                window, first = ahead, after + 1
                after += READ_WINDOW
                ahead = fetch(after + 1)
                for seq, message in enumerate(window.result(self._timeout_s * 2), start=first):
                    yield seq, self._checked(seq, message)
        finally:
            # A reader that stopped early, or a window that failed or timed
            # out: nothing more is fetched for it (done ones ignore this).
            for pending in (window, ahead):
                if pending is not None:
                    pending.cancel()

    def _submit(self, work: Coroutine[Any, Any, T]) -> Future[T]:
        if threading.get_ident() == self._loop_thread:
            work.close()
            raise RuntimeError("the transaction log is waited on from the writer thread, never the loop")
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    def _wait(self, work: Coroutine[Any, Any, T]) -> T:
        return self._submit(work).result(self._timeout_s * 2)

    # -- on the loop

    async def append_async(self, record: bytes, *, after: int) -> int:
        parts = split_record(record, self._part_bytes)
        headers = [{PART_HEADER: f"{i}/{len(parts)}", **self._stamp} for i in range(1, len(parts) + 1)]
        if self.atomic and len(parts) > 1:
            return await self._append_batches(parts, headers, after)
        seq = after
        for part, part_headers in zip(parts, headers, strict=True):
            try:
                ack = await self._js.publish(
                    self._subject,
                    part,
                    timeout=self._timeout_s,
                    stream=self._stream,
                    headers={**part_headers, "Nats-Expected-Last-Sequence": str(seq)},
                )
            except APIError as exc:
                raise self._refused(exc.err_code, str(exc), seq) from exc
            except (nats.errors.Error, TimeoutError) as exc:
                raise self._unanswered(type(exc).__name__) from exc
            seq = ack.seq
        return seq

    async def _append_batches(self, parts: list[bytes], headers: list[dict[str, str]], after: int) -> int:
        assert self._nc is not None  # ``atomic`` is set only with a client
        seq = after
        for chunk in batches([len(part) for part in parts]):
            try:
                ack = await publish_batch(
                    self._nc,
                    [(self._subject, parts[i]) for i in chunk],
                    expected_last_sequence=seq,
                    per_message_headers=[headers[i] for i in chunk],
                    timeout=self._timeout_s,
                )
            except BatchUnanswered as exc:
                raise self._unanswered(str(exc)) from exc
            except nats.errors.Error as exc:
                raise self._unanswered(type(exc).__name__) from exc
            if ack.error is not None and ack.error.err_code == ATOMIC_DISABLED and chunk.start == 0:
                self.atomic = False  # nothing of the record is stored: all of it one by one
                return await self.append_async(b"".join(parts), after=after)
            if ack.error is not None:
                raise self._refused(ack.error.err_code, ack.error.description, seq)
            assert ack.seq is not None
            seq = ack.seq
        return seq

    def _refused(self, err_code: int | None, error: str, seq: int) -> TxLogMoved | TxLogUnavailable:
        if err_code == WRONG_LAST_SEQUENCE:
            return TxLogMoved(
                "the transaction log moved on: another writer appended, or an earlier "
                "append's outcome was unknown; nothing was committed",
                stream=self._stream,
                expected_last_sequence=seq,
            )
        return TxLogUnavailable("the transaction log refused the record", stream=self._stream, error=error)

    def _unanswered(self, error: str) -> TxLogUnavailable:
        return TxLogUnavailable(
            "the transaction log did not acknowledge the record (it may hold it)",
            stream=self._stream,
            error=error,
        )

    async def last_seq(self) -> int:
        try:
            info = await self._js.stream_info(self._stream)
        except NotFoundError as exc:
            raise TxLogUnavailable(
                f"there is no transaction log stream {self._stream}", stream=self._stream
            ) from exc
        except (nats.errors.Error, TimeoutError) as exc:
            raise TxLogUnavailable(
                "the transaction log cannot be read", stream=self._stream, error=type(exc).__name__
            ) from exc
        self.atomic = self._nc is not None and bool(info.config.allow_atomic) and supports_atomic(self._nc)
        return int(info.state.last_seq)

    async def check_last_writer(self) -> None:
        """Refuse a log whose last message was written with another chain
        key (``ChainKeyDiffers``); an empty log, or no key to check, passes."""
        last = await self.last_seq()
        if self._chain_key is not None and last > 0:
            self._checked(last, await self._get(last))

    def _checked(self, seq: int, fetched: Fetched) -> Fetched:
        if self._chain_key is not None and fetched is not None:
            headers = fetched.headers if isinstance(fetched, RewrittenRecord) else fetched[0]
            check_chain_key(self._chain_key, (headers or {}).get(CHAIN_KEY_HEADER), txlog_seq=seq)
        return fetched

    async def _get_window(self, seqs: range) -> list[Fetched]:
        """The messages at ``seqs``, fetched concurrently; the first failure
        ends the rest."""
        gets = [asyncio.ensure_future(self._get(seq)) for seq in seqs]
        try:
            return await asyncio.gather(*gets)
        finally:
            for get in gets:
                get.cancel()  # done ones ignore it

    async def _get(self, seq: int) -> Fetched:
        try:
            try:
                msg = await self._js.get_msg(self._stream, seq)
            except NotFoundError:  # deleted by an erasure: its record's rewrite, if it ends here
                return await rewritten_record(self._js, self._subjects, seq)
        except (nats.errors.Error, TimeoutError) as exc:
            raise TxLogUnavailable(
                "the transaction log cannot be read", stream=self._stream, error=type(exc).__name__
            ) from exc
        return msg.headers, msg.data or b""

    def _records(self, messages: Iterator[tuple[int, Fetched]]) -> Iterator[tuple[int, bytes]]:
        """The complete records among ``messages`` (in order, by position),
        as (the position of their last part, their bytes). A record an
        erasure rewrote is read from its rewrite, which names where the
        record began: its parts are deleted from the last one back, so
        before the rewrite come deleted parts, or the record's first parts
        still there, or both; deleted parts that no rewrite covers are a
        log someone else deleted from."""
        parts: list[bytes] = []
        start = deleted = 0  # where the record being read began; its first deleted part
        for seq, fetched in messages:
            if isinstance(fetched, RewrittenRecord):
                if fetched.first_seq not in {start or seq, deleted or seq}:
                    raise _uncovered(deleted or seq, seq, fetched.first_seq)
                yield seq, fetched.data
                parts, start, deleted = [], 0, 0
                continue
            if fetched is None:
                deleted = deleted or seq
                continue
            headers, data = fetched
            i, n = part_of(headers, seq)
            if deleted:
                self._raise_deleted(deleted, seq, seq + n - i)
            if i == 1:
                parts, start = [], seq  # a record cut short before this one is skipped
            elif i != len(parts) + 1:
                parts, start = [], 0  # the rest of a record whose start was cut short
                continue
            parts.append(data)
            if i == n:
                yield seq, b"".join(parts)
                parts, start = [], 0

    def _raise_deleted(self, deleted: int, seq: int, record_last: int) -> None:
        """Parts up to ``seq`` deleted, and the part at ``seq`` there: the
        window was read while an erasure replaced that record (reading again
        finds it rewritten: ``TxLogUnavailable``, which the reader retries),
        or someone deleted parts no rewrite covers (``IntegrityError``)."""
        rewrite = self._wait(rewritten_record(self._js, self._subjects, record_last))
        if rewrite is not None and rewrite.first_seq <= deleted:
            raise TxLogUnavailable(
                "the transaction log changed while it was read (an erasure rewrote a record); read it again",
                stream=self._stream,
                txlog_seq=seq,
            )
        raise _uncovered(deleted, seq - 1, None)


def _uncovered(first: int, last: int, rewrite_first: int | None) -> IntegrityError:
    return IntegrityError(
        "transaction log messages are deleted and no erasure's rewrite of their record replaces them",
        kind="txlog_deleted",
        first_deleted=first,
        last_deleted=last,
        rewrite_first=rewrite_first,
    )
