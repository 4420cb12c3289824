"""The sequencer's own per-event work, in-process: step 0 and the ledger writer.

``bench/drain.py`` measures the whole sequencer over a nats-server, whose
CPU figure moves by ±8 % from run to run on a loaded machine. This bench
runs only what the library does for each append request — ``prepare_append``
(decoding, redaction, references, the digest) and ``LedgerWriter.apply_batch``
(checks, hashing, SQLite, the Merkle tree, the transaction log record, to a
list instead of LEDGER_TXLOG: ``MemoryTxLog``) — over the same deterministic requests every
time (fixed ids, clock and content salts), so two versions of the code can be compared in
one sitting: it prints their CPU per event and a digest of every byte they
produce (each event body, receipt and log record, and the tree's root),
which must not change when only speed does.

    .venv/bin/python bench/step_cpu.py [--requests N] [--batch B] [--events-per-append E]

For an A/B against another checkout (one that has ``txlog.MemoryTxLog`` and
``LedgerWriter``'s ``random_bytes``),
run it with that checkout's ``shared`` directory first on PYTHONPATH (with
its ``services`` linked in as ``laneledger/services``), alternating with
this one; for a figure that load
does not move, count instructions: ``valgrind --tool=callgrind`` over two
sizes, the difference divided by the difference in requests.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import itertools
import json
import random
import tempfile
import time
from pathlib import Path

from drain import payload  # the same requests as bench/drain.py

import laneledger.store.structure as structure_module
from laneledger.contract.model import CreateLane, EnsureActor, encode
from laneledger.contract.redaction import DEFAULT_REDACTOR
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append
from laneledger.store.txlog import MemoryTxLog
from laneledger.tlog import store as tree_store

LANES = 64
CLOCK = "2026-12-05T07:00:00.000000Z"


def run(requests: int, batch: int, per_append: int) -> dict:
    minted = itertools.count()
    structure_module.new_id = lambda: f"01900000-0000-7000-8000-{next(minted):012d}"  # fixed ids
    with tempfile.TemporaryDirectory(prefix="laneledger-step-cpu-") as tmp:
        log = MemoryTxLog()
        writer = LedgerWriter(
            open_ledger(Path(tmp) / "ledger.db"),
            clock=lambda: CLOCK,
            random_bytes=random.Random(0).randbytes,  # fixed content salts
        )
        writer.use_txlog(log)
        actor = writer.ensure_actor(EnsureActor(tenant="acme", key="agent:bench@1", kind="agent"))
        lanes = [
            writer.create_lane(
                CreateLane(tenant="acme", session_id="s", run_id="r", name=f"l{i}", id=f"lane-{i}")
            )
            for i in range(LANES)
        ]
        heads = dict.fromkeys((lane.id for lane in lanes), 0)
        ids = itertools.count()
        bodies = []
        for i in range(requests):
            lane = lanes[i % LANES]
            events = [
                {
                    "schema_version": "1.0",
                    "id": f"01a24510-60bd-73ca-ba4f-{next(ids):012d}",
                    "lane_id": lane.id,
                    "subject_id": lane.id,
                    "event_type": "action.started",
                    "actor_id": actor.id,
                    "occurred_at": "2026-12-05T07:17:10.973947Z",
                    "payload": payload(i),
                    "extensions": {},
                }
                for _ in range(per_append)
            ]
            request = {"lane_id": lane.id, "expected_last_seq": heads[lane.id], "append_id": f"a-{i}"}
            bodies.append(encode({**request, "events": events}))
            heads[lane.id] += per_append
        gc.collect()
        gc.freeze()  # as the sequencer does once started (servicemain.tune_gc_after_start)
        gc.set_threshold(10_000, 10, 10)
        step0 = write = 0.0
        out = hashlib.sha256()
        for start in range(0, requests, batch):
            began = time.process_time()
            prepared = [
                prepare_append(body, tenant_token="acme", redactor=DEFAULT_REDACTOR)
                for body in bodies[start : start + batch]
            ]
            prepared_at = time.process_time()
            result = writer.apply_batch(prepared)
            write += time.process_time() - prepared_at
            step0 += prepared_at - began
            for receipt in result.receipts:
                out.update(encode(receipt))
            for record in result.committed:
                routing = (record.position, record.event_id, record.event_type, record.tenant)
                out.update(encode([*routing, record.session_id, record.run_id, record.lane_id]))
                out.update(record.body)
        for record_bytes in log.records:
            out.update(record_bytes)
        size = tree_store.tree_size(writer._db)
        out.update(tree_store.root(writer._db, size))
    events = requests * per_append
    return {
        "requests": requests,
        "events_per_append": per_append,
        "batch": batch,
        "step0_cpu_us_per_event": round(step0 / events * 1e6, 2),
        "writer_cpu_us_per_event": round(write / events * 1e6, 2),
        "output_sha256": out.hexdigest(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument(
        "--batch", type=int, default=500, help="requests per batch (the sequencer's batch_size)"
    )
    parser.add_argument("--events-per-append", type=int, default=1)
    args = parser.parse_args()
    result = run(args.requests, args.batch, args.events_per_append)
    print(
        f"{result['requests']} appends x {result['events_per_append']} event(s): step 0 "
        f"{result['step0_cpu_us_per_event']} µs CPU/event, ledger writer {result['writer_cpu_us_per_event']} "
        f"µs CPU/event; output sha256 {result['output_sha256'][:16]}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
