"""``laneledger mcp`` driven by the official MCP SDK's client, over stdio and
streamable HTTP, against a real nats-server, sequencer and tail: Korg §8's
resources, templates, shapes, cursors, errors, tools and subscriptions,
main and sub-agent spines (§2b), a natively recorded session, tenancy, and
laneledger's own proofs (spec/mcp.md)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import shlex
import socket
import sys
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import jsonschema
import mcp.client.session
import mcp.types
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION
from polling import eventually
from tail_support import MAIN, SUB, ev, fill, new_lane, wait_applied
from tail_support import korg_call as call
from tlog_support import size_of, start_signing_sequencer

from laneledger.mcp import catalog
from laneledger.mcp.serve import mcp_url_of
from laneledger.mcp.server import BLOB_CAP, MAX_LISTENS
from laneledger.mcp.subscriptions import matches
from laneledger.mcp.uris import BadUri, parse
from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.blobstore import BlobStore
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.tlog.bundle import verify_bundle
from laneledger.tlog.note import Signer
from laneledger.tlog.sessionbundle import verify_session_bundle

pytestmark = pytest.mark.timeout(120)
README = Path(__file__).resolve().parents[1] / "README.md"


async def post(tail, body: dict) -> int:
    answer = await tail.ingest.post("/api/agent/tool-call", json_body=body)
    assert answer.status == 200, answer.body
    return int(answer.json()["seq_id"])


async def korg_session(tail) -> dict[str, int]:
    return await korg_session_with(tail, None)


async def korg_session_with(tail, token: str | None) -> dict[str, int]:
    """Korg §2b's worked example: a main spine and a sub-agent spine, a diamond."""
    headers = {"Authorization": f"Bearer {token}"} if token else None

    async def post(tail, body: dict) -> int:
        answer = await tail.ingest.post("/api/agent/tool-call", json_body=body, headers=headers)
        assert answer.status == 200, answer.body
        return int(answer.json()["seq_id"])

    s: dict[str, int] = {}
    s["root"] = await post(tail, call("human:dusk", "user_prompt"))
    s["llm"] = await post(tail, call(MAIN, "llm_inference", s["root"]))
    s["spawn"] = await post(tail, call(MAIN, "Agent", s["llm"]))
    s["sub_prompt"] = await post(tail, call(SUB, "user_prompt", s["llm"]))
    s["sub_llm"] = await post(tail, call(SUB, "llm_inference", s["sub_prompt"]))
    s["read"] = await post(tail, call(SUB, "Read", s["sub_llm"]))
    s["llm2"] = await post(tail, call(MAIN, "llm_inference", s["spawn"]))
    await wait_applied(tail.service, s["llm2"])
    return s


def mcp_command(tail_url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "laneledger.cli", "mcp", "--url", tail_url, *extra]


@contextlib.asynccontextmanager
async def stdio_session(
    tail_url: str, *extra: str, inits: list | None = None
) -> AsyncIterator[ClientSession]:
    """A client session with ``laneledger mcp`` as a client launches it (``inits``: gets the
    initialize result)."""
    command = mcp_command(tail_url, *extra)
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        if inits is not None:
            inits.append(init)
        yield session


