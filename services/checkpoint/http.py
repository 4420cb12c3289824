"""The checkpoint service's HTTP reads (writes go over NATS only).

Each endpoint builds the same ``CheckpointCommand`` a NATS request would
carry, from the path and query string, and runs it through
``CheckpointService.execute``: one code path, one set of answers. Errors are
``{"error": ErrorBody}`` with the status spec/errors.md gives the code.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from aiohttp import web

from laneledger.access import AccessPolicy, Scope, bearer_token
from laneledger.checkpoints import ArtifactMissing
from laneledger.errors import InternalError, InvalidRequest, LedgerError, Unauthorized
from laneledger.model import CheckpointCommand, encode
from laneledger.opsserver import ops_routes

from .service import CheckpointService

log = logging.getLogger("laneledger.checkpoint.http")

_STATUS = {
    "unauthorized": 401,
    "malformed_message": 400, "invalid_request": 400, "not_canonicalizable": 400, "request_error": 400,
    "tenant_mismatch": 403, "signature_required": 403, "invalid_signature": 403,
    "entity_not_found": 404,
    "lane_conflict": 409, "idempotency_violation": 409, "entity_conflict": 409, "duplicate_event": 409,
    "store_error": 409,
    "request_too_large": 413,
    "unknown_event_type": 422, "invalid_payload": 422, "subject_mismatch": 422, "causation_violation": 422,
    "blob_missing": 422,
    "unavailable": 503, "transport_error": 503,
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


def _command(op: str, fields: dict[str, Any]) -> CheckpointCommand:
    """A command from path and query values (strings, converted as the
    command's field types say)."""
    try:
        return msgspec.convert({"op": op, **fields}, CheckpointCommand, strict=False)
    except msgspec.ValidationError as exc:
        text = str(exc)
        at = text.rfind(" - at `")
        raise InvalidRequest(text, path=text[at + 7:-1] if at >= 0 else "$") from exc


def checkpoint_routes(service: CheckpointService,
                      access: AccessPolicy | None = None) -> list[web.RouteDef]:
    """The HTTP reads; each is scoped by the request's bearer token
    (laneledger.access; no policy or no token configured: open)."""
    policy = access or AccessPolicy()

    def scope(request: web.Request) -> Scope:
        return policy.scope_of(bearer_token(request, query_allowed=False))

    async def run(request: web.Request, op: str, fields: dict[str, Any]) -> web.Response:
        try:
            access = scope(request)  # first: no token, no word on the request itself
            result = await service.execute(_command(op, fields), access)
            service.metrics.requests.labels(op, "ok").inc()
            return _json(result)
        except LedgerError as err:
            service.metrics.requests.labels(op, err.code).inc()
            return _error(err)
        except Exception as exc:  # noqa: BLE001 - answer, do not drop the connection
            log.exception("HTTP %s failed", request.path)
            err = InternalError(f"{type(exc).__name__}: {exc}")
            return _json({"error": err.to_wire()}, 500)

    def query_op(op: str):
        async def handler(request: web.Request) -> web.Response:
            return await run(request, op, dict(request.query))
        return handler

    async def get_checkpoint(request: web.Request) -> web.Response:
        return await run(request, "get", {"checkpoint_id": request.match_info["checkpoint_id"]})

    async def get_artifact(request: web.Request) -> web.Response:
        sha = request.match_info["sha256"]
        try:
            tenant = scope(request).tenant
            # The shared bucket is every tenant's: a tenant reads the
            # artifacts its own checkpoints reference, and any other is
            # "missing". Its own bucket (tenant-scoped saves) comes first.
            if tenant is not None and not await service.artifact_of_tenant(sha, tenant):
                raise ArtifactMissing("no such artifact in the bucket", kind="artifact", id=sha,
                                      reason=ArtifactMissing.reason)
            data = await service.artifacts.read(sha, await service.artifact_buckets(sha, tenant))
        except LedgerError as err:
            return _error(err)
        return web.Response(body=data, content_type="application/octet-stream",
                            headers={"ETag": f'"{sha}"', "Cache-Control": "public, max-age=31536000, immutable"})

    return [
        *ops_routes(service.metrics.registry, lambda: service.ready),
        web.get("/api/v1/checkpoints/{checkpoint_id}", get_checkpoint),
        web.get("/api/v1/latest", query_op("latest")),
        web.get("/api/v1/revisions", query_op("revisions")),
        web.get("/api/v1/recovery-plan", query_op("recovery_plan")),
        web.get("/api/v1/inspect-run", query_op("inspect_run")),
        web.get("/api/v1/reconcile", query_op("reconcile")),
        web.get("/api/v1/info", query_op("info")),
        web.get("/api/v1/artifacts/{sha256:[0-9a-f]{64}}", get_artifact),
    ]
