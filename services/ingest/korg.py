"""Korg's HTTP writes: ``POST /api/agent/tool-call`` and ``PUT /api/blob/{sha256}``.

The mapping (normative text: ``spec/korg-mapping.md``; the shape:
``laneledger.compat.korg_append``):

* one AgentToolCall becomes one committed ledger event of type
  ``ext.korg.agent_tool_call``, appended through the sequencer like any
  other, on the lane of its ``source_agent`` (one lane per source agent and
  session, named by the source agent) in the configured tenant and run, and
  in the body's ``session_id`` or the configured Korg session;
* the agent is the event's actor (``ensure_actor``, key = ``source_agent``);
* ``seq_id`` is the ledger **position** of that event (dense and global, as
  Korg's seq_id is);
* ``triggered_by`` must name an existing, strictly earlier event of the
  session (in the Korg tenant): it becomes the ``causation_id``; anything
  else is a 422 ``causation_violation``;
* values over 1 KiB are stored as blobs by the SDK's content step before the
  event is sent (blob first); a client that externalized a value itself
  uploads the blob first with ``PUT /api/blob/{sha256}``.

The tail serves the reads of the same paths (``GET /api/journal``,
``GET /api/blob/{sha256}``).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from laneledger.compat.korg_append import (
    EVENT_TYPE,
    BlobStored,
    ToolCall,
    ToolCallAppended,
    read_tool_call,
)
from laneledger.contract.contentref import parse_sha256
from laneledger.contract.errors import CausationViolation, InvalidRequest, LaneConflict, RequestTooLarge
from laneledger.contract.model import AppendCommitted
from laneledger.runtime.access import scope_of
from laneledger.runtime.httpjson import json_response
from laneledger.sdk.blobstore import MAX_BLOB_BYTES
from laneledger.sdk.client import LaneRecorder, LedgerClient, make_event

from .bodies import body_bytes, no_query
from .committed import CommittedEvents

MIRROR_GRACE_S = 1.0  # how long a seq_id may be receipted but not yet on the committed stream
MAX_RECORDERS = 1024  # open lanes kept, least recently used dropped
APPEND_ATTEMPTS = 3  # a lane another writer moved is reloaded and appended on again
UPLOAD_CHUNK = 64 * 1024
NO_TOKEN_HINT = (
    "Korg's own clients send no token and this ingest service requires one: "
    "send Authorization: Bearer <the Korg tenant's token> (spec/korg-mapping.md)"
)


@dataclass(frozen=True)
class KorgSettings:
    tenant: str = "korg"
    session_id: str = "korg"
    run_id: str = "korg"


class KorgWrites:
    def __init__(self, settings: KorgSettings, ledger: LedgerClient, committed: CommittedEvents) -> None:
        """``ledger``: a client scoped to the Korg tenant (its subjects, its blob buckets)."""
        self._settings = settings
        self._ledger = ledger
        self._committed = committed
        self._recorders: collections.OrderedDict[tuple[str, str], LaneRecorder] = collections.OrderedDict()
        self._opening = asyncio.Lock()

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/api/agent/tool-call", self.tool_call, name="korg_tool_call"),
            web.put("/api/blob/{sha256}", self.put_blob, name="korg_put_blob"),
        ]

    # -- POST /api/agent/tool-call --------------------------------------------------------

    async def tool_call(self, request: web.Request) -> web.Response:
        no_query(request)
        # Korg calls are appended in the configured tenant: only its token
        # (or the operator's) may write there.
        scope_of(request).narrow(self._settings.tenant)
        call = read_tool_call(await body_bytes(request))
        session_id = call.session_id or self._settings.session_id
        causation_id = None
        if call.triggered_by is not None:
            causation_id = await self._cause(call.triggered_by, session_id)
        recorder = await self._recorder(session_id, call)
        event = make_event(
            recorder.lane.id,
            EVENT_TYPE,
            actor_id=recorder.lane.actor_id or "",
            payload=call.payload(),
            causation_id=causation_id,
        )
        receipt = await self._append(recorder, event)
        return json_response(
            ToolCallAppended(
                seq_id=receipt.positions[0],
                event_id=receipt.event_ids[0],
                session_id=session_id,
                lane_id=recorder.lane.id,
                lane_seq=receipt.first_seq,
                entry_hash=receipt.entry_hashes[0],
            )
        )

    async def _cause(self, triggered_by: int, session_id: str) -> str:
        """The id of the event at position ``triggered_by``, which must exist
        (it is then strictly earlier than the event about to be appended)
        and be of this session in the Korg tenant."""

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
        cause = await self._committed.at(triggered_by, MIRROR_GRACE_S)
        # Another tenant's event is not named: to this tenant it does not exist.
        if cause is None or not cause.event_type or cause.tenant != self._settings.tenant:
            raise refuse("unknown")
        if cause.session_id != session_id:
            raise refuse("other_session", causation_id=cause.id, causation_session_id=cause.session_id)
        return cause.id

    async def _recorder(self, session_id: str, call: ToolCall) -> LaneRecorder:
        key = (session_id, call.source_agent)
        async with self._opening:
            recorder = self._recorders.get(key)
            if recorder is None:
                s = self._settings
                actor = await self._ledger.ensure_actor(
                    s.tenant,
                    call.source_agent,
                    call.actor_kind,
                    display_name=call.source_agent,
                    adopt=True,  # an importer may have registered the agent with its own description
                )
                recorder = await LaneRecorder.open(
                    self._ledger,
                    s.tenant,
                    session_id,
                    s.run_id,
                    call.source_agent,
                    kind=call.lane_kind,
                    actor_id=actor.id,
                )
                self._recorders[key] = recorder
                if len(self._recorders) > MAX_RECORDERS:
                    self._recorders.popitem(last=False)
            self._recorders.move_to_end(key)
            return recorder

    async def _append(self, recorder: LaneRecorder, event: dict[str, Any]) -> AppendCommitted:
        for attempt in range(1, APPEND_ATTEMPTS + 1):
            try:
                receipt = await recorder.append([event])
                assert isinstance(receipt, AppendCommitted)  # wait="commit"
                return receipt
            except LaneConflict:
                if attempt == APPEND_ATTEMPTS:
                    raise
                await recorder.reload()  # another writer moved the lane: append on its head
        raise AssertionError("unreachable")

    # -- PUT /api/blob/{sha256} -----------------------------------------------------------

    async def put_blob(self, request: web.Request) -> web.Response:
        """Store a blob a Korg client externalized itself (Korg §7.3: it is
        in its ``.korg/blobs/<sha256[:2]>/<sha256>``) before it posts the
        reference: the bytes must hash to the name."""
        no_query(request)
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
        return json_response(BlobStored(sha256=sha256, size_bytes=len(data)))


def missing_token_hint(path: str) -> str | None:
    """What a Korg client that sent no token is told (loopback is not an identity)."""
    return NO_TOKEN_HINT if path.startswith(("/api/agent/tool-call", "/api/blob/")) else None


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
