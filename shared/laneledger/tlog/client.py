"""The transparency log as a tail service serves it (spec/tlog.md, "Served
by the tail"), over HTTP: checkpoints, consistency and inclusion proofs, and
witnesses' cosignatures.

``LogClient`` fetches; it trusts nothing it is given. What it returns is
checked against the log's public note key, which the caller holds apart from
the tail: ``bundle.verify_bundle``, ``sessionbundle.verify_session_bundle``,
``checkpoint.verify_extension``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import quote

import aiohttp

from laneledger.contract.errors import LedgerError, LedgerUnavailable, MalformedMessage, error_from_wire
from laneledger.tlog import merkle

DEFAULT_TIMEOUT_S = 10.0


class LogClient:
    """One tail service's transparency-log routes. ``headers``: its bearer
    token (``cli.clienttoken.client_headers``) for the proof routes, which
    answer a tenant's token only for its own events; the log-wide routes
    (checkpoints, consistency, cosignatures) need none."""

    def __init__(
        self, url: str, *, headers: dict[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.url = url.rstrip("/")
        self._headers = dict(headers or {})
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        # A session bundle is streamed and may take long in all: only a
        # stall (no byte for timeout_s) is a failure.
        self._stream_timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> LogClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def checkpoint(self, size: int | None = None) -> str:
        """The latest signed checkpoint (or the one of ``size``), with the
        cosignatures the tail holds for it."""
        path = "/api/v1/tlog/checkpoint" if size is None else f"/api/v1/tlog/checkpoints/{size}"
        return (await self._request("GET", path)).decode("utf-8")

    async def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """The proof that the tree of ``old_size`` is a prefix of the tree of ``new_size``."""
        body = await self._request(
            "GET", "/api/v1/tlog/consistency", params={"old": str(old_size), "new": str(new_size)}
        )
        return _hashes(body)

    async def inclusion_bundle(self, position: int, size: int | None = None) -> str:
        """A C2SP tlog-proof of the event at ``position`` (its bytes included)
        under the latest checkpoint, or the one of ``size``."""
        params = {} if size is None else {"size": str(size)}
        return (await self._request("GET", f"/api/v1/proofs/{position}", params=params)).decode("utf-8")

    async def session_bundle(
        self, session_id: str, *, tenant: str | None = None, size: int | None = None
    ) -> bytes:
        """Every event of a session, each with its inclusion proof, under one checkpoint."""
        params = {k: str(v) for k, v in (("tenant", tenant), ("size", size)) if v is not None}
        path = f"/api/v1/sessions/{quote(session_id, safe='')}/proof"  # an id may hold '/', '?', …
        return await self._request("GET", path, params=params, timeout=self._stream_timeout)

    async def add_cosignature(self, cosigned: str) -> dict[str, Any]:
        """Hand the tail a checkpoint carrying a witness's cosignature."""
        body = await self._request(
            "POST",
            "/api/v1/tlog/cosignatures",
            data=cosigned.encode("utf-8"),
            headers={"Content-Type": "text/plain; charset=utf-8"},
        )
        answer = _json(body)
        if not isinstance(answer, dict):
            raise MalformedMessage("the tail's answer is not a JSON object", url=self.url)
        return answer

    async def _request(self, method: str, path: str, **kwargs: Any) -> bytes:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        try:
            async with self._http.request(method, self.url + path, **kwargs) as response:
                body = await response.read()
                if response.status >= 400:
                    raise _error_of(response.status, body, self.url + path)
                return body
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise LedgerUnavailable(
                f"cannot reach the tail: {exc or type(exc).__name__}", url=self.url
            ) from exc


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise MalformedMessage("the tail's answer is not JSON") from None


def _error_of(status: int, body: bytes, url: str) -> LedgerError:
    """The typed error of an HTTP error body (``{"error": {code, message, details}}``)."""
    try:
        error = _json(body).get("error")
        return error_from_wire(error["code"], error["message"], error.get("details") or {})
    except (MalformedMessage, AttributeError, KeyError, TypeError):
        return LedgerUnavailable(f"the tail answered HTTP {status} without an error body", url=url)


def _hashes(body: bytes) -> list[bytes]:
    """The ``proof`` of a consistency answer, as 32-byte hashes."""
    answer = _json(body)
    proof = answer.get("proof") if isinstance(answer, dict) else None
    if not isinstance(proof, list):
        raise MalformedMessage("the tail's consistency answer has no proof list")
    hashes = []
    for i, text in enumerate(proof):
        try:
            value = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
        except (binascii.Error, ValueError):
            value = b""
        if len(value) != merkle.HASH_SIZE:
            raise MalformedMessage("a proof hash is not base64 of 32 bytes", path=f"proof[{i}]")
        hashes.append(value)
    return hashes


__all__ = ["LogClient"]
