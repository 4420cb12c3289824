"""Historical reads of the tail that need the real stream and sequencer
(the route logic is in test_tail_history.py, in-process): blobs from
JetStream's object store, 503 without a sequencer, and a session over one
NATS reply's max_payload."""

from __future__ import annotations

import hashlib
import json

import pytest
from tail_support import ev, fill, new_lane, wait_applied

from laneledger.contract.subjects import Subjects, token
from laneledger.sdk.blobstore import BlobStore, object_name

pytestmark = pytest.mark.timeout(90)


async def test_blobs(start_tail, js):
    tail = await start_tail()
    blobs = {
        "json": json.dumps({"a": 1}).encode(),
        "text": "plain text ✓".encode(),
        "binary": bytes(range(256)),
    }
    # Before any producer stored a blob there is no bucket: 404, not an error.
    early = await tail.api.get(
        "/api/v1/blobs/" + hashlib.sha256(blobs["json"]).hexdigest(), params={"tenant": "acme"}
    )
    assert early.status == 404 and early.error["details"]["kind"] == "blob"
    store = await BlobStore.open(js)  # what a producer's SDK stores into, per tenant
    digests = {name: (await store.put("acme", data))[len("sha256:") :] for name, data in blobs.items()}
    types = {"json": "application/json", "text": "text/plain", "binary": "application/octet-stream"}
    for name, digest in digests.items():
        answer = await tail.api.get(f"/api/v1/blobs/{digest}", params={"tenant": "acme"})
        assert answer.status == 200 and answer.body == blobs[name]
        assert answer.headers["Content-Type"].startswith(types[name])
    by_ref = await tail.api.get(f"/api/v1/blobs/sha256:{digests['json']}", params={"tenant": "acme"})
    assert by_ref.body == blobs["json"]

    other_tenant = await tail.api.get(f"/api/v1/blobs/{digests['json']}", params={"tenant": "globex"})
    assert other_tenant.status == 404 and other_tenant.error["details"]["kind"] == "blob"
    untold = await tail.api.get(f"/api/v1/blobs/{digests['json']}")  # an open tail: name it
    assert untold.status == 400 and untold.error["details"]["parameter"] == "tenant"
    absent = await tail.api.get("/api/v1/blobs/" + "ab" * 32, params={"tenant": "acme"})
    assert absent.status == 404 and absent.error["details"]["kind"] == "blob"
    for bad in ("xyz", "AB" * 32, "ab" * 31):
        answer = await tail.api.get(f"/api/v1/blobs/{bad}", params={"tenant": "acme"})
        assert answer.status == 400 and answer.error["details"]["parameter"] == "sha256", bad
    # Bytes that do not hash to their name are never served as the blob.
    bucket = await js.object_store(store.bucket)
    await bucket.put(object_name(token("acme"), digests["text"]), b"tampered")
    corrupt = await tail.api.get(f"/api/v1/blobs/{digests['text']}", params={"tenant": "acme"})
    assert corrupt.status == 500 and corrupt.error["code"] == "integrity_failure"
    assert corrupt.error["details"]["kind"] == "blob_mismatch"


async def test_structure_reads_without_a_sequencer_are_503(client, actor, start_tail):
    # A tail whose commands go to a prefix no sequencer serves.
    tail = await start_tail(subjects=Subjects("nobody"), ledger_timeout_s=1.0)
    lane = await new_lane(client, actor)
    positions = await fill(client, lane, actor, 2)
    await wait_applied(tail.service, positions[-1])
    for path in (
        "/api/v1/sessions/s1",
        "/api/v1/sessions/s1/runs/r1",
        "/api/v1/sessions/s1/runs/r1/inspection",
        "/api/v1/lanes/unknown/events",
    ):
        answer = await tail.api.get(path)
        assert answer.status == 503, path
        assert answer.error["code"] == "unavailable" and answer.error["retryable"] is True
    korg = await tail.ingest.post(
        "/api/agent/tool-call",
        json_body={
            "source_agent": "agent:korgex@0.2.2",
            "tool_name": "user_prompt",
            "args": {},
            "result": {},
            "success": True,
            "duration_ms": 0,
        },
    )
    assert korg.status == 503 and korg.error["code"] == "unavailable"
    # What the tail holds itself is still served.
    assert (await tail.api.get(f"/api/v1/lanes/{lane.id}/events")).status == 200
    assert (await tail.api.get("/api/v1/verify")).json()["intact"] is True


async def test_a_session_too_large_for_one_sequencer_reply(client, actor, start_tail):
    """The session is over NATS's max_payload: the sequencer answers it in
    pages (load_session / load_structure), and the tail reads the structure page by page
    (load_structure) and its own events: the views stay complete."""
    tail = await start_tail()
    main = await new_lane(client, actor, "big", "r1", "main")
    side = await new_lane(client, actor, "big", "r1", "side")
    turn = await client.create_turn(main.id, 1)
    action = await client.create_action(
        main.id, turn.id, "tool_call", "read_file", effect="read", idempotency="inherent"
    )
    attempt = await client.create_attempt(main.id, action.id, 1)
    requested = await client.append(main, 0, [ev(main, actor, "attempt.requested", subject_id=attempt.id)])
    positions = await fill(client, main, actor, 1500, start_seq=1, payload={"text": "w" * 700})
    await fill(client, side, actor, 2)
    await wait_applied(tail.service, positions[-1] + 2)
    # Over one reply: the SDK's load_session reads it page by page.
    assert len((await client.load_session("big")).events) == 1 + 1500 + 2
    session = (await tail.api.get("/api/v1/sessions/big", params={"limit": "3"})).json()
    assert session["structure_complete"] is True
    assert session["tenant"] == "acme" and session["run_ids"] == ["r1"]
    assert [(lane["id"], lane["last_seq"]) for lane in session["lanes"]] == [(main.id, 1501), (side.id, 2)]
    assert [t["id"] for t in session["turns"]] == [turn.id]
    assert [(a["id"], a["name"]) for a in session["actions"]] == [(action.id, "read_file")]
    assert [a["id"] for a in session["attempts"]] == [attempt.id]
    assert [e["position"] for e in session["events"]] == [requested.positions[0], *positions[:2]]
    run = (await tail.api.get("/api/v1/sessions/big/runs/r1")).json()
    assert run["structure_complete"] is True and len(run["lanes"]) == 2
    assert [a["id"] for a in run["attempts"]] == [attempt.id]
    inspection = (await tail.api.get("/api/v1/sessions/big/runs/r1/inspection")).json()
    assert inspection["structure_complete"] is True
    (open_attempt,) = inspection["unresolved_attempts"]
    assert open_attempt["attempt_id"] == attempt.id
    assert open_attempt["action"]["name"] == "read_file"
    assert open_attempt["reconcile_before_retry"] is False  # a read, inherently idempotent
