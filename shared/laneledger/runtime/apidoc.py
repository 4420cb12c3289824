"""Building blocks of the services' OpenAPI 3.1 documents (the tail's, the
checkpoint service's and the ingest's), so all spell references, JSON
bodies, parameters and the typed error responses (spec/errors.md) the same
way. A route's parameters and answers are msgspec Structs; its ``Operation``
names them, and ``operation_paths`` and ``answer_schemas`` make the
document's paths and schemas of them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import msgspec.inspect

from laneledger.runtime.access import guarded
from laneledger.runtime.httpjson import Error

JSON_MEDIA = "application/json"
SCHEMA_REF = "#/components/schemas/{name}"  # also msgspec's ref_template


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": SCHEMA_REF.format(name=name)}


def error_schemas() -> dict[str, Any]:
    """The schemas every document's errors and probes use: ``Error`` (what
    every error is over HTTP, ``{"error": ErrorBody}``: generated from
    ``httpjson.Error``) and ``Status`` (/healthz, /readyz)."""
    _, schemas = msgspec.json.schema_components((Error,), ref_template=SCHEMA_REF)
    require_what_is_sent(schemas, (Error,))
    return {
        **schemas,
        "Status": {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}},
    }


def require_what_is_sent(schemas: dict[str, Any], roots: Iterable[Any]) -> None:
    """Mark as required, in ``schemas``, every field that is always sent: each
    field of a Struct reachable from ``roots`` that does not omit defaults,
    but those whose default is ``UNSET`` (left out when they do not apply).
    msgspec requires only the fields without a default, as for reading."""
    for info in _structs_in(msgspec.inspect.multi_type_info(tuple(roots))):
        if info.cls.__struct_config__.omit_defaults:
            continue
        schema = schemas[info.cls.__name__]
        schema.pop("required", None)
        if sent := [f.encode_name for f in info.fields if not _unset_by_default(f)]:
            schema["required"] = sent


def _unset_by_default(field: msgspec.inspect.Field) -> bool:
    """Whether ``field`` defaults to ``UNSET`` (which ``msgspec.inspect``
    shows as an optional field with neither a default nor a factory)."""
    nodefault = msgspec.NODEFAULT
    return not field.required and field.default is nodefault and field.default_factory is nodefault


def _structs_in(types: Iterable[Any]) -> Iterator[msgspec.inspect.StructType]:
    """Every Struct type in ``types`` (``msgspec.inspect`` objects) and in
    what they hold, each once."""
    seen: set[type] = set()
    stack = list(types)
    while stack:
        node = stack.pop()
        if isinstance(node, msgspec.inspect.StructType):
            if node.cls in seen:
                continue
            seen.add(node.cls)
            yield node
        if isinstance(node, msgspec.Struct):  # an inspect node: what it holds
            for name in node.__struct_fields__:
                value = getattr(node, name)
                stack.extend(value if isinstance(value, tuple) else [value])


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


def parameters_of(
    params: type[msgspec.Struct], path: str = "", descriptions: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The parameters a handler decodes into the Struct ``params``: a field
    named in the ``path`` template (``{name}``) is a path parameter, every
    other a query parameter (a tagged Struct's tag left out). A field's
    description (``Meta``, else ``descriptions``) is the parameter's; the path
    parameters come first."""
    (_, defs) = msgspec.json.schema_components((params,))
    spec = defs[params.__name__]
    in_path = set(re.findall(r"{(\w+)}", path))
    tag_field = params.__struct_config__.tag_field
    found = []
    for name, schema in spec["properties"].items():
        if name == tag_field:
            continue
        schema = dict(schema)
        # ``X | None``: over HTTP, None is "leave the parameter out".
        for branch in schema.pop("anyOf", []):
            if branch.get("type") != "null":
                schema.update(branch)
        if schema.get("default", ...) is None:
            del schema["default"]
        description = schema.pop("description", None) or (descriptions or {}).get(name)
        where = "path" if name in in_path else "query"
        found.append(
            {
                "name": name,
                "in": where,
                "required": where == "path" or name in spec.get("required", ()),
                "schema": schema,
                **({"description": description} if description else {}),
            }
        )
    return sorted(found, key=lambda p: p["in"] != "path")


@dataclass(frozen=True)
class Operation:
    """One route of a service, as its document shows it: its parameters
    (a Struct, ``parameters_of``) and its answer, a JSON Struct (the
    ``answer_schemas``) or, for what is not JSON (an event stream, a file,
    a note), the 200 response object itself."""

    path: str
    operation_id: str
    summary: str
    answer: type[msgspec.Struct] | dict[str, Any]
    answer_description: str = ""
    params: type[msgspec.Struct] | None = None
    errors: tuple[int, ...] = ()  # the statuses of typed errors; none: not even a default
    method: str = "get"
    description: str | None = None
    extra_parameters: tuple[dict[str, Any], ...] = ()  # a header, say
    request_body: dict[str, Any] | None = None
    refers_to: tuple[type[msgspec.Struct], ...] = ()  # Structs a non-JSON answer names (an NDJSON line)
    descriptions: Mapping[str, str] | None = None  # of parameters whose field has none (parameters_of)

    def item(self) -> dict[str, Any]:
        """The OpenAPI operation object."""
        if isinstance(self.answer, dict):
            ok = self.answer
        else:
            ok = json_body(self.answer.__name__, self.answer_description)
        operation: dict[str, Any] = {"operationId": self.operation_id, "summary": self.summary}
        if self.description is not None:
            operation["description"] = self.description
        parameters = (
            parameters_of(self.params, self.path, self.descriptions) if self.params is not None else []
        )
        parameters += self.extra_parameters
        if parameters:
            operation["parameters"] = parameters
        if self.request_body is not None:
            operation["requestBody"] = self.request_body
        operation["responses"] = {"200": ok, **(error_responses(*self.errors) if self.errors else {})}
        return operation


def operation_paths(operations: Iterable[Operation]) -> dict[str, Any]:
    """The document's ``paths`` of ``operations``."""
    paths: dict[str, Any] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method] = operation.item()
    return paths


def answer_schemas(
    operations: Iterable[Operation], in_full: Iterable[type[msgspec.Struct]] = ()
) -> dict[str, Any]:
    """The component schemas of the operations' JSON answers (and of every
    Struct they hold), then ``error_schemas``. A Struct that does not omit
    defaults has every field required (``require_what_is_sent``);
    ``in_full``: Structs that do omit them (on NATS) but that a service
    shows in full over HTTP, so every field is required there too."""
    answers = {op.answer for op in operations if not isinstance(op.answer, dict)}
    answers.update(struct for op in operations for struct in op.refers_to)
    _, schemas = msgspec.json.schema_components(
        sorted(answers, key=lambda t: t.__name__), ref_template=SCHEMA_REF
    )
    require_what_is_sent(schemas, answers)
    for struct in in_full:
        schema = schemas[struct.__name__]
        schema["required"] = list(schema["properties"])
    return {**schemas, **error_schemas()}


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