@contextlib.asynccontextmanager
async def http_server(tail_url: str) -> AsyncIterator[str]:
    """``laneledger mcp --serve`` as ops run it, on a port the OS picks."""
    proc = await asyncio.create_subprocess_exec(
        *mcp_command(tail_url, "--serve", "--listen", "127.0.0.1:0"), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("laneledger-mcp ready http=http://127.0.0.1:"), line
        yield mcp_url_of(line)
    finally:
        proc.terminate()
        await proc.wait()


async def live_feeds(tail) -> float:
    """The tail's open SSE subscriptions (its /metrics)."""
    text = (await tail.api.get("/metrics")).body.decode()
    return next(
        float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("laneledger_tail_subscribers ")
    )


async def read_json(session: ClientSession, uri: str) -> Any:
    result = await session.read_resource(uri)
    (content,) = result.contents
    assert isinstance(content, mcp.types.TextResourceContents)
    assert content.mime_type == "application/json"
    return json.loads(content.text)


async def reason_of(session: ClientSession, uri: str) -> tuple[int, dict]:
    with pytest.raises(MCPError) as raised:
        await session.read_resource(uri)
    return raised.value.error.code, raised.value.error.data


# -- pure: URIs and predicates ------------------------------------------------------------------


def test_uris_parse_to_their_resource_and_refuse_the_rest():
    t = parse("korg://local/session/12/events?cursor=3&limit=2&source_agent=agent%3Ax")
    assert (t.kind, t.ids, t.query) == (
        "events",
        ("12",),
        {"cursor": "3", "limit": "2", "source_agent": "agent:x"},
    )
    # §2b names hold a '/': raw or percent-encoded, the same agent.
    assert parse(f"korg://local/agent/{quote(SUB, safe='')}/recent").ids == (SUB,)
    assert parse(f"korg://local/agent/{SUB}/recent").ids == (SUB,)
    assert parse("laneledger://acme/session/s-1/bundle").kind == "ll_bundle"
    for bad, reason in [
        ("korg://event/42", "not_found"),  # §8.1's bad example: no ledger
        ("http://local/ledger/recent", "not_found"),
        ("korg://local/session/x", "not_found"),
        ("korg://local/ledger/recent?limit=-1", "invalid_params"),
        ("korg://local/ledger/recent?foo=1", "invalid_params"),
        ("korg://local/ledger/recent?limit=1&limit=2", "invalid_params"),
        ("korg://local/" + "a" * 3000, "not_found"),
    ]:
        with pytest.raises(BadUri) as raised:
            parse(bad)
        assert raised.value.reason == reason, bad


def test_subscription_predicates_are_korg_8_5_2():
    root = {"seq_id": 7, "metadata": {"root_seq": 7}}
    child = {"seq_id": 9, "metadata": {"root_seq": 7}}
    assert matches(parse("korg://local/ledger/recent"), MAIN, None)
    assert matches(parse(f"korg://local/agent/{quote(MAIN, safe='')}/recent"), MAIN, None)
    assert not matches(parse(f"korg://local/agent/{quote(SUB, safe='')}/recent"), MAIN, None)
    heads = parse("korg://local/ledger/heads")
    assert matches(heads, MAIN, root) and not matches(heads, MAIN, child)
    assert matches(parse("korg://local/session/7/summary"), MAIN, child)
    assert not matches(parse("korg://local/session/8/summary"), MAIN, child)


# Korg's own MCP server's tools (korg_mcp_server.py v1): property -> JSON type, and required.
KORG_TOOLS = {
    "korg_append_event": (
        {
            "source_agent": "string",
            "tool_name": "string",
            "args": "object",
            "result": "object",
            "success": "boolean",
            "duration_ms": "integer",
            "triggered_by": "integer",
            "payload_refs": "array",
        },
        ["source_agent", "tool_name", "args", "result", "success", "duration_ms"],
    ),
    "korg_query_events": (
        {"limit": "integer", "tool_name": "string", "triggered_by": "integer", "source_agent": "string"},
        [],
    ),
}


def test_the_korg_tools_take_korg_s_input_schemas():
    """Korg's properties with Korg's types and Korg's required list; what
    laneledger adds (``ledger``) is optional, so a Korg client's call is valid."""
    tools = {tool.name: tool.input_schema for tool in catalog.tools()}
    for name, (types, required) in KORG_TOOLS.items():
        schema = tools[name]
        assert schema["type"] == "object" and schema["required"] == required, name
        ours = {k: v["type"] for k, v in schema["properties"].items()}
        assert {k: ours[k] for k in types} == types, name
        assert not set(required) - set(types), name
    refs = tools["korg_append_event"]["properties"]["payload_refs"]["items"]
    assert refs["required"] == ["sha256", "size_bytes"]
    assert set(tools["korg_query_events"]["properties"]) - set(KORG_TOOLS["korg_query_events"][0]) == {
        "ledger"
    }
    assert tools["laneledger_verify_session"]["required"] == ["session_id"]


# -- over stdio -------------------------------------------------------------------------------


async def test_korg_resources_over_stdio(client, actor, start_tail):
    tail = await start_tail()
    s = await korg_session(tail)
    async with stdio_session(tail.url) as session:
        listed = {str(r.uri) for r in (await session.list_resources()).resources}
        for path in ("ledger/recent", "ledger/heads", "schema/event", "schema/spec", "stats/integrity"):
            assert f"korg://local/{path}" in listed
        assert not any("/blob/" in uri for uri in listed)  # §8.2: never enumerated
        templates = {t.uri_template for t in (await session.list_resource_templates()).resource_templates}
        assert "korg://{ledger}/blob/{sha256}" in templates
        assert "korg://{ledger}/agent/{source_agent}/recent" in templates

        # §8.3.1 tail surface: newest first, seq_id < cursor.
        page1 = await read_json(session, "korg://local/ledger/recent?limit=2")
        assert [e["seq_id"] for e in page1["events"]] == [s["llm2"], s["read"]]
        assert page1["next_cursor"] == s["read"] and page1["has_more"] is True
        page2 = await read_json(session, f"korg://local/ledger/recent?limit=2&cursor={page1['next_cursor']}")
        assert [e["seq_id"] for e in page2["events"]] == [s["sub_llm"], s["sub_prompt"]]

        heads = await read_json(session, "korg://local/ledger/heads")
        assert heads["heads"] == [s["root"]]

        meta = await read_json(session, f"korg://local/session/{s['root']}")
        assert meta["root_seq"] == meta["first_seq"] == s["root"]
        assert meta["total_events"] == 7 and meta["last_seq"] == meta["last_event_seq"] == s["llm2"]
        assert meta["agent_count"] == 3 and set(meta["agents"]) == {"human:dusk", MAIN, SUB}
        assert meta["root_event"]["tool_name"] == "user_prompt" and meta["root_event"]["triggered_by"] is None
        assert "status" not in meta and meta["schema_version"] == "1.0"
        last = await read_json(session, f"korg://local/event/{s['llm2']}")
        assert meta["last_event_at"] == last["timestamp"] and meta["last_event_at"].endswith("Z")

        # §8.3.1 head surface: oldest first, seq_id > cursor, all spines mixed.
        events = await read_json(session, f"korg://local/session/{s['root']}/events?limit=2")
        assert [e["seq_id"] for e in events["events"]] == [s["root"], s["llm"]]
        assert events["next_cursor"] == s["llm"]
        rest = await read_json(session, f"korg://local/session/{s['root']}/events?cursor={s['llm']}")
        assert [e["seq_id"] for e in rest["events"]] == [
            s[k] for k in ("spawn", "sub_prompt", "sub_llm", "read", "llm2")
        ]
        assert rest["has_more"] is False
        full = rest["events"][1]
        assert full["source_agent"] == SUB and full["tool_name"] == "user_prompt"
        assert full["triggered_by"] == s["llm"] and full["args"] == {"file_path": "src/app.py"}
        assert full["payload_refs"] == [] and full["event_type"] == "AgentToolCall"

        # The sub-agent's spine alone, as a skeleton.
        spine = await read_json(
            session, f"korg://local/session/{s['root']}/summary?source_agent={quote(SUB)}"
        )
        assert [e["seq_id"] for e in spine["events"]] == [s["sub_prompt"], s["sub_llm"], s["read"]]
        assert spine["events"][0] == {
            "seq_id": s["sub_prompt"],
            "source_agent": SUB,
            "tool_name": "user_prompt",
            "triggered_by": s["llm"],
            "success": True,
            "duration_ms": 142,
            "has_payload_refs": False,
        }
        main = await read_json(session, f"korg://local/agent/{quote(MAIN, safe='')}/recent")
        assert [e["seq_id"] for e in main["events"]] == [s["llm2"], s["spawn"], s["llm"]]

        one = await read_json(session, f"korg://local/event/{s['read']}")
        assert one["tool_name"] == "Read" and one["triggered_by"] == s["sub_llm"]

        # §8.6: errors and their reasons.
        assert await reason_of(session, "korg://local/event/999999") == (
            -32602,
            {"reason": "not_found", "details": {"kind": "event", "seq_id": 999999}},
        )
        code, data = await reason_of(session, f"korg://local/session/{s['llm']}")
        assert (code, data["reason"]) == (-32602, "not_found")
        code, data = await reason_of(session, "korg://nobody/ledger/recent")
        assert (code, data["reason"]) == (-32602, "unknown_ledger")
        code, data = await reason_of(session, "korg://local/blob/" + "ab" * 32)
        assert (code, data["reason"]) == (-32602, "not_found")
        immutable = f"korg://local/event/{s['read']}"
        with pytest.raises(MCPError) as raised:
            await session.subscribe_resource(immutable)
        assert (raised.value.error.code, raised.value.error.data) == (
            -32602,
            {"reason": "not_subscribable", "uri": immutable},
        )

        schema = await read_json(session, "korg://local/schema/event")
        assert schema["title"] == "AgentToolCall"
        assert schema["required"] == ["source_agent", "tool_name", "args", "result", "success", "duration_ms"]
        for record in [*events["events"], *rest["events"], one]:  # the schema describes what is read
            jsonschema.validate(record, schema)


async def test_a_native_session_is_a_korg_session(client, actor, start_tail):
    tail = await start_tail()
    lane = await new_lane(client, actor, "native")
    positions = await fill(client, lane, actor, 3)
    await wait_applied(tail.service, positions[-1])
    tenant = lane.tenant
    async with stdio_session(tail.url) as session:
        ledgers = {str(r.uri) for r in (await session.list_resources()).resources}
        assert f"korg://{tenant}/ledger/recent" in ledgers
        heads = await read_json(session, f"korg://{tenant}/ledger/heads")
        (root,) = heads["heads"]
        events = await read_json(session, f"korg://{tenant}/session/{root}/events")
        seqs = [e["seq_id"] for e in events["events"]]
        assert seqs[-3:] == positions and seqs[0] == root
        # The first event is the root; the others name their cause, or the root (Korg §4).
        assert events["events"][0]["triggered_by"] is None
        assert all(e["triggered_by"] is not None for e in events["events"][1:])
        assert all(
            e["source_agent"] == actor.id for e in events["events"] if e["metadata"]["lane_id"] == lane.id
        )
        schema = await read_json(session, f"korg://{tenant}/schema/event")
        for record in events["events"]:  # a native event is an AgentToolCall too
            jsonschema.validate(record, schema)


async def test_a_native_session_at_any_depth_is_one_korg_session(client, start_tail):
    """A natively recorded session with a sub-agent lane and a sub-sub-agent
    lane is one Korg session (its root: the session's first event): every
    spine in its events, each spine by source_agent, and a commit three lanes
    deep notifies the session's subscription."""
    tail = await start_tail()
    names = ("main", "sub", "subsub")
    actors = [await client.ensure_actor("acme", f"agent:deep/{name}@1", "agent") for name in names]
    lanes = [await client.create_lane("acme", "deep", "r1", "main", actor_id=actors[0].id)]
    for depth in (1, 2):
        lanes.append(
            await client.create_lane(
                "acme",
                "deep",
                "r1",
                names[depth],
                kind="subagent",
                parent_lane_id=lanes[-1].id,
                actor_id=actors[depth].id,
            )
        )

    async def put(depth: int, cause: str | None) -> tuple[int, str]:
        event = ev(lanes[depth], actors[depth], causation_id=cause)
        head = (await client.get_lane(lanes[depth].id)).last_seq
        return (await client.append(lanes[depth], head, [event])).positions[0], event["id"]

    root, root_id = await put(0, None)
    sub, sub_id = await put(1, root_id)
    deep, _ = await put(2, sub_id)
    await wait_applied(tail.service, deep)
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp.types.ResourceUpdatedNotification):
            updates.put_nowait(str(message.params.uri))

    command = mcp_command(tail.url)
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        assert (await read_json(session, "korg://acme/ledger/heads"))["heads"] == [root]
        events = (await read_json(session, f"korg://acme/session/{root}/events"))["events"]
        assert [(e["seq_id"], e["triggered_by"], e["source_agent"]) for e in events] == [
            (root, None, actors[0].id),
            (sub, root, actors[1].id),
            (deep, sub, actors[2].id),
        ]
        meta = await read_json(session, f"korg://acme/session/{root}")
        assert (meta["total_events"], meta["agent_count"], meta["last_seq"]) == (3, 3, deep)
        deepest = quote(actors[2].id, safe="")
        spine = await read_json(session, f"korg://acme/session/{root}/summary?source_agent={deepest}")
        assert [e["seq_id"] for e in spine["events"]] == [deep]
        summary, agent = f"korg://acme/session/{root}/summary", f"korg://acme/agent/{deepest}/recent"
        with warnings.catch_warnings():  # the handshake era's subscribe, which this server serves
            warnings.simplefilter("ignore")
            for uri in (summary, agent):
                await session.subscribe_resource(uri)
        await eventually(lambda: live_feeds(tail), until=lambda n: n == 1, what="the server's feed")
        again, _ = await put(2, sub_id)
        got = sorted([await asyncio.wait_for(updates.get(), 10) for _ in range(2)])
        assert got == sorted([summary, agent])
        tail_of_session = await read_json(session, f"{summary}?cursor={deep}")
        assert [e["seq_id"] for e in tail_of_session["events"]] == [again]


