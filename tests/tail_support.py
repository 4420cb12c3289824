"""Helpers and fixtures for the tail service's tests.

* ``TailAPI``: real HTTP (aiohttp) to a tail (or the ingest service); every
  JSON, NDJSON and SSE answer is checked against the service's own OpenAPI
  document (``Contract``).
* ``SSEStream``: reads server-sent events frame by frame.
* ``TailProcess``: the tail as an OS process (``python -m laneledger.services.tail``).

The ``start_tail`` fixture (the tail in this process) is in tail_fixtures.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import jsonschema
import msgspec
import referencing
import referencing.jsonschema
from polling import eventually
from service_process import ServiceProcess

from laneledger.contract.model import Actor, CommittedEvent, Lane
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.ingest.openapi import DOCUMENT as INGEST_DOCUMENT
from laneledger.services.tail.answers.korg import KorgEnvelope
from laneledger.services.tail.routetable import DOCUMENT
from laneledger.services.tail.service import TailService

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")
DEADLINE_S = 30.0  # every wait below is bounded by this (or less)

# -- ledger data ------------------------------------------------------------------------


async def new_lane(
    client: LedgerClient,
    actor: Actor,
    session: str = "s1",
    run: str = "r1",
    name: str = "main",
    tenant: str = "acme",
    **fields: Any,
) -> Lane:
    return await client.create_lane(tenant, session, run, name, actor_id=actor.id, **fields)


def ev(lane: Lane, actor: Actor, event_type: str = "stream.text_delta", **fields: Any) -> dict:
    fields.setdefault("payload", {"text": "hi"})
    return make_event(lane.id, event_type, actor_id=actor.id, **fields)


async def fill(
    client: LedgerClient,
    lane: Lane,
    actor: Actor,
    n: int,
    *,
    start_seq: int | None = None,
    per_append: int = 100,
    **fields: Any,
) -> list[int]:
    """Append ``n`` events to ``lane``; returns their positions."""
    head = (await client.get_lane(lane.id)).last_seq if start_seq is None else start_seq
    positions: list[int] = []
    while len(positions) < n:
        k = min(per_append, n - len(positions))
        receipt = await client.append(lane, head, [ev(lane, actor, **fields) for _ in range(k)])
        positions += receipt.positions
        head = receipt.last_seq
    return positions


async def wait_applied(tail: TailService, position: int, timeout: float = DEADLINE_S) -> None:
    await eventually(
        lambda: tail.feed.applied,
        until=lambda applied: applied >= position,
        what=f"the tail to apply position {position}",
        timeout=timeout,
    )


async def wait_ready(api: TailAPI, timeout: float = DEADLINE_S) -> None:
    await eventually(
        lambda: api.get("/readyz"),
        until=lambda answer: answer.status == 200,
        what="the tail's /readyz to answer 200",
        timeout=timeout,
    )


# -- the OpenAPI contract ---------------------------------------------------------------


def _pointer(*parts: str) -> str:
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


class Contract:
    """A service's OpenAPI document, to check its answers against (the
    tail's, the ingest service's)."""

    def __init__(self, document: dict, uri: str) -> None:
        self.document = document
        self._uri = uri
        self._registry = referencing.Registry().with_resource(
            uri, referencing.Resource(contents=document, specification=referencing.jsonschema.DRAFT202012)
        )
        self._templates = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"), template)
            for template in document["paths"]
        ]

    def validator(self, pointer: str) -> jsonschema.Draft202012Validator:
        return jsonschema.Draft202012Validator({"$ref": f"{self._uri}#/{pointer}"}, registry=self._registry)

    def schema_validator(self, name: str) -> jsonschema.Draft202012Validator:
        return self.validator(_pointer("components", "schemas", name))

    def documented(self, path: str) -> bool:
        return any(regex.match(path) for regex, _ in self._templates)

    def template_of(self, path: str) -> str:
        matches = [t for regex, t in self._templates if regex.match(path)]
        assert matches, f"{path} is not in the OpenAPI document"
        return min(matches, key=lambda t: t.count("{"))  # a literal segment beats a parameter

    def check(self, method: str, path: str, status: int, content_type: str, body: bytes) -> None:
        """Check one response against the document: the status is listed (or
        ``default``), the content type is declared, and a JSON/NDJSON body
        validates against its schema."""
        document = self.document
        template = self.template_of(path)
        operation = document["paths"][template].get(method.lower())
        if operation is None:  # a documented path, another method
            assert status == 405, f"{method} {template} answered {status}"
            self.schema_validator("Error").validate(json.loads(body))
            return
        responses = operation["responses"]
        key = str(status) if str(status) in responses else "default"
        assert key in responses, f"{method} {template}: status {status} not in the document"
        response = responses[key]
        ref = response.get("$ref")
        if ref:
            response = document["components"]["responses"][ref.rsplit("/", 1)[-1]]
        media = content_type.split(";")[0].strip()
        content = response.get("content", {})
        assert media in content, f"{method} {template} {status}: content type {media} not documented"
        if media == "application/json" and body:
            if ref:
                pointer = _pointer(
                    "components", "responses", ref.rsplit("/", 1)[-1], "content", media, "schema"
                )
            else:
                pointer = _pointer(
                    "paths", template, method.lower(), "responses", key, "content", media, "schema"
                )
            self.validator(pointer).validate(json.loads(body))
        elif media == "application/x-ndjson":
            line_schema = self.schema_validator("KorgEnvelope")
            for line in body.splitlines():
                line_schema.validate(json.loads(line))


TAIL_CONTRACT = Contract(DOCUMENT, "urn:laneledger:tail-openapi")
INGEST_CONTRACT = Contract(INGEST_DOCUMENT, "urn:laneledger:ingest-openapi")
schema_validator = TAIL_CONTRACT.schema_validator
check_against_openapi = TAIL_CONTRACT.check


# -- HTTP --------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: Any
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict:
        return self.json()["error"]


class TailAPI:
    """``contract``: the document answers are checked against (the tail's by default)."""

    def __init__(
        self, base_url: str, session: aiohttp.ClientSession, contract: Contract = TAIL_CONTRACT
    ) -> None:
        self.base_url = base_url
        self.session = session
        self.contract = contract

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        json_body: Any = None,
        data: bytes | None = None,
        headers: dict | None = None,
        check: bool = True,
    ) -> Answer:
        async with self.session.request(
            method,
            self.base_url + path,
            params=params,
            json=json_body,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=DEADLINE_S),
        ) as resp:
            body = await resp.read()
            answer = Answer(resp.status, resp.headers, body)
            if check and self.contract.documented(resp.url.raw_path):
                self.contract.check(
                    method, resp.url.raw_path, resp.status, resp.headers.get("Content-Type", ""), body
                )
            elif check:  # an unknown route still answers with a typed error
                assert resp.status >= 400
                self.contract.schema_validator("Error").validate(json.loads(body))
        return answer

    async def get(self, path: str, **kwargs: Any) -> Answer:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> Answer:
        return await self.request("POST", path, **kwargs)

    def stream(self, params: dict | None = None, headers: dict | None = None) -> SSEStream:
        return SSEStream(self, params or {}, headers or {})


