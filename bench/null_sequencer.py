"""A stand-in for the sequencer that does its NATS traffic and nothing else
(``bench/append.py``'s ceiling phase; not part of the product).

Per append request it does what the real sequencer does on the wire, with the
same code where there is code to share: one credit-fed pull
(``laneledger.runtime.pullfeed``), one ``+ACK``, one event published to LEDGER_EVENTS
with ``Nats-Expected-Last-Sequence`` and one ack awaited per batch (the real
``CommittedStreamMirror``), and one receipt message per producer inbox per
batch. It does *none* of the ledger's work: no validation, no redaction, no
canonical JSON, no hash chain, no SQLite, no idempotency or head checks. Its
receipts say committed, with the positions it counted and placeholder hashes.

What the producers reach against it is the most this architecture's Python
processes (SDK producers, a Python consumer, nats-server) can commit on this
machine, whatever the ledger itself costs.

``--no-mirror``: nothing is published to LEDGER_EVENTS, the rest as above:
the ceiling of a design in which one stream is both the place of commit and
the committed stream (issue 36), so that no event is published twice.

    python bench/null_sequencer.py --nats URL [--no-mirror]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import msgspec
import nats

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

from laneledger.contract.clock import system_clock  # noqa: E402
from laneledger.contract.model import AppendCommitted, encode  # noqa: E402
from laneledger.contract.subjects import REPLY_HEADER, Subjects  # noqa: E402
from laneledger.runtime.pullfeed import PullFeed  # noqa: E402
from laneledger.services.sequencer.mirror import CommittedStreamMirror  # noqa: E402
from laneledger.services.sequencer.streams import (  # noqa: E402
    SEQUENCER_CONSUMER,
    ensure_consumer,
    sequencer_consumer_config,
)
from laneledger.store import CommittedRecord  # noqa: E402

PLACEHOLDER_HASH = "0" * 64  # a valid Hash (64 hex digits) that hashes nothing


class _Event(msgspec.Struct):
    id: str


class _Request(msgspec.Struct):
    """The fields a receipt needs; the rest of the request is not looked at."""

    lane_id: str
    expected_last_seq: int
    append_id: str
    events: list[_Event]


_decode = msgspec.json.Decoder(_Request).decode


async def run(url: str, batch_size: int, mirrored: bool = True) -> None:
    nc = await nats.connect(url)
    subjects = Subjects()
    js = nc.jetstream()
    position = (await js.stream_info(subjects.events_stream)).state.last_seq

    async def stream_after(after: int, n: int) -> list[tuple[int, bytes]]:
        # The stand-in has no ledger: what the stream holds is its "ledger",
        # so the mirror's check of the stream's last message passes.
        msg = await js.get_msg(subjects.events_stream, after + 1)
        return [(after + 1, msg.data or b"")]

    mirror = CommittedStreamMirror(
        nc, subjects, subjects.events_stream, read_after=stream_after, ledger_last_position=lambda: position
    )
    await mirror.catch_up()
    # Without the mirror, a task that never ends stands in for it.
    mirror_task = asyncio.create_task(mirror.run() if mirrored else asyncio.Event().wait())
    await ensure_consumer(js, subjects.append_stream, sequencer_consumer_config())
    feed = PullFeed(nc, subjects.append_stream, SEQUENCER_CONSUMER, credits=2 * batch_size)
    await feed.start()
    print("null-sequencer ready", flush=True)
    while not mirror_task.done():
        msgs = await feed.next_batch(batch_size, 0.5)
        if not msgs:
            continue
        committed_at = system_clock()
        by_inbox: dict[str, list[AppendCommitted]] = {}
        records: list[CommittedRecord] = []
        for msg in msgs:
            request = _decode(msg.data)
            first = position + 1
            ids = [e.id for e in request.events]
            for event_id in ids:
                position += 1
                if mirrored:
                    records.append(
                        CommittedRecord(position, event_id, "x", "bench", "s", "r", request.lane_id, msg.data)
                    )
            seq = request.expected_last_seq
            receipt = AppendCommitted(
                append_id=request.append_id,
                lane_id=request.lane_id,
                digest=PLACEHOLDER_HASH,
                first_seq=seq + 1,
                last_seq=seq + len(ids),
                event_ids=ids,
                positions=list(range(first, position + 1)),
                entry_hashes=[PLACEHOLDER_HASH] * len(ids),
                committed_at=committed_at,
            )
            reply_to = (msg.headers or {}).get(REPLY_HEADER)
            if reply_to:
                by_inbox.setdefault(reply_to, []).append(receipt)
        for msg in msgs:
            await nc.publish(msg.reply, b"+ACK")
        for reply_to, receipts in by_inbox.items():
            await nc.publish(reply_to, encode(receipts))
        if mirrored:
            await mirror.submit(records)
    mirror_task.result()  # a mirror failure ends the run, loudly


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nats", required=True)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--no-mirror", action="store_true", help="publish nothing to LEDGER_EVENTS")
    args = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(run(args.nats, args.batch_size, mirrored=not args.no_mirror))


if __name__ == "__main__":
    main()
