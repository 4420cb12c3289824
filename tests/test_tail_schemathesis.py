"""Schemathesis against the tail's HTTP API, as served: a real nats-server, the
real sequencer, some committed events, and the tail as its own OS process.

Every operation of the OpenAPI document the tail serves at
``/api/v1/openapi.json`` is fuzzed by ``schemathesis_support`` (no 5xx,
answers conform to the document, invalid requests refused with a 4xx),
twice: with the operator's bearer token and with a tenant's.
"""

from __future__ import annotations

import asyncio
import secrets

import pytest
import requests
import schemathesis
from polling import eventually
from schemathesis_support import bearer, fuzz_every_operation
from tail_support import TailProcess, ev, fill, new_lane

from laneledger.sdk.client import LedgerClient

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
async def test_the_tail_api_survives_schemathesis(client: LedgerClient, actor, nats_server, tmp_path):
    lane = await new_lane(client, actor)
    positions = await fill(client, lane, actor, 30, per_append=10)
    await client.append(lane, 30, [ev(lane, actor, "session.completed", subject_id=lane.id)])
    # A second tenant, so that the operator's reads span tenants.
    await new_lane(
        client, await client.ensure_actor("globex", "agent:g@1", "agent"), session="g1", tenant="globex"
    )
    token, tenant_token = secrets.token_hex(16), secrets.token_hex(16)
    (tmp_path / "operator.token").write_text(token + "\n")
    (tmp_path / "tokens").write_text(f"acme {tenant_token}\n")
    tail = await TailProcess(
        nats_server.url,
        tmp_path / "tail",
        "--tokens-file",
        str(tmp_path / "tokens"),
        "--operator-token-file",
        str(tmp_path / "operator.token"),
    ).start()
    try:
        headers = bearer(token)
        await eventually(
            lambda: asyncio.to_thread(requests.get, f"{tail.url}/api/v1/verify", headers=headers, timeout=10),
            until=lambda answer: answer.json().get("last_position", 0) > positions[-1],
            what=f"the tail's /api/v1/verify past position {positions[-1]}",
        )
        schema = schemathesis.openapi.from_url(f"{tail.url}/api/v1/openapi.json")
        known = {
            "lane_id": lane.id,
            "session_id": "s1",
            "run_id": "r1",
            "position": positions[5],
            "tenant": "acme",
        }
        never_ok = await fuzz_every_operation(schema, tail.url, headers, known)
        # Authenticated, and aimed at data that exists: every read succeeded
        # at least once (there are no blobs to read, and a generated body never
        # hashes to the generated name a Korg blob upload is put at).
        assert [line for line in never_ok if "/blobs/" not in line and "/api/blob/" not in line] == [], (
            never_ok
        )
        # A tenant's token: the same answers, narrowed to its tenant.
        await fuzz_every_operation(schema, tail.url, bearer(tenant_token), known)
        # The Korg appends it made went through the sequencer like any other.
        answer = await asyncio.to_thread(
            requests.get, f"{tail.url}/api/v1/verify", headers=headers, timeout=30
        )
        report = answer.json()
        assert report["intact"] is True, report
    finally:
        tail.stop()


async def test_a_long_documented_request_line_gets_a_typed_answer(client, start_tail):
    """Found by the test above: four query parameters of 256 four-byte
    characters (allowed by the document) make a 12 KB request line, past
    aiohttp's default limit (8190), whose plain-text 400 no middleware sees."""
    tail = await start_tail()
    text = "\U0001d11e" * 256
    params = {name: text for name in ("tenant", "session_id", "run_id", "lane_id")}
    answer = await tail.api.get("/api/v1/events", params={**params, "from_position": "x"})
    assert answer.status == 400 and answer.error["details"]["parameter"] == "from_position"
