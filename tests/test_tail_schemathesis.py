"""Schemathesis against the tail's HTTP API, as served: a real nats-server, the
real sequencer, some committed events, and the tail as its own OS process.

Every operation of the OpenAPI document the tail serves at
``/api/v1/openapi.json`` is fuzzed by ``schemathesis_support`` (no 5xx,
answers conform to the document, invalid requests refused with a 4xx),
twice: with the operator's bearer token and with a tenant's. The sequencer
signs checkpoints, so the transparency log's routes have some to serve.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest
import requests
import schemathesis
from polling import eventually
from schemathesis_support import bearer, fuzz_every_operation
from tail_support import TailProcess, ev, fill, new_lane

from laneledger.sdk.client import LedgerClient
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.services.sequencer.treeheads import TreeHeadSettings
from laneledger.tlog.note import Signer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
async def sequencer(nc, tmp_path) -> AsyncIterator[Sequencer]:
    """The real sequencer (as ``ledger_fixtures``'), signing checkpoints."""
    from ledger_fixtures import start_sequencer

    settings = SequencerSettings(
        tree_heads=TreeHeadSettings(Signer.generate("ledger.example/fuzz"), interval_s=0.2)
    )
    service = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        yield service
    finally:
        await service.stop()


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
        covered = positions[-1] + 1  # the session.completed: the last position
        await eventually(
            lambda: asyncio.to_thread(
                requests.get, f"{tail.url}/api/v1/tlog/checkpoints/{covered}", timeout=10
            ),
            until=lambda answer: answer.status_code == 200,
            what=f"the tail to serve a checkpoint of size {covered}",
        )
        schema = schemathesis.openapi.from_url(f"{tail.url}/api/v1/openapi.json")
        known = {
            "lane_id": lane.id,
            "session_id": "s1",
            "run_id": "r1",
            "position": positions[5],
            "tenant": "acme",
            "size": covered,
            "old": 1,
            "new": covered,
            # The indexed Korg view (spec/korg-mapping.md): the session's root is its first event.
            "ledger": "acme",
            "root_seq": positions[0],
            "seq_id": positions[5],
            "source_agent": actor.id,
        }
        never_ok = await fuzz_every_operation(schema, tail.url, headers, known)
        # Authenticated, and aimed at data that exists: every read succeeded
        # at least once (there are no blobs to read, and no generated body is
        # a witness's cosignature of a checkpoint).
        unreachable = ("/blobs/", "/api/blob/", "/tlog/cosignatures")
        assert [line for line in never_ok if not any(u in line for u in unreachable)] == [], never_ok
        # A tenant's token: the same answers, narrowed to its tenant.
        await fuzz_every_operation(schema, tail.url, bearer(tenant_token), known)
        # The tail writes nothing (Korg's writes are the ingest's): the ledger
        # it read is intact.
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