async def test_tools_and_protocol_2024_11_05(client, start_tail, monkeypatch):
    tail = await start_tail()
    # The SDK's client offering 2024-11-05, as Korg's tests and drivers speak it.
    monkeypatch.setattr(mcp.client.session, "LATEST_HANDSHAKE_VERSION", "2024-11-05")
    inits: list = []
    async with stdio_session(tail.url, "--ingest-url", tail.ingest_url, inits=inits) as session:
        assert inits[0].protocol_version == "2024-11-05"
        assert inits[0].server_info.name == "laneledger"
        # §8.5.4: the initialization says subscriptions are not persisted; like
        # Korg's server, subscribe but no listChanged (no list_changed is ever sent).
        assert "in memory only" in (inits[0].instructions or "")
        resources = inits[0].capabilities.resources
        assert resources is not None and resources.subscribe is True and not resources.list_changed
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"korg_append_event", "korg_query_events", "laneledger_verify_session"} <= set(tools)
        prompt = call("human:dusk", "user_prompt")
        del prompt["triggered_by"]  # Korg's schema: an integer, or absent for a root
        root = await session.call_tool("korg_append_event", prompt)
        assert not root.is_error, root.content
        seq = json.loads(root.content[0].text)["seq_id"]
        child = await session.call_tool("korg_append_event", call(MAIN, "Edit", seq))
        child_seq = json.loads(child.content[0].text)["seq_id"]
        await wait_applied(tail.service, child_seq)
        found = await session.call_tool("korg_query_events", {"triggered_by": seq})
        answer = json.loads(found.content[0].text)
        assert [e["seq_id"] for e in answer["events"]] == [child_seq]
        by_tool = json.loads(
            (await session.call_tool("korg_query_events", {"tool_name": "user_prompt"})).content[0].text
        )
        assert [e["seq_id"] for e in by_tool["events"]] == [seq]
        by_agent = json.loads(
            (await session.call_tool("korg_query_events", {"source_agent": MAIN})).content[0].text
        )
        assert [e["seq_id"] for e in by_agent["events"]] == [child_seq]
        one = json.loads((await session.call_tool("korg_query_events", {"limit": 1})).content[0].text)
        assert (one["count"], [e["seq_id"] for e in one["events"]]) == (1, [child_seq])  # newest first
        bad = await session.call_tool("korg_append_event", call(MAIN, "Edit", child_seq + 1000))
        assert bad.is_error
        # The SDK checks the input against Korg's schema before the tool runs.
        missing = await session.call_tool("korg_append_event", {"source_agent": MAIN, "tool_name": "Edit"})
        assert missing.is_error and "required" in missing.content[0].text
        verified = await session.call_tool("laneledger_verify_session", {"session_id": "korg"})
        assert not verified.is_error, verified.content


