"""The OpenAPI 3.1 document of the ingest service, served at
``/api/v1/openapi.json``.

The bodies are generated from the msgspec structs the service decodes and
answers with (``laneledger.compat.korg_append``, ``erasure.EraseRequest``,
the sequencer's ``ErasurePage``), so the document cannot
drift from the wire. ``tests/test_ingest_korg.py`` validates it, checks it
names exactly the routes the service serves, and checks every answer of the
tests against it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from laneledger.compat.korg_append import SERVER_DERIVED, BlobStored, ToolCall, ToolCallAppended
from laneledger.contract.model import ErasurePage
from laneledger.runtime.apidoc import (
    JSON_MEDIA,
    OPENAPI_PATH,
    SCHEMA_REF,
    document,
    error_responses,
    error_schemas,
    json_body,
    openapi_paths,
    ops_paths,
    parameter,
    require_what_is_sent,
    schema_ref,
    secure_guarded,
)

from .erasure import ERASURES_PATH, MAX_PAGES, EraseRequest

_ANSWERS = (ToolCallAppended, BlobStored, ErasurePage)
_, SCHEMAS = msgspec.json.schema_components((ToolCall, EraseRequest, *_ANSWERS), ref_template=SCHEMA_REF)
require_what_is_sent(SCHEMAS, _ANSWERS)
SCHEMAS.update(error_schemas())
SCHEMAS["ToolCall"]["description"] = (
    "Korg's AgentToolCall append shape (Korg §1, §1.2.1) and an optional session_id; any "
    "other field is refused (400 naming its path)."
)
# What read_tool_call checks beyond the struct: the Korg §1.1 prefix.
SCHEMAS["ToolCall"]["properties"]["source_agent"]["pattern"] = "^(agent|human|korg|mcp|import):[\\s\\S]+$"
# Korg §1.2.7: the fields the server derives are taken and ignored.
SCHEMAS["ToolCall"]["properties"].update(
    {name: {"description": "server-derived (Korg §1.2.7): ignored"} for name in sorted(SERVER_DERIVED)}
)
SCHEMAS["EraseRequest"]["description"] = (
    "Erase the content of a session of the token's tenant, or of one run of it (spec/erasure.md, "
    '"Over HTTP"). Who asks: actor_id (an actor of the tenant) or actor_key (registered if new). '
    "tenant: required with the operator's token, else the token's own. Send it again with the "
    "answer's erasure_id and after_position = next_after_position while has_more."
)
# Exactly one names who asks (the handler refuses both and neither too; null is neither).
SCHEMAS["EraseRequest"]["oneOf"] = [
    {"required": [name], "properties": {name: {"type": "string"}}} for name in ("actor_id", "actor_key")
]
_SHA256 = parameter(
    "sha256",
    "path",
    {"type": "string", "pattern": "^(sha256:)?[0-9a-f]{64}$"},
    "the blob's lowercase hex sha256 (or sha256:<hex>)",
)

PATHS: dict[str, Any] = {
    **ops_paths("connected to NATS"),
    **openapi_paths(),
    "/api/agent/tool-call": {
        "post": {
            "operationId": "korgToolCall",
            "summary": "Korg: append one AgentToolCall in the Korg tenant; answers its seq_id "
            "(the ledger position)",
            "requestBody": {"required": True, "content": {JSON_MEDIA: {"schema": schema_ref("ToolCall")}}},
            "responses": {
                "200": json_body("ToolCallAppended", "committed"),
                **error_responses(400, 403, 409, 413, 422, 429, 503, 504),
            },
        }
    },
    "/api/blob/{sha256}": {
        "put": {
            "operationId": "korgPutBlob",
            "summary": "Korg: store a blob of the Korg tenant before posting its content reference "
            "(a client's .korg/blobs/<sha256[:2]>/<sha256>, uploaded at its name)",
            "parameters": [_SHA256],
            "requestBody": {
                "required": True,
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            },
            "responses": {
                "200": json_body("BlobStored", "stored (or already there)"),
                **error_responses(400, 403, 413, 429, 503, 504),
            },
        }
    },
    ERASURES_PATH: {
        "post": {
            "operationId": "erase",
            "summary": "erase the content of a session (or a run) of the token's tenant; answers "
            f"the counts of at most {MAX_PAGES} pages, has_more when the client must send it again",
            "requestBody": {
                "required": True,
                "content": {JSON_MEDIA: {"schema": schema_ref("EraseRequest")}},
            },
            "responses": {
                "200": json_body("ErasurePage", "erased (or counted, dry_run), up to next_after_position"),
                **error_responses(400, 403, 404, 409, 413, 429, 503, 504),
            },
        }
    },
}
# Every write takes a bearer token: 401 without one; 403 for another tenant's.
secure_guarded(PATHS, "401", "403")

DOCUMENT: dict[str, Any] = document(
    title="laneledger ingest",
    description="HTTP writes for clients without a NATS connection: Korg's tool calls and "
    "blob uploads, appended as the Korg tenant through the sequencer, and a tenant's erasures "
    "(spec/erasure.md). The tail serves the "
    'reads of the same paths. Every error is {"error": ErrorBody} (spec/errors.md); see '
    "spec/korg-mapping.md.",
    paths=PATHS,
    schemas=SCHEMAS,
    bearer_description="the Korg tenant's token or the operator's (an erasure: any tenant's); "
    "spec/korg-mapping.md",
)
_BODY = msgspec.json.encode(DOCUMENT)


def openapi_route() -> web.RouteDef:
    async def serve(_: web.Request) -> web.Response:
        return web.Response(body=_BODY, content_type=JSON_MEDIA)

    return web.get(OPENAPI_PATH, serve, name="openapi")
