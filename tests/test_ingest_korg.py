"""The ingest service's Korg writes: POST /api/agent/tool-call (the
AgentToolCall append shape, through the sequencer, in the Korg tenant) and
PUT /api/blob/{sha256}; read back through the tail beside it (``tail.ingest``,
tail_fixtures.py), whose answers, like the ingest's, are checked against each
service's own OpenAPI document."""

from __future__ import annotations

import hashlib
import json

import msgspec
import pytest
from openapi_spec_validator import validate
from tail_support import MAIN, SUB, fill, journal_records, new_lane, wait_applied
from tail_support import korg_call as call
from tail_support import korg_post as post

from laneledger.runtime.access import AccessPolicy, guarded
from laneledger.sdk.blobstore import BlobStore
from laneledger.services.ingest.openapi import DOCUMENT

pytestmark = pytest.mark.timeout(90)


async def test_tool_calls_become_ledger_events_with_causation(client, start_tail):
    tail = await start_tail()
    # Korg §2b worked example: a main spine and a sub-agent spine.
    root = await post(tail, {**call("human:dusk", "user_prompt"), "event_type": "AgentToolCall"})
    llm = await post(tail, call(MAIN, "llm_inference", root["seq_id"]))
    sub_prompt = await post(tail, call(SUB, "user_prompt", llm["seq_id"]))
    sub_llm = await post(tail, call(SUB, "llm_inference", sub_prompt["seq_id"]))
    read = await post(tail, call(SUB, "Read", sub_llm["seq_id"]))
    spawn = await post(tail, call(MAIN, "Agent", llm["seq_id"]))
    calls = [root, llm, sub_prompt, sub_llm, read, spawn]
    assert [c["seq_id"] for c in calls] == sorted(c["seq_id"] for c in calls)
    assert all(c["session_id"] == "korg" for c in calls)
    # One lane per source agent; seq_id is the ledger position.
    assert len({c["lane_id"] for c in calls}) == 3
    assert [c["lane_seq"] for c in (llm, spawn)] == [1, 2]
    await wait_applied(tail.service, spawn["seq_id"])
    session = await client.load_session("korg")
    assert session.tenant == "korg"
    by_position = {e.position: e for e in session.events}
    parents = {
        llm["seq_id"]: root,
        sub_prompt["seq_id"]: llm,
        sub_llm["seq_id"]: sub_prompt,
        read["seq_id"]: sub_llm,
        spawn["seq_id"]: llm,
    }
    for c in calls:
        event = by_position[c["seq_id"]]
        assert event.id == c["event_id"] and event.entry_hash == c["entry_hash"]
        assert event.event_type == "ext.korg.agent_tool_call"
        parent = parents.get(c["seq_id"])
        if parent is None:
            assert event.causation_id is msgspec.UNSET
            assert event.payload["triggered_by"] is None
        else:
            assert event.causation_id == parent["event_id"]
            assert event.payload["triggered_by"] == parent["seq_id"]
    lanes = {lane.name: lane for lane in session.lanes}
    assert lanes[SUB].kind == "subagent" and lanes[MAIN].kind == "main"
    actor = await client.ensure_actor("korg", SUB, "agent", display_name=SUB)
    assert by_position[read["seq_id"]].actor_id == actor.id


async def test_a_chain_posted_back_to_back(client, start_tail):
    tail = await start_tail()
    previous = None
    for n in range(15):
        answer = await post(tail, call(MAIN, f"step-{n}", previous))
        previous = answer["seq_id"]
    journal = await tail.api.get("/api/journal")
    lines = [json.loads(line) for line in journal.body.splitlines()]
    assert [line["metadata"]["triggered_by"] for line in lines] == [None] + [
        line["seq_id"] for line in lines[:-1]
    ]