async def test_pages_keep_korg_8_3_default_and_maximum_limits(client, actor, start_tail):
    """§8.3's limits, read through MCP on a 1001-event native session: the
    defaults, the maxima, and a limit above a maximum refused as
    ``invalid_params``; an agent's page names the agent; the session's first
    event stays readable (reads are indexed, not a window)."""
    tail = await start_tail()
    lane = await new_lane(client, actor, "long")
    positions = await fill(client, lane, actor, 1001, per_append=500)
    await wait_applied(tail.service, positions[-1])
    ledger = lane.tenant
    root = positions[0]
    agent = quote(actor.id, safe="")
    async with stdio_session(tail.url) as session:
        for uri, default, maximum in (
            (f"korg://{ledger}/session/{root}/summary", 100, 1000),
            (f"korg://{ledger}/session/{root}/events", 50, 500),
            (f"korg://{ledger}/ledger/recent", 50, 500),
            (f"korg://{ledger}/agent/{agent}/recent", 50, 500),
        ):
            first = await read_json(session, uri)
            assert len(first["events"]) == default and first["has_more"] is True, uri
            most = await read_json(session, f"{uri}?limit={maximum}")
            assert len(most["events"]) == maximum and most["has_more"] is True, uri
            code, data = await reason_of(session, f"{uri}?limit={maximum + 1}")
            assert (code, data["reason"]) == (-32602, "invalid_params"), uri
            assert data["details"]["parameter"] == "limit", uri
        oldest = await read_json(session, f"korg://{ledger}/session/{root}/summary?limit=1")
        assert [e["seq_id"] for e in oldest["events"]] == [root]
        newest = await read_json(session, f"korg://{ledger}/agent/{agent}/recent?limit=1")
        assert newest["source_agent"] == actor.id
        assert [e["seq_id"] for e in newest["events"]] == [positions[-1]]
        assert (await read_json(session, f"korg://{ledger}/event/{root}"))["seq_id"] == root


