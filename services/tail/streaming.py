"""Streamed responses whose client may leave at any time (spec/tail.md,
"Limits and memory").

A client that closes its connection mid-stream is not an error: the one
place that writes a streamed response (``ClientStream.write``) turns the
transport's refusal into ``ClientLeft``, which ``client_stream`` ends
quietly (a DEBUG record), so the handler stops its work at once and
returns. aiohttp then finishes the response without logging anything; a
handler that raised instead would be logged as an ERROR with a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

log = logging.getLogger("laneledger.tail")


class ClientLeft(Exception):
    """The client closed its connection before the response ended."""


class ClientStream:
    """Writes of one prepared streamed response."""

    def __init__(self, request: web.Request, response: web.StreamResponse) -> None:
        self._request = request
        self._response = response

    def gone(self) -> bool:
        transport = self._request.transport
        return transport is None or transport.is_closing()

    async def write(self, data: bytes) -> None:
        """Sends ``data``, waiting while the client is slow; ``ClientLeft``
        once it has gone."""
        if self.gone():
            raise ClientLeft
        try:
            await self._response.write(data)
        except ConnectionError as exc:  # aiohttp's ClientConnectionResetError among them
            raise ClientLeft from exc


@asynccontextmanager
async def client_stream(
    request: web.Request, response: web.StreamResponse, what: str
) -> AsyncIterator[ClientStream]:
    """Sends ``response``'s headers and yields its writer; a client that
    leaves ends the block quietly (``what`` names the stream in the record)."""
    try:
        await response.prepare(request)
        yield ClientStream(request, response)
    except ClientLeft:
        log.debug("%s: the client left mid-stream", what)
    except ConnectionError:  # leaving while the headers were sent
        log.debug("%s: the client left before the headers were sent", what)
