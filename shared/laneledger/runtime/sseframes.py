"""Reading a server-sent events stream (the tail's live routes) frame by frame:
shared by ``laneledger tail`` and the MCP server's subscriptions."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp


async def frames(stream: aiohttp.StreamReader) -> AsyncIterator[tuple[str, str]]:
    """(event kind, data) of each SSE frame; comments (heartbeats) skipped."""
    kind = "message"
    data: list[str] = []
    async for raw in stream:
        text = raw.decode().rstrip("\r\n")
        if not text:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
        elif text.startswith("event:"):
            kind = text[6:].strip()
        elif text.startswith("data:"):
            data.append(text[5:].lstrip())