async def test_an_unreachable_tail_is_tail_unreachable():
    """§8.6's table: a tail that cannot be reached is -32603 ``tail_unreachable``,
    for a read and (as the tool's result) for a tool."""
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    async with stdio_session(closed) as session:
        code, data = await reason_of(session, "korg://local/ledger/recent")
        assert (code, data["reason"]) == (-32603, "tail_unreachable")
        failed = await session.call_tool("korg_query_events", {})
        assert failed.is_error and json.loads(failed.content[0].text)["reason"] == "tail_unreachable"


async def test_the_readme_s_claude_mcp_add_line_and_mcp_json_launch_the_server(
    client, start_tail, tmp_path: Path
):
    """The README's two ways to add the server, run as written (``laneledger``
    on PATH, the shell's ``~``), the tail URL swapped for the test tail's: each
    reads the Korg tenant with the token in its file."""
    token = "korg-token-0123456789abcdef"
    tail = await start_tail(access=AccessPolicy.from_tokens({"korg": token}))
    await korg_session_with(tail, token)
    readme = README.read_text()
    line = re.search(r"^claude mcp add laneledger -- (.+)$", readme, re.M)
    block = re.search(r'^```json\n(\{"mcpServers".*?)^```$', readme, re.M | re.S)
    assert line is not None and block is not None
    server = json.loads(block.group(1))["mcpServers"]["laneledger"]
    home, project = tmp_path / "home", tmp_path / "project"
    for folder in (home, project):
        (folder / ".laneledger").mkdir(parents=True)
        (folder / ".laneledger" / "token").write_text(token + "\n")
    env = {**os.environ, "HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    shell = [str(home) + word[1:] if word.startswith("~/") else word for word in shlex.split(line.group(1))]
    for written, cwd in ((shell, tmp_path), ([server["command"], *server["args"]], project)):
        swap = {"http://127.0.0.1:8471": tail.url, "http://127.0.0.1:8476": tail.ingest_url}
        command = [swap.get(word, word) for word in written]
        assert command[:2] == ["laneledger", "mcp"] and tail.url in command, written
        params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=cwd)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            heads = await read_json(session, "korg://local/ledger/heads")
            assert len(heads["heads"]) == 1, command


# -- over streamable HTTP, with subscriptions ------------------------------------------------


async def test_subscriptions_over_streamable_http(client, start_tail):
    tail = await start_tail()
    s = await korg_session(tail)
    updates: asyncio.Queue[tuple[str, float]] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp.types.ResourceUpdatedNotification):
            updates.put_nowait((str(message.params.uri), time.monotonic()))

    async with http_server(tail.url) as url:
        # On a loopback address the SDK refuses another Host (DNS rebinding) or Origin.
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        async with httpx2.AsyncClient(timeout=30) as http:
            rebound = await http.post(url, json=hello, headers={**accept, "Host": "evil.example"})
            foreign = await http.post(url, json=hello, headers={**accept, "Origin": "http://evil.example"})
        assert (rebound.status_code, foreign.status_code) == (421, 403)
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            init = await session.initialize()  # the current protocol version
            assert init.protocol_version == LATEST_HANDSHAKE_VERSION != "2024-11-05"
            assert init.capabilities.resources is not None and init.capabilities.resources.subscribe is True
            recent = "korg://local/ledger/recent"
            summary = f"korg://local/session/{s['root']}/summary"
            sub_agent = f"korg://local/agent/{quote(SUB, safe='')}/recent"
            heads = "korg://local/ledger/heads"
            for uri in (recent, recent, summary, sub_agent, heads):  # a repeat is a no-op (§8.5.3)
                assert isinstance(await session.subscribe_resource(uri), mcp.types.EmptyResult)
            # One feed (the tail's SSE) for the connection's one ledger, however many URIs.
            await eventually(lambda: live_feeds(tail), until=lambda n: n == 1, what="the server's feed")
            await post(tail, call(MAIN, "Bash", s["llm2"]))
            got = sorted([(await asyncio.wait_for(updates.get(), 10))[0] for _ in range(2)])
            assert got == sorted([recent, summary])  # one per URI; not the sub-agent's, not a head
            await session.unsubscribe_resource(summary)
            new_root = await post(tail, call("human:dusk", "user_prompt"))
            got = sorted([(await asyncio.wait_for(updates.get(), 10))[0] for _ in range(2)])
            assert got == sorted([recent, heads])
            await post(tail, call(SUB, "Grep", s["read"]))
            got = sorted([(await asyncio.wait_for(updates.get(), 10))[0] for _ in range(2)])
            assert got == sorted([recent, sub_agent])
            await asyncio.sleep(0.3)
            assert updates.empty()
            listed = await read_json(session, f"korg://local/session/{new_root}")
            assert listed["total_events"] == 1
            never = "korg://local/ledger/heads?limit=1"
            assert isinstance(await session.unsubscribe_resource(never), mcp.types.EmptyResult)  # a no-op
        # The session ended (the client's DELETE): its feed is closed with it (§8.5.4).
        await eventually(lambda: live_feeds(tail), until=lambda n: n == 0, what="the feed closed")
        # A client of the 2026-07-28 era (no handshake; the SDK's Client probes
        # for it) reads the same resources.
        async with Client(url) as modern:
            assert modern.protocol_version == LATEST_MODERN_VERSION
            result = await modern.read_resource(f"korg://local/session/{new_root}")
            assert json.loads(result.contents[0].text)["root_seq"] == new_root


