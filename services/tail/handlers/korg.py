"""Korg compatibility, the reads: ``GET /api/journal`` and ``GET /api/blob/{sha256}``.

Korg's writes (``POST /api/agent/tool-call``, ``PUT /api/blob/{sha256}``)
are the ingest service's (``services/ingest``): the tail holds no write
rights. Normative text: ``spec/korg-mapping.md``.

The journal renders those events — and the Korg tenant's natively recorded
ones, as ``korg_view`` maps them — in the Korg §1.2 envelope shape,
chained under korg-ledger-v1 (top-level ``prev_hash`` / ``entry_hash``) so
Korg's verifiers and ``laneledger verify --format korg-ledger-v1`` take it.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web
from nats.js.client import JetStreamContext

from laneledger.compat import korg_view
from laneledger.compat.korg import KORG_LEDGER_V1
from laneledger.compat.korg_append import EVENT_TYPE
from laneledger.compat.korg_view import TOOL_CALL_FIELDS
from laneledger.contract.chain import GENESIS_HASH, link
from laneledger.contract.contentref import parse_sha256
from laneledger.contract.errors import EntityNotFound
from laneledger.contract.subjects import Subjects, token
from laneledger.runtime.access import scope_of
from laneledger.sdk.blobstore import BlobStore, tenant_uploads_bucket_name

from ..api import decode_parameters
from ..feed import Feed
from ..projections import korg_index
from ..queries import KorgBlobQuery, KorgJournalQuery
from ..readmodel import ReadModel
from ..streaming import client_stream
from .blobs import BlobReader, blob_response, content_type

RECORDER = "korg:api"  # Korg §1.2.6: the recorder of every HTTP append
SCHEMA_VERSION = "1.0"
JOURNAL_PAGE = 500
# Korg's own HTTP read routes, as Korg's clients call them (its MCP server among them).
KORG_PATHS = ("/api/journal", "/api/blob/")
NO_TOKEN_HINT = (
    "Korg's own clients send no token (its MCP server among them) and this tail requires one: "
    "send Authorization: Bearer <the Korg tenant's token>, or read over MCP with "
    "`laneledger mcp --url TAIL --token-file FILE` (spec/mcp.md)"
)
_UPPER_HEX = re.compile(r"(?=.*[A-F])[0-9a-fA-F]{64}")


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


class KorgReads:
    def __init__(
        self,
        tenant: str,
        js: JetStreamContext,
        subjects: Subjects,
        timeout_s: float,
        model: ReadModel,
        readers: Executor,
        feed: Feed,
    ) -> None:
        """``tenant``: the Korg tenant, whose journal and blobs these are."""
        self._tenant = tenant
        self._js = js
        self._subjects = subjects
        self._timeout_s = timeout_s
        self._model = model
        self._readers = readers
        self._feed = feed
        self._blobs = BlobReader(js, subjects, timeout_s)
        self._uploads_store: BlobStore | None = None

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/journal", self.journal, name="korg_journal"),
            web.get("/api/blob/{sha256}", self.get_blob, name="korg_get_blob"),
        ]

    # -- GET /api/journal ---------------------------------------------------------------------

    async def journal(self, request: web.Request) -> web.StreamResponse:
        query = decode_parameters(request, KorgJournalQuery)
        session_id, limit, cause = query.session_id, query.limit, query.triggered_by
        cursor = query.cursor or 0
        applied = self._feed.applied
        if not scope_of(request).allows(self._tenant):
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
        rows = korg_index.journal(self._model, self._tenant, session_id, after, applied, JOURNAL_PAGE)
        lines = []
        # A committed event is RFC 8785 canonical, so korg-ledger-v1 can hash it.
        for position, body, agent, triggered_by in rows:
            record = link(envelope(position, body, agent, triggered_by), prev, profile=KORG_LEDGER_V1)
            prev = record["entry_hash"]
            if position > cursor and (cause is None or triggered_by == cause):
                lines.append(msgspec.json.encode(record) + b"\n")
        return _Page(lines, len(rows), rows[-1][0] if rows else after, prev)

    # -- GET /api/blob/{sha256} ---------------------------------------------------------

    async def get_blob(self, request: web.Request) -> web.Response:
        """A blob of the Korg tenant, raw (Korg §8.4.1: the path its MCP
        layer reads): committed, or uploaded with ``PUT`` and not yet
        referenced by a committed call; 404 when neither, as for another
        tenant's token."""
        raw = request.match_info["sha256"]
        if _UPPER_HEX.fullmatch(raw):  # Korg's store names blobs in lowercase: another name is absent
            raise EntityNotFound("no blob has this name (names are lowercase hex)", kind="blob", ref=raw)
        sha256 = parse_sha256(decode_parameters(request, KorgBlobQuery).sha256)
        tenant = self._tenant
        scope_of(request).not_found_unless(tenant, "blob", ref=f"sha256:{sha256}")
        try:
            data, ctype = await self._blobs.read(tenant, sha256)
        except EntityNotFound as missing:
            try:  # an upload: its hash checked, like a committed blob's; no bucket, no upload
                uploads = await self._uploads()
                data = await uploads.get(tenant, f"sha256:{sha256}")
            except EntityNotFound:
                raise missing from None
            ctype = content_type(data)
        return blob_response(data, ctype, sha256)

    async def _uploads(self) -> BlobStore:
        """The Korg tenant's uploads bucket, opened read-only (never created:
        the sequencer creates it); kept once open."""
        if self._uploads_store is None:
            self._uploads_store = await BlobStore.open(
                self._js,
                bucket=tenant_uploads_bucket_name(token(self._tenant), self._subjects),
                create=False,
                timeout_s=self._timeout_s,
            )
        return self._uploads_store


@dataclass
class _Page:
    lines: list[bytes]  # the chained envelopes to send
    rows: int  # how many were read
    last_position: int
    tip: str  # entry_hash of the last one read


def missing_token_hint(path: str) -> str | None:
    """What a Korg client that sent no token is told (spec/mcp.md: the tail
    serves no route without one; loopback is not an identity)."""
    return NO_TOKEN_HINT if path.startswith(KORG_PATHS) else None


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