@dataclass
class Frame:
    event: str  # "ledger-event", "end", or "comment"
    id: str | None
    data: str

    @property
    def position(self) -> int:
        assert self.id is not None
        return int(self.id)

    def json(self) -> Any:
        return json.loads(self.data)


class SSEStream:
    """``async with api.stream(params) as s: frame = await s.next()``; event
    frames' data are checked against the CommittedEvent schema."""

    _event_schema = None

    def __init__(self, api: TailAPI, params: dict, headers: dict) -> None:
        self._api = api
        self._params = params
        self._headers = headers
        self._cm = None
        self.response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> SSEStream:
        self._cm = self._api.session.get(
            self._api.base_url + "/api/v1/events",
            params=self._params,
            headers=self._headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )
        self.response = await self._cm.__aenter__()
        check_against_openapi(
            "GET", "/api/v1/events", self.response.status, self.response.headers.get("Content-Type", ""), b""
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._cm is not None
        await self._cm.__aexit__(*exc_info)

    async def next(self, timeout: float = DEADLINE_S, comments: bool = False) -> Frame | None:
        """The next frame (``None`` when the stream ended); comments are
        returned only when asked for."""
        async with asyncio.timeout(timeout):
            while True:
                frame = await self._read_frame()
                if frame is None or frame.event != "comment" or comments:
                    return frame

    async def _read_frame(self) -> Frame | None:
        assert self.response is not None
        fields: dict[str, list[str]] = {}
        while True:
            raw = await self.response.content.readline()
            if not raw:
                return None
            line = raw.decode().rstrip("\r\n")
            if not line:
                if not fields:
                    continue
                break
            if line.startswith(":"):
                if not fields:
                    return Frame("comment", None, line[1:].strip())
                continue
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value[1:] if value.startswith(" ") else value)
        if "retry" in fields and len(fields) == 1:
            return await self._read_frame()
        event = fields.get("event", ["message"])[-1]
        frame = Frame(event, fields.get("id", [None])[-1], "\n".join(fields.get("data", [])))
        if event == "ledger-event":
            if SSEStream._event_schema is None:
                SSEStream._event_schema = schema_validator("CommittedEvent")
            SSEStream._event_schema.validate(frame.json())
            # The frame's data is the document's CommittedEvent, read as the Struct too.
            assert decoded(frame.data.encode(), CommittedEvent).position == frame.position
        return frame

    async def collect(self, n: int, timeout: float = DEADLINE_S) -> list[Frame]:
        """The next ``n`` event frames (stops early at the end of the stream)."""
        out: list[Frame] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            frame = await self.next(max(deadline - time.monotonic(), 0.001))
            if frame is None:
                break
            out.append(frame)
            if frame.event == "end":
                break
        return out


