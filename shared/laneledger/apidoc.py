"""Building blocks of the services' OpenAPI 3.1 documents (the tail's and
the checkpoint service's), so both spell references, JSON bodies and the
typed error responses (spec/errors.md) the same way."""

from __future__ import annotations

from typing import Any

JSON_MEDIA = "application/json"
SCHEMA_REF = "#/components/schemas/{name}"  # also msgspec's ref_template


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": SCHEMA_REF.format(name=name)}


def json_body(schema_name: str, description: str) -> dict[str, Any]:
    """A response whose JSON body is the named component schema."""
    return {"description": description, "content": {JSON_MEDIA: {"schema": schema_ref(schema_name)}}}


def error_responses(*statuses: int) -> dict[str, Any]:
    """The shared typed error response for each status, and as the default."""
    found = {str(s): {"$ref": "#/components/responses/Error"} for s in statuses}
    found["default"] = {"$ref": "#/components/responses/Error"}
    return found
