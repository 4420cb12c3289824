"""Korg compatibility: ``POST /api/agent/tool-call``, ``GET /api/journal``
and ``PUT``/``GET /api/blob/{sha256}``.

The mapping (normative text: ``spec/korg-mapping.md``):

* one AgentToolCall (Korg spec §1) becomes one committed ledger event of type
  ``ext.korg.agent_tool_call``, appended through the sequencer like any
  other, on the lane of its ``source_agent`` (one lane per source agent and
  session, named by the source agent) in the configured tenant and run, and
  in the body's ``session_id`` or the configured Korg session;
* the agent is the event's actor (``ensure_actor``, key = ``source_agent``);
* ``seq_id`` is the ledger **position** of that event (dense and global, as
  Korg's seq_id is; a lane seq would restart per agent);
* ``triggered_by`` must name an existing, strictly earlier event: the event
  at that position becomes the ``causation_id``; anything else is a 422
  ``causation_violation``. The sequencer also keeps causation in the session;
* ``args`` and ``result`` are any JSON value, as Korg's server takes them
  (its stream-json adapter sends strings); values over 1 KiB are stored as
  blobs by the SDK's content step before the event is sent (blob first), and
  a client that externalized a value itself uploads the blob first with
  ``PUT /api/blob/{sha256}``, the path Korg's server reads blobs at.

The journal renders those events — and the Korg tenant's natively recorded
ones, as ``korg_view`` maps them — in the Korg §1.2 envelope shape,
chained under korg-ledger-v1 (top-level ``prev_hash`` / ``entry_hash``) so
Korg's verifiers and ``laneledger verify --format korg-ledger-v1`` take it.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import re
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from aiohttp import web

from laneledger.compat import korg_view
from laneledger.compat.korg import KORG_LEDGER_V1
from laneledger.compat.korg_view import TOOL_CALL_FIELDS
from laneledger.contract.chain import GENESIS_HASH, link
from laneledger.contract.contentref import MAX_REFS_PER_APPEND
from laneledger.contract.errors import (
    CausationViolation,
    EntityNotFound,
    InvalidRequest,
    LaneConflict,
    LedgerTimeout,
    RequestTooLarge,
)
from laneledger.contract.model import (
    MAX_REQUEST_BYTES,
    MAX_WIRE_INT,
    AppendCommitted,
    Hash,
    Id,
    MediaType,
    Name,
    WireCount,
    decode,
)
from laneledger.runtime.access import scope_of
from laneledger.runtime.httpjson import json_response
from laneledger.sdk.blobstore import MAX_BLOB_BYTES, TenantBlobStore
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event

from .api import Query
from .blobs import BlobReader, blob_response, content_type, parse_sha256
from .feed import Feed
from .readmodel import ReadModel
from .streaming import client_stream

EVENT_TYPE = "ext.korg.agent_tool_call"
RECORDER = "korg:api"  # Korg §1.2.6: the recorder of every HTTP append
SCHEMA_VERSION = "1.0"
# Korg §1.2.7: fields the server derives; a client that sends them is ignored, not refused.
SERVER_DERIVED = frozenset(
    {
        "seq_id",
        "event_id",
        "actor_id",
        "causation_id",
        "ledger_hash",
        "parent_hash",
        "emitted_at",
        "recorded_at",
        "hlc_physical",
        "hlc_logical",
        "timestamp",
    }
)
# Korg §1.1 prefixes -> laneledger actor kinds.
ACTOR_KINDS = {"agent": "agent", "human": "human", "korg": "service", "mcp": "tool", "import": "service"}
MIRROR_GRACE_S = 1.0  # how long a seq_id may be committed but not yet on the stream
WAIT_FOR_CAUSE_S = 5.0
MAX_RECORDERS = 1024
JOURNAL_PAGE = 500
UPLOAD_CHUNK = 64 * 1024
# Korg's own HTTP routes, as Korg's clients call them (its MCP server among them).
KORG_PATHS = ("/api/agent/tool-call", "/api/journal", "/api/blob/")
NO_TOKEN_HINT = (
    "Korg's own clients send no token (its MCP server among them) and this tail requires one: "
    "send Authorization: Bearer <the Korg tenant's token>, or read over MCP with "
    "`laneledger mcp --url TAIL --token-file FILE` (spec/mcp.md)"
)
_UPPER_HEX = re.compile(r"(?=.*[A-F])[0-9a-fA-F]{64}")


class PayloadRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    sha256: Hash
    size_bytes: WireCount
    label: Name | None = None
    media_type: MediaType | None = None  # laneledger's descriptors carry it (spec/content.md)


class ToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The Korg append shape (§1, §1.2.1), plus an optional ``session_id``.
    ``args`` and ``result`` are any JSON value (required, null included), as
    Korg's server takes them; its spec says object, its adapter sends strings."""

    source_agent: Id
    tool_name: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    args: Any
    result: Any
    success: bool
    duration_ms: WireCount
    # Any I-JSON integer: one below 1 names no event (422 causation_violation).
    triggered_by: Annotated[int, msgspec.Meta(ge=-MAX_WIRE_INT, le=MAX_WIRE_INT)] | None = None
    payload_refs: Annotated[list[PayloadRef], msgspec.Meta(max_length=MAX_REFS_PER_APPEND)] = []
    event_type: Literal["AgentToolCall"] = "AgentToolCall"
    session_id: Id | None = None