async def test_a_subscription_outlives_a_tail_restart(client, start_tail):
    """§8.5.1: a feed that fails is retried without dropping its
    subscriptions; it resumes after the last position it saw, so the event
    before the restart is not notified twice and the one after is."""
    tail = await start_tail()
    s = await korg_session(tail)
    port = int(tail.url.rsplit(":", 1)[1])
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp.types.ResourceUpdatedNotification):
            updates.put_nowait(str(message.params.uri))

    command = mcp_command(tail.url)
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    summary = f"korg://local/session/{s['root']}/summary"
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        with warnings.catch_warnings():  # the handshake era's subscribe, which this server serves
            warnings.simplefilter("ignore")
            await session.subscribe_resource(summary)
        await eventually(lambda: live_feeds(tail), until=lambda n: n == 1, what="the server's feed")
        before = await post(tail, call(MAIN, "Bash", s["llm2"]))
        assert await asyncio.wait_for(updates.get(), 10) == summary
        await start_tail.stop(tail)
        tail = await start_tail(port=port)  # the same data, the same URL
        await wait_applied(tail.service, before)
        await eventually(lambda: live_feeds(tail), until=lambda n: n == 1, what="the feed resumed")
        await post(tail, call(MAIN, "Grep", before))
        assert await asyncio.wait_for(updates.get(), 10) == summary
        await asyncio.sleep(0.3)
        assert updates.empty()  # one per event: the one before the restart was not sent again
        # Its last subscription gone, the connection follows nothing: idle costs nothing.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await session.unsubscribe_resource(summary)
        await eventually(lambda: live_feeds(tail), until=lambda n: n == 0, what="the feed closed")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_listen_gives_2026_07_28_clients_korg_8_5(client, start_tail, transport):
    """``subscriptions/listen`` (no handshake): the stream is the subscription,
    with §8.5's predicates, one feed per ledger, closed with the stream."""
    tail = await start_tail()
    s = await korg_session(tail)
    recent, heads = "korg://local/ledger/recent", "korg://local/ledger/heads"
    summary = f"korg://local/session/{s['root']}/summary"
    sub_agent = f"korg://local/agent/{quote(SUB, safe='')}/recent"
    async with contextlib.AsyncExitStack() as stack:
        if transport == "http":
            server: Any = await stack.enter_async_context(http_server(tail.url))
        else:
            command = mcp_command(tail.url)
            server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
        modern = await stack.enter_async_context(Client(server))
        assert modern.protocol_version == LATEST_MODERN_VERSION
        resources = modern.server_capabilities.resources
        assert resources is not None and resources.subscribe is True
        async with modern.listen(resource_subscriptions=[recent, recent, summary, sub_agent, heads]) as sub:
            assert sub.honored.resource_subscriptions == [recent, summary, sub_agent, heads]

            async def next_uris(n: int) -> list[str]:
                return sorted([(await asyncio.wait_for(anext(sub), 10)).uri for _ in range(n)])

            await eventually(lambda: live_feeds(tail), until=lambda n: n == 1, what="the listen feed")
            await post(tail, call(MAIN, "Bash", s["llm2"]))
            assert await next_uris(2) == sorted([recent, summary])  # not the sub-agent's, not a head
            await post(tail, call("human:dusk", "user_prompt"))
            assert await next_uris(2) == sorted([recent, heads])
            await post(tail, call(SUB, "Grep", s["read"]))  # in the first session
            assert await next_uris(3) == sorted([recent, summary, sub_agent])
        # The stream ended: its feed is closed with it (§8.5.4), the connection open.
        await eventually(lambda: live_feeds(tail), until=lambda n: n == 0, what="the feed closed")
        for uri, reason in (
            (f"korg://local/event/{s['read']}", "not_subscribable"),
            ("korg://nobody/ledger/recent", "unknown_ledger"),
            ("korg://local/session/999999/summary", "not_found"),
        ):
            with pytest.raises(MCPError) as raised:
                async with modern.listen(resource_subscriptions=[recent, uri]):
                    pass
            assert raised.value.error.data["reason"] == reason, uri
        with pytest.raises(MCPError) as raised:
            async with modern.listen(
                resource_subscriptions=[f"korg://local/agent/a{i}/recent" for i in range(257)]
            ):
                pass
        assert raised.value.error.data["reason"] == "too_many_subscriptions"
        assert await live_feeds(tail) == 0  # a refused listen starts nothing
        async with contextlib.AsyncExitStack() as streams:  # open streams per token are bounded
            for _ in range(MAX_LISTENS):
                await streams.enter_async_context(modern.listen())
            with pytest.raises(MCPError) as raised:
                async with modern.listen():
                    pass
            assert raised.value.error.data["reason"] == "too_many_subscriptions"

        async def reopen() -> bool:
            """A new stream once the closed ones are counted out: the server
            counts a stream out when it has seen it end, and that news (a
            cancellation; over HTTP a request of its own) may come after
            the next listen."""
            try:
                async with modern.listen() as again:
                    return again.honored.resource_subscriptions is None
            except MCPError as refused:
                if refused.error.data["reason"] != "too_many_subscriptions":
                    raise
                return False

        await eventually(reopen, what="a listen stream once the closed ones are counted out")


