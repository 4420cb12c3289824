"""The tail service, as the MCP server reads it: JSON reads, raw blob reads,
the Korg append, and the live SSE of committed events — each with the
caller's bearer token. The tail's typed error bodies become ``TailError``
(its code and details), an unreachable tail ``TailError("unavailable")``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from laneledger.runtime.sseframes import frames

READ_TIMEOUT_S = 10.0
MAX_READ_BYTES = 16 * 1024 * 1024  # above the 10 MB blob cap, so that error is ours to give


class TailError(Exception):
    def __init__(
        self, code: str, message: str, status: int = 0, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.details = dict(details or {})


class TailClient:
    """A laneledger service over HTTP: the tail, or the ingest service
    (``what``: which, for the errors)."""

    def __init__(self, url: str, http: aiohttp.ClientSession, what: str = "the tail") -> None:
        self.url = url.rstrip("/")
        self._http = http
        self._what = what

    @staticmethod
    def headers(token: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def get_json(self, path: str, token: str | None, params: Mapping[str, str] | None = None) -> Any:
        data, _ = await self.get_bytes(path, token, params)
        return json.loads(data)

    async def get_bytes(
        self,
        path: str,
        token: str | None,
        params: Mapping[str, str] | None = None,
        *,
        max_bytes: int = MAX_READ_BYTES,
    ) -> tuple[bytes, str]:
        """The body and its content type; a body above ``max_bytes`` is
        ``TailError("too_large")`` (``size_bytes`` when the tail said it),
        never read further."""
        try:
            async with self._http.get(
                self.url + path, params=params, headers=self.headers(token), timeout=_TIMEOUT
            ) as response:
                if response.status == 200 and (response.content_length or 0) > max_bytes:
                    raise TailError("too_large", "too large", 200, {"size_bytes": response.content_length})
                data = await _read_capped(response, max_bytes if response.status == 200 else ERROR_BYTES)
                if response.status != 200:
                    raise _error(response.status, data)
                return data, response.headers.get("Content-Type", "application/octet-stream")
        except aiohttp.ClientError as exc:
            raise TailError("unavailable", f"cannot reach {self._what} at {self.url}: {exc}") from exc

    async def post_json(self, path: str, token: str | None, body: Any) -> Any:
        try:
            async with self._http.post(
                self.url + path, json=body, headers=self.headers(token), timeout=_TIMEOUT
            ) as response:
                data = await _read_capped(response, MAX_READ_BYTES)
                if response.status != 200:
                    raise _error(response.status, data)
                return json.loads(data)
        except aiohttp.ClientError as exc:
            raise TailError("unavailable", f"cannot reach {self._what} at {self.url}: {exc}") from exc

    async def committed(
        self, token: str | None, tenant: str | None, after: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Committed events after position ``after``, live (the tail's SSE;
        ``tenant``: the tenant to follow, for an operator token)."""
        params = {"from_position": str(after)}
        if tenant is not None:
            params["tenant"] = tenant
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        try:
            async with self._http.get(
                self.url + "/api/v1/events", params=params, headers=self.headers(token), timeout=timeout
            ) as response:
                if response.status != 200:
                    raise _error(response.status, await _read_capped(response, ERROR_BYTES))
                async for kind, data in frames(response.content):
                    if kind == "ledger-event":
                        yield json.loads(data)
        except aiohttp.ClientError as exc:
            raise TailError("unavailable", f"the tail's live feed failed: {exc}") from exc


_TIMEOUT = aiohttp.ClientTimeout(total=READ_TIMEOUT_S)
ERROR_BYTES = 64 * 1024


async def _read_capped(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    data = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        data += chunk
        if len(data) > max_bytes:
            raise TailError("too_large", "the tail's answer is too large", response.status)
    return bytes(data)


def _error(status: int, data: bytes) -> TailError:
    try:
        error = json.loads(data)["error"]
        return TailError(str(error["code"]), str(error["message"]), status, error.get("details") or {})
    except (ValueError, KeyError, TypeError):
        return TailError("internal", f"the tail answered HTTP {status}", status)