class _Body(msgspec.Struct):
    """What the journal reads back from a committed event (lenient: an event
    of this type appended by another producer renders with what it has)."""

    id: str
    session_id: str
    event_type: str
    occurred_at: str
    committed_at: str
    prev_hash: str
    entry_hash: str
    payload: dict[str, Any]
    causation_id: str | None = None


_body = msgspec.json.Decoder(_Body)


@dataclass(frozen=True)
class KorgSettings:
    tenant: str = "korg"
    session_id: str = "korg"
    run_id: str = "korg"


class Korg:
    def __init__(
        self,
        settings: KorgSettings,
        ledger: LedgerClient,
        model: ReadModel,
        readers: Executor,
        feed: Feed,
        stream_last: Callable[[], Awaitable[int]],
    ) -> None:
        self._settings = settings
        self._ledger = ledger
        self._model = model
        self._readers = readers
        self._feed = feed
        self._stream_last = stream_last
        self._recorders: collections.OrderedDict[tuple[str, str], LaneRecorder] = collections.OrderedDict()
        self._opening = asyncio.Lock()
        self._blobs = BlobReader(ledger.nc.jetstream(), ledger.subjects, ledger.timeout)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/api/agent/tool-call", self.tool_call, name="korg_tool_call"),
            web.get("/api/journal", self.journal, name="korg_journal"),
            web.put("/api/blob/{sha256}", self.put_blob, name="korg_put_blob"),
            web.get("/api/blob/{sha256}", self.get_blob, name="korg_get_blob"),
        ]

    # -- POST /api/agent/tool-call --------------------------------------------------------

    async def tool_call(self, request: web.Request) -> web.Response:
        Query(request, ())
        # Korg calls are appended in the configured tenant: only its token
        # (or the operator's) may write there.
        scope_of(request).narrow(self._settings.tenant)
        call = read_tool_call(await _body_bytes(request))
        session_id = call.session_id or self._settings.session_id
        causation_id = None
        if call.triggered_by is not None:
            causation_id = await self._cause(call.triggered_by, session_id)
        recorder = await self._recorder(session_id, call.source_agent)
        payload = {
            "source_agent": call.source_agent,
            "tool_name": call.tool_name,
            "args": call.args,
            "result": call.result,
            "success": call.success,
            "duration_ms": call.duration_ms,
            "triggered_by": call.triggered_by,
            "payload_refs": msgspec.to_builtins(call.payload_refs),
        }
        event = make_event(
            recorder.lane.id,
            EVENT_TYPE,
            actor_id=recorder.lane.actor_id or "",
            payload=payload,
            causation_id=causation_id,
        )
        receipt = await self._append(recorder, event)
        return json_response(
            {
                "seq_id": receipt.positions[0],
                "event_id": receipt.event_ids[0],
                "session_id": session_id,
                "lane_id": recorder.lane.id,
                "lane_seq": receipt.first_seq,
                "entry_hash": receipt.entry_hashes[0],
            }
        )

    async def _cause(self, triggered_by: int, session_id: str) -> str:
        """The id of the event at position ``triggered_by``, which must exist
        (it is then strictly earlier than the event about to be appended)."""

        def refuse(reason: str, **details: Any) -> CausationViolation:
            return CausationViolation(
                f"triggered_by {triggered_by} does not name an existing, earlier event"
                f" of this session ({reason})",
                triggered_by=triggered_by,
                reason=reason,
                **details,
            )

        if triggered_by < 1:
            raise refuse("unknown")
        # A client chaining at once may name an event whose receipt it has but
        # which is not on the committed stream yet (the sequencer answers
        # before it mirrors), or not applied here yet: wait for it, bounded.
        if not await self._feed.wait_for(triggered_by, MIRROR_GRACE_S):
            if triggered_by > await self._stream_last():
                raise refuse("unknown")
            if not await self._feed.wait_for(triggered_by, WAIT_FOR_CAUSE_S):
                raise LedgerTimeout(
                    "the read model has not caught up to triggered_by yet",
                    triggered_by=triggered_by,
                    applied_position=self._feed.applied,
                )
        loop = asyncio.get_running_loop()
        try:
            row = await loop.run_in_executor(self._readers, self._model.event_at, triggered_by)
        except EntityNotFound:
            raise refuse("unknown") from None
        if not row.event_type:
            raise refuse("unknown")
        if row.session_id != session_id:
            raise refuse("other_session", causation_id=row.event_id, causation_session_id=row.session_id)
        return row.event_id

    async def _recorder(self, session_id: str, source_agent: str) -> LaneRecorder:
        key = (session_id, source_agent)
        async with self._opening:
            recorder = self._recorders.get(key)
            if recorder is None:
                s = self._settings
                actor = await self._ledger.ensure_actor(
                    s.tenant,
                    source_agent,
                    ACTOR_KINDS[source_agent.split(":", 1)[0]],
                    display_name=source_agent,
                    adopt=True,  # an importer may have registered the agent with its own description
                )
                kind = "subagent" if "/sub-" in source_agent else "main"
                recorder = await LaneRecorder.open(
                    self._ledger, s.tenant, session_id, s.run_id, source_agent, kind=kind, actor_id=actor.id
                )
                self._recorders[key] = recorder
                if len(self._recorders) > MAX_RECORDERS:
                    self._recorders.popitem(last=False)
            self._recorders.move_to_end(key)
            return recorder

    async def _append(self, recorder: LaneRecorder, event: dict[str, Any]) -> AppendCommitted:
        for attempt in range(3):
            try:
                receipt = await recorder.append([event])
                assert isinstance(receipt, AppendCommitted)  # wait="commit"
                return receipt
            except LaneConflict:
                if attempt == 2:
                    raise
                await recorder.reload()  # another writer moved the lane: append on its head
        raise AssertionError("unreachable")

    # -- GET /api/journal ---------------------------------------------------------------------

    async def journal(self, request: web.Request) -> web.StreamResponse:
        query = Query(request, ("session_id", "cursor", "limit", "triggered_by"))
        session_id = query.text("session_id")
        cursor = query.integer("cursor", 0)
        limit = query.integer("limit", None, low=1)
        cause = query.integer("triggered_by", None)
        applied = self._feed.applied
        if not scope_of(request).allows(self._settings.tenant):
            limit = 0  # the journal is the Korg tenant's: another tenant's token sees none of it
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        async with client_stream(request, response, "korg journal") as out:
            loop = asyncio.get_running_loop()
            # The chain runs over the whole selected journal from its first record,
            # whatever the cursor, so pages of one journal link up: the records up
            # to the cursor are read and hashed, not sent.
            sent, after, prev = 0, 0, GENESIS_HASH
            while limit is None or sent < limit:
                page = await loop.run_in_executor(
                    self._readers, self._chained_page, session_id, after, applied, prev, (cursor, cause)
                )
                if page.lines and limit is not None:
                    page.lines[limit - sent :] = []
                if page.lines:
                    await out.write(b"".join(page.lines))
                    sent += len(page.lines)
                if page.rows < JOURNAL_PAGE:
                    break
                after, prev = page.last_position, page.tip
            await response.write_eof()
        return response

    def _chained_page(
        self, session_id: str | None, after: int, applied: int, prev: str, send: tuple[int, int | None]
    ) -> _Page:
        """``send``: (cursor, triggered_by) — which of the chained lines are sent."""
        cursor, cause = send
        rows = self._page(session_id, after, applied, JOURNAL_PAGE)
        lines = []
        # A committed event is RFC 8785 canonical, so korg-ledger-v1 can hash it.
        for position, body, agent, triggered_by in rows:
            record = link(envelope(position, body, agent, triggered_by), prev, profile=KORG_LEDGER_V1)
            prev = record["entry_hash"]
            if position > cursor and (cause is None or triggered_by == cause):
                lines.append(msgspec.json.encode(record) + b"\n")
        return _Page(lines, len(rows), rows[-1][0] if rows else after, prev)

    def _page(
        self, session_id: str | None, cursor: int, applied: int, limit: int
    ) -> list[tuple[int, bytes, str, int | None]]:
        """Every event of the Korg tenant (tool calls and natively recorded
        events alike), with its Korg source_agent and triggered_by (``korgindex``)."""
        where, params = "e.tenant = ?", [self._settings.tenant]
        if session_id is not None:
            where += " AND e.session_id = ?"
            params.append(session_id)
        return self._model.query(
            "SELECT e.position, e.body, k.source_agent, k.triggered_by"
            f" FROM events e JOIN korg_index k USING (position) WHERE {where}"
            " AND e.position > ? AND e.position <= ? ORDER BY e.position LIMIT ?",
            [*params, cursor, applied, limit],
        )

    # -- PUT / GET /api/blob/{sha256} ---------------------------------------------------------

    async def put_blob(self, request: web.Request) -> web.Response:
        """Store a blob a Korg client externalized itself (Korg §7.3: it is
        in its ``.korg/blobs/<sha256[:2]>/<sha256>``) before it posts the
        reference: the bytes must hash to the name."""
        Query(request, ())
        scope_of(request).narrow(self._settings.tenant)
        sha256 = parse_sha256(request.match_info["sha256"])
        data = await _upload_bytes(request)
        found = hashlib.sha256(data).hexdigest()
        if found != sha256:
            raise InvalidRequest(
                "the body is not the blob its name says: its sha256 differs",
                parameter="sha256",
                expected=sha256,
                found=found,
            )
        store = await self._ledger.blob_store()
        await store.put(self._settings.tenant, data)
        return json_response({"sha256": sha256, "size_bytes": len(data)})

    async def get_blob(self, request: web.Request) -> web.Response:
        """A blob of the Korg tenant, raw (Korg §8.4.1: the path its MCP
        layer reads): committed, or uploaded with ``PUT`` and not yet
        referenced by a committed call; 404 when neither, as for another
        tenant's token."""
        Query(request, ())
        raw = request.match_info["sha256"]
        if _UPPER_HEX.fullmatch(raw):  # Korg's store names blobs in lowercase: another name is absent
            raise EntityNotFound("no blob has this name (names are lowercase hex)", kind="blob", ref=raw)
        sha256 = parse_sha256(raw)
        tenant = self._settings.tenant
        scope_of(request).not_found_unless(tenant, "blob", ref=f"sha256:{sha256}")
        try:
            data, ctype = await self._blobs.read(tenant, sha256)
        except EntityNotFound as missing:
            store = await self._ledger.blob_store()
            if not isinstance(store, TenantBlobStore):
                raise
            try:  # its hash checked, like a committed blob's
                data = await store.uploads.get(tenant, f"sha256:{sha256}")
            except EntityNotFound:
                raise missing from None
            ctype = content_type(data)
        return blob_response(data, ctype, sha256)


