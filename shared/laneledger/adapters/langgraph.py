"""A LangGraph checkpointer on laneledger: ``LaneledgerSaver``, a
``BaseCheckpointSaver`` (async and sync) over the checkpoint service and the
ledger (normative text: ``spec/langgraph.md``). This module maps LangGraph's
types and semantics (serde, channel values, pending writes, parents, lists,
deletes); ``langgraph_records`` names the keys and ids, ``langgraph_store``
writes the records and their ledger events and erases.

* Every LangGraph checkpoint is an immutable revision in the checkpoint
  service (LangGraph's serde inside; a record over the service's inline
  limit is an artifact, uploaded first), anchored to the
  ``lane.framework.langgraph.checkpoint`` event that names its id, key and
  digest (never its values) in the lane of its thread (session), run and
  namespace. Pending writes likewise.
* ``delete_thread``, ``prune`` and ``delete_for_runs`` erase state and blobs
  physically after a ``lane.framework.langgraph.erased`` event records what
  is erased: the chain still verifies, the erased records' digests stay in
  it, their bytes are gone.

Usage::

    async with LaneledgerSaver.connect("nats://127.0.0.1:4222", tenant="acme") as saver:
        graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.base import Checkpoint as LangGraphCheckpoint
from langgraph.checkpoint.serde.base import SerializerProtocol

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.ids import new_id
from laneledger.contract.model import Checkpoint, CheckpointInfo
from laneledger.sdk.checkpoints import CheckpointClient, RevisionConflict
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.natsconnect import DEFAULT_NATS

from .langgraph_records import (
    CHECKPOINT_EVENT,
    CHECKPOINT_FORMAT,
    DEFAULT_RUN,
    WRITES_EVENT,
    WRITES_FORMAT,
    field,
    json_typed,
    ns_key,
    record_id,
    redact_value,
    rows,
    thread_key,
    typed_json,
    writes_key,
    writes_key_of,
)
from .langgraph_store import SAVE_ATTEMPTS, ThreadStore

T = TypeVar("T")

ACTOR_KEY = "service:langgraph-saver"
FETCH_BATCH = 16  # records fetched at once while listing
PRUNE_STRATEGIES = ("keep_latest", "delete")


def _conf(config: RunnableConfig | None, what: str) -> Mapping[str, Any]:
    conf = (config or {}).get("configurable") or {}
    thread = conf.get("thread_id")
    if thread is None or str(thread) == "":
        raise InvalidRequest(f"{what} needs configurable.thread_id", path="$.configurable.thread_id")
    return conf


def _data_subject(conf: Mapping[str, Any]) -> str | None:
    """``configurable.data_subject``: whose personal data the thread's records
    hold (spec/langgraph.md, *Data subjects*), a pseudonymous id; or None."""
    subject = conf.get("data_subject")
    if subject is not None and (not isinstance(subject, str) or not subject):
        raise InvalidRequest(
            "configurable.data_subject is a non-empty string (an id)", path="$.configurable.data_subject"
        )
    return subject


class LaneledgerSaver(BaseCheckpointSaver[int]):
    """LangGraph's checkpointer on laneledger, for ``tenant``.

    ``client``: a connected ``LedgerClient`` (the sequencer and the checkpoint
    service on its NATS); ``record_events``: also write the ledger record of
    each checkpoint and write (off, the saver uses the checkpoint service
    alone, and erasures are still recorded). Call ``setup()`` once (the
    ``connect`` and ``open_sync`` factories do)."""

    def __init__(
        self,
        client: LedgerClient,
        *,
        tenant: str,
        checkpoints: CheckpointClient | None = None,
        serde: SerializerProtocol | None = None,
        record_events: bool = True,
        actor_key: str = ACTOR_KEY,
    ) -> None:
        super().__init__(serde=serde)
        self.client = client
        self.checkpoints = checkpoints or CheckpointClient(client)
        self.tenant = tenant
        self.actor_key = actor_key
        self.store = ThreadStore(client, self.checkpoints, tenant=tenant, record_events=record_events)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owns_loop = False  # open_sync's: close_sync stops it
        self._runs: dict[str, str] = {}  # record id -> its run

    # ------------------------------------------------------------------ lifecycle

    async def setup(self) -> None:
        """Register the saver's actor; remember the loop the sync API runs on."""
        self._loop = asyncio.get_running_loop()
        await self.store.setup(self.actor_key)

    @property
    def actor_id(self) -> str | None:
        return self.store.actor_id

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, url: str | Sequence[str] = DEFAULT_NATS, *, tenant: str, scoped: bool = False, **kwargs: Any
    ) -> AsyncIterator[LaneledgerSaver]:
        """A saver on its own connection, closed on exit. ``scoped``: connect
        as the tenant's own producer (``producer-<tenant>``, its subjects and
        buckets only; spec/wire.md) rather than the shared one."""
        client = await LedgerClient.connect(url, tenant=tenant if scoped else None)
        try:
            saver = cls(client, tenant=tenant, **kwargs)
            await saver.setup()
            yield saver
        finally:
            await client.close()

    @classmethod
    def open_sync(
        cls, url: str | Sequence[str] = DEFAULT_NATS, *, tenant: str, scoped: bool = False, **kwargs: Any
    ) -> LaneledgerSaver:
        """A saver for synchronous code (``graph.invoke``): its connection
        lives on an event loop in a thread of its own; ``close_sync()`` ends
        both."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="laneledger-langgraph", daemon=True)
        thread.start()

        async def start() -> LaneledgerSaver:
            client = await LedgerClient.connect(url, tenant=tenant if scoped else None)
            saver = cls(client, tenant=tenant, **kwargs)
            saver._owns_loop = True
            await saver.setup()
            return saver

        try:
            return asyncio.run_coroutine_threadsafe(start(), loop).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            raise

    def close_sync(self) -> None:
        """Close an ``open_sync`` saver: its connection, then its loop."""
        loop = self._loop
        if loop is None or not self._owns_loop:
            raise InvalidRequest("close_sync closes a saver made by open_sync; close this one's client")
        self._sync(self.client.close())
        loop.call_soon_threadsafe(loop.stop)
        self._loop = None

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        if loop is None:
            coro.close()
            raise InvalidRequest("the saver is not set up: call setup() (or use connect/open_sync)")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise InvalidRequest(
                "a synchronous saver method was called on the saver's own event loop: use the async one"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    # ------------------------------------------------------------------ put

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: LangGraphCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = _conf(config, "put")
        thread_id, checkpoint_ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        redactor = self.client.redactor
        rest: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = rest.pop("channel_values", None) or {}
        meta = redact_value(dict(get_serializable_checkpoint_metadata(config, metadata)), redactor)
        state = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": conf.get("checkpoint_id"),
            "checkpoint": typed_json(self.serde.dumps_typed(rest)),
            # Pairs, not an object: a channel named like a secret ("api_key")
            # would have its whole value redacted by the key rule on save.
            "channel_values": [
                [name, *typed_json(self.serde.dumps_typed(redact_value(value, redactor)))]
                for name, value in values.items()
            ],
            "metadata": typed_json(self.serde.dumps_typed(meta)),
        }
        run_id = str(meta.get("run_id") or DEFAULT_RUN)
        await self._store_checkpoint(
            state, run_id, source=meta.get("source"), step=meta.get("step"), data_subject=_data_subject(conf)
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def _store_checkpoint(
        self, state: dict[str, Any], run_id: str, *, source: Any, step: Any, data_subject: str | None
    ) -> Checkpoint:
        thread_id, checkpoint_ns = state["thread_id"], state["checkpoint_ns"]
        record = record_id(thread_id, checkpoint_ns, state["checkpoint_id"])
        # Before any await: LangGraph may send this checkpoint's writes while
        # it is still being saved, and they go to the lane of its run.
        self._runs[record] = run_id
        event = {
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": state["checkpoint_id"],
            "parent_checkpoint_id": state["parent_checkpoint_id"],
            "source": source,
            "step": step,
        }
        return await self.store.store(
            ns_key(thread_id, checkpoint_ns),
            state,
            format=CHECKPOINT_FORMAT,
            record=record,
            thread_id=thread_id,
            run_id=run_id,
            checkpoint_ns=checkpoint_ns,
            event_type=CHECKPOINT_EVENT,
            event=event,
            data_subject=data_subject,
            first=lambda: self.store.register_namespace(thread_id, checkpoint_ns, data_subject),
        )

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Merged into the checkpoint's writes record: a regular write
        already stored for (task, index) is kept, a special one (error,
        interrupt, resume …) replaced, as LangGraph's own savers do."""
        conf = _conf(config, "put_writes")
        thread_id, checkpoint_ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = conf.get("checkpoint_id")
        if not checkpoint_id:
            raise InvalidRequest(
                "put_writes needs configurable.checkpoint_id", path="$.configurable.checkpoint_id"
            )
        redactor = self.client.redactor
        data_subject = _data_subject(conf)
        key = writes_key(thread_id, checkpoint_ns, checkpoint_id)
        run_id = await self._run_of(record_id(thread_id, checkpoint_ns, checkpoint_id), config)
        incoming = [
            (task_id, WRITES_IDX_MAP.get(channel, idx), channel, value)
            for idx, (channel, value) in enumerate(writes)
        ]
        event = {
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "channels": [channel for _, _, channel, _ in incoming],
        }
        async with self.store.lock(key):
            for _ in range(SAVE_ATTEMPTS):
                latest = await self.store.latest(key)
                stored = rows(await self.store.state(latest), "writes", 5, "$.state") if latest else []
                merged = {(w[0], w[1]): w for w in stored}
                changed = False
                for task, idx, channel, value in incoming:
                    if idx >= 0 and (task, idx) in merged:
                        continue
                    typed = typed_json(self.serde.dumps_typed(redact_value(value, redactor)))
                    merged[(task, idx)] = [task, idx, channel, typed, task_path]
                    changed = True
                if not changed:
                    return
                state = {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                    "writes": sorted(merged.values(), key=lambda w: writes_sort_key(w[4], w[0], w[1])),
                }
                try:
                    expected = self.store.base_revision(key, latest)
                    await self._store_writes(key, state, run_id, event, expected, data_subject)
                except RevisionConflict:
                    continue  # another process merged first: merge again on top
                return
        raise RevisionConflict(f"{key}: lost the revision race", kind="checkpoint", key=key)

    async def _store_writes(
        self,
        key: str,
        state: Mapping[str, Any],
        run_id: str,
        event: Mapping[str, Any],
        expected: int,
        data_subject: str | None,
    ) -> Checkpoint:
        return await self.store.store(
            key,
            state,
            format=WRITES_FORMAT,
            record=new_id(),
            thread_id=state["thread_id"],
            run_id=run_id,
            checkpoint_ns=state["checkpoint_ns"],
            event_type=WRITES_EVENT,
            event=event,
            expected_revision=expected,
            data_subject=data_subject,
        )

    async def _run_of(self, record: str, config: RunnableConfig) -> str:
        """The run of a checkpoint, whose lane its writes go to: as this saver
        saved it, else as stored, else as the config's metadata names it."""
        run = self._runs.get(record)
        if run is None:
            stored = await self.store.get(record)
            run = stored.run_id if stored is not None else None
            run = run or str((config.get("metadata") or {}).get("run_id") or DEFAULT_RUN)
            self._runs[record] = run
        return run

    # ------------------------------------------------------------------ reads

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = _conf(config, "get_tuple")
        thread_id, checkpoint_ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            stored = await self.store.get(record_id(thread_id, checkpoint_ns, checkpoint_id))
        else:
            stored = await self.store.latest(ns_key(thread_id, checkpoint_ns))
        return None if stored is None else await self._tuple(stored)

    async def _tuple(self, stored: Checkpoint) -> CheckpointTuple:
        state = await self.store.state(stored)
        thread_id = field(state, "thread_id", str, "$.state")
        checkpoint_ns = field(state, "checkpoint_ns", str, "$.state")
        checkpoint_id = field(state, "checkpoint_id", str, "$.state")
        checkpoint = self.serde.loads_typed(json_typed(state.get("checkpoint"), "$.state.checkpoint"))
        checkpoint["channel_values"] = {
            name: self.serde.loads_typed(json_typed([kind, data], f"$.state.channel_values.{name}"))
            for name, kind, data in rows(state, "channel_values", 3, "$.state")
        }
        metadata = self.serde.loads_typed(json_typed(state.get("metadata"), "$.state.metadata"))
        writes = await self.store.latest(writes_key_of(stored.key, stored.id))
        pending = []
        if writes is not None:
            for task, _idx, channel, typed, _path in rows(
                await self.store.state(writes), "writes", 5, "$.state"
            ):
                pending.append((task, channel, self.serde.loads_typed(json_typed(typed, "$.state.writes"))))
        parent = state.get("parent_checkpoint_id")
        return CheckpointTuple(
            config=_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=_config(thread_id, checkpoint_ns, parent) if parent else None,
            pending_writes=pending,
        )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Newest first, within one thread (a search across every thread is
        not offered: ``InvalidRequest``). Without ``checkpoint_ns`` every
        namespace of the thread is listed."""
        conf = _conf(config, "list")
        thread_id = str(conf["thread_id"])
        if limit is not None and limit <= 0:
            return
        if conf.get("checkpoint_id"):
            found = await self.aget_tuple(config)  # type: ignore[arg-type]  # _conf checked it
            if found is not None and _matches(found, filter, before):
                yield found
            return
        namespaces = (
            [str(conf["checkpoint_ns"])]
            if conf.get("checkpoint_ns") is not None
            else sorted(await self.store.namespaces(thread_id))
        )
        infos: list[CheckpointInfo] = []
        for checkpoint_ns in namespaces:
            infos.extend(await self.store.revisions(ns_key(thread_id, checkpoint_ns)))
        if len(namespaces) > 1:
            # Newest across namespaces: by LangGraph's (time-ordered) ids.
            tuples = [t async for t in self._fetch(infos)]
            tuples.sort(key=lambda t: t.checkpoint["id"], reverse=True)
            ordered: AsyncIterator[CheckpointTuple] = _aiter(tuples)
        else:
            # Without a filter or a cursor the first ``limit`` records are the
            # answer: fetch no more than that.
            batch = min(FETCH_BATCH, limit) if limit and not filter and not before else FETCH_BATCH
            ordered = self._fetch(sorted(infos, key=lambda i: i.revision, reverse=True), batch)
        count = 0
        async for found in ordered:
            if _matches(found, filter, before):
                yield found
                count += 1
                if limit is not None and count >= limit:
                    return

    async def _fetch(
        self, infos: list[CheckpointInfo], size: int = FETCH_BATCH
    ) -> AsyncIterator[CheckpointTuple]:
        for start in range(0, len(infos), size):
            batch = infos[start : start + size]
            stored = await asyncio.gather(*(self.store.get(info.id) for info in batch))
            for found in await asyncio.gather(*(self._tuple(s) for s in stored if s is not None)):
                yield found

    # ------------------------------------------------------------------ deletes and copies

    async def _thread_revisions(self, thread_id: str) -> list[CheckpointInfo]:
        infos: list[CheckpointInfo] = []
        for checkpoint_ns in sorted(await self.store.namespaces(thread_id)):
            infos.extend(await self.store.revisions(ns_key(thread_id, checkpoint_ns)))
        return infos

    async def adelete_thread(self, thread_id: str) -> None:
        """Erase the thread: every record under its keys (checkpoints, writes,
        its record of namespaces) and their blobs, after the ledger records
        the erasure."""
        thread_id = str(thread_id)
        infos = await self.store.thread_records(thread_id)
        if not infos:
            return
        key = thread_key(thread_id)
        await self.store.erase(
            thread_id, "delete_thread", infos, keys=[key], key_prefixes=[key + "/"], checkpoint_ids=[]
        )
        for info in infos:
            self._runs.pop(info.id, None)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: each namespace keeps its newest checkpoint (and its
        writes); ``delete``: as ``delete_thread``."""
        if strategy not in PRUNE_STRATEGIES:
            raise InvalidRequest(
                f"unknown prune strategy {strategy!r}", path="$.strategy", allowed=list(PRUNE_STRATEGIES)
            )
        for thread_id in thread_ids:
            if strategy == "delete":
                await self.adelete_thread(thread_id)
                continue
            infos = await self._thread_revisions(str(thread_id))
            newest: dict[str, CheckpointInfo] = {}
            for info in infos:
                if info.key not in newest or info.revision > newest[info.key].revision:
                    newest[info.key] = info
            doomed = [info for info in infos if newest[info.key] is not info]
            if doomed:
                await self._erase_records(str(thread_id), "prune", doomed)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Erase the checkpoints (and their writes) saved by these LangGraph
        runs, in every thread: each thread's erasure recorded in its lane."""
        runs = sorted({str(run) for run in run_ids})
        if not runs:
            return
        by_thread: dict[str, list[CheckpointInfo]] = {}
        for info in await self.store.run_records(runs):
            if info.format == CHECKPOINT_FORMAT and info.session_id is not None:
                by_thread.setdefault(info.session_id, []).append(info)
        for thread_id, infos in sorted(by_thread.items()):
            await self._erase_records(thread_id, "delete_for_runs", infos)

    async def _erase_records(self, thread_id: str, reason: str, infos: list[CheckpointInfo]) -> None:
        """These checkpoints, and every revision of their writes."""
        keys = [writes_key_of(info.key, info.id) for info in infos]
        await self.store.erase(thread_id, reason, infos, keys=keys, checkpoint_ids=[i.id for i in infos])
        for info in infos:
            self._runs.pop(info.id, None)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Every checkpoint and write of the source, under the target's
        thread id (same LangGraph ids, new laneledger records, each with
        its ledger event)."""
        source, target = str(source_thread_id), str(target_thread_id)
        for info in sorted(await self._thread_revisions(source), key=lambda i: (i.key, i.revision)):
            stored = await self.store.get(info.id)
            if stored is None:
                continue  # erased meanwhile
            state = {**await self.store.state(stored), "thread_id": target}
            run_id = stored.run_id or DEFAULT_RUN
            saved = await self._store_checkpoint(
                state, run_id, source="copy", step=None, data_subject=stored.data_subject
            )
            writes = await self.store.latest(writes_key_of(stored.key, stored.id))
            if writes is not None:
                copied = {**await self.store.state(writes), "thread_id": target}
                key = writes_key_of(saved.key, saved.id)
                event = {
                    "checkpoint_ns": copied["checkpoint_ns"],
                    "checkpoint_id": copied["checkpoint_id"],
                    "copied_from": source,
                    "channels": [w[2] for w in copied.get("writes", [])],
                }
                expected = self.store.base_revision(key, None)
                await self._store_writes(key, copied, run_id, event, expected, writes.data_subject)

    # ------------------------------------------------------------------ the sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        return iter(self._sync(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: LangGraphCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self.aprune(thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))


def _matches(found: CheckpointTuple, filter: dict[str, Any] | None, before: RunnableConfig | None) -> bool:
    if filter and any(found.metadata.get(k) != v for k, v in filter.items()):
        return False
    before_id = get_checkpoint_id(before) if before else None
    return not (before_id and found.checkpoint["id"] >= before_id)


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


async def _aiter(items: list[T]) -> AsyncIterator[T]:
    for item in items:
        yield item


__all__ = ["LaneledgerSaver"]
