"""Removing erased content from the streams (spec/erasure.md, "The streams";
store/erasedcopies.py has the copies' format).

An erasure lists its events in ``stream_copies_to_erase``, committed with it.
For each listed event, after the commit, the active sequencer's background
round (woken by the erasure; JetStream's secure delete costs milliseconds a
message on a large stream, which an erasure's answer, and the commands
queued behind it, should not wait for):

1. rewrites each log record holding one: the record as the file now holds
   its rows, published on LEDGER_ERASED, then the record's parts deleted
   from LEDGER_TXLOG, last part first (a reader always finds the original,
   the rewrite, or both), then any older rewrite deleted;
2. publishes the event's erased form on LEDGER_ERASED, then deletes the
   event's message from LEDGER_EVENTS;
3. takes the events off the list (a transaction on the log, as every write).

Each step may be repeated: a crash between them leaves the list, and the
next round (after the next erasure, at activation, and every
``retry_s``) does them again. Deletes are JetStream's secure deletes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from laneledger.contract.subjects import Subjects
from laneledger.store.erasedcopies import (
    publish_erased_event,
    publish_rewrite,
    record_copies,
    rewritten_record,
    shred,
)
from laneledger.store.txlogstream import part_of, split_record
from laneledger.store.writer import LogRewrite, StreamCopies

log = logging.getLogger("laneledger.sequencer.streamcopies")

ROUND = 500  # events taken off the list per round
_IN_FLIGHT = 64  # publishes or deletes awaited together
DELETE_DENIED = 10057  # a stream made before erasure (deny_delete)

# Runs a call on the writer's thread: ``in_writer(fn, *args)``.
InWriter = Callable[..., Awaitable[Any]]


class DeletesDenied(Exception):
    """A stream refuses deletes: made before erasure, it keeps its copies."""


class StreamCopyEraser:
    def __init__(
        self,
        js: JetStreamContext,
        subjects: Subjects,
        *,
        in_writer: InWriter,
        copies: Callable[[int], StreamCopies],
        rewrite: Callable[[bytes, int], LogRewrite],
        done: Callable[[list[int]], None],
        blob_record_rewritten: Callable[[int], None],
        published_through: Callable[[int], Awaitable[None]],
        stamp: dict[str, str],
        part_bytes: int,
        timeout_s: float = 10.0,
    ) -> None:
        self._js = js
        self._subjects = subjects
        self._in_writer = in_writer
        self._copies = copies  # LedgerWriter.stream_copies_to_erase
        self._rewrite = rewrite  # LedgerWriter.erased_log_record
        self._done = done  # LedgerWriter.stream_copies_erased
        self._blob_record_rewritten = blob_record_rewritten  # LedgerWriter's
        self._published_through = published_through  # the mirror has the events to delete
        self._stamp = stamp  # the chain key header the log's parts carry
        self._part_bytes = part_bytes
        self._timeout_s = timeout_s
        self._lock = asyncio.Lock()  # one round at a time
        self._work = asyncio.Event()  # an erasure listed copies
        self._denied_warned = False

    def wake(self) -> None:
        """An erasure listed copies: the background round should start."""
        self._work.set()

    async def woken(self, timeout_s: float) -> None:
        """Until ``wake`` or ``timeout_s`` (the round's retry)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._work.wait()
        except TimeoutError:
            pass
        self._work.clear()

    async def erase_listed(self) -> int:
        """Remove the listed events' copies, round after round, until the list
        is empty; how many events it took off. A stream that refuses deletes
        (made before erasure) ends it with a warning: the list keeps them."""
        erased = 0
        async with self._lock:
            while True:
                listed: StreamCopies = await self._in_writer(self._copies, ROUND)
                if not listed.bodies and not listed.records:
                    return erased
                try:
                    await self._erase(listed)
                except DeletesDenied as exc:
                    if not self._denied_warned:
                        log.warning(
                            "%s: %d erased events keep their copies there (docs/erasure.md, "
                            '"Streams made before erasure")',
                            exc,
                            len(listed.bodies),
                        )
                        self._denied_warned = True
                    return erased
                if not listed.bodies:
                    return erased  # records naming blobs not deleted yet stay for a later round
                positions = sorted(listed.bodies)
                await self._in_writer(self._done, positions)
                erased += len(positions)

    async def _erase(self, listed: StreamCopies) -> None:
        await self._check_deletes_allowed()
        if listed.unindexed:
            log.warning(
                "%d erased events are held by log records applied before the log was indexed "
                "(a file older than schema 6): their log copies stay",
                len(listed.unindexed),
            )
        for last_seq in listed.records:  # in log order (store/recordrewrite.py)
            await self._rewrite_record(last_seq)
        if not listed.bodies:
            return
        await self._published_through(max(listed.bodies))
        positions = sorted(listed.bodies)
        await _together(
            lambda p: publish_erased_event(
                self._js, self._subjects, p, listed.bodies[p], timeout_s=self._timeout_s
            ),
            positions,
        )
        await _together(lambda p: self._delete(self._subjects.events_stream, p), positions)

    async def _rewrite_record(self, last_seq: int) -> None:
        """Rewrite the log record whose last part is at ``last_seq`` as the
        file now holds it, and delete what it replaces."""
        txlog = self._subjects.txlog_stream
        # What the new rewrite replaces on LEDGER_ERASED: every rewrite there,
        # also one a round cut short published before deleting the original.
        older = await record_copies(self._js, self._subjects, last_seq)
        try:
            msg = await self._js.get_msg(txlog, last_seq)
        except NotFoundError:
            current = await rewritten_record(self._js, self._subjects, last_seq)
            if current is None:
                log.error("log record at %d is deleted and has no rewrite: left as it is", last_seq)
                return
            first_seq, data = current.first_seq, current.data
        else:
            i, n = part_of(msg.headers, last_seq)
            if i != n:
                log.error("log message %d is not a record's last part (%s)", last_seq, msg.headers)
                return
            first_seq = last_seq - n + 1
            parts = [await self._js.get_msg(txlog, seq) for seq in range(first_seq, last_seq)]
            data = b"".join([*(p.data or b"" for p in parts), msg.data or b""])
        rewrite: LogRewrite = await self._in_writer(self._rewrite, data, last_seq)
        if rewrite.data is not None:
            await publish_rewrite(
                self._js,
                self._subjects,
                first_seq=first_seq,
                last_seq=last_seq,
                parts=split_record(rewrite.data, self._part_bytes),
                stamp=self._stamp,
                timeout_s=self._timeout_s,
            )
            for seq in range(last_seq, first_seq - 1, -1):  # last part first
                await self._delete(txlog, seq)
            for seq in older:
                await self._delete(self._subjects.erased_stream, seq)
        if not rewrite.names_blobs:
            await self._in_writer(self._blob_record_rewritten, last_seq)

    async def _check_deletes_allowed(self) -> None:
        """Before anything is published: both streams must allow deletes, or
        a rewrite would be published in vain every round."""
        for stream in (self._subjects.txlog_stream, self._subjects.events_stream):
            try:
                info = await self._js.stream_info(stream)
            except NotFoundError:
                continue  # no log (--txlog off), or no stream yet: nothing of it to delete
            if info.config.deny_delete:
                raise DeletesDenied(f"stream {stream} refuses message deletes")

    async def _delete(self, stream: str, seq: int) -> None:
        try:
            await shred(self._js, stream, seq)
        except APIError as exc:
            if exc.err_code == DELETE_DENIED:
                raise DeletesDenied(f"stream {stream} refuses message deletes") from exc
            raise


async def _together(work: Callable[[int], Coroutine[Any, Any, Any]], items: list[int]) -> None:
    """``work`` for each of ``items``, ``_IN_FLIGHT`` at a time."""
    for i in range(0, len(items), _IN_FLIGHT):
        await asyncio.gather(*(work(item) for item in items[i : i + _IN_FLIGHT]))
