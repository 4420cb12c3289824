"""``laneledger verify --nats`` (``check_stream``) and repair-stream's second
opinion (``stream_difference``) on a committed stream an erasure deleted
messages from: a deleted position counts as its erased copy on
LEDGER_ERASED, which must be the stored event itself; one without a copy is
still a finding (spec/verify.md). The ledger is written in-process and
mirrored by hand: no sequencer."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import NamedTuple

import pytest
from inprocess_ledger import InProcessLedgerClient

from laneledger.audit.stream import check_stream, stream_difference
from laneledger.cli import main as laneledger_main
from laneledger.contract.errors import IntegrityError
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import make_event
from laneledger.services.sequencer.streams import erased_stream_config, events_stream_config
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.erasedcopies import publish_erased_event, shred

SUBJECTS = Subjects()
STREAM = SUBJECTS.events_stream
ERASED = (1, 2)  # positions of session s1, erased by the erasure at 4


class Ledger(NamedTuple):
    db: Path
    published: dict[int, bytes]  # positions 1 and 2 as published, before the erasure


@pytest.fixture
async def ledger(tmp_path) -> Ledger:
    """Positions 1, 2 (session s1, erased), 3 (s2), 4 (the erasure), 5 (s3)."""
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    client = InProcessLedgerClient(writer)
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    for session, n in (("s1", 2), ("s2", 1)):
        lane = await client.create_lane("acme", session, "r1", "main", actor_id=actor.id)
        events = [
            make_event(lane.id, "action.started", actor_id=actor.id, payload={"n": i}) for i in range(n)
        ]
        await client.append(lane, 0, events)
    published = stored(tmp_path / "ledger.db")
    await client.erase("s1", actor_id=actor.id, reason="r")
    lane = await client.create_lane("acme", "s3", "r1", "main", actor_id=actor.id)
    await client.append(lane, 0, [make_event(lane.id, "action.started", actor_id=actor.id)])
    writer._db.close()
    return Ledger(tmp_path / "ledger.db", published)


def stored(db: Path) -> dict[int, bytes]:
    with closing(sqlite3.connect(db)) as conn:
        return {p: bytes(b) for p, b in conn.execute("SELECT position, body FROM events")}


async def mirror(
    js, db: Path, deleted: tuple[int, ...], copy: Callable[[int, bytes], bytes | None] = lambda p, body: body
) -> None:
    """The ledger's events on LEDGER_EVENTS, as the sequencer publishes them;
    then each of ``deleted`` erased from it: ``copy(position, stored body)``
    published on LEDGER_ERASED (None: no copy), the message deleted."""
    await js.add_stream(events_stream_config(STREAM, SUBJECTS, 1))
    await js.add_stream(erased_stream_config(SUBJECTS, 1))
    bodies = stored(db)
    for position in sorted(bodies):
        ack = await js.publish(SUBJECTS.events("acme", "s", "r", "l"), bodies[position], stream=STREAM)
        assert ack.seq == position
    for position in deleted:
        body = copy(position, bodies[position])
        if body is not None:
            await publish_erased_event(js, SUBJECTS, position, body, timeout_s=5)
        assert await shred(js, STREAM, position)


async def finding(js, db: Path) -> tuple[str, int]:
    with pytest.raises(IntegrityError) as caught:
        await check_stream(js, db, STREAM)
    return caught.value.details["kind"], caught.value.details["position"]


async def test_deleted_positions_whose_copies_are_the_stored_events_pass(ledger, js):
    await mirror(js, ledger.db, ERASED)
    assert (await check_stream(js, ledger.db, STREAM)).messages == 5
    assert [await stream_difference(js, ledger.db, STREAM, p) for p in ERASED] == [None, None]


async def test_a_deleted_position_without_a_copy_is_a_finding(ledger, js):
    await mirror(js, ledger.db, ERASED, lambda p, body: None if p == 2 else body)
    assert await finding(js, ledger.db) == ("sequence_mismatch", 2)
    assert await stream_difference(js, ledger.db, STREAM, 2) == "message 2 is missing from the stream"


async def test_a_copy_that_differs_from_the_stored_event_is_a_finding(ledger, js):
    await mirror(
        js, ledger.db, ERASED, lambda p, body: body.replace(b'"erased":', b'"erased" :') if p == 2 else body
    )
    assert await finding(js, ledger.db) == ("erased_copy_differs", 2)
    assert "its erased copy differs" in str(await stream_difference(js, ledger.db, STREAM, 2))


async def test_the_event_as_published_is_no_erased_copy(ledger, js):
    # The whole event is what the stream held before the erasure (same_event
    # takes it for the stored one there); a copy must be the stored event.
    await mirror(js, ledger.db, ERASED, lambda p, body: ledger.published[p] if p == 1 else body)
    assert await finding(js, ledger.db) == ("erased_copy_differs", 1)


@pytest.mark.parametrize(
    ("copy", "found"),
    [(lambda p, body: body, None), (lambda p, body: None if p == 5 else body, ("count_mismatch", 5))],
    ids=["copied", "not-copied"],
)
async def test_positions_deleted_from_the_streams_end_are_read_from_their_copies(ledger, js, copy, found):
    # No message after them shows the follower where they were: they are
    # read on LEDGER_ERASED directly. (4 and 5 are no erased events: the
    # copies stand for any copy equal to the stored event.)
    await mirror(js, ledger.db, (*ERASED, 4, 5), copy)
    if found is None:
        assert (await check_stream(js, ledger.db, STREAM)).messages == 5
    else:
        assert await finding(js, ledger.db) == found


async def test_repair_stream_deletes_no_stream_for_an_erasures_holes(ledger, js, nats_server, capsys):
    """Holes with their copies are no difference; a copy that differs is not
    one a new LEDGER_EVENTS would mend (the copy stays on LEDGER_ERASED)."""
    await mirror(js, ledger.db, ERASED, lambda p, body: b"{}" if p == 2 else body)
    created = (await js.stream_info(STREAM)).created
    argv = ["repair-stream", "--db", str(ledger.db), "--nats", nats_server.url, "--yes"]
    assert await asyncio.to_thread(laneledger_main, argv) == 1
    err = capsys.readouterr().err
    assert "erased_copy_differs" in err and "nothing deleted" in err, err
    # The copy put right (a later copy replaces it; past the copies' Nats-Msg-Id).
    await js.publish(SUBJECTS.erased_event(2), stored(ledger.db)[2], stream=SUBJECTS.erased_stream)
    assert await asyncio.to_thread(laneledger_main, argv) == 0
    assert "equals the ledger (5 events): nothing to repair" in capsys.readouterr().out
    assert (await js.stream_info(STREAM)).created == created
