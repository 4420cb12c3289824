"""The checkpoint service's HTTP reads (writes go over NATS only).

Each endpoint builds the same ``CheckpointCommand`` a NATS request would
carry, from the path and query string, and runs it through
``CheckpointService.execute``: one code path, one set of answers. Errors are
``{"error": ErrorBody}`` with the status spec/errors.md gives the code. The
routes are described by the OpenAPI document of ``openapi.py``, served here.
"""

from __future__ import annotations

import logging
import re
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
from laneledger.contract.model import CheckpointCommand, encode
from laneledger.runtime.access import AccessPolicy, Scope, bearer_token
from laneledger.runtime.opsserver import ops_routes
from laneledger.sdk.checkpoints import ArtifactMissing

from .openapi import DOCUMENT, OPENAPI_PATH
from .service import CheckpointService

log = logging.getLogger("laneledger.checkpoint.http")
_SHA256 = re.compile(r"[0-9a-f]{64}")

_STATUS = {
    "unauthorized": 401,
    "malformed_message": 400,
    "invalid_request": 400,
    "not_canonicalizable": 400,
    "request_error": 400,
    "tenant_mismatch": 403,
    "signature_required": 403,
    "invalid_signature": 403,
    "entity_not_found": 404,
    "lane_conflict": 409,
    "idempotency_violation": 409,
    "entity_conflict": 409,
    "duplicate_event": 409,
    "store_error": 409,
    "request_too_large": 413,
    "unknown_event_type": 422,
    "invalid_payload": 422,
    "subject_mismatch": 422,
    "causation_violation": 422,
    "blob_missing": 422,
    "unavailable": 503,
    "transport_error": 503,
    "timeout": 504,
}


def http_status(err: LedgerError) -> int:
    """spec/errors.md "HTTP status"; internal, integrity and unknown codes are 500."""
    return _STATUS.get(err.code, 500)


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=encode(value), status=status, content_type="application/json")


def _error(err: LedgerError) -> web.Response:
    response = _json({"error": err.to_wire()}, http_status(err))
    if isinstance(err, Unauthorized):
        response.headers["WWW-Authenticate"] = 'Bearer realm="laneledger"'
    return response


@web.middleware
async def _route_errors(request: web.Request, handler) -> web.StreamResponse:
    """aiohttp's own refusals (no such route, wrong method) as typed bodies,
    like every other answer (the handlers answer their errors themselves)."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        return _json(
            {
                "error": InvalidRequest(
                    "method not allowed",
                    method=request.method,
                    path=request.path,
                    allowed=sorted(exc.allowed_methods),
                ).to_wire()
            },
            405,
        )
    except web.HTTPNotFound:
        return _error(EntityNotFound("no such route", kind="route", path=request.path))


def checkpoint_app(service: CheckpointService, access: AccessPolicy | None = None) -> web.Application:
    """The service's HTTP application: its routes behind typed route errors."""
    app = web.Application(middlewares=[_route_errors])
    app.add_routes(checkpoint_routes(service, access))
    return app


def _fields(request: web.Request) -> dict[str, str]:
    """The command's fields: the query string's, then the path's. A repeated
    query name is refused rather than read as one of its values, and so is
    one that would override the operation or a path value."""
    for name in request.query:
        if name == "op" or name in request.match_info:
            raise InvalidRequest(f"unknown query parameter {name!r}", parameter=name)
        if len(request.query.getall(name)) > 1:
            raise InvalidRequest(f"query parameter {name!r} given more than once", parameter=name)
    return {**request.query, **request.match_info}


def _command(op: str, fields: dict[str, Any]) -> CheckpointCommand:
    """A command from path and query values (strings, converted as the
    command's field types say)."""
    try:
        return msgspec.convert({**fields, "op": op}, CheckpointCommand, strict=False)
    except msgspec.ValidationError as exc:
        text = str(exc)
        at = text.rfind(" - at `")
        raise InvalidRequest(text, path=text[at + 7 : -1] if at >= 0 else "$") from exc


def checkpoint_routes(service: CheckpointService, access: AccessPolicy | None = None) -> list[web.RouteDef]:
    """The HTTP reads; each is scoped by the request's bearer token
    (laneledger.runtime.access; no policy or no token configured: open)."""
    policy = access or AccessPolicy()

    def scope(request: web.Request) -> Scope:
        return policy.scope_of(bearer_token(request, query_allowed=False))

    async def run(request: web.Request, op: str) -> web.Response:
        try:
            access = scope(request)  # first: no token, no word on the request itself
            result = await service.execute(_command(op, _fields(request)), access)
            service.metrics.requests.labels(op, "ok").inc()
            return _json(result)
        except LedgerError as err:
            service.metrics.requests.labels(op, err.code).inc()
            return _error(err)
        except Exception as exc:
            log.exception("HTTP %s failed", request.path)
            err = InternalError(f"{type(exc).__name__}: {exc}")
            return _json({"error": err.to_wire()}, 500)

    def read(op: str):
        async def handler(request: web.Request) -> web.Response:
            return await run(request, op)

        return handler

    async def get_artifact(request: web.Request) -> web.Response:
        sha = request.match_info["sha256"]
        try:
            tenant = scope(request).tenant
            if not _SHA256.fullmatch(sha):
                raise InvalidRequest(
                    "an artifact is named by its lowercase hex sha256", parameter="sha256", value=sha[:80]
                )
            if request.query:
                name = next(iter(request.query))
                raise InvalidRequest(f"unknown query parameter {name!r}", parameter=name)
            # The shared bucket is every tenant's: a tenant reads the
            # artifacts its own checkpoints reference, and any other is
            # "missing". Its own bucket (tenant-scoped saves) comes first.
            if tenant is not None and not await service.artifact_of_tenant(sha, tenant):
                raise ArtifactMissing(
                    "no such artifact in the bucket", kind="artifact", id=sha, reason=ArtifactMissing.reason
                )
            data = await service.artifacts.read(sha, await service.artifact_buckets(sha, tenant))
        except LedgerError as err:
            return _error(err)
        return web.Response(
            body=data,
            content_type="application/octet-stream",
            headers={"ETag": f'"{sha}"', "Cache-Control": "public, max-age=31536000, immutable"},
        )

    async def openapi(_: web.Request) -> web.Response:
        return _json(DOCUMENT)

    return [
        *ops_routes(service.metrics.registry, lambda: service.ready),
        web.get("/api/v1/checkpoints/{checkpoint_id}", read("get")),
        web.get("/api/v1/latest", read("latest")),
        web.get("/api/v1/revisions", read("revisions")),
        web.get("/api/v1/recovery-plan", read("recovery_plan")),
        web.get("/api/v1/inspect-run", read("inspect_run")),
        web.get("/api/v1/reconcile", read("reconcile")),
        web.get("/api/v1/info", read("info")),
        web.get("/api/v1/artifacts/{sha256}", get_artifact),
        web.get(OPENAPI_PATH, openapi),
    ]
