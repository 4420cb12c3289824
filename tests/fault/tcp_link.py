"""A process's link to its NATS node, which a test can cut and mend: a small
TCP proxy on 127.0.0.1 (loopback only).

::

    with TcpLink("127.0.0.1", node_port) as link:    # forwarding from link.url
        ...start a process with --nats link.url...
        link.sever()      # every connection through it closed; new ones closed at once
        link.restore()    # new connections are forwarded again

It runs on its own thread and event loop, so a test that blocks its own loop
for a while (reading a ledger file, say) does not stall the link. Given a
node that does not advertise the cluster to clients (``--no_advertise``), a
process whose only server is ``link.url`` has no other way to NATS: severed,
it is cut off while every other process goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

LOOPBACK = "127.0.0.1"
_CHUNK = 64 * 1024


class TcpLink:
    def __init__(self, host: str, port: int) -> None:
        assert host == LOOPBACK, "the fault suite uses loopback addresses only"
        self.target = (host, port)
        self.port = 0
        self.connections = 0  # accepted and forwarded, in all
        self._severed = False
        self._open: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-link", daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"nats://{LOOPBACK}:{self.port}"

    # -- from the test's thread ------------------------------------------------------

    def start(self) -> TcpLink:
        self._thread.start()
        self._call(self._listen())
        return self

    def sever(self) -> None:
        """Close every connection through the link, and each new one at once."""
        self._call(self._sever())

    def restore(self) -> None:
        """Forward new connections again."""
        self._severed = False

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> TcpLink:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=10)

    # -- on the link's loop --------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _sever(self) -> None:
        self._severed = True
        for writer in list(self._open):
            _abort(writer)

    async def _close(self) -> None:
        await self._sever()
        if self._server is not None:
            self._server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._severed:
            _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        self.connections += 1
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._open.discard(w)
                _abort(w)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until either side closes; then close the other, so the peer sees it."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.transport.abort()
