"""``repair-stream``: the committed stream holds a message the ledger did not
write (spec/wire.md, "Foreign messages"); give it back the ledger's events.

LEDGER_EVENTS refuses purges, and only the sequencer deletes from it (an
erasure's copies, spec/erasure.md), so a position taken by a foreign message
cannot be freed in place. The repair keeps the database, the source of
truth, and replaces the stream:

1. the database must verify (``laneledger verify --db``): it is what the
   stream is rebuilt from;
2. the stream must differ from it in content (``data_mismatch``,
   ``stream_ahead``, ``sequence_mismatch``, ``count_mismatch``); a stream
   that equals the ledger, or merely trails it, is left alone, and so is
   one with an erasure's holes: a deleted position whose erased copy on
   LEDGER_ERASED is the stored event is no difference, and a copy that
   differs (``erased_copy_differs``) is not mended by a new stream. The
   comparison reads through a consumer, where a message lost on its way
   could look like a gap; so what it names is read again directly, one
   message by its sequence (``stream_difference``), and unless that read
   shows the difference too, nothing is deleted;
3. every message from the first foreign position on is saved to a JSONL
   file (sequence, subject, headers, data in base64), for whoever
   investigates how it got there;
4. the stream is deleted. The sequencer recreates it and republishes every
   committed event from the database (at once if it is running, otherwise
   when it starts), and commits again; the tail, metrics and checkpoint
   services rebuild what they derived from the stream when they next start.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
from pathlib import Path
from typing import Any

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import check_stream, stream_difference
from laneledger.cli.hmackey import read_hmac_key_file
from laneledger.cli.natsoption import add_nats_option
from laneledger.cli.report import refused
from laneledger.contract.errors import IntegrityError
from laneledger.contract.subjects import Subjects

# What check_stream names when the stream holds what the ledger did not write
# (as opposed to trailing it: stream_behind, stream_timeout, stream_stalled).
FOREIGN_KINDS = frozenset({"data_mismatch", "stream_ahead", "sequence_mismatch", "count_mismatch"})


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "repair-stream",
        help="replace a committed stream that holds messages the ledger did not write",
        description="When LEDGER_EVENTS holds a message the ledger did not write (the sequencer "
        "then commits nothing and is not ready; spec/wire.md, 'Foreign messages'): check the "
        "database, confirm the difference by reading the stream directly, save the stream's "
        "messages from the first foreign one on to a file, and delete the stream, which the "
        "sequencer recreates from the database. Connect as a NATS user that may manage the "
        "stream (the sequencer's). Exit 0 repaired (or nothing to repair), 1 refused (the "
        "database does not verify, the stream only trails it, or read directly it is intact), "
        "2 the stream could not be read whole (retry).",
    )
    sub.add_argument("--db", metavar="FILE", required=True, help="the ledger SQLite database")
    add_nats_option(sub)
    sub.add_argument("--prefix", default="ledger", help="subject prefix (default ledger)")
    sub.add_argument("--hmac-key-file", metavar="FILE", help="the chain HMAC key, if the chain is keyed")
    sub.add_argument(
        "--save",
        metavar="FILE",
        help="where the foreign messages are saved (default: beside the database, "
        "<db>.foreign-<first position>.jsonl)",
    )
    sub.add_argument(
        "--yes", action="store_true", help="delete the stream (without it: only say what would be done)"
    )
    sub.set_defaults(run=cmd_repair_stream)


def cmd_repair_stream(args: argparse.Namespace) -> int:
    Path(args.db).stat()  # a missing file is named before anything connects
    try:
        audit = audit_ledger(args.db, hmac_key=read_hmac_key_file(args.hmac_key_file))
    except IntegrityError as fault:
        return refused(f"repair-stream: the database does not verify, so nothing is rebuilt from it: {fault}")
    return asyncio.run(_repair(args, audit.events))


async def _repair(args: argparse.Namespace, events: int) -> int:
    from laneledger.sdk.client import LedgerClient

    stream = Subjects(args.prefix).events_stream
    async with await LedgerClient.connect(args.nats) as client:
        js = client.nc.jetstream()
        try:
            checked = await check_stream(js, args.db, stream, wait_s=5.0)
        except IntegrityError as fault:
            kind = str(fault.details.get("kind"))
            if kind == "erased_copy_differs":
                return refused(
                    f"repair-stream: {fault}; nothing deleted: the copy is on LEDGER_ERASED, "
                    f"which a new {stream} would not change"
                )
            if kind not in FOREIGN_KINDS:
                return refused(
                    f"repair-stream: {stream} does not hold foreign messages ({fault}); "
                    "nothing deleted: a stream that trails the ledger catches up by itself"
                )
            first = int(fault.details.get("position", 1))
            difference = await stream_difference(js, args.db, stream, first)
            if difference is None:
                return refused(
                    f"repair-stream: {stream} is intact at position {first}: read directly, it "
                    f"equals the ledger there, so the comparison's finding ({fault.message}) was a "
                    "read error, not a foreign message; nothing deleted: run `laneledger verify "
                    "--db --nats` again"
                )
            found = f"{fault.message}; read directly, {difference}"
        else:
            print(f"{stream} equals the ledger ({checked.messages} events): nothing to repair")
            return 0
        saved = Path(args.save) if args.save else Path(f"{args.db}.foreign-{first}.jsonl")
        info = await js.stream_info(stream)
        last = info.state.last_seq
        if not args.yes:
            print(
                f"{stream} differs from the ledger from position {first} ({found}); "
                f"repair-stream --yes saves its messages {first}..{last} to {saved} and deletes it"
            )
            return 1
        count = await _save(js, stream, first, last, saved)
        await js.delete_stream(stream)
    print(
        f"saved {count} messages of {stream} (positions {first}..{last}) to {saved} and deleted it; "
        f"the sequencer recreates it from the ledger's {events} events and commits again, and the "
        "tail, metrics and checkpoint services rebuild from it when they next start"
    )
    return 0


async def _save(js: Any, stream: str, first: int, last: int, path: Path) -> int:
    """The stream's messages ``first..last`` as JSONL; the count written."""
    count = 0
    with path.open("w") as out:
        for sequence in range(first, last + 1):
            try:
                msg = await js.get_msg(stream, sequence)
            except Exception:  # noqa: BLE001 - a deleted sequence: nothing to save there
                continue
            record = {
                "sequence": sequence,
                "subject": msg.subject,
                "headers": dict(msg.headers or {}),
                "data_base64": base64.b64encode(msg.data or b"").decode(),
            }
            out.write(json.dumps(record, sort_keys=True) + "\n")
            count += 1
    return count
