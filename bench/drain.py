"""The sequencer's own capacity, without producers competing for the CPU.

Pre-loads N append requests into LEDGER_APPEND (the sequencer not running),
then starts the sequencer in this process and times how long it takes until
every request is committed in SQLite and every event is on LEDGER_EVENTS.
Prints events/s and the sequencer's CPU per event (all threads, and the
ledger writer's part: the append algorithm and SQLite, on whichever thread
it runs), then a JSON line.

    .venv/bin/python bench/drain.py [--requests N] [--events-per-append E] [--signed] [--batch-size B]

``--signed``: the actor is registered with an ed25519 key and every event is
signed, so the sequencer verifies every signature (spec/object-model.md,
"Signed producers"); compare with the same run unsigned for the cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import nats
from prometheus_client import CollectorRegistry

from laneledger.contract.model import CreateLane, EnsureActor, encode
from laneledger.contract.signing import generate_private_key, public_key_hex
from laneledger.contract.subjects import Subjects
from laneledger.devtools.natsserver import NatsServer
from laneledger.runtime.servicemain import tune_gc_after_start
from laneledger.sdk.client import make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.services.sequencer.streams import append_stream_config, ensure_stream
from laneledger.store import LedgerWriter, open_ledger

LANES = 64


def payload(i: int) -> dict:
    return {
        "model": "claude-sonnet",
        "input_tokens": 1200 + i,
        "output_tokens": 300,
        "stop_reason": "tool_use",
        "temperature": 0.25,
        "tool": {"name": "Read", "args": {"file_path": f"/src/app/module_{i}.py"}},
    }


async def run(
    requests: int,
    per_append: int,
    signed: bool = False,
    batch_size: int = SequencerSettings.batch_size,
    seal: bool = True,
) -> dict:
    with (
        tempfile.TemporaryDirectory(prefix="laneledger-drain-") as tmp,
        NatsServer(Path(tmp) / "nats") as server,
    ):
        nc = await nats.connect(server.url)
        js, subjects = nc.jetstream(), Subjects()
        await ensure_stream(js, append_stream_config("LEDGER_APPEND", subjects, 1))
        writer = LedgerWriter(open_ledger(Path(tmp) / "ledger.db"), seal=seal)
        key = generate_private_key() if signed else None
        actor = writer.ensure_actor(
            EnsureActor(
                tenant="acme",
                key="agent:bench@1",
                kind="agent",
                public_key=public_key_hex(key) if key else None,
            )
        )
        lanes = [
            writer.create_lane(
                CreateLane(tenant="acme", session_id="s", run_id="r", name=f"lane-{i}", actor_id=actor.id)
            )
            for i in range(LANES)
        ]
        heads = {lane.id: 0 for lane in lanes}
        inbox = nc.new_inbox()  # one producer inbox, as the SDK has
        acks = []
        for i in range(requests):
            lane = lanes[i % LANES]
            events = [
                make_event(lane.id, "action.started", actor_id=actor.id, payload=payload(i), private_key=key)
                for _ in range(per_append)
            ]
            body = encode(
                {
                    "lane_id": lane.id,
                    "expected_last_seq": heads[lane.id],
                    "append_id": f"a-{i}",
                    "events": events,
                }
            )
            heads[lane.id] += per_append
            acks.append(
                await js.publish_async(
                    subjects.append("acme", lane.id), body, headers={"Ledger-Reply-To": inbox}
                )
            )
        await asyncio.gather(*acks)
        del acks  # not part of a deployed sequencer's heap (tune_gc_after_start freezes it)

        # The ledger writer's CPU, on whichever thread: apply_batch stages and
        # commits through these two (the sequencer calls them directly for a
        # large batch, the COMMIT on its writer thread).
        writer_cpu = [0.0]

        def timed(fn):
            def call(arg):
                started = time.thread_time()
                try:
                    return fn(arg)
                finally:
                    writer_cpu[0] += time.thread_time() - started

            return call

        writer.stage_batch = timed(writer.stage_batch)  # type: ignore[method-assign]
        writer.commit_staged = timed(writer.commit_staged)  # type: ignore[method-assign]
        settings = SequencerSettings(batch_size=batch_size)
        sequencer = Sequencer(nc, writer, SequencerMetrics(CollectorRegistry()), settings)
        total = requests * per_append
        wall, cpu = time.perf_counter(), time.process_time()
        await sequencer.start()
        tune_gc_after_start()  # as python -m laneledger.services.sequencer does
        # Polled: the sequencer has no hook to announce "all committed and
        # mirrored", and the bench must not add one to the code it measures.
        while True:
            if writer.last_position >= total and sequencer.mirror.published >= total:
                break
            await asyncio.sleep(0.005)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        await sequencer.stop()
        await nc.close()
    return {
        "requests": requests,
        "events_per_append": per_append,
        "signed": signed,
        "events_per_s": round(total / wall),
        "cpu_us_per_event": round(cpu / total * 1e6, 1),
        "writer_cpu_us_per_event": round(writer_cpu[0] / total * 1e6, 1),
        "seconds": round(wall, 2),
        "batch_size": batch_size,
        "sealed": seal,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--events-per-append", type=int, default=1)
    parser.add_argument(
        "--batch-size", type=int, default=SequencerSettings.batch_size, help="requests per batch"
    )
    parser.add_argument(
        "--signed", action="store_true", help="sign every event (an actor registered with an ed25519 key)"
    )
    parser.add_argument(
        "--seal",
        choices=("on", "off"),
        default="on",
        help="seal each event's content (the sequencer's --seal-content; spec/canonical.md §3)",
    )
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(
        run(args.requests, args.events_per_append, args.signed, args.batch_size, args.seal == "on")
    )
    print(
        f"drained {result['requests']} appends x {result['events_per_append']} event(s) in "
        f"{result['seconds']} s: {result['events_per_s']:,} events/s; sequencer CPU "
        f"{result['cpu_us_per_event']} µs/event ({result['writer_cpu_us_per_event']} µs "
        f"of it in the ledger writer: the append algorithm and SQLite)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