async def test_laneledger_resources_and_tenancy(client, actor, start_tail, tmp_path: Path):
    """A tenant's token reads only its ledger: another ledger, existing or not,
    is the same ``unknown_ledger``, and the list shows only its own."""
    korg_token, own_token = "korg-token-0123456789abcdef", "own-token-0123456789abcdef"
    lane = await new_lane(client, actor, "proved")
    tail = await start_tail(access=AccessPolicy.from_tokens({lane.tenant: own_token, "korg": korg_token}))
    s = await korg_session_with(tail, korg_token)
    positions = await fill(client, lane, actor, 2)
    await wait_applied(tail.service, positions[-1])
    token_file = tmp_path / "token"
    token_file.write_text(own_token + "\n")
    async with stdio_session(
        tail.url, "--token-file", str(token_file), "--ingest-url", tail.ingest_url
    ) as session:
        listed = {str(r.uri) for r in (await session.list_resources()).resources}
        assert f"korg://{lane.tenant}/ledger/recent" in listed
        assert not any(uri.startswith("korg://local/") for uri in listed)
        for uri in (
            f"korg://local/event/{s['root']}",
            "korg://korg/ledger/recent",
            "korg://nobody/ledger/recent",
        ):
            assert (await reason_of(session, uri))[1]["reason"] == "unknown_ledger", uri
        # Its own: laneledger's resources, by position and by session.
        event = await read_json(session, f"laneledger://{lane.tenant}/event/{positions[0]}")
        assert event["position"] == positions[0] and event["lane_id"] == lane.id
        summary = await read_json(session, f"laneledger://{lane.tenant}/session/{lane.session_id}")
        assert summary["session_id"] == lane.session_id
        # An event of the Korg tenant is not in this ledger.
        code, data = await reason_of(session, f"laneledger://{lane.tenant}/event/{s['root']}")
        assert (code, data["reason"]) == (-32602, "not_found")
        # Nor may it subscribe to, query or append to another ledger.
        with warnings.catch_warnings():  # the handshake era's subscribe, which this server serves
            warnings.simplefilter("ignore")
            for uri in ("korg://local/ledger/recent", f"korg://local/session/{s['root']}/summary"):
                with pytest.raises(MCPError) as raised:
                    await session.subscribe_resource(uri)
                assert raised.value.error.data["reason"] == "unknown_ledger", uri
        for tool, arguments in (
            ("korg_query_events", {}),
            ("korg_append_event", call(MAIN, "Edit", s["root"])),
            ("laneledger_verify_session", {"session_id": "korg"}),
        ):
            refused = await session.call_tool(tool, arguments)
            assert refused.is_error, tool
            assert json.loads(refused.content[0].text)["reason"] == "unknown_ledger", tool
    # Without a token: the tail refuses, and the client is told why.
    async with stdio_session(tail.url) as session:
        with pytest.raises(MCPError) as raised:
            await session.list_resources()
        assert raised.value.error.data["reason"] == "unauthorized"


