"""The checkpoint service's OpenAPI document: a valid OpenAPI 3.1 document,
served at /api/v1/openapi.json, describing exactly the routes the service
serves, with the query parameters its commands read
(``test_checkpoint_schemathesis.py`` checks the answers against it)."""

from __future__ import annotations

import aiohttp
import msgspec
import pytest
from openapi_spec_validator import validate

from laneledger.contract.model import ListRevisions
from laneledger.runtime.access import guarded
from laneledger.runtime.opsserver import start_http
from laneledger.services.checkpoint.http import checkpoint_app
from laneledger.services.checkpoint.openapi import DOCUMENT

pytestmark = pytest.mark.timeout(90)


async def test_the_document_is_valid_openapi_served_and_names_every_route(checkpoint_service):
    validate(DOCUMENT)  # raises on any violation of the OpenAPI 3.1 schema
    app = checkpoint_app(checkpoint_service)
    runner, port = await start_http(app, "127.0.0.1", 0)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/api/v1/openapi.json") as answer,
        ):
            assert answer.status == 200 and answer.content_type == "application/json"
            assert msgspec.json.decode(await answer.read()) == DOCUMENT
    finally:
        await runner.cleanup()
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD"
    }
    documented = {(method, path) for path, item in DOCUMENT["paths"].items() for method in item}
    assert served == documented


def test_guarded_operations_declare_the_token_and_its_refusals():
    for path, item in DOCUMENT["paths"].items():
        for operation in item.values():
            if guarded(path):
                assert operation["security"] == [{"bearerToken": []}], path
                assert {"400", "401", "404"} <= set(operation["responses"]), path
            else:
                assert "security" not in operation, path


def test_query_parameters_are_the_commands_fields():
    params = {p["name"]: p for p in DOCUMENT["paths"]["/api/v1/revisions"]["get"]["parameters"]}
    assert set(params) == set(ListRevisions.__struct_fields__)
    assert params["key"]["required"] and not params["limit"]["required"]
    assert params["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}
