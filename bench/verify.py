"""Benchmark: `laneledger verify --db` over a large ledger.

Run: .venv/bin/python bench/verify.py [--events N] [--lanes L] [--signed-every K]

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
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

from laneledger.audit.ledger import audit_ledger
from laneledger.contract.model import CreateLane, EnsureActor, encode
from laneledger.contract.signing import generate_private_key, public_key_hex
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--lanes", type=int, default=1000)
    parser.add_argument("--signed-every", type=int, default=10, help="every K-th append is signed (0: none)")
    args = parser.parse_args()
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
