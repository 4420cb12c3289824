"""``verify``: check hash chains in a file, a ledger database, or through a
running tail service. Intact prints a summary and exits 0; the first bad
record prints ``FAIL <where>: <kind> (...)`` and exits 1."""

from __future__ import annotations

import argparse
import asyncio

import aiohttp

from laneledger.audit import audit_ledger, read_export, verify_export
from laneledger.chain import verify_chain
from laneledger.errors import ChainFault, IntegrityError, LedgerUnavailable
from laneledger.korg import KORG_LEDGER_V1, read_jsonl

FILE_FORMATS = ("laneledger", "korg-ledger-v1")


def add_commands(commands: argparse._SubParsersAction) -> None:
    sub = commands.add_parser(
        "verify",
        help="verify the hash chains of an export file or a ledger database",
        description="Verify hash chains from their first record. Sources: a JSONL file "
        "(FILE or --file; --format laneledger for a `laneledger export`, korg-ledger-v1 for a "
        "Korg chain) or a ledger database (--db, read-only: lane chains, dense seqs, gap-free "
        "positions, receipts, lane heads). Intact: print a summary (for korg-ledger-v1, the "
        "tip entry_hash) and exit 0. Broken: print 'FAIL <where>: KIND (FIELD expected X, "
        "found Y)' for the first bad record, KIND one of not_chained, broken_link, "
        "content_tampered (or an integrity kind for --db), and exit 1. Malformed input: exit 2.",
    )
    source = sub.add_mutually_exclusive_group(required=True)
    source.add_argument("file", metavar="FILE", nargs="?", help="a JSONL file")
    source.add_argument("--file", dest="file_option", metavar="FILE", help="a JSONL file")
    source.add_argument("--db", metavar="FILE", help="a ledger SQLite database")
    source.add_argument("--url", metavar="URL",
                        help="a tail service: it verifies the whole ledger from its read model")
    sub.add_argument("--format", choices=FILE_FORMATS, default="laneledger",
                     help="format of FILE (default laneledger)")
    sub.add_argument("--hmac-key", metavar="KEY", type=hmac_key,
                     help="verify HMAC-SHA256 entry hashes under KEY (UTF-8) instead of plain SHA-256")
    sub.set_defaults(run=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    args.file = args.file or args.file_option
    try:
        if args.url:
            return verify_url(args.url)
        if args.db:
            audit = audit_ledger(args.db, hmac_key=args.hmac_key)
            print(f"intact: {audit.events} events in {audit.lanes} lanes, "
                  f"positions 1..{audit.last_position}")
        elif args.format == "korg-ledger-v1":
            print(verify_chain(read_jsonl(args.file), profile=KORG_LEDGER_V1, key=args.hmac_key))
        else:
            audit = verify_export(read_export(args.file), hmac_key=args.hmac_key)
            print(f"intact: {audit.events} events in {audit.lanes} lanes, "
                  f"positions 1..{audit.last_position}")
    except (ChainFault, IntegrityError) as fault:
        print(f"FAIL {fault.message}")
        return 1
    return 0


def hmac_key(text: str) -> bytes:
    if not text:
        raise argparse.ArgumentTypeError("an empty key is not a key")
    return text.encode("utf-8")


def verify_url(url: str) -> int:
    async def fetch() -> dict:
        async with aiohttp.ClientSession() as http, \
                http.get(f"{url.rstrip('/')}/api/v1/verify") as response:
            return await response.json(content_type=None)

    try:
        report = asyncio.run(fetch())
    except aiohttp.ClientError as exc:
        raise LedgerUnavailable(f"cannot read {url}: {exc}") from exc
    if report.get("intact"):
        print(f"intact: {report['events']} events in {report['lanes']} lanes, "
              f"positions 1..{report['last_position']}")
        return 0
    fault = report.get("fault") or {}
    print(f"FAIL {fault.get('message', report)}")
    return 1
