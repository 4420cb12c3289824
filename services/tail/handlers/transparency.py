"""The transparency log as the tail serves it (spec/tlog.md, "Served by the
tail"; spec/tail.md, "Transparency log").

Log-wide, public (``/api/v1/tlog/``): the checkpoints the tail kept from
LEDGER_TLOG with the witnesses' cosignatures it holds, consistency proofs
between tree sizes, and the witnesses' cosignatures posted to it. Per event
or session, guarded like every read of tenant data: a C2SP tlog-proof of one
event, a session bundle. Everything is read from the read model (the tree
is its own, ``tlog.py``); posted cosignatures are stored through the
apply thread, the read model's one writer.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Generator
from concurrent.futures import Executor

from aiohttp import web

from laneledger.contract.errors import (
    EntityNotFound,
    InvalidRequest,
    LedgerUnavailable,
    RequestTooLarge,
)
from laneledger.runtime.access import scope_of
from laneledger.runtime.apidoc import JSON_MEDIA
from laneledger.runtime.httpjson import json_response
from laneledger.sqlite import failures_as
from laneledger.tlog import store as tree_store
from laneledger.tlog.bundle import make_bundle
from laneledger.tlog.checkpoint import (
    TreeHead,
)
from laneledger.tlog.cosignature import CosignatureVerifier
from laneledger.tlog.note import Signature, split_note
from laneledger.tlog.sessionbundle import session_bundle_chunks

from ..answers.tlog import TlogConsistency, TlogCosigned
from ..api import decode_parameters, within
from ..budget import ReadBudget
from ..feed import Feed
from ..limits import ReadLimits
from ..pagestream import PieceStreamer
from ..projections import events, tlog
from ..projections.events import Row, event_at
from ..queries import (
    MAX_COSIGNED_BYTES,
    CheckpointQuery,
    ConsistencyQuery,
    EventProofQuery,
    NoParameters,
    SessionProofQuery,
)
from ..readmodel import ReadModel
from ..routes import ReadModelRoutes

log = logging.getLogger("laneledger.tail")

_READ_FAILED = "read model read failed"
TEXT = "text/plain"


def _text(body: str | bytes) -> web.Response:
    return web.Response(
        body=body.encode() if isinstance(body, str) else body, content_type=TEXT, charset="utf-8"
    )


def _no_checkpoint(**ident: object) -> EntityNotFound:
    return EntityNotFound("the tail has no such checkpoint", kind="checkpoint", **ident)


def _not_covered(what: str, position: int, latest: int | None) -> LedgerUnavailable:
    return LedgerUnavailable(
        f"no checkpoint covers {what} yet: the sequencer signs one every interval; ask again",
        position=position,
        checkpoint_size=latest,
    )


def accepted_cosignatures(
    text: str, signatures: list[Signature], witnesses: tuple[CosignatureVerifier, ...]
) -> list[Signature]:
    """The signatures on ``text`` by configured witnesses, each verified;
    one that does not verify refuses them all."""
    known = {(w.name, w.key_id): w for w in witnesses}
    accepted: dict[tuple[str, int], Signature] = {}
    for sig in signatures:
        witness = known.get((sig.name, sig.key_id))
        if witness is None or (sig.name, sig.key_id) in accepted:
            continue
        if not witness.verify(text.encode(), sig.signature):
            raise InvalidRequest(
                f"the cosignature of {tlog.witness_key(sig)} does not verify",
                reason="note_signature_invalid",
                key=tlog.witness_key(sig),
            )
        accepted[(sig.name, sig.key_id)] = sig
    if not accepted:
        raise InvalidRequest(
            "no configured witness cosigned the checkpoint",
            reason="note_unverified",
            signers=[tlog.witness_key(s) for s in signatures],
        )
    return list(accepted.values())


class Transparency(ReadModelRoutes):
    def __init__(
        self,
        model: ReadModel,
        readers: Executor,
        feed: Feed,
        apply_thread: Executor,
        witnesses: tuple[CosignatureVerifier, ...],
        limits: ReadLimits,
        budget: ReadBudget,
    ) -> None:
        super().__init__(model, readers, feed)
        self._apply_thread = apply_thread
        self._witnesses = witnesses
        self._limits = limits
        self._pages = PieceStreamer(budget)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/v1/tlog/checkpoint", self.latest, name="tlog_checkpoint"),
            web.get("/api/v1/tlog/checkpoints/{size}", self.at_size, name="tlog_checkpoints"),
            web.get("/api/v1/tlog/consistency", self.consistency, name="tlog_consistency"),
            web.post("/api/v1/tlog/cosignatures", self.cosign, name="tlog_cosignatures"),
            web.get("/api/v1/proofs/{position}", self.event_proof, name="event_proof"),
            web.get("/api/v1/sessions/{session_id}/proof", self.session_proof, name="session_proof"),
        ]

    # -- log-wide, public ------------------------------------------------------------------

    async def latest(self, request: web.Request) -> web.Response:
        decode_parameters(request, NoParameters)
        note = await self._read(self._served, None)
        if note is None:
            raise _no_checkpoint()
        return _text(note)

    async def at_size(self, request: web.Request) -> web.Response:
        size = decode_parameters(request, CheckpointQuery).size
        note = await self._read(self._served, size)
        if note is None:
            raise _no_checkpoint(size=size)
        return _text(note)

    def _served(self, size: int | None) -> str | None:
        conn = self._model.connection()
        with failures_as(_READ_FAILED):
            if size is None:
                size = tlog.latest_size(conn)
            return None if size is None else tlog.served_note(conn, size)

    async def consistency(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, ConsistencyQuery)
        tree = self._feed.applied  # committed, so every reader sees at least this tree
        new = within(query.new, "new", high=tree)
        old = within(query.old, "old", high=new)
        proof = await self._read(self._consistency, old, new)
        return json_response(
            TlogConsistency(old_size=old, new_size=new, proof=[base64.b64encode(h).decode() for h in proof])
        )

    def _consistency(self, old: int, new: int) -> list[bytes]:
        return tree_store.consistency_proof(self._model.connection(), old, new)

    async def cosign(self, request: web.Request) -> web.Response:
        decode_parameters(request, NoParameters)
        data = await _cosigned_bytes(request)
        text, signatures = split_note(data)
        checkpoint = TreeHead.parse(text)
        note = await self._read(self._stored, checkpoint.size)
        if note is None or split_note(note)[0] != text:
            raise _no_checkpoint(size=checkpoint.size)
        accepted = accepted_cosignatures(text, signatures, self._witnesses)
        loop = asyncio.get_running_loop()
        kept_newer = await loop.run_in_executor(
            self._apply_thread, self._model.store_cosignatures, checkpoint.size, accepted
        )
        witnesses = [tlog.witness_key(s) for s in accepted]
        return json_response(TlogCosigned(size=checkpoint.size, witnesses=witnesses, kept_newer=kept_newer))

    def _stored(self, size: int) -> str | None:
        with failures_as(_READ_FAILED):
            return tlog.stored_note(self._model.connection(), size)

    # -- per event or session, guarded -----------------------------------------------------------

    async def event_proof(self, request: web.Request) -> web.Response:
        query = decode_parameters(request, EventProofQuery)
        position, size = query.position, query.size
        row: Row = await self._read(event_at, self._model, position)
        if not row.event_type or not scope_of(request).allows(row.tenant):  # as if it were not there
            raise EntityNotFound("no committed event at this position (yet)", kind="event", position=position)
        bundle = await self._read(self._event_bundle, row, size)
        return _text(bundle)

    def _event_bundle(self, row: Row, size: int | None) -> str:
        conn = self._model.connection()
        with failures_as(_READ_FAILED):
            note = self._covering(row.position, size, f"position {row.position}")
            return make_bundle(conn, row.position, note, event=row.body).format()

    async def session_proof(self, request: web.Request) -> web.StreamResponse:
        query = decode_parameters(request, SessionProofQuery)
        session_id, size = query.session_id, query.size
        scope = await self._owner(request, query.tenant, "session", session_id)
        if scope.tenant is None:  # no tenant has such a session
            raise EntityNotFound("no such session", kind="session", session_id=session_id)
        with self._limits.reads.slot(scope_of(request)):
            # Streamed a page at a time (sessionbundle.PAGE_EVENTS), each held
            # against the read memory until written (pagestream.py); a client
            # that leaves stops the reading at once, and the pages' iterator
            # is closed in a reader thread, whose connection it reads.
            chunks = await self._read(self._session_bundle, scope.tenant, session_id, size)
            try:
                async with self._pages.hold(request) as held:
                    first = await self._read(next, chunks, None)
                    assert first is not None  # a bundle has a head and a tail

                    async def rest() -> bytes | None:
                        return await self._read(next, chunks, None)

                    return await self._pages.send(request, held, JSON_MEDIA, first, rest, "session proof")
            finally:
                await self._read(chunks.close)

    def _session_bundle(self, tenant: str, session_id: str, size: int | None) -> Generator[bytes, None, None]:
        last = events.last_position(self._model, events.Selection(tenant, session_id))
        if last is None:
            raise EntityNotFound("no such session", kind="session", session_id=session_id)
        with failures_as(_READ_FAILED):
            note = self._covering(last, size, f"the session's last event (position {last})")
        return session_bundle_chunks(self._model.connection, tenant, session_id, note)

    def _covering(self, position: int, size: int | None, what: str) -> str:
        """The served checkpoint of ``size`` (default: the latest), which must
        cover ``position``."""
        conn = self._model.connection()
        latest = tlog.latest_size(conn)
        if size is None:
            if latest is None or latest < position:
                raise _not_covered(what, position, latest)
            size = latest
        note = tlog.served_note(conn, size)
        if note is None:
            raise _no_checkpoint(size=size)
        if size < position:
            raise InvalidRequest(
                f"the checkpoint of size {size} does not cover {what}", parameter="size", found=size
            )
        return note


async def _cosigned_bytes(request: web.Request) -> bytes:
    def too_large() -> RequestTooLarge:
        return RequestTooLarge("a cosigned checkpoint is at most 64 KiB", limit_bytes=MAX_COSIGNED_BYTES)

    if request.content_length is not None and request.content_length > MAX_COSIGNED_BYTES:
        raise too_large()
    data = bytearray()
    async for chunk in request.content.iter_chunked(16 * 1024):
        data += chunk
        if len(data) > MAX_COSIGNED_BYTES:
            raise too_large()
    return bytes(data)
