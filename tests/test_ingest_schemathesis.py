"""Schemathesis against the ingest service's HTTP API, as served: a real
nats-server, the real sequencer, and the ingest service as its own OS
process (``python -m laneledger.services.ingest``).

Every operation of the document it serves at ``/api/v1/openapi.json`` is
fuzzed by ``schemathesis_support`` (no 5xx, answers conform to the document,
invalid requests refused with a 4xx), with the operator's bearer token and
with the Korg tenant's; then every append it made is read back from the
ledger intact, and an erasure over HTTP erases what the Korg tenant posted.
"""

from __future__ import annotations

import asyncio
import secrets

import pytest
import requests
import schemathesis
from schemathesis_support import bearer, fuzz_every_operation
from service_process import ServiceProcess
from tail_support import korg_call

from laneledger.sdk.client import LedgerClient

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
async def test_the_ingest_api_survives_schemathesis(client: LedgerClient, nats_server, tmp_path):
    token, korg_token = secrets.token_hex(16), secrets.token_hex(16)
    (tmp_path / "operator.token").write_text(token + "\n")
    (tmp_path / "tokens").write_text(f"korg {korg_token}\n")
    ingest = ServiceProcess(
        "laneledger.services.ingest",
        [
            "--nats",
            nats_server.url,
            "--http-port",
            "0",
            "--tokens-file",
            str(tmp_path / "tokens"),
            "--operator-token-file",
            str(tmp_path / "operator.token"),
        ],
        tmp_path,
        env={"LANELEDGER_LOG_LEVEL": "WARNING"},
    )
    await asyncio.to_thread(ingest.start, 30)
    try:
        assert ingest.url is not None
        first = await asyncio.to_thread(
            requests.post,
            f"{ingest.url}/api/agent/tool-call",
            json=korg_call("human:dusk", "user_prompt"),
            headers=bearer(korg_token),
            timeout=30,
        )
        assert first.status_code == 200, first.text
        to_erase = await asyncio.to_thread(
            requests.post,
            f"{ingest.url}/api/agent/tool-call",
            json=korg_call("human:dusk", "user_prompt", session_id="erase-me"),
            headers=bearer(korg_token),
            timeout=30,
        )
        assert to_erase.status_code == 200, to_erase.text
        schema = schemathesis.openapi.from_url(f"{ingest.url}/api/v1/openapi.json")
        never_ok = await fuzz_every_operation(schema, ingest.url, bearer(token), {})
        # A generated body never hashes to the generated name a blob is put
        # at, nor names a session that exists (the erasure below does).
        assert [line for line in never_ok if not ("/api/blob/" in line or "/api/v1/erasures" in line)] == []
        await fuzz_every_operation(schema, ingest.url, bearer(korg_token), {})
        erased = await asyncio.to_thread(
            requests.post,
            f"{ingest.url}/api/v1/erasures",
            json={"session_id": "erase-me", "reason": "schemathesis", "actor_key": "human:dpo"},
            headers=bearer(korg_token),
            timeout=30,
        )
    finally:
        ingest.stop()
    # What it appended went through the sequencer like any other append: the
    # first call, and those of the fuzzing in the default session after it.
    session = await client.load_session("korg", tenant="korg")
    assert session.events[0].position == first.json()["seq_id"]
    assert all(e.event_type == "ext.korg.agent_tool_call" for e in session.events)
    assert erased.status_code == 200 and erased.json()["erased"] == 1, erased.text
    assert [e.payload for e in (await client.load_session("erase-me", tenant="korg")).events] == [{}]
