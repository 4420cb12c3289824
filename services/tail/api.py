"""HTTP conventions every tail route keeps: typed JSON error bodies and strict
query parameters.

Every error is ``{"error": {"code", "message", "retryable", "details"}}`` with
the status ``spec/errors.md`` maps its code to. Query parameters are checked
against the route's list: an unknown, repeated or malformed one is a 400
``invalid_request`` whose ``details.parameter`` names it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import (
    BlobMissing,
    CausationViolation,
    EntityNotFound,
    InternalError,
    InvalidPayload,
    InvalidRequest,
    InvalidSignature,
    LedgerError,
    LedgerTimeout,
    RequestError,
    RequestTooLarge,
    SignatureRequired,
    StoreError,
    SubjectMismatch,
    TenantMismatch,
    TransportError,
    Unauthorized,
    UnknownEventType,
)
from laneledger.runtime.access import ACCESS_TOKEN_PARAMETER

log = logging.getLogger("laneledger.tail")

# spec/errors.md, "HTTP status": most specific class first.
_STATUS: tuple[tuple[tuple[type[LedgerError], ...], int], ...] = (
    ((Unauthorized,), 401),
    ((RequestTooLarge,), 413),
    ((UnknownEventType, InvalidPayload, SubjectMismatch, CausationViolation, BlobMissing), 422),
    ((RequestError,), 400),
    ((TenantMismatch, SignatureRequired, InvalidSignature), 403),
    ((EntityNotFound,), 404),
    ((StoreError,), 409),
    ((LedgerTimeout,), 504),
    ((TransportError,), 503),
)


def status_of(err: LedgerError) -> int:
    for classes, status in _STATUS:
        if isinstance(err, classes):
            return status
    return 500  # internal, integrity_failure, chain_fault, unknown codes


def error_response(err: LedgerError, status: int | None = None) -> web.Response:
    return web.Response(
        body=msgspec.json.encode({"error": err.to_wire()}),
        status=status or status_of(err),
        content_type="application/json",
        # RFC 6750: a 401 names the scheme it wants
        headers={"WWW-Authenticate": 'Bearer realm="laneledger"'} if isinstance(err, Unauthorized) else None,
    )


@web.middleware
async def errors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except LedgerError as err:
        return error_response(err)
    except web.HTTPMethodNotAllowed as exc:
        return error_response(
            InvalidRequest(
                "method not allowed",
                method=request.method,
                path=request.path,
                allowed=sorted(exc.allowed_methods),
            ),
            405,
        )
    except web.HTTPNotFound:
        return error_response(EntityNotFound("no such route", kind="route", path=request.path))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(InvalidRequest(exc.reason, path=request.path), exc.status)
    except ConnectionError:
        raise  # the client went away mid-response: there is no one to answer
    except Exception as exc:
        log.exception("%s %s failed", request.method, request.path)
        return error_response(InternalError(f"{type(exc).__name__}: {exc}"))


def json_response(body: Any, status: int = 200) -> web.Response:
    """``body`` encoded by msgspec (``msgspec.Raw`` values go out verbatim)."""
    return web.Response(body=msgspec.json.encode(body), status=status, content_type="application/json")


class Query:
    """The query parameters of one request, read against the route's allowed
    names: each getter raises ``InvalidRequest`` naming the parameter."""

    def __init__(self, request: web.Request, allowed: tuple[str, ...]) -> None:
        self._values: dict[str, str] = {}
        for name in request.query:
            if name == ACCESS_TOKEN_PARAMETER:
                continue  # the bearer token, read (and checked) by the access middleware
            if name not in allowed:
                raise InvalidRequest(
                    f"unknown query parameter {name!r}", parameter=name, allowed=list(allowed)
                )
            values = request.query.getall(name)
            if len(values) > 1:
                raise InvalidRequest(f"query parameter {name!r} given more than once", parameter=name)
            self._values[name] = values[0]

    def text(self, name: str) -> str | None:
        value = self._values.get(name)
        if value is not None and not 1 <= len(value) <= 256:
            raise InvalidRequest(f"{name} must be 1 to 256 characters", parameter=name)
        return value

    def integer(
        self, name: str, default: int | None = None, *, low: int = 0, high: int | None = None
    ) -> int | None:
        raw = self._values.get(name)
        if raw is None:
            return default
        return parse_int(raw, name, low=low, high=high)

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        raw = self._values.get(name, choices[0])
        if raw not in choices:
            raise InvalidRequest(f"{name} must be one of {', '.join(choices)}", parameter=name, found=raw)
        return raw


def parse_int(raw: str, name: str, *, low: int = 0, high: int | None = None) -> int:
    """A decimal integer in [low, high]; the error names ``name``."""
    if not raw.isascii() or not raw.isdigit() or len(raw) > 16:
        raise InvalidRequest(f"{name} must be a decimal integer", parameter=name, found=raw[:64])
    value = int(raw)
    if value < low or (high is not None and value > high):
        bounds = f"from {low}" + (f" to {high}" if high is not None else "")
        raise InvalidRequest(f"{name} must be {bounds}", parameter=name, found=value)
    return value
