"""Korg compatibility: POST /api/agent/tool-call (the AgentToolCall append
shape, through the sequencer), GET /api/journal (NDJSON envelopes, a
korg-ledger-v1 chain) and PUT/GET /api/blob/{sha256}."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import msgspec
import pytest
from korg_dogfood import korg_reference_verify
from tail_support import MAIN, SUB, fill, new_lane, wait_applied
from tail_support import korg_call as call

from laneledger.compat.claudecode import ClaudeCodeImport
from laneledger.compat.claudecode_names import DEFAULT_HUMAN, RUNTIME
from laneledger.compat.korg import read_journal, verify_journal
from laneledger.contract.errors import ChainFault
from laneledger.sdk.blobstore import BlobStore

pytestmark = pytest.mark.timeout(90)
CLAUDE_CODE_CAPTURE = Path(__file__).resolve().parent / "fixtures" / "claude-code" / "session.jsonl"


async def post(tail, body) -> dict:
    answer = await tail.api.post("/api/agent/tool-call", json_body=body)
    assert answer.status == 200, answer.body
    return answer.json()


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


async def test_triggered_by_must_name_an_existing_earlier_event(client, actor, start_tail):
    tail = await start_tail()
    first = await post(tail, call(MAIN, "user_prompt"))
    lane = await new_lane(client, actor, "elsewhere")
    (foreign,) = await fill(client, lane, actor, 1)
    await wait_applied(tail.service, foreign)
    cases = [(first["seq_id"] + 1000, "unknown"), (0, "unknown"), (-3, "unknown"), (foreign, "other_session")]
    for triggered_by, reason in cases:
        answer = await tail.api.post("/api/agent/tool-call", json_body=call(MAIN, "Edit", triggered_by))
        assert answer.status == 422, triggered_by
        error = answer.error
        assert error["code"] == "causation_violation" and error["retryable"] is False
        assert error["details"]["triggered_by"] == triggered_by
        assert error["details"]["reason"] == reason
    # Nothing was appended by the refusals.
    journal = await tail.api.get("/api/journal")
    assert len(journal.body.splitlines()) == 1


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
        answer = await tail.api.post("/api/agent/tool-call", json_body=body)
        assert answer.status == 400, body
        assert answer.error["code"] == code and answer.error["details"]["path"] == path, body
    malformed = await tail.api.post(
        "/api/agent/tool-call", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert malformed.status == 400 and malformed.error["code"] == "malformed_message"
    # Server-derived fields (Korg §1.2.7) are ignored, not refused.
    ok = await post(
        tail,
        call(MAIN, "Edit", seq_id=7, event_id="x", actor_id="korg:api", recorded_at="2026-01-01T00:00:00Z"),
    )
    assert ok["seq_id"] != 7 and ok["event_id"] != "x"


async def test_journal_envelopes_cursor_limit_and_session(client, actor, start_tail):
    tail = await start_tail()
    root = await post(tail, call("human:dusk", "user_prompt"))
    lane = await new_lane(client, actor)
    await fill(client, lane, actor, 3)  # ordinary ledger events: not in the journal
    big = {"content": "x" * 10}
    # A descriptor names a blob the client stored first (Korg §7.3 blob-first).
    new_string = b"n" * 2048
    digest = hashlib.sha256(new_string).hexdigest()
    assert (await tail.api.request("PUT", f"/api/blob/{digest}", data=new_string)).status == 200
    refs = [
        {
            "sha256": hashlib.sha256(new_string).hexdigest(),
            "size_bytes": 2048,
            "label": "Edit.args.new_string",
        }
    ]
    edit = await post(tail, call(MAIN, "Edit", root["seq_id"], result=big, payload_refs=refs))
    other = await post(tail, call(MAIN, "user_prompt", session_id="second"))
    await wait_applied(tail.service, other["seq_id"])

    answer = await tail.api.get("/api/journal")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in answer.body.splitlines()]
    assert [line["seq_id"] for line in lines] == [root["seq_id"], edit["seq_id"], other["seq_id"]]
    envelope = lines[1]
    assert envelope["schema_version"] == "1.0"
    meta, event = envelope["metadata"], envelope["event"]
    assert meta["seq_id"] == edit["seq_id"] and meta["triggered_by"] == root["seq_id"]
    assert meta["causation_id"] == root["event_id"] and meta["event_id"] == edit["event_id"]
    assert meta["actor_id"] == "korg:api" and meta["ledger_hash"] == edit["entry_hash"]
    assert meta["parent_hash"] is None  # first event of its lane: genesis
    assert meta["session_id"] == "korg" and meta["rewind_of"] is None
    assert meta["payload_refs"] == refs == event["payload_refs"]
    assert event == {
        "event_type": "AgentToolCall",
        "tool_name": "Edit",
        "source_agent": MAIN,
        "args": {"file_path": "src/app.py"},
        "result": big,
        "success": True,
        "duration_ms": 142,
        "timestamp": meta["recorded_at"],
        "payload_refs": refs,
    }

    page = await tail.api.get("/api/journal", params={"cursor": str(root["seq_id"]), "limit": "1"})
    assert [json.loads(line)["seq_id"] for line in page.body.splitlines()] == [edit["seq_id"]]
    second = await tail.api.get("/api/journal", params={"session_id": "second"})
    assert [json.loads(line)["seq_id"] for line in second.body.splitlines()] == [other["seq_id"]]
    none = await tail.api.get("/api/journal", params={"session_id": "nobody"})
    assert none.status == 200 and none.body == b""


def journal_records(answer) -> list[dict]:
    assert answer.status == 200, answer.body
    return [json.loads(line) for line in answer.body.splitlines()]


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

    missing = await tail.api.post("/api/agent/tool-call", json_body=body)
    assert missing.status == 422 and missing.error["code"] == "blob_missing"
    assert (await tail.api.get(f"/api/blob/{digest}")).status == 404

    wrong = await tail.api.request("PUT", f"/api/blob/{digest}", data=data + b" ")
    assert wrong.status == 400 and wrong.error["details"]["parameter"] == "sha256"
    assert wrong.error["details"]["found"] == hashlib.sha256(data + b" ").hexdigest()
    for name in (digest, f"sha256:{digest}"):  # again: already stored is fine
        stored = await tail.api.request(
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
    bad = await tail.api.request("PUT", "/api/blob/not-a-hash", data=b"x")
    assert bad.status == 400 and bad.error["details"]["parameter"] == "sha256"
    # Korg answers a read by uppercase hex 404, as a blob it does not have (its MCP layer: not_found).
    upper = await tail.api.get(f"/api/blob/{digest.upper()}")
    assert upper.status == 404 and upper.error["details"]["kind"] == "blob"
    assert (await tail.api.get("/api/blob/not-a-hash")).status == 400


async def test_the_korg_blob_routes_are_the_korg_tenants(client, start_tail):
    from laneledger.runtime.access import AccessPolicy

    tokens = {"korg": "k" * 20, "acme": "a" * 20}
    tail = await start_tail(access=AccessPolicy.from_tokens(tokens))
    data = b"b" * 2048
    digest = hashlib.sha256(data).hexdigest()

    def bearer(tenant: str) -> dict:
        return {"Authorization": f"Bearer {tokens[tenant]}"}

    other = await tail.api.request("PUT", f"/api/blob/{digest}", data=data, headers=bearer("acme"))
    assert other.status == 403 and other.error["code"] == "tenant_mismatch"
    own = await tail.api.request("PUT", f"/api/blob/{digest}", data=data, headers=bearer("korg"))
    assert own.status == 200
    assert (await tail.api.get(f"/api/blob/{digest}", headers=bearer("korg"))).body == data
    hidden = await tail.api.get(f"/api/blob/{digest}", headers=bearer("acme"))
    assert hidden.status == 404 and hidden.error["code"] == "entity_not_found"


async def test_korg_clients_without_a_token_are_told_why_and_what_to_use(client, start_tail):
    """Korg's own MCP server sends no token: a tail with tokens refuses it on
    every route (no loopback exception, spec/mcp.md), with a typed 401 whose
    hint names the way out; a wrong token or a laneledger route gets no hint."""
    from laneledger.runtime.access import AccessPolicy

    tokens = {"korg": "k" * 20, "acme": "a" * 20}
    tail = await start_tail(access=AccessPolicy.from_tokens(tokens))
    sha256 = "ab" * 32
    for method, path, body in (
        ("GET", "/api/journal", None),
        ("POST", "/api/agent/tool-call", call("human:dusk", "user_prompt")),
        ("GET", f"/api/blob/{sha256}", None),
    ):
        refused = await tail.api.request(method, path, json_body=body)
        assert refused.status == 401, path
        assert refused.error["code"] == "unauthorized" and refused.error["details"]["reason"] == "missing"
        assert "laneledger mcp --url TAIL --token-file FILE" in refused.error["details"]["hint"], path
    wrong = await tail.api.get("/api/journal", headers={"Authorization": "Bearer " + "x" * 20})
    assert wrong.status == 401 and wrong.error["details"] == {"reason": "invalid"}
    native = await tail.api.get("/api/v1/sessions")
    assert native.status == 401 and native.error["details"] == {"reason": "missing"}
    with_token = await tail.api.get("/api/journal", headers={"Authorization": f"Bearer {tokens['korg']}"})
    assert with_token.status == 200


async def test_the_journal_is_a_korg_ledger_v1_chain(client, actor, start_tail, tmp_path):
    """Top-level prev_hash/entry_hash over the journal selected, from genesis
    at its first record: a cursor only chooses which lines are sent, so the
    pages of one journal link up, and a whole journal verifies."""
    tail = await start_tail()
    previous = None
    for n in range(7):
        answer = await post(tail, call(MAIN, "user_prompt" if n == 0 else f"step-{n}", previous))
        previous = answer["seq_id"]
        if n == 3:  # another session's call in between: not in the session's journal
            await post(tail, call(MAIN, "user_prompt", session_id="second"))
    await wait_applied(tail.service, previous)

    whole = journal_records(await tail.api.get("/api/journal", params={"session_id": "korg"}))
    assert len(whole) == 7 and whole[0]["prev_hash"] == "0" * 64
    assert [r["prev_hash"] for r in whole[1:]] == [r["entry_hash"] for r in whole[:-1]]
    pages, cursor = [], 0
    while True:
        page = journal_records(
            await tail.api.get(
                "/api/journal", params={"session_id": "korg", "cursor": str(cursor), "limit": "3"}
            )
        )
        if not page:
            break
        pages += page
        cursor = page[-1]["seq_id"]
    assert pages == whole
    everything = journal_records(await tail.api.get("/api/journal"))
    assert len(everything) == 8 and everything[0] == whole[0]  # its own chain: the same start
    assert everything[5]["prev_hash"] == everything[4]["entry_hash"] != whole[4]["entry_hash"]

    # Korg's reference verification (chain and DAG) takes the session's
    # journal, whose seq_ids skip the other session's position.
    assert korg_reference_verify(whole) == []
    forged = [dict(r) for r in whole]
    forged[2] = {**forged[2], "event": {**forged[2]["event"], "tool_name": "forged"}}
    assert korg_reference_verify(forged) == [f"seq {whole[2]['seq_id']}: entry_hash mismatch"]
    # laneledger's verifier, on the whole journal as a file (its seq_ids run 1..8 here).
    path = tmp_path / "journal.jsonl"
    path.write_bytes((await tail.api.get("/api/journal")).body)
    assert verify_journal(read_journal(path)) == everything[-1]["entry_hash"]
    forged = [dict(r) for r in everything]
    forged[2] = {**forged[2], "event": {**forged[2]["event"], "tool_name": "forged"}}
    with pytest.raises(ChainFault) as fault:
        verify_journal(forged)
    assert fault.value.details["kind"] == "content_tampered" and fault.value.details["seq"] == 3


async def test_the_journal_holds_natively_recorded_sessions_of_the_korg_tenant(client, start_tail, tmp_path):
    """A session recorded natively in the Korg tenant (the SDK, an importer)
    is in /api/journal as its Korg records (issue 37: it was invisible), with
    the same seq_ids (positions), and the whole journal still verifies as
    korg-ledger-v1, chain and causal DAG; ``triggered_by=`` selects the
    children of one event (Korg's server and dogfood script use it)."""
    tail = await start_tail()
    root = await post(tail, call("human:dusk", "user_prompt"))
    child = await post(tail, call(MAIN, "Edit", root["seq_id"]))
    agent = await client.ensure_actor("korg", "agent:native@1", "agent")
    lane = await new_lane(client, agent, "native-session", tenant="korg")
    native = await fill(client, lane, agent, 3)
    await wait_applied(tail.service, native[-1])
    lines = journal_records(await tail.api.get("/api/journal"))
    assert [line["seq_id"] for line in lines] == [root["seq_id"], child["seq_id"], *native]
    first_native = lines[2]
    assert first_native["event"]["source_agent"] == agent.id
    assert first_native["event"]["tool_name"] == "stream.text_delta"
    assert first_native["event"]["args"] == {"text": "hi"}
    assert first_native["metadata"]["session_id"] == "native-session"
    # A native event names its cause, or its session's first event (the root).
    assert [line["metadata"]["triggered_by"] for line in lines[2:]] == [None, native[0], native[0]]
    path = tmp_path / "journal.jsonl"
    path.write_bytes((await tail.api.get("/api/journal")).body)
    assert verify_journal(read_journal(path)) == lines[-1]["entry_hash"]
    assert korg_reference_verify(lines) == []

    children = journal_records(
        await tail.api.get("/api/journal", params={"triggered_by": str(root["seq_id"])})
    )
    assert [c["seq_id"] for c in children] == [child["seq_id"]]
    assert children[0] == lines[1]  # the same chained record: a filter only chooses what is sent
    assert (await tail.api.get("/api/journal", params={"triggered_by": "x"})).status == 400


async def test_a_claude_code_import_into_the_korg_tenant_after_korg_posts(client, start_tail):
    """Korg's stream-json adapter and laneledger's importer name the same
    agents (issue 37: the import failed with entity_conflict on the actor a
    Korg post had registered with another description): the import adopts
    it, and the whole tenant's journal holds both."""
    tail = await start_tail()
    root = await post(tail, call(f"agent:{RUNTIME}/main@2.1.150", "user_prompt"))
    importer = ClaudeCodeImport(client, tenant="korg")
    summary = await importer.run(
        (await asyncio.to_thread(CLAUDE_CODE_CAPTURE.read_bytes)).splitlines(keepends=True)
    )
    session = await client.load_session(summary.session_id, tenant="korg")
    await wait_applied(tail.service, max(e.position for e in session.events))
    # The reverse: a Korg post as the human the importer registered.
    after = await post(tail, call(DEFAULT_HUMAN, "user_prompt"))
    await wait_applied(tail.service, after["seq_id"])
    lines = journal_records(await tail.api.get("/api/journal"))
    assert lines[0]["seq_id"] == root["seq_id"] and lines[-1]["seq_id"] == after["seq_id"]
    imported = [line for line in lines if line["metadata"]["session_id"] == summary.session_id]
    assert len(imported) == len(session.events)
    korg_actor = await client.ensure_actor(
        "korg", f"agent:{RUNTIME}/main@2.1.150", "agent", display_name=f"agent:{RUNTIME}/main@2.1.150"
    )
    assert any(e.actor_id == korg_actor.id for e in session.events)  # the one actor of that key
