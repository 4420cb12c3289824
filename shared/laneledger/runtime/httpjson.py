"""JSON answers over HTTP, as the tail and the checkpoint service give them.

An error is ``{"error": ErrorBody}`` with the status ``spec/errors.md`` maps
its code to (``LedgerError.http_status``); a 401 also names the scheme it
wants (RFC 6750). ``errors_middleware`` gives every failure of a route that
shape, aiohttp's own refusals (no such route, wrong method) included.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import (
    EntityNotFound,
    InternalError,
    InvalidRequest,
    LedgerError,
    Unauthorized,
)
from laneledger.contract.model import ErrorBody

log = logging.getLogger(__name__)

CHALLENGE = 'Bearer realm="laneledger"'  # the WWW-Authenticate of a 401


# The documents' Error schema is generated from it (apidoc.error_schemas).
class Error(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What every error is over HTTP (spec/errors.md)."""

    error: ErrorBody


def json_response(body: Any, status: int = 200) -> web.Response:
    """``body`` encoded by msgspec (``msgspec.Raw`` values go out verbatim)."""
    return web.Response(body=msgspec.json.encode(body), status=status, content_type="application/json")


def error_response(err: LedgerError, status: int | None = None) -> web.Response:
    """The typed error body, with ``err``'s status unless ``status`` is given."""
    response = json_response(Error(error=ErrorBody(**err.to_wire())), status or err.http_status)
    if isinstance(err, Unauthorized):
        response.headers["WWW-Authenticate"] = CHALLENGE
    retry_after = err.details.get("retry_after_s")
    if response.status == 429 and isinstance(retry_after, int):
        response.headers["Retry-After"] = str(retry_after)  # RFC 9110: seconds
    return response


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
