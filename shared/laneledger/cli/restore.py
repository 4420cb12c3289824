"""``restore``: rebuild a ledger database from its transaction log alone.

Every transaction the sequencer commits is on the replicated stream
LEDGER_TXLOG before the SQLite file has it (spec/replication.md). Applying
the log's records in order to an empty file gives back the ledger row for
row: events, receipts, actors, lanes, turns, actions, attempts. An existing
file is brought up to date from where it stopped. ``laneledger verify --db
FILE --nats URL`` then checks the result against LEDGER_EVENTS.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from laneledger.cli.natsoption import add_nats_option
from laneledger.contract.subjects import Subjects


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "restore",
        help="rebuild a ledger database from the transaction log stream (LEDGER_TXLOG)",
        description="Apply the transaction log's records to a ledger database: a missing or empty "
        "file becomes the whole ledger, an existing one is brought up to date from where it "
        "stopped. Connect as a NATS user that may read the stream (the sequencer's). Do not "
        "point it at the file a running sequencer writes. Exit 0 restored, 2 no such stream "
        "or NATS unreachable; a log that does not continue the file is named and nothing of "
        "that record is written.",
    )
    sub.add_argument("--db", metavar="FILE", required=True, help="the ledger SQLite database to write")
    add_nats_option(sub)
    sub.add_argument("--prefix", default="ledger", help="subject prefix (default ledger)")
    sub.set_defaults(run=cmd_restore)


def cmd_restore(args: argparse.Namespace) -> int:
    return asyncio.run(_restore(args))


async def _restore(args: argparse.Namespace) -> int:
    from laneledger.sdk.client import LedgerClient
    from laneledger.store import LedgerWriter, open_ledger
    from laneledger.store.txlogstream import JetStreamTxLog

    subjects = Subjects(args.prefix)
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    conn = open_ledger(args.db)
    try:
        writer = LedgerWriter(conn)
        start = writer.txlog_seq
        async with await LedgerClient.connect(args.nats) as client:
            loop = asyncio.get_running_loop()
            txlog = JetStreamTxLog(client.nc.jetstream(), subjects, loop, max_payload=client.nc.max_payload)
            writer.use_txlog(txlog, seed=False)  # restore reads the log, never appends to it
            # The writer waits on the loop for each read: it runs on a thread.
            applied = await asyncio.to_thread(writer.catch_up)
    finally:
        conn.close()
    print(
        f"applied {applied} transactions of {subjects.txlog_stream} "
        f"(records {start + 1}..{writer.txlog_seq}) to {args.db}: the ledger is at position "
        f"{writer.last_position}; check it with `laneledger verify --db {args.db} --nats {args.nats}`"
    )
    return 0
