"""The OpenAPI 3.1 document of the checkpoint service's HTTP reads, served at
``/api/v1/openapi.json`` (``http.py``).

The bodies and query parameters are generated from the msgspec structs the
service answers with and reads its commands into (``laneledger.contract.model``), so
the document cannot drift from the wire: a field added to ``RecoveryPlan`` or
``ListRevisions`` is documented by that change. ``tests/test_checkpoint_openapi.py``
validates it and checks it names exactly the routes the service serves.
"""

from __future__ import annotations

from typing import Any

import msgspec

from laneledger.contract.model import (
    Checkpoint,
    CheckpointServiceInfo,
    CheckpointServiceStatus,
    GetCheckpoint,
    InspectRun,
    LatestCheckpoint,
    ListRevisions,
    PlanRecovery,
    ReconcileCheckpoints,
    ReconcileReport,
    RecoveryPlan,
    RevisionPage,
    RunInspection,
)
from laneledger.runtime.apidoc import (
    SCHEMA_REF,
    document,
    error_responses,
    error_schemas,
    json_body,
    openapi_paths,
    ops_paths,
    secure_guarded,
)

_, SCHEMAS = msgspec.json.schema_components(
    (Checkpoint, RevisionPage, RecoveryPlan, RunInspection, ReconcileReport, CheckpointServiceInfo),
    ref_template=SCHEMA_REF,
)
SCHEMAS.update(error_schemas())


TENANT_DESCRIPTION = (
    "whose checkpoint key or id (each tenant's own; empty: the checkpoints of no tenant): the token's "
    "own by default, another is 403; with the operator token or on an open service, needed only "
    "when several tenants have the key or id (400 listing them in details.tenants)"
)


def _query_params(command: type[msgspec.Struct]) -> list[dict[str, Any]]:
    """A command's fields (but its ``op`` tag) as query parameters: the HTTP
    handler converts the query string into exactly this struct."""
    (_, defs) = msgspec.json.schema_components((command,))
    spec = defs[command.__name__]
    params = []
    for name, schema in spec["properties"].items():
        if name == "op":
            continue
        schema = dict(schema)
        # ``X | None``: over HTTP, None is "leave the parameter out".
        for branch in schema.pop("anyOf", []):
            if branch.get("type") != "null":
                schema.update(branch)
        if schema.get("default", ...) is None:
            del schema["default"]
        param = {"name": name, "in": "query", "required": name in spec["required"], "schema": schema}
        if name == "tenant":
            param["description"] = TENANT_DESCRIPTION
        params.append(param)
    return params


# A read runs the service's command: 400 for a parameter the command refuses,
# 403 for a tenant the token does not grant, 404 for what is absent (or
# another tenant's), 503/504 when NATS or the sequencer does not answer.
_READ_ERRORS = (400, 403, 404, 503, 504)


def _read(
    operation_id: str,
    summary: str,
    command: type[msgspec.Struct],
    answer: str,
    path_params: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    params = path_params or []
    path_names = {p["name"] for p in params}
    params += [p for p in _query_params(command) if p["name"] not in path_names]
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "parameters": params,
            "responses": {"200": json_body(answer, answer), **error_responses(*_READ_ERRORS)},
        }
    }


PATHS: dict[str, Any] = {
    **ops_paths("connected to NATS and at most --ready-max-lag events behind the committed stream"),
    **openapi_paths(),
    "/api/v1/checkpoints/{checkpoint_id}": _read(
        "getCheckpoint",
        "one checkpoint by id, with its inline state",
        GetCheckpoint,
        "Checkpoint",
        [
            {
                "name": "checkpoint_id",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "minLength": 1, "maxLength": 256},
            }
        ],
    ),
    "/api/v1/latest": _read("latestCheckpoint", "a key's latest revision", LatestCheckpoint, "Checkpoint"),
    "/api/v1/revisions": _read(
        "listRevisions",
        "a key's revisions after after_revision, oldest first, without their state",
        ListRevisions,
        "RevisionPage",
    ),
    "/api/v1/recovery-plan": _read(
        "recoveryPlan",
        "where to resume: the checkpoint (by key, or the latest anchored in "
        "lane_id), the lane's events after its anchor and the unresolved attempts",
        PlanRecovery,
        "RecoveryPlan",
    ),
    "/api/v1/inspect-run": _read(
        "inspectRun",
        "a run's terminal events, linked checkpoints, unresolved attempts and "
        "terminal revisions no event links",
        InspectRun,
        "RunInspection",
    ),
    "/api/v1/reconcile": _read(
        "reconcile",
        "terminal revisions no lane.framework.checkpoint.linked event names",
        ReconcileCheckpoints,
        "ReconcileReport",
    ),
    "/api/v1/info": _read(
        "info", "the service's settings and positions", CheckpointServiceStatus, "CheckpointServiceInfo"
    ),
    "/api/v1/artifacts/{sha256}": {
        "get": {
            "operationId": "getArtifact",
            "summary": "an artifact's bytes, by sha256; readable when a checkpoint of the "
            "token's tenant references it",
            "parameters": [
                {
                    "name": "sha256",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    "description": "lowercase hex sha256",
                }
            ],
            "responses": {
                "200": {
                    "description": "the blob; ETag is its sha256",
                    "headers": {"ETag": {"schema": {"type": "string"}}},
                    "content": {
                        "application/octet-stream": {
                            "schema": {"type": "string", "contentMediaType": "application/octet-stream"}
                        }
                    },
                },
                **error_responses(400, 404, 500, 503, 504),
            },
        }
    },
}

# Every guarded path takes a bearer token and may answer 401. Another tenant's
# checkpoint, run, lane or artifact is 404, as if absent (403 only for naming
# a tenant the token does not grant).
secure_guarded(PATHS, "401")

DOCUMENT: dict[str, Any] = document(
    title="laneledger checkpoint service",
    description="Reads of saved checkpoints, recovery plans, run inspection and "
    "artifacts (writes go over NATS only). Every error is "
    '{"error": ErrorBody} (spec/errors.md); see spec/checkpoint.md.',
    paths=PATHS,
    schemas=SCHEMAS,
    bearer_description="a tenant's token (its own checkpoints only) or the "
    "operator's (every tenant); spec/checkpoint.md",
)
