"""Building blocks of the services' OpenAPI 3.1 documents (the tail's and
the checkpoint service's), so both spell references, JSON bodies and the
typed error responses (spec/errors.md) the same way."""

from __future__ import annotations

from typing import Any

from laneledger.runtime.access import guarded

JSON_MEDIA = "application/json"
SCHEMA_REF = "#/components/schemas/{name}"  # also msgspec's ref_template


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": SCHEMA_REF.format(name=name)}


def error_schemas() -> dict[str, Any]:
    """The schemas every document's errors and probes use: ``Error`` (what
    every error is over HTTP, ``{"error": ErrorBody}``: ``LedgerError.to_wire``
    always carries all four fields) and ``Status`` (/healthz, /readyz)."""
    return {
        "ErrorBody": {
            "type": "object",
            "required": ["code", "message", "retryable", "details"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "string", "description": "stable code, spec/errors.md"},
                "message": {"type": "string"},
                "retryable": {"type": "boolean"},
                "details": {"type": "object"},
            },
        },
        "Error": {
            "type": "object",
            "required": ["error"],
            "additionalProperties": False,
            "properties": {"error": schema_ref("ErrorBody")},
        },
        "Status": {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}},
    }


def json_body(schema_name: str, description: str) -> dict[str, Any]:
    """A response whose JSON body is the named component schema."""
    return {"description": description, "content": {JSON_MEDIA: {"schema": schema_ref(schema_name)}}}


def parameter(
    name: str, where: str, schema: dict[str, Any], description: str, required: bool = False
) -> dict[str, Any]:
    """An OpenAPI parameter; one in the path is always required."""
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "schema": schema,
        "description": description,
    }


def error_response() -> dict[str, str]:
    """A reference to the shared typed error response (spec/errors.md)."""
    return {"$ref": "#/components/responses/Error"}


def error_responses(*statuses: int) -> dict[str, Any]:
    """The shared typed error response for each status, and as the default."""
    found = {str(s): error_response() for s in statuses}
    found["default"] = error_response()
    return found


OBJECT_BODY = {"schema": {"type": "object"}}
OPENAPI_PATH = "/api/v1/openapi.json"  # where each service serves its own document


def openapi_paths() -> dict[str, Any]:
    """The path item of the route serving the document itself."""
    return {
        OPENAPI_PATH: {
            "get": {
                "operationId": "openapi",
                "summary": "this document",
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1",
                        "content": {JSON_MEDIA: {"schema": {"type": "object"}}},
                    }
                },
            }
        }
    }


def ops_paths(ready_summary: str) -> dict[str, Any]:
    """The operations routes every service serves (runtime/opsserver.py):
    ``/healthz``, ``/readyz`` (``ready_summary``: what ready means for this
    service) and ``/metrics``. Their ``Status`` schema is the document's."""
    return {
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "the event loop answers",
                "responses": {"200": json_body("Status", "alive")},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": ready_summary,
                "responses": {"200": json_body("Status", "ready"), "503": json_body("Status", "not ready")},
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics",
                "responses": {
                    "200": {
                        "description": "text exposition format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
    }


def secure_guarded(paths: dict[str, Any], *statuses: str) -> list[tuple[str, dict[str, Any]]]:
    """Every operation of every guarded path (``laneledger.runtime.access.guarded``:
    all but the probes, /metrics, the documents and the console's files)
    takes the bearer token and may answer each of ``statuses`` with the typed
    error. Returns those ``(path, operation)`` for what a service adds."""
    secured = []
    for path, operations in paths.items():
        if not guarded(path):
            continue
        for operation in operations.values():
            operation["security"] = [{"bearerToken": []}]
            for status in statuses:
                operation["responses"].setdefault(status, error_response())
            secured.append((path, operation))
    return secured


def document(
    *,
    title: str,
    description: str,
    paths: dict[str, Any],
    schemas: dict[str, Any],
    bearer_description: str,
    security_schemes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A service's whole document: its paths and schemas, the typed error
    response, the bearer token scheme (``bearerToken``) and any other schemes."""
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1.0.0", "description": description},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {"Error": json_body("Error", "a typed error (spec/errors.md)")},
            "securitySchemes": {
                "bearerToken": {"type": "http", "scheme": "bearer", "description": bearer_description},
                **(security_schemes or {}),
            },
        },
    }
