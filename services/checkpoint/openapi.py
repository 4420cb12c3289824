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
    Operation,
    answer_schemas,
    document,
    openapi_paths,
    operation_paths,
    ops_paths,
    parameter,
    secure_guarded,
)

TENANT_DESCRIPTION = (
    "whose checkpoint key or id (each tenant's own; empty: the checkpoints of no tenant): the token's "
    "own by default, another is 403; with the operator token or on an open service, needed only "
    "when several tenants have the key or id (400 listing them in details.tenants)"
)

# A read runs the service's command: 400 for a parameter the command refuses,
# 403 for a tenant the token does not grant, 404 for what is absent (or
# another tenant's), 503/504 when NATS or the sequencer does not answer.
_READ_ERRORS = (400, 403, 404, 503, 504)


def _read(
    path: str,
    operation_id: str,
    summary: str,
    command: type[msgspec.Struct],
    answer: type[msgspec.Struct],
) -> Operation:
    """A read: its parameters are the command's fields (but its ``op``
    tag), as the handler converts the request into exactly this struct."""
    return Operation(
        path,
        operation_id,
        summary,
        answer,
        answer.__name__,
        params=command,
        errors=_READ_ERRORS,
        descriptions={"tenant": TENANT_DESCRIPTION},
    )


OPERATIONS = (
    _read(
        "/api/v1/checkpoints/{checkpoint_id}",
        "getCheckpoint",
        "one checkpoint by id, with its inline state",
        GetCheckpoint,
        Checkpoint,
    ),
    _read("/api/v1/latest", "latestCheckpoint", "a key's latest revision", LatestCheckpoint, Checkpoint),
    _read(
        "/api/v1/revisions",
        "listRevisions",
        "a key's revisions after after_revision, oldest first, without their state",
        ListRevisions,
        RevisionPage,
    ),
    _read(
        "/api/v1/recovery-plan",
        "recoveryPlan",
        "where to resume: the checkpoint (by key, or the latest anchored in "
        "lane_id), the lane's events after its anchor and the unresolved attempts",
        PlanRecovery,
        RecoveryPlan,
    ),
    _read(
        "/api/v1/inspect-run",
        "inspectRun",
        "a run's terminal events, linked checkpoints, unresolved attempts and "
        "terminal revisions no event links",
        InspectRun,
        RunInspection,
    ),
    _read(
        "/api/v1/reconcile",
        "reconcile",
        "terminal revisions no lane.framework.checkpoint.linked event names",
        ReconcileCheckpoints,
        ReconcileReport,
    ),
    _read(
        "/api/v1/info",
        "info",
        "the service's settings and positions",
        CheckpointServiceStatus,
        CheckpointServiceInfo,
    ),
    Operation(
        "/api/v1/artifacts/{sha256}",
        "getArtifact",
        "an artifact's bytes, by sha256; readable when a checkpoint of the token's tenant references it",
        {
            "description": "the blob; ETag is its sha256",
            "headers": {"ETag": {"schema": {"type": "string"}}},
            "content": {
                "application/octet-stream": {
                    "schema": {"type": "string", "contentMediaType": "application/octet-stream"}
                }
            },
        },
        errors=(400, 404, 500, 503, 504),
        extra_parameters=(
            parameter(
                "sha256",
                "path",
                {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "lowercase hex sha256",
            ),
        ),
    ),
)

PATHS: dict[str, Any] = {
    **ops_paths("connected to NATS and at most --ready-max-lag events behind the committed stream"),
    **openapi_paths(),
    **operation_paths(OPERATIONS),
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
    schemas=answer_schemas(OPERATIONS),
    bearer_description="a tenant's token (its own checkpoints only) or the "
    "operator's (every tenant); spec/checkpoint.md",
)
