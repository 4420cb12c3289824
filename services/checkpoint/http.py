"""The checkpoint service's HTTP reads (writes go over NATS only).

Each endpoint builds the same ``CheckpointCommand`` a NATS request would
carry, from the path and query string, and runs it through
``CheckpointService.execute``: one code path, one set of answers. Errors are
``{"error": ErrorBody}`` with the status spec/errors.md gives the code
(``laneledger.runtime.httpjson``, as the tail's). The routes are described
by the OpenAPI document of ``openapi.py``, served here.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from laneledger.contract.errors import ArtifactMissing, InvalidRequest, LedgerError, TenantMismatch
from laneledger.contract.model import CheckpointCommand, error_path
from laneledger.runtime.access import AccessPolicy, Scope, bearer_token
from laneledger.runtime.apidoc import OPENAPI_PATH
from laneledger.runtime.httpjson import errors_middleware, json_response
from laneledger.runtime.opsserver import ops_routes

from .openapi import DOCUMENT
from .service import CheckpointService
from .store import TENANT_PATH

_SHA256 = re.compile(r"[0-9a-f]{64}")


def checkpoint_app(service: CheckpointService, access: AccessPolicy | None = None) -> web.Application:
    """The service's HTTP application: its routes, every failure a typed
    error body (aiohttp's own refusals included)."""
    app = web.Application(middlewares=[errors_middleware])
    app.add_routes(_routes(service, access))
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
        command: CheckpointCommand = msgspec.convert({**fields, "op": op}, CheckpointCommand, strict=False)
        return command
    except msgspec.ValidationError as exc:
        raise InvalidRequest(str(exc), path=error_path(exc)) from exc


def _over_http(err: LedgerError) -> LedgerError:
    """A command's ``$.tenant`` is the ``tenant`` query parameter over HTTP,
    and a tenant named there that the token does not grant is the token's
    mismatch (as the tail's ``Scope.narrow`` answers)."""
    if err.details.get("path") != TENANT_PATH:
        return err
    details = {k: v for k, v in err.details.items() if k not in ("path", "subject_tenant")}
    if isinstance(err, TenantMismatch):
        return TenantMismatch(
            "this token does not grant that tenant", **{**details, "what": "token"}, parameter="tenant"
        )
    return type(err)(err.message, **details, parameter="tenant")


def _routes(service: CheckpointService, access: AccessPolicy | None = None) -> list[web.RouteDef]:
    """The HTTP reads; each is scoped by the request's bearer token
    (laneledger.runtime.access; no policy or no token configured: open)."""
    policy = access or AccessPolicy()

    def scope(request: web.Request) -> Scope:
        return policy.scope_of(bearer_token(request, query_allowed=False))

    async def run(request: web.Request, op: str) -> web.Response:
        try:
            access = scope(request)  # first: no token, no word on the request itself
            try:
                result = await service.execute(_command(op, _fields(request)), access)
            except LedgerError as err:
                raise _over_http(err) from None
        except LedgerError as err:
            service.metrics.requests.labels(op, err.code).inc()
            raise  # answered by errors_middleware, like any other failure
        service.metrics.requests.labels(op, "ok").inc()
        return json_response(result)

    def read(op: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            return await run(request, op)

        return handler

    async def get_artifact(request: web.Request) -> web.Response:
        sha = request.match_info["sha256"]
        tenant = scope(request).tenant
        if not _SHA256.fullmatch(sha):
            raise InvalidRequest(
                "an artifact is named by its lowercase hex sha256", parameter="sha256", value=sha[:80]
            )
        if request.query:
            name = next(iter(request.query))
            raise InvalidRequest(f"unknown query parameter {name!r}", parameter=name)
        # The shared bucket is every tenant's: a tenant reads the artifacts
        # its own checkpoints reference, and any other is "missing". Its own
        # bucket (tenant-scoped saves) comes first.
        if tenant is not None and not await service.artifact_of_tenant(sha, tenant):
            raise ArtifactMissing(
                "no such artifact in the bucket", kind="artifact", id=sha, reason=ArtifactMissing.reason
            )
        data = await service.artifacts.read(sha, await service.artifact_buckets(sha, tenant))
        return web.Response(
            body=data,
            content_type="application/octet-stream",
            headers={"ETag": f'"{sha}"', "Cache-Control": "public, max-age=31536000, immutable"},
        )

    async def openapi(_: web.Request) -> web.Response:
        return json_response(DOCUMENT)

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