@dataclass
class _Page:
    lines: list[bytes]  # the chained envelopes to send
    rows: int  # how many were read
    last_position: int
    tip: str  # entry_hash of the last one read


async def _upload_bytes(request: web.Request) -> bytes:
    """The request body, at most ``MAX_BLOB_BYTES`` (read in chunks: the
    app's body limit is the append's 1 MiB)."""

    def too_large() -> RequestTooLarge:
        return RequestTooLarge("blob larger than the ledger stores", limit_bytes=MAX_BLOB_BYTES)

    if request.content_length is not None and request.content_length > MAX_BLOB_BYTES:
        raise too_large()
    data = bytearray()
    async for chunk in request.content.iter_chunked(UPLOAD_CHUNK):
        data += chunk
        if len(data) > MAX_BLOB_BYTES:
            raise too_large()
    return bytes(data)


async def _body_bytes(request: web.Request) -> bytes:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestTooLarge("request body too large", limit_bytes=MAX_REQUEST_BYTES) from None


def missing_token_hint(path: str) -> str | None:
    """What a Korg client that sent no token is told (spec/mcp.md: the tail
    serves no route without one; loopback is not an identity)."""
    return NO_TOKEN_HINT if path.startswith(KORG_PATHS) else None


def read_tool_call(data: bytes) -> ToolCall:
    """Decode the append shape; server-derived fields are dropped (Korg §1.2.7),
    any other unknown field is refused with its path."""
    raw = decode(data, dict[str, Any])  # malformed or too large: typed errors
    for name in SERVER_DERIVED & raw.keys():
        del raw[name]
    call = decode(msgspec.json.encode(raw), ToolCall)
    prefix, _, rest = call.source_agent.partition(":")
    if prefix not in ACTOR_KINDS or not rest:
        raise InvalidRequest(
            "source_agent must be agent:<name>@<version>, human:<id>, korg:<component>, "
            "mcp:<server> or import:<source>@<version>",
            path="$.source_agent",
            found=call.source_agent,
        )
    return call