async def test_triggered_by_must_name_an_existing_earlier_event_of_the_session(client, actor, start_tail):
    """Read from the committed stream by position (the ingest keeps no read
    model): beyond its end, below 1, another tenant's event (to the Korg
    tenant it does not exist: neither its id nor its session is told) are
    ``unknown``; the Korg tenant's event of another session is ``other_session``."""
    tail = await start_tail()
    first = await post(tail, call(MAIN, "user_prompt"))
    second = await post(tail, call(MAIN, "user_prompt", session_id="second"))
    lane = await new_lane(client, actor, "korg")  # acme's session named like the Korg one
    (foreign,) = await fill(client, lane, actor, 1)
    cases = [
        (second["seq_id"] + 1000, "unknown"),
        (0, "unknown"),
        (-3, "unknown"),
        (foreign, "unknown"),
        (second["seq_id"], "other_session"),
    ]
    for triggered_by, reason in cases:
        answer = await tail.ingest.post("/api/agent/tool-call", json_body=call(MAIN, "Edit", triggered_by))
        assert answer.status == 422, triggered_by
        error = answer.error
        assert error["code"] == "causation_violation" and error["retryable"] is False
        assert error["details"]["triggered_by"] == triggered_by
        assert error["details"]["reason"] == reason
        if reason == "other_session":
            assert error["details"]["causation_id"] == second["event_id"]
            assert error["details"]["causation_session_id"] == "second"
        else:
            assert "causation_id" not in error["details"], error
    # Nothing was appended by the refusals.
    await wait_applied(tail.service, foreign)
    journal = journal_records(await tail.api.get("/api/journal"))
    assert [r["seq_id"] for r in journal] == [first["seq_id"], second["seq_id"]]


