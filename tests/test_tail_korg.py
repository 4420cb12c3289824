"""Korg compatibility, the reads: GET /api/journal (NDJSON envelopes, a
korg-ledger-v1 chain) and GET /api/blob/{sha256}. The calls are posted to
the ingest service beside the tail (``tail.ingest``); its writes are tested
in test_ingest_korg.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest
from korg_dogfood import korg_reference_verify
from tail_support import MAIN, fill, journal_records, new_lane, wait_applied
from tail_support import korg_call as call
from tail_support import korg_post as post

from laneledger.compat.claudecode import ClaudeCodeImport
from laneledger.compat.claudecode_names import DEFAULT_HUMAN, RUNTIME
from laneledger.compat.korg import read_journal, verify_journal
from laneledger.contract.errors import ChainFault

pytestmark = pytest.mark.timeout(90)
CLAUDE_CODE_CAPTURE = Path(__file__).resolve().parent / "fixtures" / "claude-code" / "session.jsonl"


async def test_journal_envelopes_cursor_limit_and_session(client, actor, start_tail):
    tail = await start_tail()
    root = await post(tail, call("human:dusk", "user_prompt"))
    lane = await new_lane(client, actor)
    await fill(client, lane, actor, 3)  # ordinary ledger events: not in the journal
    big = {"content": "x" * 10}
    # A descriptor names a blob the client stored first (Korg §7.3 blob-first).
    new_string = b"n" * 2048
    digest = hashlib.sha256(new_string).hexdigest()
    assert (await tail.ingest.request("PUT", f"/api/blob/{digest}", data=new_string)).status == 200
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


async def test_korg_clients_without_a_token_are_told_why_and_what_to_use(client, start_tail):
    """Korg's own MCP server sends no token: a tail with tokens refuses it on
    every route (no loopback exception, spec/mcp.md), with a typed 401 whose
    hint names the way out; a wrong token or a laneledger route gets no hint.
    (The ingest's writes: test_ingest_korg.py.)"""
    from laneledger.runtime.access import AccessPolicy

    tokens = {"korg": "k" * 20, "acme": "a" * 20}
    tail = await start_tail(access=AccessPolicy.from_tokens(tokens))
    sha256 = "ab" * 32
    for path in ("/api/journal", f"/api/blob/{sha256}"):
        refused = await tail.api.get(path)
        assert refused.status == 401, path
        assert refused.error["code"] == "unauthorized" and refused.error["details"]["reason"] == "missing"
        assert "laneledger mcp --url TAIL --token-file FILE" in refused.error["details"]["hint"], path
    wrong = await tail.api.get("/api/journal", headers={"Authorization": "Bearer " + "x" * 20})
    assert wrong.status == 401 and wrong.error["details"] == {"reason": "invalid"}
    native = await tail.api.get("/api/v1/sessions")
    assert native.status == 401 and native.error["details"] == {"reason": "missing"}
    with_token = await tail.api.get("/api/journal", headers={"Authorization": f"Bearer {tokens['korg']}"})
    assert with_token.status == 200


async def test_the_tail_serves_no_write(client, start_tail):
    """Korg's writes are the ingest service's: the tail answers them as
    routes it does not have (a typed 404; 405 where it serves the path's GET)."""
    tail = await start_tail()
    posted = await tail.api.post("/api/agent/tool-call", json_body=call(MAIN, "user_prompt"))
    assert posted.status == 404 and posted.error["details"]["kind"] == "route"
    digest = hashlib.sha256(b"x").hexdigest()
    put = await tail.api.request("PUT", f"/api/blob/{digest}", data=b"x")
    assert put.status == 405 and put.error["details"]["allowed"] == ["GET", "HEAD"]
    assert journal_records(await tail.api.get("/api/journal")) == []


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
