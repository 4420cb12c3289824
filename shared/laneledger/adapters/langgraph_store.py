"""The laneledger side of the LangGraph saver: records in the checkpoint
service, each anchored to the ledger event that records it, and erasure
(spec/langgraph.md). Knows keys, records, lanes and events; nothing of
LangGraph's types (``langgraph.py`` maps those onto this).

One rule holds every write together: **the event first, then the record
anchored to it**. A crash in between leaves an event naming a record that
was never stored (its writer was never told it was), never a stored record
the ledger does not name. Erasure likewise: the event naming what is erased
(ids and digests, never values) is committed before anything is erased.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from laneledger.contract.errors import (
    EntityNotFound,
    IdempotencyViolation,
    IntegrityError,
    InvalidRequest,
    LaneConflict,
)
from laneledger.contract.ids import derived_id, new_id
from laneledger.contract.model import Anchor, AppendCommitted, Checkpoint, CheckpointInfo
from laneledger.sdk.checkpoints import CheckpointClient, RevisionConflict, anchor_of, state_digest
from laneledger.sdk.client import LaneRecorder, LedgerClient

from .langgraph_records import (
    DEFAULT_RUN,
    ERASED_EVENT,
    KEY_PREFIX,
    THREAD_FORMAT,
    field,
    lane_name,
    thread_key,
)

SAVE_ATTEMPTS = 16  # revision or lane-head races retried (another writer won)


class ThreadStore:
    """Records of ``tenant``'s LangGraph threads. ``record_events``: also
    write (and anchor to) the ledger event of each record; erasures are
    recorded either way."""

    def __init__(
        self, client: LedgerClient, checkpoints: CheckpointClient, *, tenant: str, record_events: bool
    ) -> None:
        self.client = client
        self.checkpoints = checkpoints
        self.tenant = tenant
        self.record_events = record_events
        self.actor_id: str | None = None
        self._lanes: dict[tuple[str, str, str], LaneRecorder] = {}
        self._namespaces: dict[str, set[str]] = {}  # thread -> namespaces known registered
        self._revisions: dict[str, int] = {}  # key -> its latest revision, as last seen
        self._locks: dict[str, asyncio.Lock] = {}

    async def setup(self, actor_key: str) -> None:
        self.actor_id = (await self.client.ensure_actor(self.tenant, actor_key, "service")).id

    def lock(self, key: str) -> asyncio.Lock:
        """Serializes this process's read-merge-save of one key."""
        return self._locks.setdefault(key, asyncio.Lock())

    # ------------------------------------------------------------------ reads

    async def latest(self, key: str) -> Checkpoint | None:
        return await self.checkpoints.latest(key, tenant=self.tenant)

    async def get(self, record: str) -> Checkpoint | None:
        try:
            return await self.checkpoints.get(record, tenant=self.tenant)
        except EntityNotFound:
            return None

    async def state(self, stored: Checkpoint) -> Mapping[str, Any]:
        state = await self.checkpoints.load_state(stored)
        if not isinstance(state, Mapping):
            raise InvalidRequest("a stored LangGraph record is not an object", key=stored.key, id=stored.id)
        return state

    async def revisions(self, key: str) -> list[CheckpointInfo]:
        infos: list[CheckpointInfo] = []
        after = 0
        while True:
            page = await self.checkpoints.revisions(key, after_revision=after, limit=1000, tenant=self.tenant)
            infos.extend(page.revisions)
            if not page.has_more or not page.revisions:
                return infos
            after = page.revisions[-1].revision

    def base_revision(self, key: str, latest: Checkpoint | None) -> int:
        """The revision to save on top of: the latest, or for a key with none
        left, the last one seen (erased revisions keep their numbers)."""
        return latest.revision if latest is not None else self._revisions.get(key, 0)

    # ------------------------------------------------------------------ namespaces

    async def namespaces(self, thread_id: str) -> set[str]:
        latest = await self.latest(thread_key(thread_id))
        if latest is None:
            return set()
        return set(field(await self.state(latest), "namespaces", list, "$.state"))

    async def register_namespace(self, thread_id: str, checkpoint_ns: str, data_subject: str | None) -> None:
        """The thread's record lists its namespaces, so a thread can be
        listed, copied and erased whole without a key search; it names the
        data subject of the checkpoint that adds a namespace."""
        if checkpoint_ns in self._namespaces.get(thread_id, set()):
            return
        key = thread_key(thread_id)
        async with self.lock(key):
            for _ in range(SAVE_ATTEMPTS):
                latest = await self.latest(key)
                known = (
                    set(field(await self.state(latest), "namespaces", list, "$.state")) if latest else set()
                )
                if checkpoint_ns not in known:
                    try:
                        await self._save_once(
                            key,
                            {"thread_id": thread_id, "namespaces": sorted(known | {checkpoint_ns})},
                            expected_revision=self.base_revision(key, latest),
                            format=THREAD_FORMAT,
                            record=new_id(),
                            session_id=thread_id,
                            run_id=None,
                            anchor=None,
                            data_subject=data_subject,
                        )
                    except RevisionConflict:
                        continue
                self._namespaces.setdefault(thread_id, set()).update(known | {checkpoint_ns})
                return
        raise RevisionConflict(f"{key}: lost the revision race", kind="checkpoint", key=key)

    # ------------------------------------------------------------------ records

    async def store(
        self,
        key: str,
        state: Mapping[str, Any],
        *,
        format: str,
        record: str,
        thread_id: str,
        run_id: str,
        checkpoint_ns: str,
        event_type: str,
        event: Mapping[str, Any],
        expected_revision: int | None = None,
        data_subject: str | None = None,
        first: Callable[[], Awaitable[None]] | None = None,
    ) -> Checkpoint:
        """The event (``event`` plus the record's id, key, digest and format),
        then the record anchored to it, in the lane (thread, run, namespace);
        both name ``data_subject``, so the ledger's erasure of that data
        subject erases both (spec/langgraph.md, *Data subjects*).
        ``expected_revision`` None: the record is independent of the key's
        others (a LangGraph checkpoint names its parent), so a lost revision
        race is saved again on top; given: a lost race is the caller's
        ``RevisionConflict`` (it merged what it read)."""
        # Values were redacted before serde; what a rule finds now is in the
        # record's own encoding (a configured pattern matching hex text),
        # and replacing it would corrupt the record: refused, nothing written.
        done = self.client.redactor.redact(dict(state))
        if done.count:
            raise InvalidRequest(
                "a redaction rule matches this LangGraph record's encoded bytes: saving it "
                "redacted would corrupt it (check LANELEDGER_REDACT_PATTERNS)",
                path="$.state",
                key=key,
                rules=sorted(done.rules),
            )
        if first is not None:
            await first()  # what must precede the event, once the record is known good
        anchor = None
        if self.record_events:
            payload = {
                "checkpoint_id": record,
                "key": key,
                "digest": state_digest(state)[0],  # what the save below stores, checked there
                "format": format,
                "langgraph": dict(event),
            }
            anchor = await self.record(
                thread_id,
                run_id,
                checkpoint_ns,
                event_type,
                payload,
                derived_id("lg-event", record),
                data_subject=data_subject,
            )
        attempts = 1 if expected_revision is not None else SAVE_ATTEMPTS
        expected = expected_revision
        if expected is None:
            expected = self._revisions.get(key)
            if expected is None:
                expected = self.base_revision(key, await self.latest(key))
        digest = state_digest(state)[0]
        for _ in range(attempts):
            try:
                saved = await self._save_once(
                    key,
                    state,
                    expected_revision=expected,
                    format=format,
                    record=record,
                    session_id=thread_id,
                    run_id=run_id,
                    anchor=anchor,
                    data_subject=data_subject,
                )
            except RevisionConflict as err:
                if expected_revision is not None:
                    raise
                expected = int(err.details["actual_revision"])
                continue
            if saved.digest != digest:
                # The service's own redaction rules rewrote the record (they
                # may be configured beyond the SDK's): it would not decode.
                raise IntegrityError(
                    "the checkpoint service stored this LangGraph record with other bytes than sent "
                    "(its redaction rules match the encoding?)",
                    id=saved.id,
                    key=key,
                    digest=digest,
                    stored_digest=saved.digest,
                )
            return saved
        raise RevisionConflict(f"{key}: lost the revision race {attempts} times", kind="checkpoint", key=key)

    async def _save_once(
        self,
        key: str,
        state: Any,
        *,
        expected_revision: int,
        format: str,
        record: str,
        session_id: str,
        run_id: str | None,
        anchor: Anchor | None,
        data_subject: str | None,
    ) -> Checkpoint:
        try:
            saved = await self.checkpoints.save(
                key,
                expected_revision=expected_revision,
                format=format,
                state=state,
                checkpoint_id=record,
                session_id=session_id,
                run_id=run_id,
                anchor=anchor,
                tenant=self.tenant,
                data_subject=data_subject,
            )
        except RevisionConflict as err:
            self._revisions[key] = int(err.details["actual_revision"])
            raise
        self._revisions[key] = max(saved.revision, self._revisions.get(key, 0))
        return saved

    # ------------------------------------------------------------------ the ledger

    async def _lane(self, thread_id: str, run_id: str, checkpoint_ns: str) -> LaneRecorder:
        where = (thread_id, run_id, lane_name(checkpoint_ns))
        recorder = self._lanes.get(where)
        if recorder is None:
            recorder = await LaneRecorder.open(
                self.client, self.tenant, thread_id, run_id, where[2], actor_id=self.actor_id
            )
            self._lanes[where] = recorder
        return recorder

    async def record(
        self,
        thread_id: str,
        run_id: str,
        checkpoint_ns: str,
        event_type: str,
        payload: Mapping[str, Any],
        append_id: str,
        *,
        data_subject: str | None = None,
    ) -> Anchor:
        """One event in the lane, and the anchor naming it; another writer of
        the lane moving its head only means appending again on top.
        ``append_id`` is derived from what the event records, so recording
        the same thing twice commits once (a resend from another process,
        whose event differs in its clock, gets the original's anchor)."""
        assert self.actor_id is not None, "setup() registers the actor"
        recorder = await self._lane(thread_id, run_id, checkpoint_ns)
        event = recorder.event(
            event_type,
            actor_id=self.actor_id,
            subject_id=recorder.lane.id,
            payload=dict(payload),
            data_subject=data_subject,
        )
        for _ in range(SAVE_ATTEMPTS):
            try:
                receipt = await recorder.append([event], append_id=append_id)
                assert isinstance(receipt, AppendCommitted)  # wait="commit"
                return anchor_of(receipt)
            except LaneConflict:
                await recorder.reload()
            except IdempotencyViolation:
                return anchor_of(await self.client.get_receipt(append_id))
        raise LaneConflict("the lane kept moving", lane_id=recorder.lane.id)

    # ------------------------------------------------------------------ erasure

    async def run_records(self, run_ids: list[str]) -> list[CheckpointInfo]:
        """Every record saved with these run ids, in every thread (a dry run
        of their erasure: the service erases nothing)."""
        plan = await self.checkpoints.erase(
            run_ids=run_ids, key_prefix=KEY_PREFIX, dry_run=True, tenant=self.tenant
        )
        return list(plan.erased)

    async def thread_records(self, thread_id: str) -> list[CheckpointInfo]:
        """Every record of the thread, under any of its keys (writes whose
        checkpoint was never stored among them)."""
        key = thread_key(thread_id)
        plan = await self.checkpoints.erase(
            keys=[key], key_prefixes=[key + "/"], dry_run=True, tenant=self.tenant
        )
        return list(plan.erased)

    async def erase(
        self,
        thread_id: str,
        reason: str,
        infos: list[CheckpointInfo],
        *,
        keys: list[str],
        checkpoint_ids: list[str],
        key_prefixes: list[str] | None = None,
    ) -> None:
        """Record, then erase: a crash in between leaves an erasure recorded
        and not done, which the same call, made again, does (and records
        again); never bytes gone without a record. The event is in the
        thread's default-run main lane."""
        payload = {
            "reason": reason,
            "keys": keys,
            "key_prefixes": key_prefixes or [],
            "checkpoints": [
                {
                    "checkpoint_id": i.id,
                    "key": i.key,
                    "revision": i.revision,
                    "digest": i.digest,
                    "format": i.format,
                }
                for i in infos
            ],
        }
        # It lists the records' digests: it names their data subject when
        # they name one, so that subject's erasure erases this payload too.
        subjects = {i.data_subject for i in infos if i.data_subject is not None}
        subject = subjects.pop() if len(subjects) == 1 else None
        await self.record(thread_id, DEFAULT_RUN, "", ERASED_EVENT, payload, new_id(), data_subject=subject)
        await self.checkpoints.erase(
            keys=keys, checkpoint_ids=checkpoint_ids, key_prefixes=key_prefixes or [], tenant=self.tenant
        )
        if thread_key(thread_id) in keys:
            self._namespaces.pop(thread_id, None)
