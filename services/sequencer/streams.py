"""The sequencer's JetStream streams, created if missing and checked if
present (spec/wire.md, "Streams"): the committed stream, and the append
stream (or, with a tenants file, one per tenant, bounded by its backlog
limits). A stream whose settings differ in anything that matters is refused
at start-up, never silently changed; only a tenant's limits are updated."""

from __future__ import annotations

import logging

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    PersistMode,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from laneledger.contract.errors import InternalError
from laneledger.contract.subjects import Subjects
from laneledger.runtime.tenants import TenantLimits

log = logging.getLogger("laneledger.sequencer")

DUPLICATE_WINDOW_S = 120.0
SEQUENCER_CONSUMER = "sequencer"
# Settings compared on an existing stream, and why: each one could lose,
# drop or misroute a request or a committed event if it were different.
_CHECKED = (
    "subjects",
    "retention",
    "storage",
    "num_replicas",
    "max_msgs",
    "max_bytes",
    "max_age",
    "discard",
    "deny_delete",
    "deny_purge",
    "allow_rollup_hdrs",
)


# Turned on in an existing stream when wanted (it adds a way to publish and
# takes nothing away); never turned off.
_ENABLED_ON_UPGRADE = ("allow_atomic",)

# What a tenants file may change on an existing tenant append stream.
LIMITS = ("max_msgs", "max_bytes")


def append_stream_config(name: str, subjects: Subjects, replicas: int) -> StreamConfig:
    """The one append stream of a ledger without a tenants file."""
    return _append_stream(name, [subjects.append_wildcard], replicas, -1, -1)


def tenant_append_stream_config(
    name: str, subjects: Subjects, tenant_token: str, limits: TenantLimits, replicas: int
) -> StreamConfig:
    """One tenant's append stream (``LEDGER_APPEND_<token>``): its backlog is
    bounded, and JetStream refuses (discard new) a publish beyond it."""
    return _append_stream(
        name,
        [subjects.tenant_append_wildcard(tenant_token)],
        replicas,
        limits.append_backlog,
        limits.append_backlog_bytes,
    )


def _append_stream(
    name: str, subject_filters: list[str], replicas: int, max_msgs: int, max_bytes: int
) -> StreamConfig:
    return StreamConfig(
        name=name,
        description="laneledger inbound append requests (work queue, acked after commit)",
        subjects=subject_filters,
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_msgs=max_msgs,
        max_bytes=max_bytes,
        max_age=0,
        discard=DiscardPolicy.NEW,
        duplicate_window=DUPLICATE_WINDOW_S,
        deny_delete=False,
        deny_purge=False,
        allow_rollup_hdrs=False,
        # A request's promise is its receipt, not this stream's PubAck: one
        # lost before its commit is resent by its producer (same append id,
        # same receipt). So on one server the requests are not fsynced one
        # by one (ADR-56's R1 `async` mode; JetStream refuses it for R3,
        # where a quorum stores each request); the transaction log and the
        # committed stream still are, before any receipt (spec/replication.md,
        # "Durability").
        persist_mode=PersistMode.ASYNC if replicas == 1 else None,
    )


def events_stream_config(
    name: str, subjects: Subjects, replicas: int, *, atomic: bool = False
) -> StreamConfig:
    """``atomic``: allow atomic batch publish (the mirror's; a server 2.12+,
    ``laneledger.store.atomicbatch.supports_atomic``)."""
    return _permanent_stream(
        name,
        "laneledger committed events (stream sequence == ledger position)",
        subjects.events_wildcard,
        replicas,
        atomic,
        erasable=True,
    )


def txlog_stream_config(subjects: Subjects, replicas: int, *, atomic: bool = False) -> StreamConfig:
    """``atomic``: as ``events_stream_config`` (a record's parts as atomic batches)."""
    return _permanent_stream(
        subjects.txlog_stream,
        "laneledger writer transactions (the ledger's replicated source of truth)",
        subjects.txlog,
        replicas,
        atomic,
        erasable=True,
    )


def erased_stream_config(subjects: Subjects, replicas: int) -> StreamConfig:
    return _permanent_stream(
        subjects.erased_stream,
        "laneledger erased copies (an erased event by position, a rewritten log record by sequence)",
        subjects.erased_wildcard,
        replicas,
        # A record erased twice is rewritten twice: the older rewrite is deleted.
        erasable=True,
    )


def tlog_stream_config(subjects: Subjects, replicas: int) -> StreamConfig:
    return _permanent_stream(
        subjects.tlog_stream,
        "laneledger signed tree heads (C2SP checkpoints of the ledger's Merkle tree)",
        subjects.tlog_checkpoint,
        replicas,
    )


