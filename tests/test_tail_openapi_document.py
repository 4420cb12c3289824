"""The tail's OpenAPI document, in-process (the tail's app over an
in-process writer, tail_fixtures.py): a valid OpenAPI 3.1 document, served,
describing exactly the routes the service serves. That every operation's
answers validate against it, over the real stream: test_tail_openapi.py."""

from __future__ import annotations

import pytest
import pytest_asyncio
from openapi_spec_validator import validate
from tail_fixtures import client_in_process, start_tail_in_process

from laneledger.services.tail.routetable import DOCUMENT

pytestmark = pytest.mark.timeout(90)

# Route logic: the tail's app in-process over an in-process writer (tail_fixtures.py).
client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")


async def test_the_document_is_valid_openapi_and_served(client, start_tail):
    tail = await start_tail()
    answer = await tail.api.get("/api/v1/openapi.json")
    assert answer.status == 200
    served = answer.json()
    assert served == DOCUMENT
    validate(served)  # raises on any violation of the OpenAPI 3.1 schema


async def test_it_describes_every_route_and_only_those(client, start_tail):
    tail = await start_tail()
    served = set()
    for route in tail.service.app.router.routes():
        if route.method == "HEAD":
            continue  # aiohttp adds HEAD beside each GET
        served.add((route.method.lower(), route.resource.canonical))
    documented = {(method, path) for path, item in DOCUMENT["paths"].items() for method in item}
    assert served == documented