# -- the tail as a process -------------------------------------------------------------------


class TailProcess(ServiceProcess):
    """``python -m laneledger.services.tail --http-port 0`` on ``data_dir`` (its logs
    beside it), so its memory is its own. ``start`` is awaitable: it waits for
    the ready line in a thread, so a sequencer in the test's event loop keeps
    serving meanwhile."""

    def __init__(self, nats_url: str, data_dir: Path, *extra_args: str) -> None:
        self.nats_url = nats_url
        self.data_dir = Path(data_dir)
        super().__init__(
            "laneledger.services.tail",
            ["--nats", nats_url, "--data", str(self.data_dir), "--http-port", "0", *extra_args],
            self.data_dir.parent,
            env={"LANELEDGER_LOG_LEVEL": "WARNING"},
        )

    async def start(self, timeout: float = DEADLINE_S) -> TailProcess:  # type: ignore[override]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(ServiceProcess.start, self, timeout)
        return self

    async def restart(self, timeout: float = DEADLINE_S) -> TailProcess:  # type: ignore[override]
        if self.running:
            await asyncio.to_thread(self.terminate, timeout)
        return await self.start(timeout)

    def rss_bytes(self) -> int:
        """Its resident memory now (VmRSS from /proc)."""
        assert self.pid is not None, "the tail is not running"
        return rss_bytes(self.pid)


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` now (VmRSS from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


async def rewrite_stopped_read_model(stop: Any, tail: Any, script: str) -> None:
    """Stop ``tail`` (``await stop(tail)``) and run ``script`` on its read
    model's file: to make it look like a file an older tail wrote."""
    from laneledger.services.tail.readmodel import ReadModel

    path = tail.service.model.path
    await stop(tail)
    model = ReadModel(path)
    try:
        model._db.executescript(script)
    finally:
        model.close()


# -- Korg ----------------------------------------------------------------------------------

MAIN = "agent:claude-code/main@2.1"  # Korg §2b's spines
SUB = "agent:claude-code/sub-0f3a9c21@2.1"


def korg_call(source: str, tool: str, triggered_by: int | None = None, **extra: Any) -> dict:
    """A Korg AgentToolCall body (POST /api/agent/tool-call, the MCP append tool)."""
    body = {
        "source_agent": source,
        "tool_name": tool,
        "args": {"file_path": "src/app.py"},
        "result": {"success": True},
        "success": True,
        "duration_ms": 142,
        "triggered_by": triggered_by,
        "payload_refs": [],
    }
    body.update(extra)
    return body


async def korg_post(tail: Any, body: dict, headers: dict | None = None) -> dict:
    """POST a tool call to the ingest service beside ``tail`` (a RunningTail); its 200 answer."""
    answer = await tail.ingest.post("/api/agent/tool-call", json_body=body, headers=headers)
    assert answer.status == 200, answer.body
    result: dict = answer.json()
    return result


def journal_records(answer: Answer) -> list[dict]:
    """The records of a ``GET /api/journal`` answer (NDJSON), each line
    decoded into the document's ``KorgEnvelope`` too (so the hand-streamed
    lines and the Struct cannot drift)."""
    assert answer.status == 200, answer.body
    lines = answer.body.splitlines()
    assert len(decoded_lines(answer.body, KorgEnvelope)) == len(lines)
    return [json.loads(line) for line in lines]


def decoded(body: bytes, answer: type[T]) -> T:
    """A streamed answer read as its Struct (``answers/``): strict, so a field
    the writer adds, drops or retypes fails here."""
    return msgspec.json.decode(body, type=answer, strict=True)


def decoded_lines(body: bytes, line: type[T]) -> list[T]:
    return [decoded(raw, line) for raw in body.splitlines()]
