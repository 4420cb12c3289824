"""Readers of one position of LEDGER_EVENTS on a position an erasure deleted
from it: the ingest's cause lookup (a Korg ``triggered_by``) reads the
erased copy on LEDGER_ERASED; the mirror's start-up check takes a deleted
last message whose copy is the ledger's event, and stops at one without
(spec/wire.md, "Foreign messages")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from laneledger.contract.subjects import Subjects
from laneledger.services.ingest.committed import CommittedEvents
from laneledger.services.sequencer.mirror import CommittedStreamMirror, StreamFault
from laneledger.services.sequencer.streams import erased_stream_config, events_stream_config
from laneledger.store.erasedcopies import publish_erased_event, shred

SUBJECTS = Subjects()
STREAM = SUBJECTS.events_stream


def body(position: int, **more: object) -> bytes:
    event = {
        "id": f"e{position}",
        "tenant": "acme",
        "session_id": "s",
        "event_type": "action.started",
        **more,
    }
    return json.dumps(event, sort_keys=True).encode()


async def streams_with(js, last: int, deleted: int, copy: bytes | None) -> None:
    """Events 1..``last``; ``deleted`` erased: ``copy`` (if any) published on
    LEDGER_ERASED, then the message deleted from LEDGER_EVENTS."""
    await js.add_stream(events_stream_config(STREAM, SUBJECTS, 1))
    await js.add_stream(erased_stream_config(SUBJECTS, 1))
    for position in range(1, last + 1):
        await js.publish(SUBJECTS.events("acme", "s", "r", "l"), body(position), stream=STREAM)
    if copy is not None:
        await publish_erased_event(js, SUBJECTS, deleted, copy, timeout_s=5)
    assert await shred(js, STREAM, deleted)


async def test_the_ingest_reads_a_deleted_cause_from_its_erased_copy(js):
    await streams_with(js, 3, deleted=2, copy=body(2, erased={"position": 3}))
    committed = CommittedEvents(js, SUBJECTS, timeout_s=5)
    cause = await committed.at(2, grace_s=0)
    assert cause is not None and (cause.id, cause.session_id) == ("e2", "s")
    assert (await committed.at(3, grace_s=0)).id == "e3"  # type: ignore[union-attr]
    assert await committed.at(4, grace_s=0.1) is None  # on neither stream


async def test_the_ingest_finds_no_cause_where_a_deleted_event_has_no_copy(js):
    await streams_with(js, 3, deleted=2, copy=None)
    assert await CommittedEvents(js, SUBJECTS, timeout_s=5).at(2, grace_s=0.1) is None


def mirror_of(nc, ledger: dict[int, bytes]) -> CommittedStreamMirror:
    async def read_after(position: int, n: int) -> list[tuple[int, bytes]]:
        return [(p, ledger[p]) for p in sorted(ledger) if p > position][:n]

    return CommittedStreamMirror(
        nc, SUBJECTS, STREAM, read_after=read_after, ledger_last_position=lambda: max(ledger)
    )


@pytest.mark.parametrize(
    ("copy", "whole"),
    [(lambda stored: stored, True), (lambda stored: None, False), (lambda stored: b"{}", False)],
    ids=["copy-is-the-event", "no-copy", "copy-differs"],
)
async def test_the_mirror_compares_a_deleted_last_message_by_its_copy(
    nc, js, copy: Callable[[bytes], bytes | None], whole: bool
):
    ledger = {p: body(p) for p in (1, 2)} | {3: body(3, erased={"position": 4})}
    await streams_with(js, 3, deleted=3, copy=copy(ledger[3]))
    mirror = mirror_of(nc, ledger)
    if whole:
        await asyncio.wait_for(mirror.catch_up(), 10)
        assert mirror.published == 3
    else:
        with pytest.raises(StreamFault) as fault:
            await asyncio.wait_for(mirror.catch_up(), 10)
        assert (fault.value.details["kind"], fault.value.details["position"]) == ("message_deleted", 3)
