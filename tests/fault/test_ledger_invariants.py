"""The fault suite's checker can fail: consumer files derived from a real
ledger pass, and each kind of damage a crash could leave — a missing or
altered read-model row, an event folded twice, a lost label or lane index
entry, a consumer that stopped short — is reported; and so is a receipt a
producer holds that the ledger does not bear out (``receipt_check``)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import msgspec
import pytest
from ledger_invariants import (
    Consumers,
    check_checkpoint_index,
    check_metrics,
    check_tail,
    ledger_events,
    wait_for_consumers,
)
from receipt_check import check_receipts_held

from laneledger.sdk.client import make_event
from laneledger.services.checkpoint.store import CheckpointStore, LaneEvent
from laneledger.services.metrics.fold import State, fold_message
from laneledger.services.metrics.store import MetricsStore, rows_of
from laneledger.services.tail.readmodel import ReadModel


@pytest.fixture
async def events(client, actor, tmp_path: Path) -> list[tuple[int, bytes]]:
    """A small real ledger: three lanes, a text delta and a cost each."""
    for i in range(3):
        lane = await client.create_lane("acme", f"s{i}", "r", "main", actor_id=actor.id)
        await client.append(
            lane,
            0,
            [
                make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "x"}),
                make_event(
                    lane.id,
                    "cost.recorded",
                    actor_id=actor.id,
                    payload={
                        "provider": "anthropic",
                        "model": "claude",
                        "currency": "USD",
                        "amount": "0.125",
                        "input_tokens": 10,
                        "output_tokens": 5,
                    },
                ),
            ],
        )
    found = ledger_events(tmp_path / "ledger.db")
    assert len(found) == 6
    return found


def consumer_files(events: list[tuple[int, bytes]], where: Path) -> dict[str, Path]:
    """The three consumers' files for ``events``, written by their own store code."""
    model = ReadModel(where / "tail" / "tail.db")
    model.apply(events)
    model.close()
    state = State()
    for position, body in events:
        fold_message(state, position, body)
    store = MetricsStore(where / "metrics" / "metrics.db")
    store.save(rows_of(state, state.take_changes()))
    store.close()
    (where / "checkpoint").mkdir()
    index = CheckpointStore.open(where / "checkpoint" / "checkpoints.db")
    index.apply_events(
        events[-1][0],
        [
            LaneEvent(
                position=p,
                lane_id=e["lane_id"],
                seq=e["seq"],
                event_id=e["id"],
                session_id=e["session_id"],
                run_id=e["run_id"],
            )
            for p, b in events
            for e in (json.loads(b),)
        ],
    )
    index.close()
    return Consumers(where / "tail", where / "metrics", where / "checkpoint").files


def tamper(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute(sql).rowcount == 1, sql
        conn.commit()
    finally:
        conn.close()


DAMAGE = {
    "tail": (
        check_tail,
        "tail",
        [
            "DELETE FROM events WHERE position = 3",
            "UPDATE events SET body = CAST(replace(CAST(body AS TEXT), '\"x\"', '\"y\"') AS BLOB)"
            " WHERE position = 1",
            "UPDATE events SET seq = 9 WHERE position = 2",
        ],
    ),
    "metrics": (
        check_metrics,
        "metrics",
        [
            "UPDATE series SET value = CAST(value AS INTEGER) + 1"  # an event folded twice
            " WHERE metric = 'laneledger_events' AND labels LIKE '%text_delta%'",
            "UPDATE series SET value = '0.250' WHERE metric = 'laneledger_cost'",
            "DELETE FROM label_values WHERE label = 'model'",
        ],
    ),
    "checkpoint": (
        check_checkpoint_index,
        "checkpoint lane index",
        [
            "DELETE FROM lane_events WHERE (lane_id, seq) ="
            " (SELECT lane_id, seq FROM lane_events WHERE seq = 2 LIMIT 1)",
        ],
    ),
}


async def test_each_consumer_check_passes_the_fold_and_reports_damage(events, tmp_path: Path):
    intact = consumer_files(events, tmp_path / "intact")
    for name, (check, _, _) in DAMAGE.items():
        check(events, intact[name])
    for name, (check, message, statements) in DAMAGE.items():
        for k, sql in enumerate(statements):
            files = consumer_files(events, tmp_path / f"{name}-{k}")
            tamper(files[name], sql)
            with pytest.raises(AssertionError, match=message):
                check(events, files[name])


async def test_a_consumer_that_stops_short_is_reported(events, tmp_path: Path):
    files = consumer_files(events, tmp_path / "c")
    await wait_for_consumers(Consumers(tail=files["tail"].parent), events[-1][0], timeout=0.3)
    last = events[-1][0]
    with pytest.raises(
        AssertionError,
        match=re.escape(f"every consumer at position {last + 1}; last seen: {{'tail': {last}}}"),
    ):
        await wait_for_consumers(Consumers(tail=files["tail"].parent), last + 1, timeout=0.3)
    with pytest.raises(
        AssertionError, match=re.escape(f"past the ledger's position {last - 1}: {{'tail': {last}}}")
    ):
        await wait_for_consumers(Consumers(tail=files["tail"].parent), last - 1, timeout=0.3)


async def test_a_receipt_the_ledger_does_not_bear_out_is_refused(client, actor, tmp_path: Path):
    lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
    events = [
        make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": str(i)})
        for i in range(3)
    ]
    receipt = msgspec.to_builtins(await client.append(lane, 0, events))
    db = tmp_path / "ledger.db"
    assert check_receipts_held([receipt], db) == 1
    assert check_receipts_held([{**receipt, "replayed": True}], db) == 1  # a resend's answer

    hashes = list(receipt["entry_hashes"])
    hashes[1] = ("0" if hashes[1][0] != "0" else "1") + hashes[1][1:]
    for damaged, message in (
        ({**receipt, "entry_hashes": hashes}, "position 2 differs .*entry_hash"),
        ({**receipt, "event_ids": receipt["event_ids"][::-1]}, "position 1 differs .*'id'"),
        ({**receipt, "positions": [p + 1 for p in receipt["positions"]]}, "position 2 differs .*'seq'"),
        ({**receipt, "positions": [p + 3 for p in receipt["positions"]]}, "no event at position 4"),
        ({**receipt, "committed_at": "2020-01-01T00:00:00Z"}, "position 1 differs .*committed_at"),
        ({**receipt, "digest": "sha256:" + "0" * 64}, "stored receipt differs"),
        ({**receipt, "append_id": "nobody-sent-this"}, "differs .*append_id"),
    ):
        with pytest.raises(AssertionError, match=message):
            check_receipts_held([receipt, damaged], db)