async def test_the_deployed_mcp_server_reads_each_tenant_with_its_own_token(rendered_deployment):
    """The container's command on the rendered deployment (a tail with
    per-tenant tokens): a token reads its own ledger, another tenant's is
    ``unknown_ledger``, no token is the tail's ``unauthorized``."""
    d = rendered_deployment
    receipts = {}
    for tenant in ("acme", "globex"):
        recorder = await d.lane(tenant)
        actor = await recorder.client.ensure_actor(tenant, f"agent:{tenant}@1", "agent")
        receipts[tenant] = await recorder.append(
            [recorder.event("run.started", actor_id=actor.id, subject_id="r-1")]
        )
    mcp_server = await d.start_mcp()
    endpoint = f"{mcp_server.http_url}/mcp"

    @contextlib.asynccontextmanager
    async def as_tenant(tenant: str | None) -> AsyncIterator[ClientSession]:
        headers = {"Authorization": f"Bearer {d.token(tenant)}"} if tenant else None
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(endpoint, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    async def first_event(session: ClientSession, tenant: str) -> int:
        recent = await eventually(  # a ledger exists once the tail has applied its first event
            lambda: read_json(session, f"korg://{tenant}/ledger/recent"),
            until=lambda found: found["events"],
            what=f"{tenant}'s event in the tail",
            retry_on=(MCPError,),
        )
        return int(recent["events"][0]["seq_id"])

    async with as_tenant("globex") as globex:
        assert await first_event(globex, "globex") == receipts["globex"].positions[0]
    async with as_tenant("acme") as acme:
        assert await first_event(acme, "acme") == receipts["acme"].positions[0]
        listed = {str(r.uri) for r in (await acme.list_resources()).resources}
        assert "korg://acme/ledger/recent" in listed and not any("globex" in uri for uri in listed)
        # globex's ledger exists (globex just read it): for acme it is as if it did not.
        assert (await reason_of(acme, "korg://globex/ledger/recent"))[1]["reason"] == "unknown_ledger"
    async with as_tenant(None) as nobody:
        assert (await reason_of(nobody, "korg://acme/ledger/recent"))[1]["reason"] == "unauthorized"
    async with Client(endpoint) as anonymous:  # 2026-07-28: a listen stream needs a token the tail knows
        with pytest.raises(MCPError) as raised:
            async with anonymous.listen():
                pass
        assert raised.value.error.data["reason"] == "unauthorized"
    async with httpx2.AsyncClient() as http:
        assert (await http.get(f"{mcp_server.http_url}/healthz")).status_code == 200


async def test_blobs_as_korg_8_4_packs_them(client, actor, start_tail):
    tail = await start_tail()
    await korg_session(tail)
    lane = await new_lane(client, actor, "with-blobs")  # a tenant's ledger: its blobs are its own
    await wait_applied(tail.service, (await fill(client, lane, actor, 1))[0])
    store = await BlobStore.open(tail.nc.jetstream())
    own = (await store.put(lane.tenant, b"a tenant's notes")).removeprefix("sha256:")
    own_big = (await store.put(lane.tenant, os.urandom(BLOB_CAP + 1))).removeprefix("sha256:")
    blobs = {
        "json": (b'{"k": [1, 2]}', "application/json"),
        "text": ("héllo, not json".encode(), "text/plain"),
        "binary": (bytes(range(256)) * 4, "application/octet-stream"),
    }
    digests = {}
    for name, (data, _) in blobs.items():
        digest = hashlib.sha256(data).hexdigest()
        answer = await tail.ingest.request("PUT", f"/api/blob/{digest}", data=data)
        assert answer.status == 200, answer.body
        digests[name] = digest
    big = os.urandom(BLOB_CAP + 1)
    big_digest = hashlib.sha256(big).hexdigest()
    assert (await tail.ingest.request("PUT", f"/api/blob/{big_digest}", data=big)).status == 200
    async with stdio_session(tail.url) as session:
        for name, (data, mime) in blobs.items():
            # Korg names blobs by lowercase hex; uppercase reads the same blob.
            (content,) = (await session.read_resource(f"korg://local/blob/{digests[name].upper()}")).contents
            assert content.mime_type == mime, name
            if isinstance(content, mcp.types.BlobResourceContents):
                assert base64.b64decode(content.blob) == data
            else:
                assert content.text.encode() == data
        code, data = await reason_of(session, f"korg://local/blob/{big_digest}")
        assert code == -32603
        assert data == {
            "reason": "blob_too_large",
            "sha256": big_digest,
            "size_bytes": BLOB_CAP + 1,
            "http_url": f"/api/blob/{big_digest}",
        }
        (content,) = (await session.read_resource(f"korg://{lane.tenant}/blob/{own}")).contents
        assert (content.mime_type, content.text) == ("text/plain", "a tenant's notes")
        code, data = await reason_of(session, f"korg://{lane.tenant}/blob/{own_big}")
        assert (code, data["reason"], data["size_bytes"]) == (-32603, "blob_too_large", BLOB_CAP + 1)
        assert data["http_url"] == f"/api/v1/blobs/{own_big}?tenant={lane.tenant}"
        assert (await tail.api.get(data["http_url"])).status == 200  # the escape hatch serves it
        # Another ledger's blob is not in this one.
        code, data = await reason_of(session, f"korg://local/blob/{own}")
        assert (code, data["reason"]) == (-32602, "not_found")
        integrity = await read_json(session, "korg://local/stats/integrity")
        assert integrity["ledger"] == "local" and integrity["verify"]


async def test_an_agent_proves_what_it_did(nats_server, nc, start_tail, tmp_path: Path):
    """laneledger's own resources: an event's inclusion proof under the latest
    signed checkpoint, the session bundle and the checkpoint verify offline
    with the log's key; the verify tool checks the session's chains."""
    signer = Signer.generate("ledger.example/acme")
    sequencer = await start_signing_sequencer(nc, tmp_path / "ledger.db", signer)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:prover@1", "agent")
            lane = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
            receipt = await lane.append(
                [lane.event("stream.text_delta", actor_id=actor.id, payload={"k": k}) for k in range(3)]
            )
        last = receipt.positions[-1]
        tail = await start_tail()
        await eventually(
            lambda: tail.api.get("/api/v1/tlog/checkpoint"),
            until=lambda a: a.status == 200 and size_of(a.body.decode()) >= last,
            what="a checkpoint covering the session",
        )
        async with stdio_session(tail.url) as session:
            (proof,) = (
                await session.read_resource(f"laneledger://acme/proof/{receipt.positions[1]}")
            ).contents
            assert proof.mime_type == "text/plain"
            verified = verify_bundle(proof.text, signer.verifier(), origin="ledger.example/acme")
            assert verified.event is not None and verified.event["position"] == receipt.positions[1]
            (bundle,) = (await session.read_resource("laneledger://acme/session/s1/bundle")).contents
            assert bundle.mime_type == "application/json"
            checked = verify_session_bundle(
                bundle.text.encode(), signer.verifier(), origin="ledger.example/acme"
            )
            assert checked.events == 3
            (note,) = (await session.read_resource("laneledger://acme/log/checkpoint")).contents
            assert note.text.startswith("ledger.example/acme\n")
            timeline = await read_json(session, "laneledger://acme/session/s1/timeline")
            assert timeline["session_id"] == "s1"
            tree = await read_json(session, "laneledger://acme/session/s1/causal-tree")
            assert tree["session_id"] == "s1"
            verify = await session.call_tool(
                "laneledger_verify_session", {"ledger": "acme", "session_id": "s1"}
            )
            assert not verify.is_error, verify.content
    finally:
        await sequencer.stop()


def test_serve_refuses_a_token_file(tmp_path, capsys):
    """Over HTTP each client brings its own token: one file's token for every
    client would hand it to anyone who reaches the port."""
    from laneledger.cli import main

    token = tmp_path / "token"
    token.write_text("acme-secret\n")
    code = main(["mcp", "--serve", "--url", "http://127.0.0.1:9", "--token-file", str(token)])
    assert code != 0
    err = capsys.readouterr().err
    assert "--token-file is for stdio" in err and "acme-secret" not in err
