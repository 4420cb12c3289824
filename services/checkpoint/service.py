"""The checkpoint service: saves and reads checkpoints, checks their anchors
against the committed stream, and builds recovery plans and run inspections.

Requests arrive on ``<prefix>.checkpoint.<op>`` or, scoped to one tenant,
``<prefix>.checkpoint.<tenant>.<op>`` (a tagged ``CheckpointCommand``,
answered by a ``Reply``, like the sequencer's commands) and, for the reads,
over HTTP (``http.py``); both go through ``execute``, with the ``Scope`` of
the subject's tenant or of the bearer token. Each NATS request is
served in its own task: a save may wait for its anchor, and must not hold up
the requests behind it. SQLite work runs on one database thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import msgspec
from nats.aio.client import Client as NATS

from laneledger.contract.clock import Clock, ledger_time, system_clock
from laneledger.contract.erasurescope import scope_of
from laneledger.contract.errors import (
    AnchorMismatch,
    ArtifactMismatch,
    EntityNotFound,
    IdempotencyViolation,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
    NotCanonicalizable,
    RequestTooLarge,
    RevisionConflict,
    TenantMismatch,
)
from laneledger.contract.ids import new_id
from laneledger.contract.model import (
    Checkpoint,
    CheckpointCommand,
    CheckpointServiceInfo,
    CheckpointServiceStatus,
    EraseCheckpoints,
    ErasureReport,
    GetCheckpoint,
    InspectRun,
    LatestCheckpoint,
    LinkedCheckpoint,
    ListRevisions,
    PlanRecovery,
    ProposedCheckpoint,
    ReconcileCheckpoints,
    ReconcileReport,
    RecoveryPlan,
    RevisionPage,
    RunInspection,
    SaveCheckpoint,
    encode,
    timestamp_problem,
)
from laneledger.contract.redaction import DEFAULT_REDACTOR, Redactor, redact_checkpoint_state
from laneledger.contract.subjects import RequestSubject, Subjects
from laneledger.runtime.access import OPEN, Scope
from laneledger.runtime.follow import StreamIdentity
from laneledger.runtime.requestserver import RequestServer
from laneledger.runtime.servicemain import cancel_tasks, first_task_end
from laneledger.runtime.tenants import Tenants
from laneledger.sdk.checkpoints import DEFAULT_ARTIFACT_BUCKET, content_digest, state_digest
from laneledger.sdk.client import LedgerClient

from .anchors import AnchorIndex
from .artifacts import ArtifactStore
from .metrics import CheckpointMetrics
from .recovery import lane_events_page, link_problem, linked_events, unresolved_attempts
from .runread import read_run
from .store import NO_TENANT, TENANT_PATH, CheckpointStore, one_namespace, several_tenants

log = logging.getLogger("laneledger.checkpoint")

T = TypeVar("T")
P = ParamSpec("P")
_REPLY_MARGIN = 4096  # bytes kept free in a reply for the envelope
LEDGER_ERASURE_PAGE = 1000  # revisions per erase a ledger erasure sends (the command's bound)


@dataclass(frozen=True)
class CheckpointSettings:
    subjects: Subjects = Subjects()
    artifact_bucket: str = DEFAULT_ARTIFACT_BUCKET
    max_inline_bytes: int = 256 * 1024
    anchor_wait_s: float = 5.0
    replicas: int = 1
    ready_max_lag: int = 1000  # /readyz: at most this many events behind the stream
    consumer_name: str = field(default_factory=lambda: "checkpoint-" + new_id().replace("-", "")[-16:])
    batch_size: int = 500
    ledger_timeout_s: float = 10.0  # per call to the sequencer or the object store
    refresh_interval_s: float = 1.0  # how often the stream's last sequence is asked for
    drain_timeout_s: float = 5.0
    # Which committed stream the anchor index was built from (follow.StreamIdentity);
    # None: not checked.
    identity: StreamIdentity | None = None
    # Secrets replaced in inline state before anything is stored or digested,
    # refused in JSON artifacts (spec/content.md); the defaults plus
    # LANELEDGER_REDACT_* in the service.
    redactor: Redactor = DEFAULT_REDACTOR
    # The tenants file (runtime/tenants.py): each tenant's artifact bucket is
    # bounded by its artifact_bytes. None: unbounded.
    tenants: Tenants | None = None


class CheckpointService:
    def __init__(
        self,
        nc: NATS,
        store: CheckpointStore,
        metrics: CheckpointMetrics,
        settings: CheckpointSettings = CheckpointSettings(),
        *,
        clock: Clock = system_clock,
        reply_nc: NATS | None = None,
        ledger: LedgerClient | None = None,
    ) -> None:
        """``ledger``: where structure reads go (the sequencer over ``nc`` when
        None); the tests' in-process service passes a client of an in-process
        writer (tests/checkpoint_fixtures.py)."""
        self._nc = nc
        self._store = store
        self.metrics = metrics
        self.settings = settings
        self._clock = clock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-db")
        self.anchors = AnchorIndex(
            nc,
            store,
            self._db,
            metrics,
            consumer_name=settings.consumer_name,
            batch_size=settings.batch_size,
            identity=settings.identity,
            on_erasure=self._erase_for_ledger,
        )
        self.artifacts = ArtifactStore(
            nc.jetstream(),
            settings.artifact_bucket,
            store,
            self._db,
            replicas=settings.replicas,
            timeout_s=settings.ledger_timeout_s,
            tenants=settings.tenants,
        )
        self.ledger = ledger or LedgerClient(
            nc, subjects=settings.subjects, timeout=settings.ledger_timeout_s
        )
        # Each request in a task of its own: a save may wait for its anchor,
        # and must not hold up the requests behind it.
        self._requests = RequestServer[CheckpointCommand](
            nc,
            base=settings.subjects.checkpoint_base,
            queue="checkpoint",
            commands=CheckpointCommand,
            handler=self._on_request,
            counter=metrics.requests,
            log=log,
            what="checkpoint",
            other_op="unknown",
            too_large=_reply_too_large,
            concurrent=True,
            # Replies go where requesters say: on a connection that may
            # publish to inboxes only (the sequencer's reply_nc, likewise).
            reply_nc=reply_nc,
        )
        self._tasks: list[asyncio.Task[None]] = []
        metrics.applied_position.set(self.anchors.applied)

    async def _db(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, lambda: fn(*args, **kwargs))

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        await self.artifacts.ensure()
        await self._requests.start()
        self._tasks = [
            asyncio.create_task(self.anchors.run(), name="checkpoint-follow"),
            asyncio.create_task(self._refresh_loop(), name="checkpoint-refresh"),
        ]
        log.info("checkpoint service started at position %d", self.anchors.applied)

    @property
    def ready(self) -> bool:
        """Connected, and caught up with the committed stream within the bound."""
        lag = self.anchors.lag()
        return (
            self._nc.is_connected
            and self.anchors.caught_up_once
            and lag is not None
            and lag <= self.settings.ready_max_lag
        )

    async def wait(self) -> None:
        """Until a background task dies (re-raised) or the service is stopped."""
        await first_task_end(self._tasks)

    async def stop(self) -> None:
        """Stop taking requests, give those in hand a bounded time, stop following."""
        await self._requests.stop(self.settings.drain_timeout_s)
        await cancel_tasks(self._tasks, timeout_s=self.settings.drain_timeout_s)
        self._tasks = []
        await self.ledger.close()
        self._thread.shutdown(wait=True)

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self.anchors.refresh()
            except Exception as exc:  # noqa: BLE001 - no stream yet, or NATS away: ask again
                log.debug("cannot read the committed stream's state: %s", exc)
            await asyncio.sleep(self.settings.refresh_interval_s)

    # ------------------------------------------------------------- NATS requests

    async def _on_request(self, cmd: CheckpointCommand, target: RequestSubject) -> Any:
        """One NATS request for the request server: ``<prefix>.checkpoint.<tenant>.<op>``
        is answered as that tenant's bearer token would be over HTTP,
        ``<prefix>.checkpoint.<op>`` openly."""
        scope = OPEN if target.tenant is None else Scope(target.tenant)
        result = await self.execute(cmd, scope)
        if isinstance(cmd, CheckpointServiceStatus) and target.tenant is not None:
            # A tenant's producer uses its own artifact bucket (artifacts.py).
            result = msgspec.structs.replace(
                result, artifact_bucket=await self.artifacts.ensure(target.tenant)
            )
        return result

    async def execute(self, cmd: CheckpointCommand, scope: Scope = OPEN) -> Any:
        """Run one command. ``scope``: what the HTTP caller's token may see
        (laneledger.runtime.access); another tenant's checkpoint, run or lane is
        "not found", exactly as if it did not exist: keys and ids are each
        tenant's own, and every lookup is in one tenant's (``_whose``)."""
        match cmd:
            case SaveCheckpoint():
                return await self.save(cmd, scope)
            case GetCheckpoint(checkpoint_id=checkpoint_id, tenant=named):
                whose = await self._whose(scope, named, "id", checkpoint_id)
                return await self._db(self._store.get, checkpoint_id, whose)
            case LatestCheckpoint(key=key, tenant=named):
                latest = await self._db(self._store.latest, key, await self._whose(scope, named, "key", key))
                if latest is None:
                    raise EntityNotFound("nothing saved under this key", kind="checkpoint", id=key, key=key)
                return latest
            case ListRevisions(key=key, after_revision=after, limit=limit, tenant=named):
                whose = await self._whose(scope, named, "key", key)
                revisions, more = await self._db(self._store.revisions, key, after, limit, whose)
                return RevisionPage(key=key, revisions=revisions, has_more=more)
            case PlanRecovery():
                return await self.recovery_plan(cmd, scope)
            case InspectRun(session_id=session_id, run_id=run_id, tenant=named):
                return await self.inspect_run(session_id, run_id, scope, named)
            case ReconcileCheckpoints():
                return await self.reconcile(cmd, scope)
            case CheckpointServiceStatus():
                return self.info()
            case EraseCheckpoints():
                return await self.erase(cmd, scope)
        raise InvalidRequest("unknown op", path="$.op")  # unreachable: the union is closed

    async def _whose(self, scope: Scope, named: str | None, what: str, value: str) -> str:
        """Whose checkpoint key, id or anchor lane (``what``) a read means
        (keys and ids are each tenant's own; '' is the no-tenant namespace):
        a tenant scope's own, and naming another is ``tenant_mismatch`` (the
        caller chose both, so it reveals nothing); else the one the command
        names; else the only one that has it (``one_namespace``)."""
        narrowed = _narrow(scope, named)
        if narrowed is not None:
            return narrowed
        return one_namespace(await self._db(self._store.namespaces, what, value), **{what: value})

    async def artifact_of_tenant(self, sha256: str, tenant: str) -> bool:
        return await self._db(self._store.artifact_of_tenant, sha256, tenant)

    async def artifact_buckets(self, sha256: str, tenant: str | None) -> list[str | None]:
        """Where an artifact may be, in the order to look: the buckets of the
        tenants whose checkpoints reference it (only ``tenant``'s when one is
        given), then the shared bucket (None)."""
        tenants = [tenant] if tenant is not None else await self._db(self._store.artifact_tenants, sha256)
        return [*tenants, None]

    def info(self) -> CheckpointServiceInfo:
        s = self.settings
        return CheckpointServiceInfo(
            artifact_bucket=s.artifact_bucket,
            max_inline_bytes=s.max_inline_bytes,
            anchor_wait_s=s.anchor_wait_s,
            applied_position=self.anchors.applied,
            stream_last_position=self.anchors.stream_last or 0,
        )

    # ------------------------------------------------------------- erasure

    async def erase(
        self, cmd: EraseCheckpoints, scope: Scope = OPEN, *, also_bucket_of: str | None = None
    ) -> ErasureReport:
        """Blobs first, then rows: a crash in between leaves rows whose blob
        is gone, which the same erase, sent again, finds and finishes (it is
        idempotent); the other order could leave a blob nothing names.
        ``also_bucket_of``: a tenant whose own bucket may hold the orphaned
        blobs too (with ``scope`` OPEN, no revision of any tenant names them)."""
        whose = _narrow(scope, cmd.tenant)  # None: the one namespace the selection is in
        before = None
        if cmd.created_before is not None:
            problem = timestamp_problem(cmd.created_before)
            if problem is not None:
                raise InvalidRequest(
                    f"created_before is not a real instant: {problem}",
                    path="$.created_before",
                    found=cmd.created_before,
                )
            before = ledger_time(cmd.created_before)
        erased, orphans, more = await self._db(
            functools.partial(
                self._store.erasure_plan,
                cmd.keys,
                cmd.checkpoint_ids,
                whose,
                run_ids=cmd.run_ids,
                key_prefix=cmd.key_prefix,
                key_prefixes=cmd.key_prefixes,
                data_subject=cmd.data_subject,
                created_before=before,
                limit=cmd.limit,
                after=(cmd.after_key, cmd.after_revision) if cmd.after_key is not None else None,
                bucket_tenant=scope.tenant,
            )
        )
        if cmd.dry_run:
            return ErasureReport(erased=erased, artifacts_erased=[], has_more=more)
        gone = [sha for sha in orphans if await self.artifacts.erase(sha, scope.tenant)]
        if also_bucket_of is not None and scope.tenant is None:
            gone += [sha for sha in orphans if await self.artifacts.erase(sha, also_bucket_of)]
        await self._db(self._store.forget_artifacts, orphans)
        if erased:
            namespace = erased[0].tenant or NO_TENANT  # the plan's one namespace
            await self._db(self._store.erase, [info.id for info in erased], self._clock(), namespace)
        log.info("erased %d checkpoint revisions and %d artifacts", len(erased), len(gone))
        return ErasureReport(erased=erased, artifacts_erased=gone, has_more=more)

    async def _erase_for_ledger(self, tenant: str, scope: dict[str, Any]) -> None:
        """An erasure committed in the ledger (spec/erasure.md, *Readers*)
        erases the revisions of its scope too, as ``erase`` does: a session's
        (a run's) and a data subject's in the tenant's namespace and in the
        shared one (the trusted callers', where a save names no tenant and
        derives none); a retention's, those created before its time, in the
        tenant's alone (the shared namespace is no tenant's to age out). A
        scope of a kind the service does not know is left alone."""
        found = scope_of(scope)
        if found is None or (found.committed_before and timestamp_problem(found.committed_before)):
            log.warning("an erasure of tenant %s names a scope this service does not know: %s", tenant, scope)
            return
        namespaces = (tenant,) if found.committed_before is not None else (tenant, NO_TENANT)
        # As the operator: a blob is erased when no revision of any tenant
        # names it, from the shared bucket and from the tenant's own.
        for namespace in namespaces:
            if found.session_id is not None:
                while ids := await self._db(
                    self._store.revisions_in_session,
                    namespace,
                    found.session_id,
                    found.run_id,
                    LEDGER_ERASURE_PAGE,
                ):
                    cmd = EraseCheckpoints(checkpoint_ids=ids, tenant=namespace, limit=LEDGER_ERASURE_PAGE)
                    await self.erase(cmd, OPEN, also_bucket_of=tenant)
                continue
            cmd = EraseCheckpoints(
                data_subject=found.data_subject,
                created_before=found.committed_before,
                tenant=namespace,
                limit=LEDGER_ERASURE_PAGE,
            )
            while (report := await self.erase(cmd, OPEN, also_bucket_of=tenant)).has_more:
                # On after the last erased: the plan walks the namespace's
                # revisions in (key, revision) order, so each is looked at once.
                last = report.erased[-1]
                cmd = msgspec.structs.replace(cmd, after_key=last.key, after_revision=last.revision)

    # ------------------------------------------------------------- save

    async def save(self, cmd: SaveCheckpoint, scope: Scope = OPEN) -> Checkpoint:
        try:
            checkpoint, replayed = await self._save(cmd, scope)
        except LedgerError as err:
            self.metrics.saves.labels(str(err.details.get("reason") or err.code)).inc()
            kind = _conflict_kind(err)
            if kind:
                self.metrics.conflicts.labels(kind).inc()
            raise
        self.metrics.saves.labels("replayed" if replayed else "saved").inc()
        return checkpoint

    async def _save(self, cmd: SaveCheckpoint, scope: Scope) -> tuple[Checkpoint, bool]:
        """Spec order: the request's own checks; a tenant-scoped save's
        tenant; same id (replay or idempotency violation) before the
        revision; the anchor (waiting at most the bound); the artifact; then
        the write, which checks id and revision again since another save may
        have won meanwhile."""
        proposal, _ = redact_checkpoint_state(cmd.checkpoint, self.settings.redactor)
        digest, state_bytes = self._check_proposal(proposal)
        if scope.tenant is not None and proposal.tenant not in (None, scope.tenant):
            raise TenantMismatch(
                "the checkpoint names another tenant than its subject",
                what="checkpoint",
                tenant=scope.tenant,
                checkpoint_tenant=proposal.tenant,
            )
        content = content_digest(proposal)
        # Whose lane, session, key and id the save means (each tenant's
        # own): the subject's tenant, or the one the save names; with
        # neither, the tenant whose lane or session it names, as far as the
        # index has read (an anchor not read yet is waited for below).
        named = scope.tenant or proposal.tenant
        derived = named or await self._db(self._store.tenant_of, proposal)
        if derived is None and proposal.anchor is None and proposal.session_id is not None:
            derived = await self._session_tenant(proposal.session_id)
        if derived is not None or proposal.anchor is None:
            # Known now (or never to be: then the key's): replays and
            # conflicts before any wait, in that tenant's namespace alone.
            namespace = (
                derived if derived is not None else await self._db(self._store.key_namespace, proposal.key)
            )
            replay = await self._db(self._store.precheck, proposal, content, cmd.expected_revision, namespace)
            if replay is not None:
                return replay, True
        anchored: str | None = None
        if proposal.anchor is not None:
            wait = self.settings.anchor_wait_s
            if cmd.anchor_wait_s is not None:
                wait = min(wait, cmd.anchor_wait_s)
            anchored = await self.anchors.check(
                proposal.anchor,
                tenant=derived,
                session_id=proposal.session_id,
                run_id=proposal.run_id,
                wait_s=wait,
            )
        if proposal.artifact is not None:
            await self.artifacts.verify(proposal.artifact, scope.tenant, redactor=self.settings.redactor)
        tenant = derived or anchored  # None: the key's namespace (store.save)
        return await self._db(
            self._store.save,
            proposal,
            content=content,
            digest=digest,
            state_bytes=state_bytes,
            expected_revision=cmd.expected_revision,
            created_at=self._clock(),
            tenant=tenant,
            state_limit=self._state_limit,
        )

    async def _session_tenant(self, session_id: str) -> str | None:
        """The tenant of a session the index has not read yet, asked of the
        ledger: the committed stream trails the receipts, so a save right
        after a session's first append would otherwise land in the key's
        namespace. None when no tenant has the session; several:
        ``invalid_request`` naming ``$.checkpoint.tenant``, as the index's."""
        try:
            page = await self.ledger.load_structure_page(session_id, limit=1)
        except EntityNotFound:
            return None
        except InvalidRequest as exc:
            if "tenants" not in exc.details:  # not the ambiguity: the ledger's own answer
                raise
            raise several_tenants(exc.details["tenants"]) from None
        return page.tenant

    def _state_limit(self, namespace: str) -> int | None:
        """A tenant's ``checkpoint_state_bytes``, by the namespace a save
        lands in (the no-tenant namespace ``""`` has none)."""
        tenants = self.settings.tenants
        return tenants.limits_of(namespace).checkpoint_state_bytes if tenants and namespace else None

    def _check_proposal(self, proposal: ProposedCheckpoint) -> tuple[str, int]:
        """The state digest and inline size, or the request error."""
        if proposal.terminal and (proposal.session_id is None or proposal.run_id is None):
            raise InvalidRequest(
                "a terminal checkpoint names its session and run", path="$.checkpoint.run_id"
            )
        if proposal.artifact is not None:
            if proposal.state is not None:
                raise InvalidRequest("inline state or an artifact, not both", path="$.checkpoint.state")
            return proposal.artifact.sha256, 0
        try:
            digest, size = state_digest(proposal.state)
        except NotCanonicalizable as err:
            where = str(err.details.get("path", "$"))
            details = {**err.details, "path": "$.checkpoint.state" + where[1:]}
            raise NotCanonicalizable(err.message, **details) from err
        limit = self.settings.max_inline_bytes
        if size > limit:
            raise RequestTooLarge(
                f"inline state is {size} bytes, the limit is {limit}: save it as an artifact",
                size_bytes=size,
                limit_bytes=limit,
                path="$.checkpoint.state",
            )
        return digest, size

    # ------------------------------------------------------------- recovery

    async def recovery_plan(self, cmd: PlanRecovery, scope: Scope = OPEN) -> RecoveryPlan:
        checkpoint: Checkpoint | None = None
        lane_id = cmd.lane_id
        named = _narrow(scope, cmd.tenant)
        if cmd.key is not None:
            whose = await self._whose(scope, cmd.tenant, "key", cmd.key)
            checkpoint = await self._db(self._store.latest, cmd.key, whose)
            anchor = checkpoint.anchor if checkpoint else None
            if anchor is not None:
                if lane_id is not None and lane_id != anchor.lane_id:
                    raise InvalidRequest(
                        "the key's latest checkpoint is anchored in another lane",
                        path="$.lane_id",
                        anchor_lane_id=anchor.lane_id,
                    )
                lane_id = anchor.lane_id
        elif lane_id is not None:
            whose = await self._whose(scope, cmd.tenant, "lane_id", lane_id)
            checkpoint = await self._db(self._store.latest_anchored_in, lane_id, whose)
        else:
            raise InvalidRequest("name a checkpoint key or a lane", path="$")
        if lane_id is None:
            # A key whose checkpoint anchors no lane: nothing to replay; the
            # attempts of its run (when it names one) still matter.
            unresolved = []
            if checkpoint is not None and checkpoint.session_id and checkpoint.run_id:
                run = await read_run(
                    self.ledger, checkpoint.session_id, checkpoint.run_id, scope, checkpoint.tenant or named
                )
                unresolved = unresolved_attempts(run)
            return RecoveryPlan(
                key=cmd.key,
                checkpoint=checkpoint,
                session_id=checkpoint.session_id if checkpoint else cmd.session_id,
                run_id=checkpoint.run_id if checkpoint else cmd.run_id,
                unresolved_attempts=unresolved,
            )
        after_seq = checkpoint.anchor.seq if checkpoint and checkpoint.anchor else 0
        # The first page only (made shorter when max_events of them would not
        # fit one reply); has_more sends the client on with load_lane.
        # Whose lane (ids are each tenant's own): the checkpoint's, else the
        # one named (or the scope's).
        tenant = checkpoint.tenant if checkpoint and checkpoint.tenant else named or None
        pages = self.ledger.lane_pages(lane_id, after_seq, limit=cmd.max_events, tenant=tenant)
        page = await anext(pages)
        await pages.aclose()
        lane = page.lane
        scope.not_found_unless(lane.tenant, "lane", id=lane_id)
        for name, wanted in (("session_id", cmd.session_id), ("run_id", cmd.run_id)):
            if wanted is not None and getattr(lane, name) != wanted:
                raise InvalidRequest(
                    f"the lane belongs to another {name[:-3]}",
                    path=f"$.{name}",
                    lane_id=lane_id,
                    found=getattr(lane, name),
                )
        run = await read_run(self.ledger, lane.session_id, lane.run_id, scope, lane.tenant)
        plan = RecoveryPlan(
            key=checkpoint.key if checkpoint else cmd.key,
            checkpoint=checkpoint,
            session_id=lane.session_id,
            run_id=lane.run_id,
            lane_id=lane_id,
            after_seq=after_seq,
            head_seq=max(lane.last_seq, page.events[-1].seq if page.events else 0),
            events=page.events,
            has_more=page.has_more,
            unresolved_attempts=unresolved_attempts(run, lane_id),
        )
        return self._fit(plan)

    def _fit(self, plan: RecoveryPlan) -> RecoveryPlan:
        """Leave out trailing events so the reply fits in one NATS message
        (``has_more`` tells the client to page on with ``load_lane``)."""
        fixed = len(encode(msgspec.structs.replace(plan, events=[])))
        n = lane_events_page(plan.events, self._nc.max_payload - _REPLY_MARGIN, fixed)
        if n == len(plan.events):
            return plan
        return msgspec.structs.replace(plan, events=plan.events[:n], has_more=True)

    # ------------------------------------------------------------- inspection

    async def inspect_run(
        self, session_id: str, run_id: str, scope: Scope = OPEN, tenant: str | None = None
    ) -> RunInspection:
        """The run's terminal events, the checkpoints its events link, its
        unresolved attempts, and its terminal revisions no event links: all
        of the run's tenant (``tenant``: whose session, needed only when
        several tenants have it)."""
        run = await read_run(self.ledger, session_id, run_id, scope, _narrow(scope, tenant) or None)
        last = run.last_position
        # Links come from the run's own events; the wait lets the index see
        # links made elsewhere (bounded: a lagging index only costs accuracy
        # on those).
        await self.anchors.wait_applied(last, self.settings.anchor_wait_s)
        links = linked_events(run.links)
        named = {cid for _, cid in links if cid}
        stored = await self._db(self._store.infos, sorted(named), run.tenant)
        if scope.tenant is None:
            # An event links its tenant's checkpoint of the id, or one of no
            # tenant (whose run it ended was never known; the operator's alone).
            stored |= await self._db(self._store.infos, sorted(named - set(stored)), NO_TENANT)
        linked = [
            LinkedCheckpoint(
                event_id=event.id,
                lane_id=event.lane_id,
                seq=event.seq,
                position=event.position,
                checkpoint_id=cid,
                checkpoint=stored.get(cid) if cid else None,
                problem=link_problem(event, stored.get(cid)) if cid else "unknown_checkpoint",
            )
            for event, cid in links
        ]
        unlinked, _ = await self._db(
            self._store.unlinked, session_id=session_id, run_id=run_id, limit=1000, tenant=run.tenant
        )
        return RunInspection(
            session_id=session_id,
            run_id=run_id,
            as_of_position=last,
            terminal_events=run.terminal,
            linked_checkpoints=linked,
            unresolved_attempts=unresolved_attempts(run),
            unlinked_revisions=[info for info in unlinked if info.id not in named],
        )

    async def reconcile(self, cmd: ReconcileCheckpoints, scope: Scope = OPEN) -> ReconcileReport:
        """Terminal revisions never linked, once the index has read the stream
        as far as it went when asked, and to ``min_position`` (bounded wait;
        ``caught_up`` says whether it got there)."""
        try:
            target = max(await self.anchors.refresh(), cmd.min_position)
        except Exception as exc:
            raise LedgerUnavailable(f"cannot read the committed stream's state: {exc}") from exc
        caught_up = await self.anchors.wait_applied(target, self.settings.anchor_wait_s)
        unlinked, more = await self._db(
            self._store.unlinked,
            session_id=cmd.session_id,
            run_id=cmd.run_id,
            key=cmd.key,
            limit=cmd.limit,
            tenant=_narrow(scope, cmd.tenant),
        )
        return ReconcileReport(
            as_of_position=self.anchors.applied, caught_up=caught_up, unlinked=unlinked, has_more=more
        )


def _narrow(scope: Scope, named: str | None) -> str | None:
    """The namespace a command is limited to: a tenant scope's own (naming
    another is ``tenant_mismatch`` at ``$.tenant``), else the one it names
    ('' for no tenant's), else None (every one's, or the only one that has
    what it names)."""
    if scope.tenant is None:
        return named
    if named is not None and named != scope.tenant:
        raise TenantMismatch(
            "the request names another tenant than its scope",
            what="command",
            path=TENANT_PATH,
            tenant=named,
            subject_tenant=scope.tenant,
        )
    return scope.tenant


def _reply_too_large(op: str, size: int, limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        "the reply is larger than the server's max_payload; ask for less", size_bytes=size, limit_bytes=limit
    )


def _conflict_kind(err: LedgerError) -> str | None:
    if isinstance(err, RevisionConflict):
        return "revision"
    if isinstance(err, IdempotencyViolation):
        return "idempotency"
    if isinstance(err, AnchorMismatch):
        return "anchor"
    if isinstance(err, ArtifactMismatch):
        return "artifact"
    return None