def envelope(position: int, body: bytes, source_agent: str, triggered_by: int | None) -> dict[str, Any]:
    """The Korg §1.2 envelope of a committed event, unchained: a tool call as
    posted; a natively recorded event as its Korg record (``korg_view``)."""
    ev = _body.decode(body)
    p = ev.payload
    if ev.event_type != EVENT_TYPE:
        native = korg_view.record(msgspec.json.decode(body), source_agent, triggered_by, 0)
        p = {k: native[k] for k in TOOL_CALL_FIELDS}
    refs = p.get("payload_refs", [])
    return {
        "schema_version": SCHEMA_VERSION,
        "seq_id": position,
        "metadata": {
            "triggered_by": p.get("triggered_by"),
            "causation_id": ev.causation_id,
            "event_id": ev.id,
            "actor_id": RECORDER,
            "seq_id": position,
            "ledger_hash": ev.entry_hash,
            "parent_hash": None if ev.prev_hash == GENESIS_HASH else ev.prev_hash,
            "emitted_at": ev.occurred_at,
            "recorded_at": ev.committed_at,
            "session_id": ev.session_id,
            "hlc_physical": _millis(ev.occurred_at),
            "hlc_logical": 0,
            "rewind_of": None,
            "payload_refs": refs,
        },
        "event": {
            "event_type": "AgentToolCall",
            "tool_name": p.get("tool_name"),
            "source_agent": p.get("source_agent"),
            "args": p.get("args", {}),
            "result": p.get("result", {}),
            "success": p.get("success"),
            "duration_ms": p.get("duration_ms"),
            "timestamp": ev.committed_at,
            "payload_refs": refs,
        },
    }


def _millis(timestamp: str) -> int:
    # Python 3.11 reads at most 6 fraction digits; the ledger's own clock writes 6.
    try:
        return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0
