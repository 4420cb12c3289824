"""What every write route of the ingest service reads of a request: a JSON
body within the append's size limit, and no query parameter."""

from __future__ import annotations

from aiohttp import web

from laneledger.contract.errors import InvalidRequest, RequestTooLarge
from laneledger.contract.model import MAX_REQUEST_BYTES
from laneledger.runtime.access import ACCESS_TOKEN_PARAMETER


def no_query(request: web.Request) -> None:
    """These routes take no query parameter (the access token aside: the access middleware's)."""
    for name in request.query:
        if name != ACCESS_TOKEN_PARAMETER:
            raise InvalidRequest(f"unknown query parameter {name!r}", parameter=name, allowed=[])


async def body_bytes(request: web.Request) -> bytes:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestTooLarge("request body too large", limit_bytes=MAX_REQUEST_BYTES) from None
