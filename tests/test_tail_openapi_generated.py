"""The tail's generated OpenAPI document (routetable.py) beside the
hand-written one (openapi.py) it replaces: the same operations, parameters
and responses. The answers' schemas are checked against the real answers by
every tail test (tail_support.TailAPI validates against the generated one)."""

from __future__ import annotations

from typing import Any

from laneledger.services.tail.openapi import DOCUMENT as WRITTEN
from laneledger.services.tail.routetable import DOCUMENT as GENERATED


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(path, method): op for path, item in document["paths"].items() for method, op in item.items()}


def test_the_same_operations_with_the_same_summaries():
    written, generated = operations(WRITTEN), operations(GENERATED)
    assert sorted(written) == sorted(generated)
    for key, op in written.items():
        for field in ("operationId", "summary", "description", "security", "requestBody"):
            assert op.get(field) == generated[key].get(field), (key, field)


def test_the_same_parameters_with_the_same_bounds():
    generated = operations(GENERATED)
    for key, op in operations(WRITTEN).items():
        written_params = {p["name"]: p for p in op.get("parameters", [])}
        generated_params = {p["name"]: p for p in generated[key].get("parameters", [])}
        assert sorted(written_params) == sorted(generated_params), key
        for name, param in written_params.items():
            new = generated_params[name]
            assert (param["in"], param["required"], param["description"]) == (
                new["in"],
                new["required"],
                new["description"],
            ), (key, name)
            for bound in ("type", "minimum", "maximum", "minLength", "maxLength", "pattern"):
                assert param["schema"].get(bound) == new["schema"].get(bound), (key, name, bound)
            assert sorted(param["schema"].get("enum", [])) == sorted(new["schema"].get("enum", [])), (
                key,
                name,
            )
            # A default a description stated is now the schema's too.
            assert param["schema"].get("default", new["schema"].get("default")) == new["schema"].get(
                "default"
            ), (key, name)


def test_the_same_responses():
    generated = operations(GENERATED)
    for key, op in operations(WRITTEN).items():
        responses = generated[key]["responses"]
        assert sorted(op["responses"]) == sorted(responses), key
        assert sorted(op["responses"]["200"].get("content", {})) == sorted(
            responses["200"].get("content", {})
        ), key


def test_every_written_schema_property_is_generated():
    """Each answer's fields, as the written document names them (properties
    or required): the same names (``Page`` and ``Structure``, parts of an ``allOf``, are now folded
    into each answer)."""
    written, generated = WRITTEN["components"]["schemas"], GENERATED["components"]["schemas"]

    def properties(schemas: dict[str, Any], name: str) -> set[str]:
        schema = schemas[name]
        found = set(schema.get("properties", {})) | set(schema.get("required", []))
        for part in schema.get("allOf", []):
            found |= (
                properties(schemas, part["$ref"].rsplit("/", 1)[1])
                if "$ref" in part
                else set(part["properties"])
            )
        return found

    for name in set(written) - {"Page", "Structure", "KorgPage"}:
        assert properties(written, name) == properties(generated, name), name
    # The summary's page of skeletons is its own schema now; agent/recent's adds source_agent.
    assert properties(written, "KorgPage") == properties(generated, "KorgPage")
    assert properties(generated, "KorgSkeletonPage") == {"events", "next_cursor", "has_more"}