async def test_bad_bodies_are_refused_with_the_field(client, start_tail):
    tail = await start_tail()
    cases = [
        ({k: v for k, v in call(MAIN, "Edit").items() if k != "tool_name"}, "$", "invalid_request"),
        ({**call(MAIN, "Edit"), "colour": "blue"}, "$", "invalid_request"),
        (call("robot:r2d2", "Edit"), "$.source_agent", "invalid_request"),
        (call(MAIN, "Edit", duration_ms=-1), "$.duration_ms", "invalid_request"),
        ({**call(MAIN, "Edit"), "event_type": "SomethingElse"}, "$.event_type", "invalid_request"),
        (call(MAIN, "Edit", success="yes"), "$.success", "invalid_request"),
        ({k: v for k, v in call(MAIN, "Edit").items() if k != "result"}, "$", "invalid_request"),
    ]
    for body, path, code in cases:
        answer = await tail.ingest.post("/api/agent/tool-call", json_body=body)
        assert answer.status == 400, body
        assert answer.error["code"] == code and answer.error["details"]["path"] == path, body
    malformed = await tail.ingest.post(
        "/api/agent/tool-call", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert malformed.status == 400 and malformed.error["code"] == "malformed_message"
    # Server-derived fields (Korg §1.2.7) are ignored, not refused.
    ok = await post(
        tail,
        call(MAIN, "Edit", seq_id=7, event_id="x", actor_id="korg:api", recorded_at="2026-01-01T00:00:00Z"),
    )
    assert ok["seq_id"] != 7 and ok["event_id"] != "x"


async def test_args_and_result_take_any_json_value(client, start_tail):
    """As Korg's server does: its stream-json adapter posts the root's result
    as "Success" and a tool's output as text."""
    tail = await start_tail()
    values = ["Success", "total 8\ndrwxr-xr-x  src\n", [1, "two", {"three": 3}], 42, 0.5, True, None, {}]
    posted = []
    for value in values:
        posted.append(await post(tail, call(MAIN, "Bash", args=value, result=value)))
    await wait_applied(tail.service, posted[-1]["seq_id"])
    events = [line["event"] for line in journal_records(await tail.api.get("/api/journal"))]
    assert [(e["args"], e["result"]) for e in events] == [(v, v) for v in values]


async def test_a_large_inline_value_is_stored_as_a_blob_first(client, start_tail):
    """A client that posts a value over 1 KiB inline ends with the value in the
    blob store and a content reference in the event (Korg §7.3)."""
    tail = await start_tail()
    output = "".join(f"line {n}: {'x' * 40}\n" for n in range(100))  # ~4.6 KiB of tool output
    edit = {"file_path": "src/app.py", "new_string": "y" * 2000}
    answer = await post(tail, call(MAIN, "Edit", args=edit, result=output))
    await wait_applied(tail.service, answer["seq_id"])
    (line,) = journal_records(await tail.api.get("/api/journal"))
    event = line["event"]
    digest = hashlib.sha256(output.encode()).hexdigest()
    assert event["result"] == {"_ref": f"sha256:{digest}", "size_bytes": len(output)}
    new_digest = hashlib.sha256(edit["new_string"].encode()).hexdigest()
    assert event["args"] == {
        "file_path": "src/app.py",
        "new_string": {"_ref": f"sha256:{new_digest}", "size_bytes": 2000},
    }
    assert {(d["sha256"], d["size_bytes"]) for d in event["payload_refs"]} == {
        (digest, len(output)),
        (new_digest, 2000),
    }
    assert line["metadata"]["payload_refs"] == event["payload_refs"]
    # The blobs are in the Korg tenant's committed bucket (counted in its
    # blob_bytes), not the shared one, and served where Korg serves them.
    korg_blobs = await BlobStore.open(client.js, bucket="LEDGER_BLOBS_korg", create=False)
    assert await korg_blobs.get("korg", f"sha256:{digest}") == output.encode()
    assert not await (await client.blob_store()).has("korg", f"sha256:{digest}")
    blob = await tail.api.get(f"/api/blob/{digest}")
    assert blob.status == 200 and blob.body == output.encode()
    assert blob.headers["Content-Type"].startswith("text/plain")


async def test_a_blob_a_client_externalized_is_uploaded_before_its_reference(client, start_tail, tmp_path):
    """A Korg client writes a large value to .korg/blobs/<sha256[:2]>/<sha256>
    and posts the reference; it uploads that file first, at its name."""
    tail = await start_tail()
    data = json.dumps({"matches": [f"src/m{n}.py" for n in range(200)]}, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    local = tmp_path / ".korg" / "blobs" / digest[:2] / digest
    local.parent.mkdir(parents=True)
    local.write_bytes(data)
    sentinel = {"_ref": f"sha256:{digest}", "size_bytes": len(data)}
    refs = [{"sha256": digest, "size_bytes": len(data), "label": "Grep"}]
    body = call(MAIN, "Grep", args={"pattern": "def "}, result=sentinel, payload_refs=refs)

    missing = await tail.ingest.post("/api/agent/tool-call", json_body=body)
    assert missing.status == 422 and missing.error["code"] == "blob_missing"
    assert (await tail.api.get(f"/api/blob/{digest}")).status == 404

    wrong = await tail.ingest.request("PUT", f"/api/blob/{digest}", data=data + b" ")
    assert wrong.status == 400 and wrong.error["details"]["parameter"] == "sha256"
    assert wrong.error["details"]["found"] == hashlib.sha256(data + b" ").hexdigest()
    for name in (digest, f"sha256:{digest}"):  # again: already stored is fine
        stored = await tail.ingest.request(
            "PUT",
            f"/api/blob/{name}",
            data=local.read_bytes(),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert stored.status == 200 and stored.json() == {"sha256": digest, "size_bytes": len(data)}
    answer = await post(tail, body)
    await wait_applied(tail.service, answer["seq_id"])
    (line,) = journal_records(await tail.api.get("/api/journal"))
    assert line["event"]["result"] == sentinel and line["event"]["payload_refs"] == refs
    blob = await tail.api.get(f"/api/blob/{digest}")
    assert blob.status == 200 and blob.body == data
    assert blob.headers["Content-Type"] == "application/json" and blob.headers["ETag"] == f'"{digest}"'
    bad = await tail.ingest.request("PUT", "/api/blob/not-a-hash", data=b"x")
    assert bad.status == 400 and bad.error["details"]["parameter"] == "sha256"
    # Korg answers a read by uppercase hex 404, as a blob it does not have (its MCP layer: not_found).
    upper = await tail.api.get(f"/api/blob/{digest.upper()}")
    assert upper.status == 404 and upper.error["details"]["kind"] == "blob"
    assert (await tail.api.get("/api/blob/not-a-hash")).status == 400


async def test_the_korg_blob_routes_are_the_korg_tenants(client, start_tail):
    tokens = {"korg": "k" * 20, "acme": "a" * 20}
    tail = await start_tail(access=AccessPolicy.from_tokens(tokens))
    data = b"b" * 2048
    digest = hashlib.sha256(data).hexdigest()

    other = await tail.ingest.request("PUT", f"/api/blob/{digest}", data=data, headers=bearer(tokens["acme"]))
    assert other.status == 403 and other.error["code"] == "tenant_mismatch"
    own = await tail.ingest.request("PUT", f"/api/blob/{digest}", data=data, headers=bearer(tokens["korg"]))
    assert own.status == 200
    assert (await tail.api.get(f"/api/blob/{digest}", headers=bearer(tokens["korg"]))).body == data
    hidden = await tail.api.get(f"/api/blob/{digest}", headers=bearer(tokens["acme"]))
    assert hidden.status == 404 and hidden.error["code"] == "entity_not_found"


async def test_the_korg_tenants_token_writes_only_its_own_ledger(client, start_tail):
    """A tenant's token writes only its own ledger: Korg's writes are the
    Korg tenant's, so another tenant's token is 403 and nothing is appended;
    no token is a typed 401 telling Korg's clients what to send."""
    tokens = {"korg": "k" * 20, "acme": "a" * 20}
    tail = await start_tail(access=AccessPolicy.from_tokens(tokens))
    body = call("human:dusk", "user_prompt")
    other = await tail.ingest.post("/api/agent/tool-call", json_body=body, headers=bearer(tokens["acme"]))
    assert other.status == 403 and other.error["code"] == "tenant_mismatch"
    for method, path in (("POST", "/api/agent/tool-call"), ("PUT", f"/api/blob/{'ab' * 32}")):
        missing = await tail.ingest.request(method, path, json_body=body)
        assert missing.status == 401 and missing.error["details"]["reason"] == "missing", path
        assert "Authorization: Bearer <the Korg tenant's token>" in missing.error["details"]["hint"], path
    wrong = await tail.ingest.post("/api/agent/tool-call", json_body=body, headers=bearer("x" * 20))
    assert wrong.status == 401 and wrong.error["details"] == {"reason": "invalid"}
    own = await post(tail, body, headers=bearer(tokens["korg"]))
    await wait_applied(tail.service, own["seq_id"])
    journal = journal_records(await tail.api.get("/api/journal", headers=bearer(tokens["korg"])))
    assert [r["seq_id"] for r in journal] == [own["seq_id"]]  # the refused calls appended nothing


async def test_the_document_is_valid_openapi_served_and_names_every_route(start_tail):
    """Generated from the structs the service decodes and answers with; every
    answer of these tests is checked against it (tail_support.Contract)."""
    validate(DOCUMENT)  # raises on any violation of the OpenAPI 3.1 schema
    tail = await start_tail()
    served = await tail.ingest.get("/api/v1/openapi.json")
    assert served.status == 200 and served.json() == DOCUMENT
    app = tail.ingest_service.app
    routes = {(r.method.lower(), r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}
    documented = {(method, path) for path, item in DOCUMENT["paths"].items() for method in item}
    assert routes == documented
    for path, item in DOCUMENT["paths"].items():
        for operation in item.values():
            if guarded(path):
                assert operation["security"] == [{"bearerToken": []}], path
                assert {"400", "401", "403"} <= set(operation["responses"]), path
            else:
                assert "security" not in operation, path
    tool_call = DOCUMENT["components"]["schemas"]["ToolCall"]
    required = {"source_agent", "tool_name", "args", "result", "success", "duration_ms"}
    assert set(tool_call["required"]) == required


async def test_health_readiness_and_metrics(client, start_tail):
    tail = await start_tail()
    assert (await tail.ingest.get("/healthz")).json() == {"status": "ok"}
    assert (await tail.ingest.get("/readyz")).json() == {"status": "ready"}
    await post(tail, call(MAIN, "user_prompt"))
    refused = await tail.ingest.post("/api/agent/tool-call", json_body={"colour": "blue"})
    assert refused.status == 400
    metrics = (await tail.ingest.get("/metrics")).body.decode()
    assert 'laneledger_ingest_http_requests_total{route="/api/agent/tool-call",status="200"} 1.0' in metrics
    assert 'laneledger_ingest_http_requests_total{route="/api/agent/tool-call",status="400"} 1.0' in metrics


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}
