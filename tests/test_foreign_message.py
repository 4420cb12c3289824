"""A message the ledger did not write lands on LEDGER_EVENTS (a misconfigured
operator's publish: here a forged event of another tenant). It is never a
silent gap: the sequencer stops committing, is not ready, logs at ERROR and
counts it; ``laneledger repair-stream`` saves the message and replaces the
stream, the sequencer refills it from the ledger and commits again, and the
derived services rebuild from it (spec/wire.md, "Foreign messages"). Every
service runs as its real process."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import msgspec
import pytest
from checkpoint_support import CheckpointProcess
from metrics_support import metrics_process, parse, scrape, total, value
from polling import eventually
from sequencer_process import ledger_last_position
from tail_support import TailProcess

from laneledger.audit.stream import check_stream
from laneledger.contract.errors import EntityNotFound
from laneledger.sdk.client import LaneRecorder, LedgerClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FORGED_SUBJECT = "ledger.events.globex.s.r.forged"


async def status(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status


def laneledger(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laneledger.cli", *args], capture_output=True, text=True, timeout=120
    )


async def test_a_foreign_message_stops_commits_until_repair_stream_replaces_the_stream(
    nats_server, nc, sequencer_proc, tmp_path
):
    db = tmp_path / "ledger.db"
    tail = await TailProcess(nats_server.url, tmp_path / "tail").start()
    metrics = metrics_process(nats_server.url, tmp_path / "metrics", tmp_path).start()
    checkpoint = CheckpointProcess(nats_server.url, tmp_path / "checkpoint").start()
    js = nc.jetstream()
    async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
        actor = await client.ensure_actor("acme", "agent:acme/main@1", "agent")
        lane = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)

        def started() -> dict[str, object]:
            return lane.event("run.started", actor_id=actor.id, subject_id="r1")

        for _ in range(3):
            await lane.append([started()])
        assert (await check_stream(js, db, wait_s=10)).messages == 3  # receipts come before the stream

        # The foreign message: a committed event of acme's, re-labelled as globex's.
        forged = msgspec.json.decode((await js.get_msg("LEDGER_EVENTS", 3)).data)
        forged.update(tenant="globex", id="forged-event")
        await js.publish(FORGED_SUBJECT, msgspec.json.encode(forged))

        # The next commit finds position 4 taken: the sequencer stops there.
        await lane.append([started()])  # committed in SQLite before the publish was refused
        seq_metrics = sequencer_proc.http_url
        await eventually(
            lambda: scrape(seq_metrics),
            until=lambda text: value(parse(text), "laneledger_sequencer_stream_fault") == 1,
            what="the sequencer to report the foreign message",
        )
        samples = parse(await scrape(seq_metrics))
        assert total(samples, "laneledger_sequencer_stream_faults_total", kind="foreign_message") == 1
        assert await status(f"{sequencer_proc.http_url}/readyz") == 503
        assert "ERROR" in sequencer_proc.log_text() and "repair-stream" in sequencer_proc.log_text()

        # Held, not committed: an append is accepted and waits.
        held = await client.submit(lane.lane, lane.head, [started()])
        await asyncio.sleep(1.5)  # a negative check: the time it would take to commit
        with pytest.raises(EntityNotFound):
            await client.get_receipt(held.append_id)
        assert ledger_last_position(db) == 4

        # Without --yes the command only says what it would do.
        dry = laneledger("repair-stream", "--db", str(db), "--nats", nats_server.url)
        assert dry.returncode == 1 and "position 4" in dry.stdout, dry
        assert (await js.stream_info("LEDGER_EVENTS")).state.last_seq == 4
        saved = tmp_path / "foreign.jsonl"
        done = laneledger(
            "repair-stream", "--db", str(db), "--nats", nats_server.url, "--save", str(saved), "--yes"
        )
        assert done.returncode == 0, done
        (record,) = [json.loads(line) for line in saved.read_text().splitlines()]
        assert record["sequence"] == 4 and record["subject"] == FORGED_SUBJECT
        assert msgspec.json.decode(base64.b64decode(record["data_base64"]))["tenant"] == "globex"

        # The running sequencer refills the stream from the ledger and goes on:
        # the held append commits, the stream equals SQLite.
        receipt = await held.receipt(timeout=30)
        assert receipt.positions == [5]
        await eventually(
            lambda: status(f"{sequencer_proc.http_url}/readyz"), until=lambda s: s == 200, what="ready again"
        )
        assert (await check_stream(js, db, wait_s=10)).messages == 5
        # Running again: a second run finds nothing to repair.
        again = laneledger("repair-stream", "--db", str(db), "--nats", nats_server.url)
        assert again.returncode == 0 and "nothing to repair" in again.stdout, again

    # The derived services had applied the forged message: each stops on the
    # replaced stream and, started again, rebuilds from it.
    for service in (tail, metrics, checkpoint):
        await eventually(
            lambda s=service: not s.running, what=f"{service.name} to stop on the replaced stream"
        )
        assert "recreated" in service.log_text(), service.log_tail()
    await tail.start()
    metrics.start()
    checkpoint.start()
    await eventually(
        lambda: scrape(metrics.http_url),
        until=lambda text: value(parse(text), "laneledger_metrics_folded_position") == 5,
        what="the metrics refolded up to position 5",
    )
    samples = parse(await scrape(metrics.http_url))
    assert total(samples, "laneledger_events_total") == 5
    assert total(samples, "laneledger_events_total", tenant="globex") == 0

    async def tail_verify() -> dict[str, object]:
        async with aiohttp.ClientSession() as http, http.get(f"{tail.http_url}/api/v1/verify") as response:
            return dict(await response.json())

    report = await eventually(
        tail_verify, until=lambda r: r.get("last_position") == 5, what="the tail's read model rebuilt"
    )
    assert report["intact"] is True
    await eventually(
        lambda: scrape(checkpoint.http_url),
        until=lambda text: value(parse(text), "laneledger_checkpoint_applied_position") == 5,
        what="the checkpoint index rebuilt up to position 5",
    )
    for service in (tail, metrics, checkpoint):
        service.stop()


def test_repair_stream_refuses_a_missing_database(tmp_path: Path):
    result = laneledger("repair-stream", "--db", str(tmp_path / "nope.db"), "--nats", "nats://127.0.0.1:1")
    assert result.returncode == 2 and "nope.db" in result.stderr
