"""Benchmark: `laneledger verify --db` over a large ledger.

Run: .venv/bin/python bench/verify.py [--events N] [--lanes L] [--signed-every K]
     .venv/bin/python bench/verify.py --stream [--stream-events N] [--event-kib K]

Builds a ledger with the real writer (``LedgerWriter``, the code the
sequencer runs; no NATS needed for the database): L lanes, appends of 10
events round-robin over the lanes, every event caused by the one before it in
its lane (a causation lookup each), and every K-th append by an actor
registered with an ed25519 key (a signature check each). Then times
``audit_ledger`` over the whole file, once at a quarter of the events and
once at all of them, and measures the Python heap peak of each audit with
tracemalloc (a separate, untimed run): the audit streams, so the peak follows
the number of lanes and actors, not the number of events. The last line is
JSON for scripts.

With ``--stream`` it benchmarks ``laneledger verify --nats``'s stream
comparison instead (``check_stream``) on events near the 1 MiB max_payload:
``--stream-events`` events of ``--event-kib`` KiB of inline text each (as a
producer that does not use the SDK may send them), written by the real
writer, published in position order to LEDGER_EVENTS on a real nats-server
(port and store picked for it, removed after), then compared, timed, and
once more under tracemalloc: the comparison reads in byte-bounded pulls and
one database row at a time, so its heap peak stays near twice the pull
budget (8 MiB), not the stream's size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import time
import tracemalloc
from pathlib import Path

import nats

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import check_stream
from laneledger.contract.model import CreateLane, EnsureActor, encode
from laneledger.contract.signing import generate_private_key, public_key_hex
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import make_event
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append

PER_APPEND = 10
BATCH = 100  # appends per writer transaction


def payload(i: int) -> dict:
    return {
        "model": "claude-sonnet",
        "input_tokens": 1200 + i,
        "output_tokens": 300,
        "tool": {"name": "Read", "args": {"file_path": f"/src/app/module_{i}.py"}},
    }


class LedgerBuilder:
    def __init__(self, db: Path, lanes: int, signed_every: int) -> None:
        self.writer = LedgerWriter(open_ledger(db))
        self.key = generate_private_key()
        self.plain = self.writer.ensure_actor(
            EnsureActor(tenant="acme", key="agent:bench/main@1", kind="agent")
        )
        self.signer = self.writer.ensure_actor(
            EnsureActor(
                tenant="acme",
                key="agent:bench/sub-signed01@1",
                kind="agent",
                public_key=public_key_hex(self.key),
            )
        )
        self.lanes = [
            self.writer.create_lane(
                CreateLane(tenant="acme", session_id=f"s{i % 10}", run_id="r", name=f"lane-{i}")
            )
            for i in range(lanes)
        ]
        self.heads = {lane.id: (0, None) for lane in self.lanes}  # seq, last event id
        self.signed_every = signed_every
        self.appends = 0

    def grow_to(self, events: int) -> None:
        while self.writer.last_position < events:
            batch = []
            for _ in range(BATCH):
                lane = self.lanes[self.appends % len(self.lanes)]
                seq, cause = self.heads[lane.id]
                signed = self.signed_every and self.appends % self.signed_every == 0
                actor, key = (self.signer.id, self.key) if signed else (self.plain.id, None)
                proposed = []
                for k in range(PER_APPEND):
                    event = make_event(
                        lane.id,
                        "action.started",
                        actor_id=actor,
                        payload=payload(self.appends * PER_APPEND + k),
                        causation_id=cause,
                        private_key=key,
                    )
                    cause = event["id"]
                    proposed.append(event)
                body = encode(
                    {
                        "lane_id": lane.id,
                        "expected_last_seq": seq,
                        "append_id": f"a-{self.appends}",
                        "events": proposed,
                    }
                )
                batch.append(prepare_append(body, actor_keys=self.writer.actor_keys))
                self.heads[lane.id] = (seq + PER_APPEND, cause)
                self.appends += 1
            result = self.writer.apply_batch(batch)
            rejected = [r for r in result.receipts if getattr(r, "error", None)]
            assert not rejected, rejected[0]


def measure(db: Path) -> dict:
    started = time.perf_counter()
    audit = audit_ledger(db)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    audit_ledger(db)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "events": audit.events,
        "lanes": audit.lanes,
        "signed_events": audit.signed_events,
        "causal_links": audit.causal_links,
        "seconds": round(seconds, 2),
        "events_per_s": round(audit.events / seconds),
        "heap_peak_mib": round(peak / 2**20, 2),
    }


def build_inline(db: Path, events: int, event_bytes: int) -> None:
    """One lane, one event per append, each with ``event_bytes`` of text inline."""
    writer = LedgerWriter(open_ledger(db))
    actor = writer.ensure_actor(EnsureActor(tenant="acme", key="agent:bench/large@1", kind="agent"))
    lane = writer.create_lane(CreateLane(tenant="acme", session_id="s", run_id="r", name="large"))
    words = "lorem ipsum dolor sit amet " * (event_bytes // 27 + 1)
    for start in range(0, events, 10):
        batch = []
        for seq in range(start, min(events, start + 10)):
            event = dict(make_event(lane.id, "stream.text_delta", actor_id=actor.id))
            event["payload"] = {"text": f"{seq:08d} {words}"[:event_bytes]}
            body = encode(
                {"lane_id": lane.id, "expected_last_seq": seq, "append_id": f"a-{seq}", "events": [event]}
            )
            batch.append(prepare_append(body, actor_keys=writer.actor_keys))
        result = writer.apply_batch(batch)
        rejected = [r for r in result.receipts if getattr(r, "error", None)]
        assert not rejected, rejected[0]


async def measure_stream(db: Path, store: Path) -> dict:
    conn = sqlite3.connect(db)
    try:
        events, stored = conn.execute("SELECT count(*), sum(length(body)) FROM events").fetchone()
        bodies = (bytes(body) for (body,) in conn.execute("SELECT body FROM events ORDER BY position"))
        with NatsServer(store) as server:
            nc = await nats.connect(server.url)
            try:
                js = nc.jetstream()
                await js.add_stream(name="LEDGER_EVENTS", subjects=["ledger.events.>"])
                for body in bodies:
                    await js.publish("ledger.events.acme", body)
                started = time.perf_counter()
                checked = await check_stream(js, db)
                seconds = time.perf_counter() - started
                tracemalloc.start()
                await check_stream(js, db)
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
            finally:
                await nc.close()
    finally:
        conn.close()
    assert checked.messages == events
    return {
        "events": events,
        "stream_mib": round(stored / 2**20, 1),
        "seconds": round(seconds, 2),
        "mib_per_s": round(stored / 2**20 / seconds, 1),
        "heap_peak_mib": round(peak / 2**20, 1),
    }


def stream_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="laneledger-verify-stream-") as tmp:
        db = Path(tmp) / "ledger.db"
        built = time.perf_counter()
        build_inline(db, args.stream_events, args.event_kib * 1024)
        print(
            f"built {args.stream_events} events of {args.event_kib} KiB inline "
            f"({time.perf_counter() - built:.1f} s)"
        )
        run = asyncio.run(measure_stream(db, Path(tmp) / "nats"))
        print(
            f"  verify --nats stream comparison: {run['events']} events, {run['stream_mib']} MiB in "
            f"{run['seconds']} s: {run['mib_per_s']} MiB/s; heap peak {run['heap_peak_mib']} MiB"
        )
        print(json.dumps({"event_kib": args.event_kib, **run}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--lanes", type=int, default=1000)
    parser.add_argument("--signed-every", type=int, default=10, help="every K-th append is signed (0: none)")
    parser.add_argument("--stream", action="store_true", help="benchmark the stream comparison instead")
    parser.add_argument("--stream-events", type=int, default=300, help="with --stream (default 300)")
    parser.add_argument(
        "--event-kib", type=int, default=900, help="with --stream: each event's text (default 900)"
    )
    args = parser.parse_args()
    if args.stream:
        stream_main(args)
        return
    with tempfile.TemporaryDirectory(prefix="laneledger-verify-") as tmp:
        db = Path(tmp) / "ledger.db"
        builder = LedgerBuilder(db, args.lanes, args.signed_every)
        runs = []
        for target in (args.events // 4, args.events):
            built = time.perf_counter()
            builder.grow_to(target)
            print(
                f"built {builder.writer.last_position:,} events in {args.lanes} lanes "
                f"({time.perf_counter() - built:.1f} s)"
            )
            run = measure(db)
            runs.append(run)
            print(
                f"  verify: {run['events']:,} events ({run['signed_events']:,} signed, "
                f"{run['causal_links']:,} causation links) in {run['seconds']} s: "
                f"{run['events_per_s']:,} events/s; heap peak {run['heap_peak_mib']} MiB"
            )
        last = runs[-1]
        print(
            json.dumps(
                {
                    "lanes": args.lanes,
                    "signed_every": args.signed_every,
                    "events": last["events"],
                    "events_per_s": last["events_per_s"],
                    "heap_peak_mib": last["heap_peak_mib"],
                    "runs": runs,
                }
            )
        )


if __name__ == "__main__":
    main()
