"""The stream comparison of `laneledger verify --nats` on a consumer that
answers 503 (no leader: a cluster electing one after a node restart) or not
at all, and on a stream with a message deleted. The cluster fault test meets
503 only by chance; here the comparison's pull requests are sent, at will, to
a consumer nobody serves, so the real server answers each one 503, on a real
ledger and a real stream (spec/verify.md): a passing 503 is retried and the
comparison completes, one that lasts ends in ``stream_timeout`` at the
comparison's deadline, a consumer that answers but delivers nothing ends in
``stream_stalled``, never in an exception; a sequence missing from the stream
is named, once, at its position."""

from __future__ import annotations

import sqlite3
import time

import pytest
from nats.aio.client import Client as NATS
from polling import eventually

from laneledger.audit.stream import check_stream, stream_difference
from laneledger.contract.errors import IntegrityError
from laneledger.sdk.client import make_event

EVENTS = 40


@pytest.fixture
async def mirrored_ledger(client, actor, sequencer, tmp_path):
    """A ledger of EVENTS events, all of them on LEDGER_EVENTS."""
    lane = await client.create_lane("acme", "session-1", "run-1", "main", actor_id=actor.id)
    for seq in range(0, EVENTS, 4):
        await client.append(
            lane, seq, [make_event(lane.id, "action.started", actor_id=actor.id) for _ in range(4)]
        )
    await eventually(
        lambda: sequencer.mirror.published,
        until=lambda published: published >= EVENTS,
        what=f"the committed stream at position {EVENTS}",
        timeout=10,
    )
    return tmp_path / "ledger.db"


NEXT = "$JS.API.CONSUMER.MSG.NEXT."


def redirect_pulls(monkeypatch, to: str, times: int | None) -> list[str]:
    """Send the next ``times`` pull requests of the comparison's consumer
    (every one, when None) to consumer ``to`` of LEDGER_EVENTS instead."""
    real_publish = NATS.publish
    redirected: list[str] = []

    async def publish(self, subject, payload=b"", reply="", headers=None):
        if subject.startswith(NEXT) and ".audit-" in subject and (times is None or len(redirected) < times):
            redirected.append(subject)
            subject = f"{NEXT}LEDGER_EVENTS.{to}"
        return await real_publish(self, subject, payload, reply=reply, headers=headers)

    monkeypatch.setattr(NATS, "publish", publish)
    return redirected


def answer_503(monkeypatch, times: int | None) -> list[str]:
    """The next ``times`` pull requests (every one, when None) go to a
    consumer that does not exist: the server answers them 503."""
    return redirect_pulls(monkeypatch, "nobody", times)


async def test_a_passing_503_is_retried_and_everything_is_compared(mirrored_ledger, js, monkeypatch):
    refused = answer_503(monkeypatch, times=3)
    check = await check_stream(js, mirrored_ledger, timeout=20.0)
    assert len(refused) == 3
    assert check.messages == EVENTS and check.lag == 0


async def test_a_lasting_503_ends_in_stream_timeout_at_the_deadline(mirrored_ledger, js, monkeypatch):
    refused = answer_503(monkeypatch, times=None)
    started = time.monotonic()
    with pytest.raises(IntegrityError) as caught:
        # A 503 is no stall, however short the stall limit: retried until the deadline.
        await check_stream(js, mirrored_ledger, timeout=1.5, stall_s=0.5)
    assert caught.value.details["kind"] == "stream_timeout"
    assert caught.value.details["position"] == 1  # nothing could be compared
    # Asked again about every half second, not in a tight loop.
    assert 2 <= len(refused) <= 10
    assert 1.5 <= time.monotonic() - started < 10.0


async def test_a_consumer_that_answers_but_delivers_nothing_is_stream_stalled(
    mirrored_ledger, js, monkeypatch
):
    # A real, idle consumer (on a filter nothing matches) answers every pull
    # request when it expires, and delivers nothing.
    await js.add_consumer("LEDGER_EVENTS", durable_name="idle", filter_subject="nothing.matches")
    redirected = redirect_pulls(monkeypatch, "idle", times=None)
    started = time.monotonic()
    with pytest.raises(IntegrityError) as caught:
        await check_stream(js, mirrored_ledger, timeout=30.0, stall_s=1.5)
    assert (caught.value.details["kind"], caught.value.details["position"]) == ("stream_stalled", 1)
    assert caught.value.message == (
        "position 1: stream_stalled: the stream stopped delivering after 0 messages"
    )
    assert redirected and 1.5 <= time.monotonic() - started < 10.0


async def copy_of_the_stream(js, db) -> str:
    """A stream holding the ledger's bodies, one per position, that (unlike
    LEDGER_EVENTS, which denies deletes) lets a test delete a message."""
    await js.add_stream(name="COPY", subjects=["copy.>"])
    conn = sqlite3.connect(db)
    try:
        bodies = [body for (body,) in conn.execute("SELECT body FROM events ORDER BY position")]
    finally:
        conn.close()
    for body in bodies:
        await js.publish("copy.events", bytes(body))
    return "COPY"


async def test_a_message_deleted_from_the_stream_is_named_at_its_position(mirrored_ledger, js):
    stream = await copy_of_the_stream(js, mirrored_ledger)
    assert (await check_stream(js, mirrored_ledger, stream)).messages == EVENTS
    await js.delete_msg(stream, 17)
    started = time.monotonic()
    with pytest.raises(IntegrityError) as caught:
        await check_stream(js, mirrored_ledger, stream, timeout=20.0)
    assert caught.value.details == {"kind": "sequence_mismatch", "position": 17, "stream_sequence": 18}
    assert (
        caught.value.message == "position 17: sequence_mismatch: the stream's message there has sequence 18"
    )
    assert time.monotonic() - started < 5.0  # named at once, not re-read until the deadline


async def test_a_message_deleted_from_the_streams_end_is_a_count_mismatch(mirrored_ledger, js):
    stream = await copy_of_the_stream(js, mirrored_ledger)
    await js.delete_msg(stream, EVENTS)
    with pytest.raises(IntegrityError) as caught:
        await check_stream(js, mirrored_ledger, stream, timeout=20.0)
    assert (caught.value.details["kind"], caught.value.details["position"]) == ("count_mismatch", EVENTS)


async def test_a_direct_read_tells_where_the_stream_differs(mirrored_ledger, js):
    stream = await copy_of_the_stream(js, mirrored_ledger)
    assert [await stream_difference(js, mirrored_ledger, stream, p) for p in (1, EVENTS)] == [None, None]
    assert await stream_difference(js, mirrored_ledger, stream, EVENTS + 1) is None  # nothing beyond
    await js.delete_msg(stream, 17)
    assert await stream_difference(js, mirrored_ledger, stream, 17) == "message 17 is missing from the stream"
    await js.publish("copy.events", b'{"foreign": true}')
    assert await stream_difference(js, mirrored_ledger, stream, EVENTS + 1) == (
        f"the stream holds message {EVENTS + 1}, past the ledger's last position"
    )
    await js.add_stream(name="OTHER", subjects=["other.>"])
    await js.publish("other.events", b'{"foreign": true}')
    assert (
        await stream_difference(js, mirrored_ledger, "OTHER", 1) == "message 1 differs from the stored body"
    )