def _permanent_stream(
    name: str, description: str, subject: str, replicas: int, atomic: bool = False, *, erasable: bool = False
) -> StreamConfig:
    """A stream nothing may shorten: no limits, no purges, and no deletes
    unless ``erasable``: an erasure removes its copy of erased content
    (spec/erasure.md, "The streams"), and only the sequencer's user may
    (nats-config); a deleted message anyone else could have removed is
    found by the chain, which its erased copy must continue."""
    return StreamConfig(
        name=name,
        description=description,
        subjects=[subject],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_msgs=-1,
        max_bytes=-1,
        max_age=0,
        discard=DiscardPolicy.NEW,
        duplicate_window=DUPLICATE_WINDOW_S,
        deny_delete=not erasable,
        deny_purge=True,
        allow_rollup_hdrs=False,
        allow_atomic=atomic or None,
    )


def sequencer_consumer_config() -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=SEQUENCER_CONSUMER,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        # A request delivered to a sequencer that died unacked comes back after
        # this; it must outlast one batch's commit even on a slow disk.
        ack_wait=10.0,
        max_deliver=-1,  # never give up on a request: it gets a receipt or stays
        max_ack_pending=20_000,
    )


async def ensure_stream(
    js: JetStreamContext, wanted: StreamConfig, *, updatable: tuple[str, ...] = ()
) -> None:
    """Create the stream, or check the one there; settings in ``updatable``
    (a tenant's limits) are brought to what is wanted instead."""
    assert wanted.name is not None  # the *_stream_config() above always name it
    try:
        info = await js.stream_info(wanted.name)
    except NotFoundError:
        await js.add_stream(wanted)
        return
    _check_persist_mode(info.config, wanted)
    _accept_denied_deletes(info.config, wanted)
    differing = {
        name: {"found": getattr(info.config, name), "wanted": getattr(wanted, name)}
        for name in _CHECKED
        if _normal(getattr(info.config, name)) != _normal(getattr(wanted, name))
    }
    if differing and set(differing) <= set(updatable):
        await js.update_stream(wanted)
        return
    enable = [n for n in _ENABLED_ON_UPGRADE if getattr(wanted, n) and not getattr(info.config, n)]
    if enable and not differing:
        for name in enable:
            setattr(info.config, name, True)
        await js.update_stream(info.config)
        return
    if differing:
        raise InternalError(
            f"stream {wanted.name} exists with other settings; refusing to change it",
            stream=wanted.name,
            differing=differing,
        )


def _check_persist_mode(found: StreamConfig, wanted: StreamConfig) -> None:
    """JetStream cannot change a stream's persist mode in place. A stream
    that fsyncs each write where it need not (an append stream an older
    sequencer made) is used, correct and slower, and named in a warning. One
    in the ``async`` mode where every acknowledged write must be on disk
    (the transaction log, the committed stream: made by hand, or by a build
    that tried it) is refused: its acknowledgements would promise what it
    has not done (spec/replication.md, "Durability")."""
    found_mode = PersistMode(found.persist_mode or PersistMode.DEFAULT)
    wanted_mode = PersistMode(wanted.persist_mode or PersistMode.DEFAULT)
    if found_mode == wanted_mode:
        return
    remake = (
        "stop the producers, let the sequencer drain it, stop the sequencer, delete the stream "
        f"(nats stream rm {wanted.name}) and start the sequencer, which makes it anew"
        if wanted.retention == RetentionPolicy.WORK_QUEUE
        else f"stop the sequencer, delete the stream (nats stream rm {wanted.name}) and start the "
        "sequencer, which makes it anew from the ledger file"
    )
    if found_mode == PersistMode.ASYNC:
        raise InternalError(
            f"stream {wanted.name} acknowledges writes before they are on disk (persist mode async), "
            "and every write it acknowledges must be (JetStream cannot change it in place). "
            f"To move it: {remake}",
            stream=wanted.name,
            persist_mode=found_mode.value,
        )
    log.warning(
        "stream %s has persist mode %s, not %s (JetStream cannot change it in place); it works, "
        "more slowly. To move it: %s",
        wanted.name,
        found_mode.value,
        wanted_mode.value,
        remake,
    )


def _accept_denied_deletes(found: StreamConfig, wanted: StreamConfig) -> None:
    """A stream made before erasure denies deletes, which JetStream cannot
    lift (error 10052): it is used as it is, and an erasure cannot remove
    its copies (spec/erasure.md, "Streams made before erasure")."""
    if found.deny_delete and not wanted.deny_delete:
        log.warning(
            "stream %s denies message deletes (made before erasure, and JetStream cannot change it): "
            "erasures leave their content in it until it is replaced (docs/erasure.md, "
            '"Streams made before erasure")',
            wanted.name,
        )
        wanted.deny_delete = True


def _normal(value: object) -> object:
    # The server reports "unlimited" as -1 or 0 and omits false flags.
    if value in (None, 0, -1, 0.0, False):
        return None
    if isinstance(value, list):
        return sorted(value)
    return value


async def ensure_consumer(js: JetStreamContext, stream: str, wanted: ConsumerConfig) -> None:
    """Create the durable consumer, or keep the one there (its delivery state
    is the queue's progress; it must never be recreated from scratch)."""
    assert wanted.durable_name is not None  # sequencer_consumer_config() names it
    try:
        await js.consumer_info(stream, wanted.durable_name)
    except NotFoundError:
        await js.add_consumer(stream, wanted)
