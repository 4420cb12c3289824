"""Erasure over HTTP (``POST /api/v1/erasures`` on the ingest service) and
from the operator's command line (``laneledger erase``), spec/erasure.md:
a real nats-server and sequencer, the ingest service in this process on
its own NATS connection, every answer checked against its OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import nats
import pytest
import pytest_asyncio
from tail_support import INGEST_CONTRACT, TailAPI
from test_erasure import EMAIL, fill

from laneledger.cli import main
from laneledger.contract.erasure import ERASURE_EVENT, LEDGER_SESSION
from laneledger.contract.model import Actor
from laneledger.devtools.natsserver import NatsServer
from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.ingest import erasure
from laneledger.services.ingest.service import IngestService, IngestSettings

pytestmark = pytest.mark.timeout(90)

TOKENS = {"acme": "a" * 20, "globex": "g" * 20}
OPERATOR = "o" * 20
PATH = "/api/v1/erasures"


@pytest_asyncio.fixture
async def ingest(nats_server: NatsServer, client: LedgerClient) -> AsyncIterator[TailAPI]:
    """The ingest service with acme's, globex's and the operator's tokens
    (``client`` brings the sequencer up)."""
    nc = await nats.connect(nats_server.url, name="laneledger-ingest-test")
    service = IngestService(nc, IngestSettings(access=AccessPolicy.from_tokens(TOKENS, OPERATOR)))
    port = await service.start("127.0.0.1", 0)
    async with aiohttp.ClientSession() as session:
        try:
            yield TailAPI(f"http://127.0.0.1:{port}", session, INGEST_CONTRACT)
        finally:
            await service.stop()
            await nc.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def erase(ingest: TailAPI, token: str, **body: Any):
    return await ingest.post(PATH, json_body=body, headers=bearer(token))


async def payloads(client: LedgerClient, session: str, tenant: str = "acme") -> list[dict]:
    return [e.payload for e in (await client.load_session(session, tenant=tenant)).events]


async def test_a_tenants_token_erases_its_own_session(ingest, client, actor: Actor) -> None:
    await fill(client, actor, "s1", "r1")
    await fill(client, actor, "s2", "r1", 2)
    done = await erase(ingest, TOKENS["acme"], session_id="s1", reason="GDPR Art. 17", actor_key="human:dpo")
    assert done.status == 200, done.body
    page = done.json()
    assert (page["erased"], page["already_erased"], page["unsealed"], page["has_more"]) == (3, 0, 0, False)
    assert await payloads(client, "s1") == [{}, {}, {}]
    assert all(p["email"] == EMAIL for p in await payloads(client, "s2"))
    # The erasure event names who asked: the actor the gateway registered for the key.
    erasure_event = (await client.load_session(LEDGER_SESSION, tenant="acme")).events[-1]
    assert erasure_event.event_type == ERASURE_EVENT and erasure_event.id == page["erasure_id"]
    assert erasure_event.position == page["erasure"]["position"]
    dpo = await client.ensure_actor("acme", "human:dpo", "human")
    assert erasure_event.actor_id == dpo.id
    assert erasure_event.payload == {"scope": {"session_id": "s1"}, "reason": "GDPR Art. 17"}
    # The same erasure again erases nothing twice.
    again = await erase(
        ingest,
        TOKENS["acme"],
        session_id="s1",
        reason="GDPR Art. 17",
        actor_id=dpo.id,
        erasure_id=page["erasure_id"],
    )
    assert again.status == 200 and (again.json()["erased"], again.json()["already_erased"]) == (0, 3)


async def test_another_tenants_session_is_not_found(ingest, client, actor: Actor) -> None:
    await fill(client, actor, "s1", "r1")
    hidden = await erase(ingest, TOKENS["globex"], session_id="s1", reason="r", actor_key="human:dpo")
    assert hidden.status == 404 and hidden.error["code"] == "entity_not_found", hidden.body
    assert hidden.error["details"]["kind"] == "session"
    named = await erase(
        ingest, TOKENS["globex"], session_id="s1", reason="r", actor_key="human:dpo", tenant="acme"
    )
    assert named.status == 403 and named.error["code"] == "tenant_mismatch"
    # acme's actor is no actor of globex's either, in a session of globex's.
    owner = await client.ensure_actor("globex", "agent:globex@1", "agent")
    await client.create_lane("globex", "g1", "r1", "main", actor_id=owner.id)
    foreign = await erase(ingest, TOKENS["globex"], session_id="g1", reason="r", actor_id=actor.id)
    assert foreign.status == 404 and foreign.error["details"]["kind"] == "actor", foreign.body
    assert all(p["email"] == EMAIL for p in await payloads(client, "s1"))
    # The operator's token names the tenant; one run only.
    other_run, _ = await fill(client, actor, "s1", "r2", 2)
    unnamed = await erase(ingest, OPERATOR, session_id="s1", reason="r", actor_id=actor.id)
    assert unnamed.status == 400 and unnamed.error["details"]["path"] == "$.tenant"
    done = await erase(
        ingest, OPERATOR, session_id="s1", run_id="r2", reason="r", actor_id=actor.id, tenant="acme"
    )
    assert done.status == 200 and done.json()["erased"] == 2, done.body
    assert [e.payload for e in (await client.load_lane(other_run.id)).events] == [{}, {}]
    assert sum(p == {} for p in await payloads(client, "s1")) == 2


async def test_a_tenants_token_erases_a_data_subject_or_by_age(ingest, client, actor: Actor) -> None:
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    events = [
        make_event(
            lane.id, "stream.text_delta", actor_id=actor.id, payload={"email": EMAIL}, data_subject=subject
        )
        for subject in ("customer-42", None)
    ]
    await client.append(lane, 0, events)
    by_subject = await erase(
        ingest, TOKENS["acme"], data_subject="customer-42", reason="Art. 17", actor_key="human:dpo"
    )
    assert by_subject.status == 200 and by_subject.json()["erased"] == 1, by_subject.body
    assert await payloads(client, "s1") == [{}, {"email": EMAIL}]
    by_age = await erase(
        ingest,
        TOKENS["acme"],
        committed_before="2999-01-01T00:00:00Z",
        reason="retention",
        actor_key="human:dpo",
    )
    assert by_age.status == 200 and by_age.json()["erased"] == 1, by_age.body
    assert await payloads(client, "s1") == [{}, {}]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"reason": "r", "actor_key": "human:dpo"}, "$.session_id"),  # no scope
        ({"session_id": "s1", "data_subject": "c", "reason": "r", "actor_key": "human:dpo"}, "$.session_id"),
        ({"committed_before": "yesterday", "reason": "r", "actor_key": "human:dpo"}, "$.committed_before"),
        (
            {"committed_before": "2026-13-01T00:00:00Z", "reason": "r", "actor_key": "human:dpo"},
            "$.committed_before",
        ),
        ({"session_id": "s1", "actor_key": "human:dpo"}, "$"),  # no reason
        ({"session_id": "s1", "reason": "", "actor_key": "human:dpo"}, "$.reason"),
        ({"session_id": "s1", "reason": "r" * 1025, "actor_key": "human:dpo"}, "$.reason"),
        ({"session_id": "s1", "reason": "r", "actor_key": "human:dpo", "colour": "blue"}, "$"),
        (
            {"session_id": "s1", "reason": "r", "actor_key": "human:dpo", "after_position": -1},
            "$.after_position",
        ),
        ({"session_id": "s1", "reason": "r", "actor_key": "human:dpo", "dry_run": "yes"}, "$.dry_run"),
        ({"session_id": "s1", "reason": "r"}, "$.actor_id"),  # nobody asks
        ({"session_id": "s1", "reason": "r", "actor_key": "human:dpo", "actor_id": "x"}, "$.actor_id"),
        ({"session_id": LEDGER_SESSION, "reason": "r", "actor_key": "human:dpo"}, "$.session_id"),
    ],
)
async def test_bad_bodies_are_typed_400s_naming_the_field(ingest, client, body: dict, path: str) -> None:
    refused = await erase(ingest, TOKENS["acme"], **body)
    assert refused.status == 400, refused.body
    assert refused.error["code"] == "invalid_request" and refused.error["details"]["path"] == path, (
        refused.body
    )


async def test_what_is_not_a_body_is_refused(ingest, client) -> None:
    garbled = await ingest.post(PATH, data=b"{not json", headers=bearer(TOKENS["acme"]))
    assert garbled.status == 400 and garbled.error["code"] == "malformed_message"
    query = await ingest.post(
        PATH + "?tenant=acme",
        json_body={"session_id": "s1", "reason": "r", "actor_key": "human:dpo"},
        headers=bearer(TOKENS["acme"]),
    )
    assert query.status == 400 and query.error["details"]["parameter"] == "tenant"
    missing = await ingest.post(PATH, json_body={"session_id": "s1", "reason": "r", "actor_key": "human:dpo"})
    assert missing.status == 401 and missing.error["code"] == "unauthorized"


async def test_a_request_sends_a_bounded_number_of_pages_then_says_has_more(
    ingest, client, actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(erasure, "PAGE_LIMIT", 2)
    monkeypatch.setattr(erasure, "MAX_PAGES", 2)
    await fill(client, actor, "s1", "r1", 7)
    asked = {"session_id": "s1", "reason": "retention", "actor_key": "human:dpo"}
    dry = (await erase(ingest, TOKENS["acme"], **asked, dry_run=True)).json()
    assert (dry["erased"], dry["has_more"], dry["dry_run"], dry["erasure"]) == (4, True, True, None)
    first = (await erase(ingest, TOKENS["acme"], **asked)).json()
    assert (first["erased"], first["has_more"]) == (4, True)
    assert sum(p == {} for p in await payloads(client, "s1")) == 4
    # Sent again with its erasure_id, from where it stopped: the rest.
    rest = await erase(
        ingest,
        TOKENS["acme"],
        **asked,
        erasure_id=first["erasure_id"],
        after_position=first["next_after_position"],
    )
    assert rest.status == 200, rest.body
    assert (rest.json()["erased"], rest.json()["has_more"]) == (3, False)
    assert rest.json()["erasure"] == first["erasure"]  # one erasure, one erasure event
    assert await payloads(client, "s1") == [{}] * 7


async def test_the_operator_erases_from_the_command_line(
    client, actor: Actor, nats_server: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill(client, actor, "s1", "r1")
    await fill(client, actor, "s1", "r2", 2)
    common = ["erase", "--session", "s1", "--tenant", "acme", "--reason", "GDPR Art. 17"]
    common += ["--actor-key", "human:dpo", "--nats", nats_server.url]
    assert await asyncio.to_thread(main, [*common, "--run", "r1", "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert json.loads(dry.out)["erased"] == 3 and "would erase 3 events of session s1 run r1" in dry.err
    assert all(p["email"] == EMAIL for p in await payloads(client, "s1"))

    assert await asyncio.to_thread(main, common) == 0
    done = capsys.readouterr()
    page = json.loads(done.out)
    assert (page["erased"], page["has_more"], page["dry_run"]) == (5, False, False)
    position = page["erasure"]["position"]
    assert f"erased 5 events of session s1 of tenant acme (erasure event at position {position})" in done.err
    assert await payloads(client, "s1") == [{}] * 5

    assert await asyncio.to_thread(main, [*common[:2], "nope", *common[3:]]) == 2
    assert "no such session" in capsys.readouterr().err
