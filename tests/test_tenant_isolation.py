"""One tenant cannot read another's events, blobs or checkpoints, by any
route or filter of the tail or the checkpoint service (spec/tail.md,
"Access").

Both services' routes are enumerated from the OpenAPI documents they serve
(each pinned to its router by test_tail_openapi.py and
test_checkpoint_openapi.py), so a route added later is checked without
touching this file. Each route is asked with globex's token for
acme's things (every documented query parameter too, one at a time, set to
acme's value); the answer must be a 401/403/404 or hold nothing of acme's.
The same requests with acme's token are the control: they do return acme's
data, so the check can fail.

Real parts: nats-server, the sequencer, the tail and the checkpoint service
on real HTTP ports, all in this process.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys

import aiohttp
import pytest
import pytest_asyncio
from tail_support import wait_applied

from laneledger.contract.contentref import hex_of
from laneledger.runtime.access import AccessPolicy, guarded
from laneledger.runtime.opsserver import start_http
from laneledger.sdk.blobstore import BlobStore
from laneledger.sdk.checkpoints import anchor_of
from laneledger.sdk.client import LaneRecorder
from laneledger.services.checkpoint.http import checkpoint_app

TOKENS = {"acme": "acme-token-0123456789abcdef", "globex": "globex-token-0123456789abcdef"}
OPERATOR = "operator-token-0123456789abcdef"
# Strings that occur only in acme's data, and never in a request (an id the
# request names may come back in a 404): none may reach globex. acme's event
# ids are added when they exist.
ACME_SESSION = "sess-acme-5a1d"
ACME_BLOB = b'{"acme_secret_blob": "only-acme-may-read-this"}'
MARKERS = [b"acme says", b"only-acme-may-read-this", b"acme-state-marker"]
FORMAT = "application/vnd.tests.state+json;version=1"
SSE_READ_S = 0.6  # how long a tail is read for acme data before it is judged empty


def policy() -> AccessPolicy:
    return AccessPolicy.from_tokens(TOKENS, operator=OPERATOR)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def fetch(
    session: aiohttp.ClientSession, method: str, url: str, *, params=None, headers=None
) -> tuple[int, bytes]:
    """Status and body; an event stream is read for ``SSE_READ_S`` only."""
    async with session.request(
        method,
        url,
        params=params,
        headers=headers,
        json={} if method == "POST" else None,
        timeout=aiohttp.ClientTimeout(total=30),
    ) as resp:
        if resp.content_type != "text/event-stream":
            return resp.status, await resp.read()
        body = b""
        try:
            async with asyncio.timeout(SSE_READ_S):
                async for chunk in resp.content.iter_any():
                    body += chunk
        except TimeoutError:
            pass
        return resp.status, body


def leaked(body: bytes) -> list[bytes]:
    return [m for m in MARKERS if m in body]


@pytest_asyncio.fixture
async def world(client, actor, sequencer, checkpoint_service, checkpoints, start_tail, js):
    """acme and globex, each with a session, events, a blob and checkpoints."""
    ids = {}
    for tenant, session in (("acme", ACME_SESSION), ("globex", "sess-globex-77")):
        who = await client.ensure_actor(tenant, "agent:iso/main@1", "agent")
        lane = await LaneRecorder.open(client, tenant, session, "r1", "main", actor_id=who.id)
        receipt = await lane.append(
            [
                lane.event("run.started", actor_id=who.id, subject_id="r1"),
                lane.event("stream.text_delta", actor_id=who.id, payload={"text": f"{tenant} says"}),
            ]
        )
        state = {"marker": f"{tenant}-state-marker"}
        saved = await checkpoints.save(
            f"key-{tenant}",
            expected_revision=0,
            format=FORMAT,
            state=state,
            anchor=anchor_of(receipt),
            session_id=session,
            run_id="r1",
            terminal=True,
        )
        assert saved.tenant == tenant  # derived from the anchor's lane
        art = await checkpoints.save(
            f"art-{tenant}",
            expected_revision=0,
            format=FORMAT,
            data=b"acme-state-marker" if tenant == "acme" else b"g" * 10,
            media_type="application/octet-stream",
            session_id=session,
            run_id="r1",
        )
        if tenant == "acme":
            del MARKERS[3:]  # a previous test's world
            MARKERS.extend(event_id.encode() for event_id in receipt.event_ids)
        ids[tenant] = {
            "session_id": session,
            "run_id": "r1",
            "lane_id": lane.lane.id,
            "position": str(receipt.positions[-1]),
            "checkpoint_id": saved.id,
            "key": saved.key,
            "artifact": art.artifact.sha256,
            "tenant": tenant,
            "actor_id": who.id,
            # The Korg view (spec/korg-mapping.md): the ledger is the tenant, a
            # native session's root its first event, seq_id a position.
            "ledger": tenant,
            "root_seq": str(receipt.positions[0]),
            "seq_id": str(receipt.positions[-1]),
        }
    blobs = await BlobStore.open(js)  # what a producer's SDK stores into, per tenant
    ids["acme"]["sha256"] = hex_of(await blobs.put("acme", ACME_BLOB))
    ids["acme"]["event_type"] = "stream."

    tail = await start_tail(access=policy())
    await wait_applied(tail.service, int(ids["globex"]["position"]))
    runner, port = await start_http(checkpoint_app(checkpoint_service, policy()), "127.0.0.1", 0)
    async with aiohttp.ClientSession() as session:
        yield {"ids": ids, "tail": tail.url, "checkpoint": f"http://127.0.0.1:{port}", "http": session}
    await runner.cleanup()


def fill(template: str, values: dict[str, str]) -> str:
    """A route template with the values' ids in its path parameters (a
    checkpoint artifact's sha256 is the artifact's, the tail's the blob's)."""

    def value(match: re.Match) -> str:
        name = match.group(1)
        if name == "sha256" and "/artifacts/" in template:
            return values["artifact"]
        return values[name]

    return re.sub(r"\{(\w+)(?::[^{}]*(?:\{[^{}]*\}[^{}]*)*)?\}", value, template)


async def guarded_operations(world, service: str = "tail") -> list[tuple[str, str, dict]]:
    """(method, path, operation) of every guarded operation in the document
    ``service`` (the tail or the checkpoint service) serves."""
    status, body = await fetch(world["http"], "GET", world[service] + "/api/v1/openapi.json")
    assert status == 200
    document = json.loads(body)
    found = [
        (method.upper(), path, op)
        for path, ops in document["paths"].items()
        if guarded(path)
        for method, op in ops.items()
    ]
    assert len(found) >= 8, found  # the document really was read
    return found


async def test_no_token_no_data(world):
    for method, path, _ in await guarded_operations(world):
        url = world["tail"] + fill(path, world["ids"]["acme"])
        status, body = await fetch(world["http"], method, url)
        assert status == 401, (method, path, status)
        assert b'"unauthorized"' in body and not leaked(body)
        status, _ = await fetch(world["http"], method, url, headers=bearer("not-a-real-token-at-all"))
        assert status == 401, (method, path)
    for route in await checkpoint_paths(world):
        status, body = await fetch(
            world["http"], "GET", world["checkpoint"] + fill(route, world["ids"]["acme"])
        )
        assert status == 401 and not leaked(body), route


@pytest.mark.slow
async def test_one_tenant_cannot_read_another_on_the_tail(world):
    acme = world["ids"]["acme"]
    controls = 0
    for method, path, op in await guarded_operations(world):
        url = world["tail"] + fill(path, acme)
        names = [
            p["name"] for p in op.get("parameters", []) if p["in"] == "query" and p["name"] != "access_token"
        ]
        variants = [{}] + [{name: acme[name]} for name in names if name in acme]
        for params in variants:
            status, body = await fetch(
                world["http"], method, url, params=params, headers=bearer(TOKENS["globex"])
            )
            assert not leaked(body), (method, path, params, status, body[:300])
            if "tenant" in params:
                assert status == 403, (path, params, status)  # naming another tenant
            else:
                assert status in (200, 400, 403, 404), (method, path, params, status)
        if method == "GET":
            status, body = await fetch(world["http"], method, url, headers=bearer(TOKENS["acme"]))
            if status == 200 and leaked(body):
                controls += 1
    # The control: acme's own token reads acme's data on the same routes (the
    # live tail, an event, a lane, a session, a run, a blob at least).
    assert controls >= 6, controls
    # The SSE tail also takes the token as a query parameter (EventSource).
    status, body = await fetch(
        world["http"], "GET", world["tail"] + "/api/v1/events", params={"access_token": TOKENS["globex"]}
    )
    assert status == 200 and b"sess-globex-77" in body and not leaked(body)
    status, body = await fetch(
        world["http"], "GET", world["tail"] + "/api/v1/events", params={"access_token": OPERATOR}
    )
    assert status == 200 and ACME_SESSION.encode() in body and b"sess-globex-77" in body


async def checkpoint_paths(world) -> list[str]:
    operations = await guarded_operations(world, "checkpoint")
    assert {method for method, _, _ in operations} == {"GET"}, operations  # reads only
    return [path for _, path, _ in operations]


QUERY_OF = {  # what each checkpoint read asks for, by path (acme's ids filled in)
    "/api/v1/latest": [{"key": "key"}, {"key": "key", "tenant": "tenant"}],
    "/api/v1/revisions": [{"key": "key"}, {"key": "key", "tenant": "tenant"}],
    "/api/v1/recovery-plan": [{"key": "key"}, {"lane_id": "lane_id"}, {"key": "key", "tenant": "tenant"}],
    "/api/v1/inspect-run": [
        {"session_id": "session_id", "run_id": "run_id"},
        {"session_id": "session_id", "run_id": "run_id", "tenant": "tenant"},
    ],
    "/api/v1/reconcile": [{}, {"session_id": "session_id"}, {"key": "key"}, {"tenant": "tenant"}],
    "/api/v1/info": [{}],
    "/api/v1/checkpoints/{checkpoint_id}": [{}, {"tenant": "tenant"}],
}


async def test_one_tenant_cannot_read_another_on_the_checkpoint_service(world):
    acme = world["ids"]["acme"]
    controls = 0
    for path in await checkpoint_paths(world):
        url = world["checkpoint"] + fill(path, acme)
        for query in QUERY_OF.get(path, [{}]):
            params = {name: acme[field] for name, field in query.items()}
            status, body = await fetch(
                world["http"], "GET", url, params=params, headers=bearer(TOKENS["globex"])
            )
            assert not leaked(body), (path, params, status, body[:300])
            if "tenant" in params:
                assert status == 403, (path, params, status)  # naming another tenant
            else:
                assert status in (200, 404), (path, params, status, body[:300])
            status, body = await fetch(
                world["http"], "GET", url, params=params, headers=bearer(TOKENS["acme"])
            )
            if status == 200 and leaked(body):
                controls += 1
    assert controls >= 6, controls
    # Not found means not found: the same answer as for an id nobody has.
    status, theirs = await fetch(
        world["http"],
        "GET",
        f"{world['checkpoint']}/api/v1/checkpoints/{acme['checkpoint_id']}",
        headers=bearer(TOKENS["globex"]),
    )
    status_none, nobody = await fetch(
        world["http"],
        "GET",
        f"{world['checkpoint']}/api/v1/checkpoints/no-such-id",
        headers=bearer(TOKENS["globex"]),
    )
    assert status == status_none == 404
    assert theirs.replace(acme["checkpoint_id"].encode(), b"X") == nobody.replace(b"no-such-id", b"X")


async def test_the_cli_reads_a_guarded_tail_with_a_token_file(world, tmp_path):
    token = tmp_path / "acme.token"
    token.write_text(TOKENS["acme"] + "\n")

    async def cli(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "laneledger.cli",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, out.decode(), err.decode()

    status, out, err = await cli("verify", "--url", world["tail"])
    assert status == 2 and "unauthorized" in err, (status, out, err)
    status, out, err = await cli("verify", "--url", world["tail"], "--token-file", str(token))
    assert status == 0 and out.startswith("intact: 2 events in 1 lanes of tenant acme"), (out, err)
