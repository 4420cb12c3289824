"""laneledger's sequencer beside a store a user might pick instead: python
``eventsourcing`` on SQLite (issue 36), side by side in one run.

Both take the same kind of work: appends of 1 or 10 events of ~450 bytes
(bench/drain.py's events) to 64 streams (lanes, aggregates), each append one
durable write:

* laneledger: bench/drain.py's run — the sequencer drains a pre-loaded
  backlog (its transaction log on a nats-server that fsyncs every write,
  ``sync_interval: always``; its SQLite file);
* eventsourcing (pinned in the dev extra): ``Application.save`` of one
  aggregate's new events per append, on its SQLite recorder (WAL, SQLite's
  default ``synchronous=FULL``: one fsync per save).

Rounds are interleaved (laneledger 1, eventsourcing 1, laneledger 10,
eventsourcing 10, then again), so both see the same machine load; the
median of the rounds is printed, events/s (wall clock) and CPU per event
(this process: for laneledger the sequencer, not nats-server), then a JSON
line.

    .venv/bin/python bench/peers.py [--rounds 3] [--events 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drain import LANES, payload
from drain import run as drain_run

PER_APPEND = (1, 10)


class Lane(Aggregate):
    @event("Recorded")
    def record(self, fields: dict[str, Any], payload: dict[str, Any]) -> None:
        pass


def beside_payload(lane: Lane, i: int) -> dict[str, Any]:
    """What a laneledger event carries beside its payload (its lane, actor,
    id and chain link; its type is the event class), so both stores write events of about the
    same size (bench/drain.py's are ~450 bytes)."""
    return {
        "lane_id": str(lane.id),
        "actor_id": "agent:bench@1",
        "event_id": f"01JBENCH{i:018d}",
        "prev_hash": f"{i:064x}",
    }


def eventsourcing_run(events: int, per_append: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="laneledger-peers-") as tmp:
        db = Path(tmp) / "eventsourcing.db"
        app: Application = Application(
            env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(db)}
        )
        lanes = [Lane() for _ in range(LANES)]
        app.save(*lanes)
        appends = events // per_append
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(appends):
            lane = lanes[i % LANES]
            for _ in range(per_append):
                lane.record(beside_payload(lane, i), payload(i))
            app.save(lane)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        app.close()
        with sqlite3.connect(db) as conn:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
            size = conn.execute(
                "SELECT avg(length(state)) FROM stored_events WHERE originator_version > 1"
            ).fetchone()[0]
    total = appends * per_append
    return {
        "events_per_s": round(total / wall),
        "cpu_us_per_event": round(cpu / total * 1e6, 1),
        "mean_event_bytes": round(size),
        "journal_mode": mode,
        "synchronous": synchronous,  # 2: FULL
    }


def laneledger_run(events: int, per_append: int) -> dict[str, Any]:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(drain_run(events // per_append, per_append))
    return {key: result[key] for key in ("events_per_s", "cpu_us_per_event")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=10_000, help="events per run")
    args = parser.parse_args()
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {
        "laneledger": {e: [] for e in PER_APPEND},
        "eventsourcing": {e: [] for e in PER_APPEND},
    }
    for round_no in range(args.rounds):
        for per_append in PER_APPEND:
            for name, run in (("laneledger", laneledger_run), ("eventsourcing", eventsourcing_run)):
                found = run(args.events, per_append)
                runs[name][per_append].append(found)
                print(
                    f"round {round_no + 1}, {per_append} event(s) per append, {name}: "
                    f"{found['events_per_s']:,} events/s, {found['cpu_us_per_event']} µs CPU/event",
                    flush=True,
                )
    result: dict[str, Any] = {"rounds": args.rounds, "events": args.events}
    for per_append in PER_APPEND:
        row: dict[str, Any] = {}
        for name in runs:
            done = runs[name][per_append]
            row[name] = {
                "events_per_s": round(statistics.median(r["events_per_s"] for r in done)),
                "cpu_us_per_event": round(statistics.median(r["cpu_us_per_event"] for r in done), 1),
            }
        row["ratio"] = round(row["laneledger"]["events_per_s"] / row["eventsourcing"]["events_per_s"], 2)
        result[f"per_append_{per_append}"] = row
        print(
            f"{per_append} event(s) per append, median of {args.rounds}: laneledger "
            f"{row['laneledger']['events_per_s']:,} events/s ({row['laneledger']['cpu_us_per_event']} µs "
            f"CPU/event), eventsourcing {row['eventsourcing']['events_per_s']:,} events/s "
            f"({row['eventsourcing']['cpu_us_per_event']} µs CPU/event): {row['ratio']}x"
        )
    peer = runs["eventsourcing"][1][0]
    result["eventsourcing_sqlite"] = {k: peer[k] for k in ("mean_event_bytes", "journal_mode", "synchronous")}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
