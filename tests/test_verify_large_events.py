"""`laneledger verify --db --nats` and `laneledger repair-stream` on a ledger
of events near NATS's 1 MiB max_payload (spec/verify.md, "Reading the
stream"). The comparison reads the stream in byte-bounded pulls, so it never
asks nats-server for more than a client may hold; a message lost on the way
to the client is a typed read error that says to retry, never a gap in the
ledger; and repair-stream deletes nothing that a direct read shows equal to
the database (the repair of a true divergence: tests/test_foreign_message.py)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from polling import eventually

from laneledger.audit.stream import check_stream
from laneledger.cli import main as laneledger_main
from laneledger.contract.errors import IntegrityError, LedgerUnavailable
from laneledger.contract.model import encode
from laneledger.contract.subjects import REPLY_HEADER, Subjects
from laneledger.runtime.follow import READ_BUDGET_BYTES
from laneledger.runtime.pullfeed import PullFeed
from laneledger.sdk.client import make_event

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

EVENT_BYTES = 900 * 1024  # with its envelope, just under the 1 MiB max_payload
# 132 MiB: before byte-bounded pulls, `verify --nats` lost messages on such a
# stream and reported sequence_mismatch (bench/verify.py --stream shows it from 120 on).
MANY = 150
EVENTS = 50  # enough for the tests that lose a message on the way themselves


def laneledger(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laneledger.cli", *args], capture_output=True, text=True, timeout=180
    )


@pytest.fixture
def large_ledger_of(client, actor, sequencer, js, tmp_path):
    """``await large_ledger_of(n)``: the ledger file once it holds n events of
    about 900 KiB each, all on LEDGER_EVENTS. Appended as a producer that
    does not use the SDK may (the SDK would move the text to a blob): the
    payload inline, the request raw on its subject."""

    async def build(events: int) -> Path:
        lane = await client.create_lane("acme", "session-1", "run-1", "main", actor_id=actor.id)
        words = "lorem ipsum dolor sit amet " * (EVENT_BYTES // 27 + 1)
        for seq in range(events):
            event = dict(make_event(lane.id, "stream.text_delta", actor_id=actor.id))
            event["payload"] = {"text": f"{seq:06d} {words}"[:EVENT_BYTES]}
            body = encode(
                {"lane_id": lane.id, "expected_last_seq": seq, "append_id": f"a{seq}", "events": [event]}
            )
            await js.publish(
                Subjects().append("acme", lane.id), body, headers={REPLY_HEADER: "_INBOX.unread"}
            )
        await eventually(
            lambda: sequencer.mirror.published,
            until=lambda published: published >= events,
            what=f"the committed stream at position {events}",
            timeout=120,
        )
        db = tmp_path / "ledger.db"
        with closing(sqlite3.connect(db)) as conn:
            (smallest,) = conn.execute("SELECT min(length(body)) FROM events").fetchone()
        assert smallest > EVENT_BYTES
        return db

    return build


@pytest.fixture
async def large_ledger(large_ledger_of):
    return await large_ledger_of(EVENTS)


async def test_verify_nats_passes_on_events_near_max_payload(large_ledger_of, nats_server):
    db = await large_ledger_of(MANY)
    log_before = len(nats_server.log_text())
    result = await asyncio.to_thread(laneledger, "verify", "--db", str(db), "--nats", nats_server.url)
    assert result.returncode == 0, result
    assert f"LEDGER_EVENTS identical ({MANY} messages)" in result.stdout
    # Never more pushed at it than it takes: nats-server cut no one off.
    assert "Slow Consumer" not in nats_server.log_text()[log_before:]


async def test_the_comparison_pulls_a_bounded_number_of_bytes(large_ledger, js, monkeypatch):
    asked: list[dict] = []
    real_publish = NATS.publish

    async def publish(self, subject, payload=b"", reply="", headers=None):
        if subject.startswith("$JS.API.CONSUMER.MSG.NEXT.LEDGER_EVENTS.audit-"):
            asked.append(json.loads(payload))
        return await real_publish(self, subject, payload, reply=reply, headers=headers)

    monkeypatch.setattr(NATS, "publish", publish)
    assert (await check_stream(js, large_ledger)).messages == EVENTS
    # 44 MiB read in pulls of at most 8 MiB each: more than five of them.
    assert len(asked) > EVENTS * EVENT_BYTES // READ_BUDGET_BYTES
    assert all(request["max_bytes"] == READ_BUDGET_BYTES for request in asked), asked


def drop_once_at_the_client(monkeypatch, sequence: int) -> list[int]:
    """The comparison's feed loses stream message ``sequence`` once, as a
    client dropped as a slow consumer (or reconnecting) loses what was on its way."""
    dropped: list[int] = []
    real_on_msg = PullFeed._on_msg

    async def on_msg(self, msg):
        if msg.reply and not dropped and msg.metadata.sequence.stream == sequence:
            dropped.append(sequence)
            return None
        return await real_on_msg(self, msg)

    monkeypatch.setattr(PullFeed, "_on_msg", on_msg)
    return dropped


async def test_a_message_lost_on_the_way_is_a_read_error_not_a_gap(large_ledger, js, monkeypatch):
    dropped = drop_once_at_the_client(monkeypatch, 42)
    with pytest.raises(LedgerUnavailable) as caught:
        await check_stream(js, large_ledger)
    assert dropped == [42]
    assert caught.value.details == {
        "kind": "stream_read_lost",
        "position": 42,
        "stream_sequence": 43,
        "stream": "LEDGER_EVENTS",
    }
    assert caught.value.retryable and "run the check again" in caught.value.message
    # Run again, nothing lost: intact.
    monkeypatch.undo()
    assert (await check_stream(js, large_ledger)).messages == EVENTS


async def repair_stream(nats_url: str, db: Path, *args: str) -> int:
    """``laneledger repair-stream`` in this process (so a test can simulate
    a client fault), on a thread: the sequencer runs on this loop."""
    argv = ["repair-stream", "--db", str(db), "--nats", nats_url, *args]
    return await asyncio.to_thread(laneledger_main, argv)


async def test_repair_stream_deletes_nothing_when_a_message_is_lost_on_the_way(
    large_ledger, js, nats_server, monkeypatch, capsys
):
    created = (await js.stream_info("LEDGER_EVENTS")).created
    dropped = drop_once_at_the_client(monkeypatch, 42)
    assert await repair_stream(nats_server.url, large_ledger, "--yes") == 2
    assert dropped == [42]
    assert "stream_read_lost" in capsys.readouterr().err
    info = await js.stream_info("LEDGER_EVENTS")
    assert (info.created, info.state.messages) == (created, EVENTS)


async def test_repair_stream_reads_what_the_comparison_names_again_before_deleting(
    large_ledger, js, nats_server, monkeypatch, capsys
):
    created = (await js.stream_info("LEDGER_EVENTS")).created

    async def false_alarm(*args, **kwargs):
        # What the comparison said before it read in bounded pulls and
        # confirmed its gaps (issue 34): a message lost on its way, as a gap.
        raise IntegrityError(
            "position 42: sequence_mismatch: the stream's message there has sequence 43",
            kind="sequence_mismatch",
            position=42,
            stream_sequence=43,
        )

    monkeypatch.setattr("laneledger.cli.repair.check_stream", false_alarm)
    for yes in ((), ("--yes",)):  # neither offered nor done
        assert await repair_stream(nats_server.url, large_ledger, *yes) == 1
        out, err = capsys.readouterr()
        assert "LEDGER_EVENTS is intact at position 42" in err and "nothing deleted" in err, err
        assert "saves" not in out and "deleted it" not in out, out
    info = await js.stream_info("LEDGER_EVENTS")
    assert (info.created, info.state.messages) == (created, EVENTS)
    assert not list(large_ledger.parent.glob("*.foreign-*.jsonl"))  # nothing saved either
