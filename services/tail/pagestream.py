"""Large answers streamed a piece at a time (spec/tail.md, "Limits and
memory"): history pages and session proofs.

Each piece (at most ``PIECE_BYTES`` of events, and one event more) is held
against the tail's read memory (``budget.py``) from its read until it is
written, so what such answers hold at once is bounded by the budget, not by
their size. The first piece is read before the headers, so a refusal (404,
429 …) is a typed error. After the headers a failure cuts the connection,
so the client sees a failed transfer, never an answer that merely ends
early; a client that leaves ends the reading at once (``streaming.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import LedgerError
from laneledger.contract.model import MAX_REQUEST_BYTES
from laneledger.runtime.access import scope_of

from .budget import Hold, ReadBudget
from .streaming import client_stream

log = logging.getLogger("laneledger.tail")

PIECE_BYTES = 1 << 20
PIECE_RESERVE = PIECE_BYTES + MAX_REQUEST_BYTES  # a piece overruns by one event at most
BUDGET_WAIT_S = 5.0  # a piece waits this long for read memory, then 429 (or a cut stream)

# The next piece of an answer's bytes; None once it is all sent.
NextBytes = Callable[[], Awaitable[bytes | None]]
# A history page's piece: its events, the key of the last (None: no events), whether more follow.
Piece = tuple[list[msgspec.Raw], int | None, bool]
# The piece after a key, of at most this many events.
NextPiece = Callable[[int | None, int], Awaitable[Piece]]


class PieceStreamer:
    def __init__(self, budget: ReadBudget) -> None:
        self._budget = budget

    def hold(self, request: web.Request) -> AbstractAsyncContextManager[Hold]:
        """Read memory for the first piece, before it is read (``send`` gives it back)."""
        return self._budget.hold(scope_of(request), PIECE_RESERVE, wait_s=BUDGET_WAIT_S)

    async def send(
        self, request: web.Request, held: Hold, content_type: str, first: bytes, rest: NextBytes, what: str
    ) -> web.StreamResponse:
        """``first`` (read under ``held``), then each piece of ``rest``, each
        read under a hold of its own and given back once written."""
        response = web.StreamResponse(headers={"Content-Type": content_type})
        piece: bytes | None = first
        try:
            async with client_stream(request, response, what) as out:
                while piece is not None:
                    held.keep(len(piece))
                    await out.write(piece)  # waits while the client is slow
                    held.release()
                    held = await self._budget.take(scope_of(request), PIECE_RESERVE, wait_s=BUDGET_WAIT_S)
                    piece = await rest()
                await response.write_eof()
        except LedgerError as err:
            log.warning("%s %s ended mid-stream: %s", what, request.path, err)
            if request.transport is not None:
                request.transport.abort()
        finally:
            held.release()  # whichever piece was held when the stream ended
        return response

    async def send_page(
        self,
        request: web.Request,
        held: Hold,
        head: dict[str, Any],
        first: Piece,
        limit: int,
        page_bytes: int,
        next_piece: NextPiece,
        applied: int,
    ) -> web.StreamResponse:
        """A history page, ``{**head, "events": [...], "next_cursor",
        "has_more", "applied_position"}``: ``first``, then pieces from
        ``next_piece`` until ``limit`` events, ``page_bytes``, or the end."""
        events, last, more = first
        count, size = len(events), 0
        body = msgspec.json.encode(events)[1:-1]
        size += len(body)
        opening = msgspec.json.encode(head)[:-1] + b',"events":['
        closed = False

        async def rest() -> bytes | None:
            nonlocal last, more, count, size, closed
            if closed:
                return None
            if more and count < limit and size < page_bytes:
                events, piece_last, more = await next_piece(last, limit - count)
                if events:  # none: what is more is past this page (a fork's next segment)
                    body = msgspec.json.encode(events)[1:-1]
                    count, size, last = count + len(events), size + len(body), piece_last
                    return b"," + body
            closed = True
            ending = {"next_cursor": last, "has_more": more, "applied_position": applied}
            return b"]," + msgspec.json.encode(ending)[1:]

        return await self.send(request, held, "application/json", opening + body, rest, "history page")
