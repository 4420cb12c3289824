"""The checkpoint SDK: ``CheckpointClient`` over a ``LedgerClient``'s NATS
connection, and the terminal pattern (normative text: ``spec/checkpoint.md``).

A checkpoint is a harness-native recovery baseline, opaque to the ledger:
inline JSON state up to the service's size limit, or a content-addressed
artifact (a blob in the service's JetStream object store bucket, uploaded
first). Saves are guarded by ``expected_revision`` and idempotent by
checkpoint id: resending a save with the same id and content returns the
stored checkpoint, so every transport failure is retried with the same id.

The terminal pattern: save the checkpoint that is the safe end of a run
(``terminal=True``), then append ``lane.framework.checkpoint.linked`` and
``run.completed`` in one atomic lane batch (``complete_run``). A crash between
the two leaves a terminal revision that no event links; ``reconcile`` lists
those.

The refusals specific to checkpoints (``RevisionConflict``,
``AnchorNotCommitted``, ``AnchorMismatch``, ``ArtifactMissing``,
``ArtifactMismatch``; re-exported here, defined with every other error in
``laneledger.contract.errors``) are subclasses of the ledger's errors that
keep their parent's wire code (``entity_conflict``, ``entity_not_found``) and
are told apart by ``details["reason"]``; ``error_from_wire`` rebuilds the
subclass from a reply, so a caller can catch either level.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import msgspec
from nats.aio.msg import Msg
from nats.js.errors import DigestMismatchError, NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from laneledger.contract.canonical import canonicalize

# The checkpoint refusals, re-exported (``as``): defined with every other
# error in laneledger.contract.errors, which error_from_wire picks from.
from laneledger.contract.errors import AnchorMismatch as AnchorMismatch
from laneledger.contract.errors import AnchorNotCommitted as AnchorNotCommitted
from laneledger.contract.errors import ArtifactMismatch as ArtifactMismatch
from laneledger.contract.errors import ArtifactMissing as ArtifactMissing
from laneledger.contract.errors import (
    EntityNotFound,
    IntegrityError,
    InvalidRequest,
    LedgerError,
    LedgerTimeout,
    LedgerUnavailable,
    QuotaExceeded,
    TransportError,
    error_from_wire,
)
from laneledger.contract.errors import RevisionConflict as RevisionConflict
from laneledger.contract.ids import new_id
from laneledger.contract.model import (
    Anchor,
    AppendCommitted,
    ArtifactRef,
    Checkpoint,
    CheckpointCommand,
    CheckpointInfo,
    CheckpointServiceInfo,
    CheckpointServiceStatus,
    EraseCheckpoints,
    ErasureReport,
    GetCheckpoint,
    InspectRun,
    LatestCheckpoint,
    ListRevisions,
    PlanRecovery,
    ProposedCheckpoint,
    ReconcileCheckpoints,
    ReconcileReport,
    RecoveryPlan,
    Reply,
    ReplyError,
    RevisionPage,
    RunInspection,
    SaveCheckpoint,
    decoder,
    encode,
)
from laneledger.contract.redaction import Redactor, redact_checkpoint_state
from laneledger.contract.subjects import tenant_headers
from laneledger.sdk.client import TRANSPORT_BACKOFF, LaneRecorder, LedgerClient, transport_error
from laneledger.sdk.objectstores import open_object_store, read_chunks
from laneledger.sdk.pubacks import limit_reached_by
from laneledger.sdk.retry import retry

T = TypeVar("T")

DEFAULT_ARTIFACT_BUCKET = "LEDGER_CHECKPOINT_ARTIFACTS"
LINKED_EVENT = "lane.framework.checkpoint.linked"
RUN_COMPLETED = "run.completed"
JSON_MEDIA_TYPE = "application/json"
ERASE_BATCH = 1000  # keys, ids and run ids per erase request (the command's bound)


# -- digests and names (shared with the service) ---------------------------------------------


def state_digest(state: Any) -> tuple[str, int]:
    """SHA-256 hex of the RFC 8785 bytes of inline state, and their length."""
    raw = canonicalize(state)
    return hashlib.sha256(raw).hexdigest(), len(raw)


def content_digest(proposal: ProposedCheckpoint) -> str:
    """What "the same content" means for a save: the RFC 8785 digest of the
    proposed checkpoint exactly as sent (state, artifact, anchor, ids)."""
    return hashlib.sha256(canonicalize(msgspec.to_builtins(proposal))).hexdigest()


def artifact_name(sha256: str) -> str:
    """The object name of a blob in the artifact bucket."""
    return f"sha256/{sha256}"


def object_store_digest(sha256: str) -> str:
    """The digest string the JetStream object store keeps for those bytes."""
    return "SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(sha256)).decode()


def anchor_of(receipt: AppendCommitted) -> Anchor:
    """The anchor naming the last event of a committed append."""
    return Anchor(lane_id=receipt.lane_id, seq=receipt.last_seq, event_id=receipt.event_ids[-1])


def is_json_media_type(media_type: str) -> bool:
    base = media_type.split(";", 1)[0].strip().lower()
    return base == JSON_MEDIA_TYPE or base.endswith("+json")


_NO_STATE: Any = object()

# The slowest transfer the time bound of an artifact upload or read allows for.
ARTIFACT_BYTES_PER_S = 1024 * 1024


def artifact_timeout(base_s: float, size_bytes: int) -> float:
    return base_s + size_bytes / ARTIFACT_BYTES_PER_S


async def object_call(what: str, sha256: str, call: Awaitable[T], timeout: float) -> T:
    """One JetStream object store call, bounded in time, with its errors as
    ledger errors (nats-py's object reads wait forever on a stalled consumer)."""
    try:
        async with asyncio.timeout(timeout):
            return await call
    except ObjectNotFoundError:
        raise ArtifactMissing(
            "no such artifact in the bucket", kind="artifact", id=sha256, reason=ArtifactMissing.reason
        ) from None
    except DigestMismatchError as exc:
        raise IntegrityError("artifact chunks do not match their digest", sha256=sha256) from exc
    except TimeoutError:
        raise LedgerTimeout(f"{what}: no answer in {timeout:g}s", sha256=sha256) from None
    except LedgerError:
        raise
    except Exception as exc:
        if limit_reached_by(exc) is not None:
            raise QuotaExceeded(
                f"{what}: the tenant's artifact bucket is full (its artifact_bytes limit)",
                limit="artifact_bytes",
                sha256=sha256,
            ) from exc
        raise _nats_error(exc, what) from exc


def _nats_error(exc: Exception, what: str) -> LedgerError:
    return transport_error(exc, what, service="checkpoint service")


# -- the client ---------------------------------------------------------------------------------


class CheckpointClient:
    """Checkpoint operations over the NATS connection of ``ledger``.

    ``timeout`` (default: the ledger client's) bounds each request; a save
    that waits for its anchor gets the anchor wait on top.
    """

    def __init__(
        self,
        ledger: LedgerClient,
        *,
        timeout: float | None = None,
        bucket: str | None = None,
        retries: int = 2,
    ) -> None:
        self.ledger = ledger
        self.nc = ledger.nc
        self.subjects = ledger.subjects
        self.timeout = ledger.timeout if timeout is None else timeout
        self.retries = retries
        self._bucket_name = bucket
        self._info: CheckpointServiceInfo | None = None
        self._store: ObjectStore | None = None

    # ------------------------------------------------------------------ requests

    async def _request(
        self, cmd: CheckpointCommand, result_type: type[T], *, timeout: float | None = None
    ) -> T:
        """One request and its reply, decoded (a refusal raised as its typed error)."""
        op = type(cmd).__struct_config__.tag
        assert isinstance(op, str)  # every checkpoint command is tagged by its op name
        data = await self._exchange(op, encode(cmd), self.timeout if timeout is None else timeout)
        reply = decoder(Reply).decode(data)
        if isinstance(reply, ReplyError):
            refused = reply.error
            raise error_from_wire(refused.code, refused.message, refused.details, refused.retryable)
        return msgspec.convert(reply.result, result_type)

    async def _exchange(self, op: str, body: bytes, timeout: float) -> bytes:
        """The transport: one request's reply body. Transport failures are
        retried with the same body (every checkpoint op is a read or an
        idempotent save)."""

        async def once() -> Msg:
            try:
                # On the ledger client's tenant's subject when it has one
                # (spec/checkpoint.md, "Tenants").
                return await self.nc.request(
                    self.subjects.checkpoint(op, self.ledger.tenant),
                    body,
                    timeout=timeout,
                    headers=tenant_headers(self.ledger.tenant),
                )
            except Exception as exc:
                raise _nats_error(exc, f"checkpoint {op}") from exc

        backoff = replace(TRANSPORT_BACKOFF, attempts=self.retries + 1)
        msg = await retry(once, backoff, retry_on=(TransportError,))
        return msg.data

    async def info(self, *, refresh: bool = False) -> CheckpointServiceInfo:
        """The service's limits and progress (cached; ``refresh`` asks again)."""
        if self._info is None or refresh:
            self._info = await self._request(CheckpointServiceStatus(), CheckpointServiceInfo)
        return self._info

    # ------------------------------------------------------------------ artifacts

    async def _bucket(self) -> ObjectStore:
        if self._store is None:
            name = self._bucket_name = self._bucket_name or (await self.info()).artifact_bucket
            try:
                self._store = await open_object_store(self.ledger.js, name)
            except NotFoundError as exc:
                raise LedgerUnavailable(
                    f"no artifact bucket {name!r}: is the checkpoint service up?", bucket=name
                ) from exc
            except Exception as exc:
                raise _nats_error(exc, "open the artifact bucket") from exc
        return self._store

    async def put_artifact(self, data: bytes, media_type: str) -> ArtifactRef:
        """Upload ``data`` (content-addressed, so uploading the same bytes
        twice stores them once) and return the reference a save can carry."""
        sha = hashlib.sha256(data).hexdigest()
        ref = ArtifactRef(sha256=sha, size_bytes=len(data), media_type=media_type)
        store = await self._bucket()
        name = artifact_name(sha)
        try:
            info = await object_call("artifact info", sha, store.get_info(name), self.timeout)
            if info.size == len(data) and info.digest == object_store_digest(sha):
                return ref  # already there: do not replace chunks a reader may be reading
        except ArtifactMissing:
            pass
        try:
            await object_call(
                "upload artifact", sha, store.put(name, data), artifact_timeout(self.timeout, len(data))
            )
        except QuotaExceeded as exc:
            exc.details.update(tenant=self.ledger.tenant, bucket=self._bucket_name)
            raise
        return ref

    async def read_artifact(self, ref: ArtifactRef | str) -> bytes:
        """The blob's bytes, checked against its sha256 (and size)."""
        sha = ref if isinstance(ref, str) else ref.sha256
        store = await self._bucket()
        name = artifact_name(sha)
        info = await object_call("artifact info", sha, store.get_info(name), self.timeout)
        if info.deleted or not isinstance(info.nuid, str):
            raise ArtifactMissing(
                "no such artifact in the bucket", kind="artifact", id=sha, reason=ArtifactMissing.reason
            )
        assert self._bucket_name is not None  # set by _bucket()
        # By message, not through a consumer (objectstores.read_chunks).
        size = info.size or 0
        data = await object_call(
            "read artifact",
            sha,
            read_chunks(self.ledger.js, self._bucket_name, info.nuid, size),
            artifact_timeout(self.timeout, size),
        )
        if hashlib.sha256(data).hexdigest() != sha or (
            not isinstance(ref, str) and len(data) != ref.size_bytes
        ):
            raise IntegrityError("artifact bytes do not match their reference", sha256=sha)
        return data

    async def load_state(self, checkpoint: Checkpoint) -> Any:
        """The checkpoint's state: inline as is; an artifact as bytes, or
        decoded when its media type is JSON."""
        if checkpoint.artifact is None:
            return checkpoint.state
        data = await self.read_artifact(checkpoint.artifact)
        return json.loads(data) if is_json_media_type(checkpoint.artifact.media_type) else data

    # ------------------------------------------------------------------ saves and reads

    async def save(
        self,
        key: str,
        *,
        expected_revision: int,
        format: str,
        state: Any = _NO_STATE,
        data: bytes | None = None,
        media_type: str | None = None,
        artifact: ArtifactRef | None = None,
        anchor: Anchor | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        terminal: bool = False,
        checkpoint_id: str | None = None,
        anchor_wait_s: float | None = None,
        tenant: str | None = None,
        data_subject: str | None = None,
    ) -> Checkpoint:
        """Save a revision of ``key``: ``state`` (inline JSON; spilled to a JSON
        artifact when larger than the service's inline limit), or ``data``
        bytes (uploaded as an artifact of ``media_type``), or an ``artifact``
        already uploaded. ``expected_revision`` is the key's latest revision
        (0 for a new key). ``tenant``: needed only when neither an anchor nor
        the session names one (spec/checkpoint.md, "Tenants"). ``data_subject``:
        whose personal data the state holds; the ledger's erasure of that data
        subject erases the revision (spec/checkpoint.md, "Erasure")."""
        given = [state is not _NO_STATE, data is not None, artifact is not None]
        if sum(given) != 1:
            raise InvalidRequest("give exactly one of state, data or artifact", path="$.checkpoint")
        redactor = self.ledger.redactor
        if data is not None:
            media_type = media_type or "application/octet-stream"
            if is_json_media_type(media_type):
                data = _redacted_json(data, redactor)
            artifact = await self.put_artifact(data, media_type)
        elif state is not _NO_STATE:
            # Redacted before it is measured, spilled or digested: no secret
            # reaches the service, an artifact or a disk (spec/content.md).
            state = redactor.redact(state).value
            raw = canonicalize(state)
            if len(raw) > (await self.info()).max_inline_bytes:
                artifact, state = await self.put_artifact(raw, JSON_MEDIA_TYPE), _NO_STATE
        proposal = ProposedCheckpoint(
            id=checkpoint_id or new_id(),
            key=key,
            format=format,
            session_id=session_id,
            run_id=run_id,
            state=None if state is _NO_STATE else state,
            artifact=artifact,
            anchor=anchor,
            terminal=terminal,
            tenant=tenant,
            data_subject=data_subject,
        )
        wait = anchor_wait_s
        if anchor is not None and wait is None:
            wait = (await self.info()).anchor_wait_s
        proposal, _ = redact_checkpoint_state(proposal, redactor)  # refuses secret-shaped ids here
        cmd = SaveCheckpoint(
            expected_revision=expected_revision, checkpoint=proposal, anchor_wait_s=anchor_wait_s
        )
        return await self._request(cmd, Checkpoint, timeout=self.timeout + (wait or 0.0))

    # ``tenant=`` on the reads: whose key or id (each tenant's own; "" for
    # the checkpoints of no tenant). A client on a tenant's subject means its
    # own; a trusted one needs it only when several tenants have the key or
    # id (spec/checkpoint.md, "Tenants").

    async def get(self, checkpoint_id: str, *, tenant: str | None = None) -> Checkpoint:
        return await self._request(GetCheckpoint(checkpoint_id=checkpoint_id, tenant=tenant), Checkpoint)

    async def latest(self, key: str, *, tenant: str | None = None) -> Checkpoint | None:
        """The key's latest revision, or None when nothing was saved under it."""
        try:
            return await self._request(LatestCheckpoint(key=key, tenant=tenant), Checkpoint)
        except EntityNotFound as err:
            if err.details.get("kind") == "checkpoint":
                return None
            raise

    async def revisions(
        self, key: str, *, after_revision: int = 0, limit: int = 100, tenant: str | None = None
    ) -> RevisionPage:
        return await self._request(
            ListRevisions(key=key, after_revision=after_revision, limit=limit, tenant=tenant), RevisionPage
        )

    async def erase(
        self,
        *,
        keys: Sequence[str] = (),
        checkpoint_ids: Sequence[str] = (),
        run_ids: Sequence[str] = (),
        key_prefix: str | None = None,
        key_prefixes: Sequence[str] = (),
        data_subject: str | None = None,
        created_before: str | None = None,
        dry_run: bool = False,
        tenant: str | None = None,
    ) -> ErasureReport:
        """Physically erase every revision of ``keys``, each of
        ``checkpoint_ids`` and every revision saved with one of ``run_ids``
        (of keys under ``key_prefix``), of every key under one of
        ``key_prefixes`` (at most 100), naming ``data_subject`` and created
        before ``created_before`` (those three sent with the first request), with
        the artifacts nothing else
        references (spec/checkpoint.md, "Erasure"); ``dry_run``: only say
        what that would erase. Sent in requests of at most 1000 of each, each
        answered in pages of at most 500 revisions until none is left;
        idempotent: what is gone already is skipped."""
        todo = [list(keys), list(checkpoint_ids), list(run_ids)]
        erased: list[CheckpointInfo] = []
        blobs: list[str] = []
        while True:
            batch = [items[:ERASE_BATCH] for items in todo]
            todo = [items[ERASE_BATCH:] for items in todo]
            after: CheckpointInfo | None = None
            while True:  # pages of one batch: erased rows are gone, a dry run goes on after its last
                report = await self._request(
                    EraseCheckpoints(
                        keys=batch[0],
                        checkpoint_ids=batch[1],
                        run_ids=batch[2],
                        key_prefix=key_prefix,
                        key_prefixes=list(key_prefixes),
                        data_subject=data_subject,
                        created_before=created_before,
                        dry_run=dry_run,
                        tenant=tenant,
                        after_key=after.key if dry_run and after else None,
                        after_revision=after.revision if dry_run and after else 0,
                    ),
                    ErasureReport,
                )
                erased.extend(report.erased)
                blobs.extend(report.artifacts_erased)
                if not report.has_more or not report.erased:
                    break
                after = report.erased[-1]
            key_prefixes, data_subject, created_before = (), None, None
            if not any(todo):
                return ErasureReport(erased=erased, artifacts_erased=blobs)

    # ------------------------------------------------------------------ recovery and inspection

    async def recovery_plan(
        self,
        key: str | None = None,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        lane_id: str | None = None,
        max_events: int = 1000,
        all_events: bool = True,
        max_pages: int = 10_000,
        tenant: str | None = None,
    ) -> RecoveryPlan:
        """The latest checkpoint, the lane events after its anchor and the
        unresolved attempts. With ``all_events`` the events the service left
        out (``has_more``) are paged in from the sequencer's ``load_lane``."""
        plan = await self._request(
            PlanRecovery(
                key=key,
                session_id=session_id,
                run_id=run_id,
                lane_id=lane_id,
                max_events=max_events,
                tenant=tenant,
            ),
            RecoveryPlan,
        )
        if not (all_events and plan.has_more and plan.lane_id):
            return plan
        events = list(plan.events)
        has_more = True
        if plan.checkpoint is not None:  # whose lane: the checkpoint's, else the one named
            tenant = plan.checkpoint.tenant
        pages = self.ledger.lane_pages(
            plan.lane_id, events[-1].seq if events else plan.after_seq, tenant=tenant or None
        )
        try:
            for _ in range(max_pages):
                page = await anext(pages, None)
                if page is None:
                    has_more = False
                    break
                events.extend(page.events)
                has_more = page.has_more
                if not has_more:
                    break
        finally:
            await pages.aclose()
        return msgspec.structs.replace(plan, events=events, has_more=has_more)

    async def inspect_run(self, session_id: str, run_id: str, *, tenant: str | None = None) -> RunInspection:
        return await self._request(
            InspectRun(session_id=session_id, run_id=run_id, tenant=tenant),
            RunInspection,
            timeout=self.timeout + (await self.info()).anchor_wait_s,
        )

    async def reconcile(
        self,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        key: str | None = None,
        limit: int = 100,
        min_position: int = 0,
        tenant: str | None = None,
    ) -> ReconcileReport:
        """``min_position``: a ledger position the answer must reflect, such as
        the last position of a receipt (its events may not be on the
        committed stream yet when the receipt arrives). ``tenant``: only
        that tenant's (a tenant-scoped client's are its own)."""
        return await self._request(
            ReconcileCheckpoints(
                session_id=session_id,
                run_id=run_id,
                key=key,
                limit=limit,
                min_position=min_position,
                tenant=tenant,
            ),
            ReconcileReport,
            timeout=self.timeout + (await self.info()).anchor_wait_s,
        )


async def reconcile(
    checkpoints: CheckpointClient | LedgerClient,
    *,
    session_id: str | None = None,
    run_id: str | None = None,
    key: str | None = None,
    limit: int = 1000,
    min_position: int = 0,
) -> list[CheckpointInfo]:
    """Terminal revisions saved but never linked by a
    ``lane.framework.checkpoint.linked`` event (a crash between the save and
    the link), oldest first. For the CLI's ``reconcile`` command."""
    if isinstance(checkpoints, LedgerClient):
        checkpoints = CheckpointClient(checkpoints)
    report = await checkpoints.reconcile(
        session_id=session_id, run_id=run_id, key=key, limit=limit, min_position=min_position
    )
    return list(report.unlinked)


# -- the terminal pattern ---------------------------------------------------------------------


@dataclass(frozen=True)
class RunCompletion:
    checkpoint: Checkpoint
    receipt: AppendCommitted  # one append: the linked event, then run.completed
    linked_event_id: str
    completed_event_id: str | None


def link_payload(checkpoint: Checkpoint | CheckpointInfo) -> dict[str, Any]:
    return {
        "checkpoint_id": checkpoint.id,
        "key": checkpoint.key,
        "revision": checkpoint.revision,
        "digest": checkpoint.digest,
        "format": checkpoint.format,
    }


async def head_anchor(recorder: LaneRecorder) -> Anchor | None:
    """The anchor naming the recorder's lane head (None while the lane is empty)."""
    await recorder.flush()  # appends sent with wait="accept" must be committed first
    if recorder.head == 0:
        return None
    page = await recorder.client.load_lane(
        recorder.lane.id, recorder.head - 1, limit=1, tenant=recorder.lane.tenant
    )
    if not page.events:
        raise EntityNotFound(
            "the recorder's head event is not in the lane",
            kind="event",
            lane_id=recorder.lane.id,
            seq=recorder.head,
        )
    event = page.events[0]
    return Anchor(lane_id=event.lane_id, seq=event.seq, event_id=event.id)


async def link_checkpoint(
    recorder: LaneRecorder,
    checkpoint: Checkpoint | CheckpointInfo,
    *,
    actor_id: str,
    complete_run: bool = True,
    run_payload: Mapping[str, Any] | None = None,
    append_id: str | None = None,
) -> tuple[AppendCommitted, str, str | None]:
    """Append ``lane.framework.checkpoint.linked`` naming ``checkpoint`` and,
    with ``complete_run``, ``run.completed`` (caused by the link) in the same
    atomic batch. Also what reconciling an unlinked terminal revision does."""
    lane = recorder.lane
    linked = recorder.event(
        LINKED_EVENT, actor_id=actor_id, subject_id=lane.id, payload=link_payload(checkpoint)
    )
    events = [linked]
    completed_id = None
    if complete_run:
        completed = recorder.event(
            RUN_COMPLETED,
            actor_id=actor_id,
            subject_id=lane.run_id,
            payload=dict(run_payload or {}),
            causation_id=linked["id"],
        )
        events.append(completed)
        completed_id = completed["id"]
    receipt = await recorder.append(events, append_id=append_id or new_id())
    assert isinstance(receipt, AppendCommitted)
    return receipt, linked["id"], completed_id


async def complete_run(
    recorder: LaneRecorder,
    checkpoints: CheckpointClient,
    *,
    key: str,
    expected_revision: int,
    format: str,
    actor_id: str,
    state: Any = _NO_STATE,
    data: bytes | None = None,
    media_type: str | None = None,
    artifact: ArtifactRef | None = None,
    anchor: Anchor | Literal["head"] | None = "head",
    run_payload: Mapping[str, Any] | None = None,
    checkpoint_id: str | None = None,
    append_id: str | None = None,
) -> RunCompletion:
    """The terminal pattern: save the run's final checkpoint (``terminal``,
    anchored at the lane head unless told otherwise), then append the link and
    ``run.completed`` in one atomic lane batch. Pass ``checkpoint_id`` and
    ``append_id`` to make a retry after a crash land on the same records."""
    if anchor == "head":
        anchor = await head_anchor(recorder)
    lane = recorder.lane
    checkpoint = await checkpoints.save(
        key,
        expected_revision=expected_revision,
        format=format,
        state=state,
        data=data,
        media_type=media_type,
        artifact=artifact,
        anchor=anchor,
        session_id=lane.session_id,
        run_id=lane.run_id,
        terminal=True,
        checkpoint_id=checkpoint_id,
        data_subject=recorder.data_subject,  # the run's: its state is erased with its events
    )
    receipt, linked_id, completed_id = await link_checkpoint(
        recorder,
        checkpoint,
        actor_id=actor_id,
        complete_run=True,
        run_payload=run_payload,
        append_id=append_id,
    )
    return RunCompletion(checkpoint, receipt, linked_id, completed_id)


def _redacted_json(data: bytes, redactor: Redactor) -> bytes:
    """JSON artifact bytes with their secrets replaced (the same bytes when
    none; bytes that are not JSON go as they are: opaque)."""
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return data
    if redactor.surely_clean(value):
        return data
    done = redactor.redact(value)
    return canonicalize(done.value) if done.count else data
