"""The Python SDK: ``LedgerClient`` for every store operation, and
``LaneRecorder`` for writing one lane safely.

An append is published to JetStream (the PubAck means "durably accepted"),
and the sequencer answers on the client's inbox with a receipt ("committed",
or a typed error). Resending the same append id is always safe: the ledger
answers a resend with the original receipt.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import time
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import msgspec
import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from laneledger.contract.clock import system_clock
from laneledger.contract.contentref import refs_in
from laneledger.contract.errors import (
    BlobMissing,
    EntityConflict,
    EntityNotFound,
    InvalidRequest,
    LedgerError,
    LedgerTimeout,
    LedgerUnavailable,
    QuotaExceeded,
    RequestTooLarge,
    TransportError,
    error_from_wire,
)
from laneledger.contract.ids import new_id
from laneledger.contract.model import (
    MAX_REQUEST_BYTES,
    Action,
    Actor,
    AppendCommitted,
    AppendRejected,
    Attempt,
    Command,
    CreateAction,
    CreateAttempt,
    CreateLane,
    CreateTurn,
    EnsureActor,
    Erase,
    ErasurePage,
    EventsPage,
    ForkPoint,
    GetLane,
    GetReceipt,
    Lane,
    LanePage,
    LoadLane,
    LoadRun,
    LoadSession,
    LoadStructure,
    Receipt,
    Reply,
    ReplyError,
    RunView,
    SessionView,
    StructureCursor,
    StructurePage,
    Turn,
    decoder,
    encode,
)
from laneledger.contract.redaction import Redactor, redact_command
from laneledger.contract.signing import Ed25519PrivateKey, public_key_hex, sign_event
from laneledger.contract.subjects import (
    REPLY_HEADER,
    TENANT_JS_API_PREFIX,
    Subjects,
    tenant_headers,
    token,
)
from laneledger.contract.subjects import inbox_prefix as tenant_inbox_prefix
from laneledger.contract.vocabulary import SCHEMA_VERSION
from laneledger.sdk.blobstore import (
    BlobStore,
    TenantBlobStore,
    tenant_bucket_name,
    tenant_uploads_bucket_name,
)
from laneledger.sdk.content import PreparedEvent, blobs_of, default_redactor, prepare_content, prepared
from laneledger.sdk.deadline import within
from laneledger.sdk.natsconnect import DEFAULT_NATS, connect_nats, nats_servers
from laneledger.sdk.pubacks import AckInbox, PubAck, limit_reached
from laneledger.sdk.retry import Backoff, retry

T = TypeVar("T")
Wait = Literal["commit", "accept"]
log = logging.getLogger("laneledger.sdk.client")

# ``on``: a trusted client receives each tenant's receipts in that tenant's
# inbox (``LedgerClient(tenant_inboxes=...)`` unset), as a deployment with a
# tenants file requires; so the CLI's appending commands work there as the
# shared producer.
TENANT_INBOXES_ENV = "LANELEDGER_TENANT_INBOXES"


def tenant_inboxes_from_env() -> bool:
    value = os.environ.get(TENANT_INBOXES_ENV, "off")
    if value not in ("on", "off"):
        raise InvalidRequest(
            f"{TENANT_INBOXES_ENV} must be on or off", variable=TENANT_INBOXES_ENV, value=value[:40]
        )
    return value == "on"


NO_RESPONDERS_GRACE_S = 1.0  # how long a command is asked again while no sequencer subscribes
NO_RESPONDERS_FIRST_PAUSE_S = 0.05
# A request the transport lost, sent again (the same append id, the same
# idempotent checkpoint body): its attempt budget is the caller's ``retries``.
TRANSPORT_BACKOFF = Backoff(first=0.1, cap=2.0)


def transport_error(exc: Exception, what: str, *, service: str = "sequencer") -> LedgerError:
    """The one place nats-py errors become ledger errors (``service`` names
    who should have answered a request)."""
    if isinstance(exc, LedgerError):
        return exc
    if isinstance(exc, (nats.errors.TimeoutError, asyncio.TimeoutError)):
        return LedgerTimeout(f"{what}: no answer in time")
    if isinstance(exc, nats.errors.MaxPayloadError):
        return RequestTooLarge(f"{what}: larger than the server's max_payload")
    if isinstance(exc, nats.errors.NoRespondersError):
        return LedgerUnavailable(f"{what}: no {service} is answering")
    return LedgerUnavailable(f"{what}: {type(exc).__name__}: {exc}")


def _append_refused(accepted: PubAck, tenant: str) -> LedgerError:
    """JetStream's refusal of an append request: a tenant's append stream at
    its backlog limit (spec/wire.md, "Tenants and limits"), or unavailable."""
    assert accepted.error is not None
    limit = limit_reached(accepted.error)
    if limit is not None:
        return QuotaExceeded(
            f"append: tenant {tenant!r} has as many append requests waiting as its limit allows "
            f"({accepted.error.description}); the ledger takes them at the tenant's append rate: "
            "resend later, more slowly",
            limit="append_backlog" if limit == "max_msgs" else "append_backlog_bytes",
            tenant=tenant,
            stream=accepted.stream,
        )
    return LedgerUnavailable(
        f"append: JetStream refused it: {accepted.error.description}", err_code=accepted.error.err_code
    )


def make_event(
    lane_id: str,
    event_type: str,
    *,
    actor_id: str,
    subject_id: str | None = None,
    payload: Mapping[str, Any] | None = None,
    causation_id: str | None = None,
    extensions: Mapping[str, Any] | None = None,
    occurred_at: str | None = None,
    event_id: str | None = None,
    private_key: Ed25519PrivateKey | None = None,
    data_subject: str | None = None,
) -> PreparedEvent:
    """A proposed event as a plain JSON object, with a fresh UUIDv7 id;
    signed (``signature``) when the actor's ``private_key`` is given;
    ``data_subject``: whose personal data it holds (spec/erasure.md).

    Its content is redacted and its payload values over 1 KiB externalized
    (``spec/content.md``); the bytes of those blobs travel with the event
    (a ``PreparedEvent``: a dict, its ``blobs`` an attribute) until
    ``LedgerClient.submit`` stores them. Signing it later (``sign_event``)
    keeps them; a plain-dict copy drops them (submit then needs the blobs
    stored already, else refuses it with ``blob_missing``)."""
    event: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "id": event_id or new_id(),
        "lane_id": lane_id,
        "subject_id": subject_id or lane_id,
        "event_type": event_type,
        "actor_id": actor_id,
        "occurred_at": occurred_at or system_clock(),
        "payload": dict(payload or {}),
        "extensions": dict(extensions or {}),
    }
    if causation_id is not None:
        event["causation_id"] = causation_id
    if data_subject is not None:
        event["data_subject"] = data_subject
    # Redact and externalize before signing: the signature covers what is sent.
    done = prepared(event)
    return PreparedEvent(sign_event(done, private_key), done.blobs) if private_key is not None else done


@dataclass
class AppendHandle:
    """An append the stream has durably accepted; its receipt may follow."""

    append_id: str
    accepted: PubAck
    _receipt: asyncio.Future[Receipt]
    _client: LedgerClient
    tenant: str | None = None  # the lane's: append ids are each tenant's own

    async def receipt(self, timeout: float | None = None) -> AppendCommitted:
        """Wait for the commit. Raises the receipt's typed error when rejected,
        ``LedgerTimeout`` when no receipt came (resend the same append: safe)."""
        timeout = self._client.timeout if timeout is None else timeout
        try:
            found: Receipt = await within(self._receipt, timeout)
        except TimeoutError:
            # The receipt itself may have been lost on the way; the ledger keeps
            # the receipts of committed appends.
            try:
                return await self._client.get_receipt(self.append_id, tenant=self.tenant)
            except LedgerError:
                raise LedgerTimeout(
                    "no receipt in time", append_id=self.append_id, timeout_s=timeout
                ) from None
        finally:
            self._client._forget(self.append_id, self._receipt)
        return raise_if_rejected(found)


def raise_if_rejected(receipt: Receipt) -> AppendCommitted:
    if isinstance(receipt, AppendRejected):
        err = error_from_wire(receipt.error.code, receipt.error.message, receipt.error.details)
        err.receipt = receipt  # type: ignore[attr-defined]
        raise err
    return receipt


async def _tenant_js_api_prefix(nc: NATS, tenant: str, subjects: Subjects) -> str | None:
    """``TENANT_JS_API_PREFIX`` when the ledger account's JetStream answers
    there (a tenant account, as nats-config renders it), else None: a server
    without accounts has no responder on it, and says so at once."""
    bucket = tenant_uploads_bucket_name(token(tenant), subjects)
    try:
        await nc.request(f"{TENANT_JS_API_PREFIX}.STREAM.INFO.OBJ_{bucket}", b"", timeout=2.0)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        return None
    return TENANT_JS_API_PREFIX


_DESCRIPTIVE = frozenset({"display_name", "attributes"})  # what ensure_actor(adopt=True) lets differ


class LedgerClient:
    def __init__(
        self,
        nc: NATS,
        *,
        subjects: Subjects = Subjects(),
        timeout: float = 10.0,
        owns_connection: bool = False,
        redactor: Redactor | None = None,
        tenant: str | None = None,
        js_api_prefix: str | None = None,
        tenant_inboxes: bool | None = None,
    ) -> None:
        self.nc = nc
        # The JetStream API (blob and artifact buckets): the connection's own
        # account's, or the ledger account's under ``js_api_prefix``
        # (``subjects.TENANT_JS_API_PREFIX`` for a tenant's producer user).
        self.js = nc.jetstream(**({"prefix": js_api_prefix} if js_api_prefix else {}))
        # Commands go on this tenant's subjects (<prefix>.cmd.<tenant>.<op>),
        # answered for it alone: what a tenant's producer user may publish.
        # None: <prefix>.cmd.<op>, any tenant (the shared producer, services).
        self.tenant = tenant
        self.redactor = redactor or default_redactor()
        self._blobs: dict[str, BlobStore] = {}  # by bucket name
        self._stored: set[tuple[str, str, int]] = set()  # (tenant, ref, size) known stored
        self._acks = AckInbox(nc)
        self.subjects = subjects
        self.timeout = timeout
        self._owns = owns_connection
        # Receipts of a tenant's appends come to that tenant's inbox prefix
        # (_INBOX_<token>) for a tenant's client, and for a trusted one with
        # ``tenant_inboxes``: with a tenants file the sequencer sends them
        # nowhere else (spec/wire.md, "Replies"); otherwise to the
        # connection's own inbox. One subscription per prefix, by prefix.
        if tenant_inboxes is None:
            tenant_inboxes = tenant_inboxes_from_env()
        self._tenant_inboxes = tenant_inboxes or tenant is not None
        self._inboxes: dict[str, tuple[str, Subscription]] = {}
        # Futures of appends waiting for their receipt, by append id.
        self._waiting: dict[str, list[asyncio.Future[Receipt]]] = {}

    @classmethod
    async def connect(
        cls,
        url: str | Sequence[str] = DEFAULT_NATS,
        *,
        connect_timeout: float = 5.0,
        inbox_prefix: str | None = None,
        tenant: str | None = None,
        js_api_prefix: str | None = None,
        **kwargs: Any,
    ) -> LedgerClient:
        """Connect, failing within ``connect_timeout`` if no server answers;
        once connected, reconnect for as long as it takes. ``url``: one
        server, or several (a list, or comma-separated: a cluster's nodes),
        tried in turn until one answers; a malformed one is ``InvalidRequest``
        naming it. ``inbox_prefix``:
        where receipts and replies come back; a tenant's producer user under
        deploy/nats.conf must use ``subjects.inbox_prefix(tenant)``, the
        default when ``tenant`` is given. ``tenant``: send commands and
        checkpoint requests on that tenant's subjects (spec/wire.md, "NATS
        users and tenants"). ``js_api_prefix``: where the JetStream API is
        reached (blob and artifact buckets); by default the connection's own
        account's, or, for a ``tenant`` whose producer user is in its own
        account (``laneledger nats-config``), the ledger account's through
        ``subjects.TENANT_JS_API_PREFIX``: found out by asking it once.
        ``tenant_inboxes`` (a trusted client, no ``tenant``): receive each
        tenant's receipts under that tenant's inbox prefix, as a deployment
        with a tenants file requires (spec/wire.md, "Replies"); unset:
        ``$LANELEDGER_TENANT_INBOXES`` (``on``/``off``, default off); a
        tenant's client always does."""
        if inbox_prefix is None and tenant is not None:
            inbox_prefix = tenant_inbox_prefix(tenant)
        try:
            servers = nats_servers(url)
        except ValueError as exc:
            raise InvalidRequest(f"NATS URL: {exc}", url=url) from None
        errors: list[Exception] = []

        async def remember(exc: Exception) -> None:  # instead of nats-py's logged traceback
            errors.append(exc)
            log.debug("NATS connection error: %s", exc)

        try:
            nc = await asyncio.wait_for(
                connect_nats(
                    servers,
                    name="laneledger-client",
                    error_cb=remember,
                    # each server its share, so an unanswering first
                    # one leaves time for the next
                    connect_timeout=connect_timeout / len(servers),
                    **({"inbox_prefix": inbox_prefix} if inbox_prefix else {}),
                ),
                connect_timeout,
            )
        except Exception as exc:
            cause = errors[-1] if errors else exc
            raise LedgerUnavailable(f"cannot connect to {','.join(servers)}: {cause}") from exc
        if js_api_prefix is None and tenant is not None:
            js_api_prefix = await _tenant_js_api_prefix(nc, tenant, kwargs.get("subjects", Subjects()))
        return cls(nc, owns_connection=True, tenant=tenant, js_api_prefix=js_api_prefix, **kwargs)

    async def __aenter__(self) -> LedgerClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._acks.close()
        for _, sub in self._inboxes.values():
            await sub.unsubscribe()
        self._inboxes.clear()
        for futures in self._waiting.values():
            for future in futures:
                future.cancel()
        self._waiting.clear()
        if self._owns and not self.nc.is_closed:
            await self.nc.flush()
            await self.nc.close()

    async def drain(self) -> None:
        """Wait for outstanding receipts to arrive (bounded by the timeout)."""
        pending = [f for futures in self._waiting.values() for f in futures if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=self.timeout)

    # ------------------------------------------------------------ commands

    async def _command(self, cmd: Command, result_type: type[T]) -> T:
        op = str(type(cmd).__struct_config__.tag)  # every Command has a string tag
        # Secrets never leave the process: free-form fields redacted, a
        # secret-shaped identifier refused here (the sequencer does it again).
        cmd, _ = redact_command(cmd, self.redactor)
        reply = decoder(Reply).decode(await self._request(op, encode(cmd)))
        if isinstance(reply, ReplyError):
            raise error_from_wire(reply.error.code, reply.error.message, reply.error.details)
        return msgspec.convert(reply.result, result_type)

    async def _request(self, op: str, body: bytes) -> bytes:
        """One command's body to the sequencer; its reply's bytes (the
        transport: tests/ledger_fixtures.py's in-process client replaces it)."""
        subject, headers = self.subjects.command(op, self.tenant), tenant_headers(self.tenant)
        # Nobody subscribed at this instant (a sequencer starting or
        # restarting), so nobody got it: asked again for a moment before it
        # is an error.
        grace = min(NO_RESPONDERS_GRACE_S, self.timeout)
        try:
            msg = await retry(
                lambda: self.nc.request(subject, body, timeout=self.timeout, headers=headers),
                Backoff(
                    first=NO_RESPONDERS_FIRST_PAUSE_S,
                    cap=max(grace, NO_RESPONDERS_FIRST_PAUSE_S),
                    within=grace,
                ),
                retry_on=(nats.errors.NoRespondersError,),
            )
        except Exception as exc:
            raise transport_error(exc, op) from exc
        return msg.data

    async def ensure_actor(
        self,
        tenant: str,
        key: str,
        kind: str,
        *,
        display_name: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        public_key: str | Ed25519PrivateKey | None = None,
        adopt: bool = False,
    ) -> Actor:
        """Register (or find) an actor. With ``public_key`` (hex, or the
        private key whose public half to register) its events must be signed;
        the key is part of the actor: another key for the same ``key`` is an
        ``entity_conflict``, as is another description — unless ``adopt``:
        then an actor of ``key`` that exists with another ``display_name`` or
        ``attributes`` is that actor as it is (a key names one actor, whoever
        registered it first: a Korg post and an importer describe the same
        agent differently); another ``kind`` or public key stays a conflict."""
        if isinstance(public_key, Ed25519PrivateKey):
            public_key = public_key_hex(public_key)
        command = EnsureActor(
            tenant=tenant,
            key=key,
            kind=kind,
            display_name=display_name,
            attributes=dict(attributes or {}),
            public_key=public_key,
        )
        try:
            return await self._command(command, Actor)
        except EntityConflict as conflict:
            differing = conflict.details.get("differing")
            if not adopt or not isinstance(differing, dict) or not differing or set(differing) - _DESCRIPTIVE:
                raise
            stored = {name: value["stored"] for name, value in differing.items()}
            return await self._command(msgspec.structs.replace(command, **stored), Actor)

    async def create_lane(
        self,
        tenant: str,
        session_id: str,
        run_id: str,
        name: str,
        *,
        kind: str = "main",
        parent_lane_id: str | None = None,
        actor_id: str | None = None,
        lane_id: str | None = None,
        fork_of: ForkPoint | None = None,
    ) -> Lane:
        """``fork_of``: fork that lane at that seq (``laneledger.history.branching.fork_lane``)."""
        return await self._command(
            CreateLane(
                tenant=tenant,
                session_id=session_id,
                run_id=run_id,
                name=name,
                kind=kind,
                parent_lane_id=parent_lane_id,
                actor_id=actor_id,
                id=lane_id,
                fork_of=fork_of,
            ),
            Lane,
        )

    async def create_turn(
        self, lane_id: str, turn_no: int, *, turn_id: str | None = None, tenant: str | None = None
    ) -> Turn:
        return await self._command(
            CreateTurn(lane_id=lane_id, turn_no=turn_no, id=turn_id or new_id(), tenant=tenant), Turn
        )

    async def create_action(
        self,
        lane_id: str,
        turn_id: str,
        action_type: str,
        name: str,
        *,
        effect: str,
        idempotency: str,
        idempotency_key: str | None = None,
        action_id: str | None = None,
        tenant: str | None = None,
    ) -> Action:
        return await self._command(
            CreateAction(
                lane_id=lane_id,
                turn_id=turn_id,
                action_type=action_type,
                name=name,
                effect=effect,
                idempotency=idempotency,
                idempotency_key=idempotency_key,
                id=action_id or new_id(),
                tenant=tenant,
            ),
            Action,
        )

    async def create_attempt(
        self,
        lane_id: str,
        action_id: str,
        attempt_no: int,
        *,
        attempt_id: str | None = None,
        tenant: str | None = None,
    ) -> Attempt:
        return await self._command(
            CreateAttempt(
                lane_id=lane_id,
                action_id=action_id,
                attempt_no=attempt_no,
                id=attempt_id or new_id(),
                tenant=tenant,
            ),
            Attempt,
        )

    # ``tenant`` on the lookups: whose ids they are (every id is its
    # tenant's own). A client connected as a tenant leaves it out; a trusted
    # one needs it only for an id several tenants use (``invalid_request``
    # naming ``$.tenant`` otherwise).

    async def get_lane(self, lane_id: str, *, tenant: str | None = None) -> Lane:
        return await self._command(GetLane(lane_id=lane_id, tenant=tenant), Lane)

    async def load_lane(
        self, lane_id: str, after_seq: int = 0, limit: int = 1000, *, tenant: str | None = None
    ) -> LanePage:
        return await self._command(
            LoadLane(lane_id=lane_id, after_seq=after_seq, limit=limit, tenant=tenant), LanePage
        )

    async def lane_pages(
        self,
        lane_id: str,
        after_seq: int = 0,
        *,
        limit: int = 1000,
        through_seq: int | None = None,
        tenant: str | None = None,
    ) -> AsyncGenerator[LanePage, None]:
        """A lane's events after ``after_seq`` (through ``through_seq`` when
        given), page by page to the end, for lanes of any size. ``load_lane``
        counts events, not bytes: a page whose reply would be over the
        server's max_payload (``request_too_large``) is asked again at half
        the length, down to one event; the pages after it grow back."""
        size = limit
        while through_seq is None or after_seq < through_seq:
            want = size if through_seq is None else min(size, through_seq - after_seq)
            try:
                page = await self.load_lane(lane_id, after_seq, limit=want, tenant=tenant)
            except RequestTooLarge:
                if want == 1:
                    raise
                size = max(1, want // 2)
                continue
            if through_seq is not None and page.events and page.events[-1].seq >= through_seq:
                page = msgspec.structs.replace(page, has_more=False)
            yield page
            if not page.events or not page.has_more:
                return
            after_seq = page.events[-1].seq
            size = min(limit, size * 2)

    async def load_run(self, session_id: str, run_id: str, *, tenant: str | None = None) -> RunView:
        """A run whole, read page by page (``_whole``)."""
        _, parts = await self._whole(session_id, run_id, tenant)
        return RunView(session_id=session_id, run_id=run_id, **parts)

    async def load_session(self, session_id: str, *, tenant: str | None = None) -> SessionView:
        """A session whole, read page by page (``_whole``)."""
        structure, parts = await self._whole(session_id, None, tenant)
        runs = sorted({lane.run_id for lane in structure.lanes})
        return SessionView(session_id=session_id, tenant=structure.tenant, run_ids=runs, **parts)

    async def _whole(
        self, session_id: str, run_id: str | None, tenant: str | None
    ) -> tuple[StructurePage, dict[str, Any]]:
        """A session's (run's) structure (``load_structure``) and its events
        (``events_pages``), each reply one page: the view's fields."""
        structure = await self.load_structure(session_id, run_id, tenant=tenant)
        events = [
            e
            async for page in self.events_pages(session_id, run_id, tenant=structure.tenant)
            for e in page.events
        ]
        kinds = ("lanes", "turns", "actions", "attempts")
        return structure, {**{kind: getattr(structure, kind) for kind in kinds}, "events": events}

    async def events_page(
        self,
        session_id: str,
        run_id: str | None = None,
        after_position: int = 0,
        limit: int = 1000,
        *,
        tenant: str | None = None,
    ) -> EventsPage:
        """One page of a session's (``run_id``: a run's) events after ``after_position``."""
        cmd: LoadSession | LoadRun
        if run_id is None:
            cmd = LoadSession(
                session_id=session_id, after_position=after_position, limit=limit, tenant=tenant
            )
        else:
            cmd = LoadRun(
                session_id=session_id,
                run_id=run_id,
                after_position=after_position,
                limit=limit,
                tenant=tenant,
            )
        return await self._command(cmd, EventsPage)

    async def events_pages(
        self, session_id: str, run_id: str | None = None, *, tenant: str | None = None
    ) -> AsyncGenerator[EventsPage, None]:
        """A session's (run's) events page by page to the end, for sessions of any size."""
        after = 0
        while True:
            page = await self.events_page(session_id, run_id, after, tenant=tenant)
            yield page
            if not page.has_more:
                return
            after = page.next_position

    async def load_structure_page(
        self,
        session_id: str,
        run_id: str | None = None,
        after: StructureCursor | None = None,
        limit: int = 1000,
        *,
        tenant: str | None = None,
    ) -> StructurePage:
        return await self._command(
            LoadStructure(
                session_id=session_id,
                run_id=run_id,
                after=after if after is not None else StructureCursor(),
                limit=limit,
                tenant=tenant,
            ),
            StructurePage,
        )

    async def load_structure(
        self, session_id: str, run_id: str | None = None, *, tenant: str | None = None
    ) -> StructurePage:
        """A session's (run's) whole structure, read page by page: what
        ``load_session`` holds but its events, for sessions of any size."""
        page = await self.load_structure_page(session_id, run_id, tenant=tenant)
        # Every later page is of the first page's tenant, also when the id
        # was resolved to the only tenant that has it.
        whole = {kind: list(getattr(page, kind)) for kind in ("lanes", "turns", "actions", "attempts")}
        while page.has_more:
            page = await self.load_structure_page(session_id, run_id, page.next, tenant=page.tenant)
            for kind, rows in whole.items():
                rows.extend(getattr(page, kind))
        return msgspec.structs.replace(page, **whole)

    async def get_receipt(self, append_id: str, *, tenant: str | None = None) -> AppendCommitted:
        """The receipt of a committed append; ``tenant``: whose append id it
        is (append ids are each tenant's own), needed only when several
        tenants used it and this client is not scoped to one."""
        return await self._command(GetReceipt(append_id=append_id, tenant=tenant), AppendCommitted)

    # -------------------------------------------------------------- erasure

    async def erase_page(
        self,
        session_id: str | None = None,
        *,
        actor_id: str,
        reason: str,
        erasure_id: str,
        run_id: str | None = None,
        data_subject: str | None = None,
        committed_before: str | None = None,
        after_position: int = 0,
        limit: int = 200,
        dry_run: bool = False,
        tenant: str | None = None,
    ) -> ErasurePage:
        """One request of an erasure (spec/erasure.md): the first commits its
        erasure event, each erases the next ``limit`` events it covers."""
        return await self._command(
            Erase(
                erasure_id=erasure_id,
                actor_id=actor_id,
                reason=reason,
                session_id=session_id,
                run_id=run_id,
                data_subject=data_subject,
                committed_before=committed_before,
                after_position=after_position,
                limit=limit,
                dry_run=dry_run,
                tenant=tenant,
            ),
            ErasurePage,
        )

    async def erase(
        self,
        session_id: str | None = None,
        *,
        actor_id: str,
        reason: str,
        run_id: str | None = None,
        data_subject: str | None = None,
        committed_before: str | None = None,
        erasure_id: str | None = None,
        after_position: int = 0,
        limit: int = 200,
        dry_run: bool = False,
        tenant: str | None = None,
        max_pages: int | None = None,
        budget_s: float | None = None,
    ) -> ErasurePage:
        """Erase the content of a session's events, of one run's, of every
        event naming ``data_subject``, or of every event of ``tenant``
        committed before ``committed_before`` (spec/erasure.md), page by page
        from ``after_position`` until none is left; the last page's report
        with the counts of all pages. Safe to call again with the same
        ``erasure_id`` (after a timeout, say): what is erased stays so, and
        the rest is erased. ``actor_id``: who asks, an actor of the tenant;
        ``reason`` is kept in the erasure event, forever: no personal data in
        it. ``max_pages``, ``budget_s``: stop after that many pages, or once
        that long has passed, the report then saying ``has_more`` (continue
        with its ``erasure_id`` and ``next_after_position``)."""
        erasure_id = erasure_id or new_id()
        started = time.monotonic()
        after, totals, pages = after_position, [0, 0, 0], 0
        while True:
            page = await self.erase_page(
                session_id,
                actor_id=actor_id,
                reason=reason,
                erasure_id=erasure_id,
                run_id=run_id,
                data_subject=data_subject,
                committed_before=committed_before,
                after_position=after,
                limit=limit,
                dry_run=dry_run,
                tenant=tenant,
            )
            pages += 1
            for i, n in enumerate((page.erased, page.already_erased, page.unsealed)):
                totals[i] += n
            spent = (max_pages is not None and pages >= max_pages) or (
                budget_s is not None and time.monotonic() - started >= budget_s
            )
            if not page.has_more or spent:
                erased, already, unsealed = totals
                return msgspec.structs.replace(page, erased=erased, already_erased=already, unsealed=unsealed)
            after = page.next_after_position

    # -------------------------------------------------------------- appends

    async def submit(
        self,
        lane: Lane,
        expected_last_seq: int,
        events: Iterable[Mapping[str, Any]],
        *,
        append_id: str | None = None,
    ) -> AppendHandle:
        """Publish an append and return once JetStream has durably accepted it
        (its content redacted and its blobs stored first)."""
        append_id = append_id or new_id()
        body = await self.append_body(lane, expected_last_seq, events, append_id)
        reply_to, future = await self._expect_receipt(append_id, lane.tenant)
        try:
            # No Nats-Msg-Id: JetStream would swallow a resend whose original
            # was rejected, leaving no answer; the ledger's replay check makes
            # every resend safe and answered (spec/wire.md).
            waiting = await self._acks.publish(
                self.subjects.append(lane.tenant, lane.id), body, {REPLY_HEADER: reply_to}
            )
            try:
                accepted = await within(waiting, self.timeout)
            except TimeoutError:
                self._acks.forget(waiting)
                raise LedgerTimeout("append: JetStream did not acknowledge in time") from None
            if accepted.error is not None:
                raise _append_refused(accepted, lane.tenant)
        except Exception as exc:
            self._forget(append_id, future)
            err = transport_error(exc, "append")
            err.details.setdefault("append_id", append_id)
            raise err from exc
        return AppendHandle(append_id, accepted, future, self, lane.tenant)

    async def append_body(
        self, lane: Lane, expected_last_seq: int, events: Iterable[Mapping[str, Any]], append_id: str
    ) -> bytes:
        """The append request as published (its content redacted and its
        blobs stored first); ``request_too_large`` over the size limit."""
        body = encode(
            {
                "lane_id": lane.id,
                "expected_last_seq": expected_last_seq,
                "append_id": append_id,
                "events": await self.store_content(lane.tenant, events),
            }
        )
        if len(body) > MAX_REQUEST_BYTES:
            raise RequestTooLarge(
                f"append is {len(body)} bytes, the limit is {MAX_REQUEST_BYTES}",
                size_bytes=len(body),
                limit_bytes=MAX_REQUEST_BYTES,
                append_id=append_id,
            )
        return body

    async def append(
        self,
        lane: Lane,
        expected_last_seq: int,
        events: Iterable[Mapping[str, Any]],
        *,
        append_id: str | None = None,
        retries: int = 2,
        timeout: float | None = None,
    ) -> AppendCommitted:
        """Append and wait for the commit. Transport failures are retried with
        the same append id (safe: a resend gets the original receipt)."""
        append_id = append_id or new_id()
        events = list(events)

        async def once() -> AppendCommitted:
            handle = await self.submit(lane, expected_last_seq, events, append_id=append_id)
            return await handle.receipt(timeout)

        return await retry(once, replace(TRANSPORT_BACKOFF, attempts=retries + 1), retry_on=(TransportError,))

    # ------------------------------------------------------------- content

    async def blob_store(self, tenant: str | None = None) -> BlobStore:
        """The blob store this client stores ``tenant``'s blobs with
        (``spec/content.md``). A tenant-scoped client (``tenant=`` at
        connect: a ``producer-<tenant>`` user) gets a ``TenantBlobStore``:
        it uploads into ``LEDGER_UPLOADS_<token>`` and reads the committed
        ``LEDGER_BLOBS_<token>``, buckets the sequencer creates on the
        tenant's first command and a producer may not: missing, they are
        asked for with a command that changes nothing, and if still missing
        are ``EntityNotFound`` (kind ``blob_bucket``). A trusted client uses
        the shared bucket (opened, or created, on first use)."""
        if self.tenant is None:
            if "" not in self._blobs:
                self._blobs[""] = await BlobStore.open(
                    self.js, subjects=self.subjects, timeout_s=self.timeout
                )
            return self._blobs[""]
        tenant = tenant or self.tenant
        name = tenant_bucket_name(token(tenant), self.subjects)
        if name not in self._blobs:
            try:
                self._blobs[name] = await self._tenant_blobs(tenant, name)
            except EntityNotFound as exc:
                if exc.details.get("kind") != "blob_bucket":
                    raise
                # Any command on the tenant's subjects has the sequencer create
                # its buckets before answering: ask for a receipt nobody has.
                with contextlib.suppress(EntityNotFound):
                    await self.get_receipt(new_id())
                self._blobs[name] = await self._tenant_blobs(tenant, name)
        return self._blobs[name]

    async def _tenant_blobs(self, tenant: str, name: str) -> TenantBlobStore:
        committed = await self._tenant_bucket(tenant, name)
        uploads = await self._tenant_bucket(tenant, tenant_uploads_bucket_name(token(tenant), self.subjects))
        return TenantBlobStore(committed, uploads)

    async def _tenant_bucket(self, tenant: str, bucket: str) -> BlobStore:
        try:
            return await BlobStore.open(self.js, bucket=bucket, create=False, timeout_s=self.timeout)
        except EntityNotFound as exc:
            raise EntityNotFound(
                f"tenant {tenant!r} has no blob bucket yet: the sequencer "
                "creates it when the tenant's producer sends its first command "
                "(ensure_actor, create_lane, …); send one, then store the blob again",
                kind="blob_bucket",
                bucket=bucket,
            ) from exc

    async def store_content(
        self, tenant: str, events: Iterable[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """The events redacted and externalized (``spec/content.md``), once
        every blob they reference is in ``tenant``'s blob store: stored from
        the bytes an event carries (a ``PreparedEvent`` from ``make_event``,
        or what this call externalized), or already there. ``blob_missing``
        when neither."""
        out: list[Mapping[str, Any]] = []
        uploads: dict[str, bytes] = {}
        needed: dict[tuple[str, int], str] = {}  # (ref, size) -> path naming it
        for i, event in enumerate(events):
            done, blobs, rules = prepare_content(dict(event), self.redactor)
            if (rules or blobs) and "signature" in event:
                raise InvalidRequest(
                    "a signed event holds a secret or a value over 1 KiB: its signature would "
                    "not cover what is sent; build it with make_event (or LaneRecorder.event), "
                    "which redacts and externalizes before signing",
                    path=f"$.events[{i}]",
                    event_id=event.get("id"),
                    redactions=rules,
                    blobs=len(blobs),
                )
            out.append(done if (rules or blobs) else event)
            uploads.update(blobs_of(event))
            uploads.update(blobs)
            payload = done.get("payload")
            if isinstance(payload, dict):
                for ref_size in refs_in(payload):
                    needed.setdefault(ref_size, f"$.events[{i}].payload")
        todo = [(r, s, p) for (r, s), p in needed.items() if (tenant, r, s) not in self._stored]
        if todo:
            store = await self.blob_store(tenant)
            await asyncio.gather(
                *(self._store_blob(store, tenant, ref, size, path, uploads) for ref, size, path in todo)
            )
        return out

    async def _store_blob(
        self, store: BlobStore, tenant: str, ref: str, size: int, path: str, uploads: dict[str, bytes]
    ) -> None:
        data = uploads.get(ref)
        # Bytes that do not hash to the reference (a hand-made PreparedEvent)
        # satisfy nothing: the store names objects by their own hash.
        stored = data is not None and len(data) == size and await store.put(tenant, data) == ref
        if not stored and not await store.has(tenant, ref, size):
            raise BlobMissing(
                "the event references a blob that is neither stored nor carried by "
                "the event (make_event's events carry their blobs' bytes; a plain-dict "
                "copy does not): store it first (BlobStore.put)",
                ref=ref,
                size_bytes=size,
                path=path,
            )
        if not await store.lasting(tenant, ref, size):
            return  # an upload, not committed yet: it ages out, so look again next time
        if len(self._stored) > 100_000:
            self._stored.clear()
        self._stored.add((tenant, ref, size))

    async def _expect_receipt(self, append_id: str, tenant: str) -> tuple[str, asyncio.Future[Receipt]]:
        own_prefix, unique = self.nc.new_inbox().rsplit(".", 1)  # the connection's prefix, a nuid
        prefix = tenant_inbox_prefix(tenant) if self._tenant_inboxes else own_prefix
        if prefix not in self._inboxes:
            inbox = f"{prefix}.{unique}"
            sub = await self.nc.subscribe(inbox, cb=self._on_receipts)
            if prefix in self._inboxes:  # a concurrent append subscribed first: use its inbox
                await sub.unsubscribe()
            else:
                self._inboxes[prefix] = (inbox, sub)
        future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(append_id, []).append(future)
        return self._inboxes[prefix][0], future

    def _forget(self, append_id: str, future: asyncio.Future[Receipt]) -> None:
        waiting = self._waiting.get(append_id, [])
        if future in waiting:
            waiting.remove(future)
            if not waiting:
                del self._waiting[append_id]

    async def _on_receipts(self, msg: Msg) -> None:
        try:
            receipts = _receipts_decoder.decode(msg.data)
        except msgspec.DecodeError:
            return  # not ours to answer; the waiting appends time out and resend
        for receipt in receipts:
            # Oldest waiter first: the same append id sent twice is answered in order.
            for future in self._waiting.get(receipt.append_id or "", []):
                if not future.done():
                    future.set_result(receipt)
                    break


_receipts_decoder = msgspec.json.Decoder(list[Receipt])


class LaneRecorder:
    """Writes one lane: serializes concurrent appends, tracks the lane head and
    advances it only on a newer receipt.

    ``wait="commit"`` (default) returns the receipt. ``wait="accept"`` returns
    once JetStream has the append and assumes it will commit (the recorder is
    the lane's only writer); ``flush()`` then awaits every outstanding receipt
    and raises the first rejection, after which the head is reloaded.
    """

    def __init__(
        self,
        client: LedgerClient,
        lane: Lane,
        *,
        signers: Mapping[str, Ed25519PrivateKey] | None = None,
        data_subject: str | None = None,
    ) -> None:
        self.client = client
        self.lane = lane
        # Named on every event appended that names none (spec/erasure.md): a
        # harness serving one person per lane sets it once.
        self.data_subject = data_subject
        # actor id -> private key: events of these actors are signed on append
        self.signers = dict(signers or {})
        self.head = lane.last_seq
        self._lock = asyncio.Lock()
        self._outstanding: list[AppendHandle] = []

    @classmethod
    async def open(
        cls,
        client: LedgerClient,
        tenant: str,
        session_id: str,
        run_id: str,
        name: str,
        *,
        signers: Mapping[str, Ed25519PrivateKey] | None = None,
        data_subject: str | None = None,
        **lane_fields: Any,
    ) -> LaneRecorder:
        """Create the lane (idempotent by session, run and name) and resume its head."""
        lane = await client.create_lane(tenant, session_id, run_id, name, **lane_fields)
        lane = await client.get_lane(lane.id, tenant=lane.tenant)
        return cls(client, lane, signers=signers, data_subject=data_subject)

    def event(self, event_type: str, *, actor_id: str, **fields: Any) -> PreparedEvent:
        """``make_event`` on this lane, signed when ``actor_id`` is one of the
        signers, naming the recorder's data subject unless told another."""
        fields.setdefault("private_key", self.signers.get(actor_id))
        fields.setdefault("data_subject", self.data_subject)
        return make_event(self.lane.id, event_type, actor_id=actor_id, **fields)

    def _subject(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        """The recorder's data subject on an event that names none (before it
        is signed: the signature covers it). A copy of its own kind, as
        ``sign_event`` makes, so a ``PreparedEvent`` keeps its blobs."""
        if self.data_subject is None or "data_subject" in event:
            return event
        marked = copy.copy(event)
        marked["data_subject"] = self.data_subject  # type: ignore[index]
        return marked

    def _signed(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        key = self.signers.get(event.get("actor_id"))  # type: ignore[arg-type]
        return sign_event(event, key) if key is not None and "signature" not in event else event

    async def append(
        self,
        events: Iterable[Mapping[str, Any]],
        *,
        append_id: str | None = None,
        wait: Wait = "commit",
    ) -> AppendCommitted | AppendHandle:
        # Content first (redact, externalize), then sign what will be sent; an
        # event signed already is left to submit's check.
        events = [
            event
            if "signature" in event
            else self._signed(self._subject(prepared(event, self.client.redactor)))
            for event in events
        ]
        async with self._lock:
            if wait == "accept":
                handle = await self.client.submit(self.lane, self.head, events, append_id=append_id)
                self.head += len(events)
                self._outstanding.append(handle)
                return handle
            receipt = await self.client.append(self.lane, self.head, events, append_id=append_id)
            self.head = max(self.head, receipt.last_seq)
            return receipt

    async def flush(self) -> list[AppendCommitted]:
        async with self._lock:
            handles, self._outstanding = self._outstanding, []
            receipts: list[AppendCommitted] = []
            try:
                for handle in handles:
                    receipts.append(await handle.receipt())
            except LedgerError:
                await self.reload()
                raise
            return receipts

    async def reload(self) -> int:
        self.lane = await self.client.get_lane(self.lane.id, tenant=self.lane.tenant)
        self.head = self.lane.last_seq
        return self.head
