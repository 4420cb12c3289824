"""``verify``: check a whole ledger — a database, an export file, or through a
running tail service (normative text: ``spec/verify.md``). Intact prints a
summary and exits 0; the first fault prints ``FAIL <where>: <kind> …`` and
exits 1; warnings (broken conventions) print ``WARN …`` and do not fail."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from laneledger.audit.export import read_export, verify_export
from laneledger.audit.ledger import LedgerAudit, audit_ledger
from laneledger.audit.stream import StreamCheck, check_stream
from laneledger.cli.bundles import add_verify_options, verify_bundle_file, verify_checkpoints
from laneledger.cli.clienttoken import CLIENT_TOKEN_FILE_ENV, client_headers
from laneledger.cli.hmackey import add_hmac_key_file_option, read_hmac_key_file
from laneledger.cli.natsoption import add_nats_option
from laneledger.cli.report import fail
from laneledger.compat.korg import read_journal, verify_journal
from laneledger.contract.errors import ChainFault, IntegrityError, InvalidRequest, LedgerUnavailable
from laneledger.contract.signing import Ed25519PublicKey, load_public_key
from laneledger.contract.subjects import Subjects

FILE_FORMATS = ("laneledger", "korg-ledger-v1")
SHOWN_WARNINGS = 20
STREAM_WAIT_ENV = "LANELEDGER_VERIFY_STREAM_WAIT_S"
DEFAULT_STREAM_WAIT_S = 5.0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "verify",
        help="verify a ledger: a database, an export file, or through a tail service",
        description="Verify a ledger from its first record (spec/verify.md). Sources: a JSONL "
        "file (FILE or --file; --format laneledger for a `laneledger export`: chains and "
        "positions; korg-ledger-v1 for a Korg journal, JSON lines or one JSON array: its chain, "
        "unique seq_ids (gaps allowed, as in Korg), its causal DAG and, with --public-key, every "
        "record's event_sig), a ledger database "
        "(--db, read-only, one snapshot, constant memory: chains, dense seqs, gap-free "
        "positions, receipts, lane heads, actors and their identity conventions, signatures, "
        "causation; add --nats to also check that LEDGER_EVENTS equals the database and that "
        "every referenced blob is stored with its bytes), or a tail service (--url). Intact: "
        "print a summary and exit 0. Broken: print 'FAIL position N ...: KIND ...' for the "
        "first fault and exit 1. Warnings ('WARN ...') do not fail unless --strict-actors. "
        "Malformed input or an unreachable service: exit 2.",
    )
    source = sub.add_mutually_exclusive_group(required=True)
    source.add_argument("file", metavar="FILE", nargs="?", help="a JSONL file")
    source.add_argument("--file", dest="file_option", metavar="FILE", help="a JSONL file")
    source.add_argument("--db", metavar="FILE", help="a ledger SQLite database")
    source.add_argument(
        "--url", metavar="URL", help="a tail service: it verifies the whole ledger from its read model"
    )
    sub.add_argument(
        "--token-file",
        metavar="FILE",
        default=os.environ.get(CLIENT_TOKEN_FILE_ENV),
        help="with --url: the bearer token to read it with (a tenant's token "
        f"verifies that tenant's lanes; env {CLIENT_TOKEN_FILE_ENV})",
    )
    sub.add_argument(
        "--format", choices=FILE_FORMATS, default="laneledger", help="format of FILE (default laneledger)"
    )
    key = sub.add_mutually_exclusive_group()
    key.add_argument(
        "--hmac-key",
        metavar="KEY",
        type=hmac_key,
        help="verify HMAC-SHA256 entry hashes under KEY (UTF-8) instead of plain SHA-256",
    )
    add_hmac_key_file_option(
        key, "read the HMAC key from FILE, as the sequencer does (surrounding whitespace stripped)"
    )
    sub.add_argument(
        "--public-key",
        metavar="HEX",
        type=korg_public_key,
        help="with --format korg-ledger-v1: the Ed25519 public key (64 hex digits) every "
        "record's event_sig must verify under; an unsigned record fails, as in Korg's verifier",
    )
    add_nats_option(
        sub,
        default=None,
        help="with --db: also compare LEDGER_EVENTS with the database and check "
        "every referenced blob in the blob bucket (URL, or several comma-separated)",
    )
    sub.add_argument(
        "--prefix",
        default="ledger",
        help="with --nats: the subject prefix, naming the stream and the blob bucket (default ledger)",
    )
    sub.add_argument(
        "--stream-wait-s",
        metavar="SECONDS",
        type=float,
        help="with --nats: how long a stream behind the database may take to catch "
        "up before it is a fault, not lag (a live ledger's stream trails SQLite "
        f"by a moment; env {STREAM_WAIT_ENV}, default {DEFAULT_STREAM_WAIT_S:g})",
    )
    sub.add_argument(
        "--strict-actors",
        action="store_true",
        help="with --db: an actor key breaking the identity conventions is a fault, not a warning",
    )
    sub.add_argument(
        "--json", action="store_true", help="print one JSON report instead of text (--db and export files)"
    )
    add_verify_options(sub)
    sub.set_defaults(run=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    args.file = args.file or args.file_option
    if (args.nats or args.strict_actors) and not args.db:
        return fail("verify: --nats and --strict-actors need --db")
    if args.public_key is not None and (args.format != "korg-ledger-v1" or not args.file):
        return fail("verify: --public-key is for a --format korg-ledger-v1 file")
    key = args.hmac_key if args.hmac_key is not None else read_hmac_key_file(args.hmac_key_file)
    try:
        stream_wait_s = stream_wait(args.stream_wait_s)
    except ValueError as exc:
        return fail(f"verify: {exc}")
    if args.checkpoint:
        return verify_checkpoints(args)
    if args.note_key is not None:
        if not args.file:
            return fail("verify: --note-key checks a bundle FILE")
        return verify_bundle_file(args, key)
    if args.witness or args.quorum is not None:
        return fail("verify: --witness and --quorum are for a bundle, with --note-key")
    try:
        if args.url:
            return verify_url(args.url, args.token_file)
        if args.db:
            report = verify_db(
                args.db, key, args.nats, Subjects(args.prefix), args.strict_actors, stream_wait_s
            )
        elif args.format == "korg-ledger-v1":
            print(verify_journal(read_journal(args.file), key=key, public_key=args.public_key))
            return 0
        else:
            audit = verify_export(read_export(args.file), hmac_key=key)
            report = {
                "intact": True,
                "events": audit.events,
                "lanes": audit.lanes,
                "last_position": audit.last_position,
            }
    except (ChainFault, IntegrityError) as fault:
        if args.json:
            print(json.dumps({"intact": False, "fault": fault.to_wire()}, default=str))
        else:
            print(f"FAIL {fault.message}")
        return 1
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print_report(report)
    return 0


def stream_wait(given: float | None) -> float:
    """``--stream-wait-s``, else its variable, else the default; >= 0."""
    source, value = "--stream-wait-s", given
    if value is None:
        source, text = STREAM_WAIT_ENV, os.environ.get(STREAM_WAIT_ENV)
        try:
            value = DEFAULT_STREAM_WAIT_S if text is None else float(text)
        except ValueError:
            raise ValueError(f"{source}={text!r}: not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"{source}={value!r}: must be a number of seconds >= 0")
    return value


def verify_db(
    db: str,
    key: bytes | None,
    nats_url: str | None,
    subjects: Subjects,
    strict_actors: bool,
    stream_wait_s: float = DEFAULT_STREAM_WAIT_S,
) -> dict[str, Any]:
    Path(db).stat()  # a missing file is named before anything connects
    if nats_url is None:
        return db_report(audit_ledger(db, hmac_key=key, strict_actors=strict_actors))
    return asyncio.run(_verify_db_with_nats(db, key, nats_url, subjects, strict_actors, stream_wait_s))


async def _verify_db_with_nats(
    db: str, key: bytes | None, nats_url: str, subjects: Subjects, strict_actors: bool, stream_wait_s: float
) -> dict[str, Any]:
    from laneledger.audit.blobs import audit_ledger_with_blobs, open_blob_store
    from laneledger.sdk.client import LedgerClient

    async with await LedgerClient.connect(nats_url) as client:
        js = client.nc.jetstream()
        store = await open_blob_store(js, subjects)
        audit = await audit_ledger_with_blobs(db, store, hmac_key=key, strict_actors=strict_actors)
        stream = subjects.events_stream
        # After the walk, on its own (later) snapshot: a live ledger has grown.
        checked = await check_stream(js, db, stream, wait_s=stream_wait_s)
    report = db_report(audit)
    report["stream"] = {
        "name": stream,
        "identical": True,
        "messages": checked.messages,
        "lag": checked.lag,
        "caught_up_s": round(checked.caught_up_s, 3),
    }
    if checked.lag:
        report["warnings"].insert(0, stream_lag_warning(stream, checked))
        report["warning_count"] += 1
    report["blob_bucket"] = store.shared  # and each tenant's <shared>_<tenant token>
    return report


def stream_lag_warning(stream: str, checked: StreamCheck) -> dict[str, Any]:
    """The stream trailed the database and caught up: lag, not a fault."""
    first = checked.messages - checked.lag + 1
    return {
        "kind": "stream_lag",
        "position": first,
        "actor_id": None,
        "message": f"{stream} was {checked.lag} events behind the database (positions "
        f"{first}..{checked.messages}) and caught up in {checked.caught_up_s:.2f}s",
    }


def db_report(audit: LedgerAudit) -> dict[str, Any]:
    return {
        "intact": True,
        "events": audit.events,
        "lanes": audit.lanes,
        "last_position": audit.last_position,
        "actors": audit.actors,
        "signed_events": audit.signed_events,
        "causal_links": audit.causal_links,
        "blob_refs": audit.blob_refs,
        "warning_count": audit.warning_count,
        "warnings": [w.to_wire() for w in audit.warnings],
        "tree_root": audit.tree_root,
        "erased_events": audit.erased_events,
        "erasures": audit.erasures,
    }


def print_report(report: dict[str, Any]) -> None:
    warnings = report.get("warnings") or []
    for warning in warnings[:SHOWN_WARNINGS]:
        print(f"WARN position {warning['position']}: {warning['kind']}: {warning['message']}")
    if report.get("warning_count", 0) > SHOWN_WARNINGS:
        print(f"WARN … and {report['warning_count'] - SHOWN_WARNINGS} more (--json lists {len(warnings)})")
    print(
        f"intact: {report['events']} events in {report['lanes']} lanes, "
        f"positions 1..{report['last_position']}"
    )
    checked = []
    if report.get("signed_events"):
        checked.append(f"{report['signed_events']} signatures valid")
    if report.get("causal_links"):
        checked.append(f"{report['causal_links']} causation links earlier and in-session")
    if report.get("erasures"):
        checked.append(
            f"{report['erased_events']} events erased by {report['erasures']} erasures, each erased event "
            "named by its erasure and covered by its scope (its content gone, its hash kept)"
        )
    if "stream" in report:
        checked.append(f"{report['blob_refs']} blob references stored and matching")
        checked.append(f"{report['stream']['name']} identical ({report['stream']['messages']} messages)")
    if checked:
        print("checked: " + "; ".join(checked))
    if report.get("tree_root"):
        print(f"tree: {report['last_position']} leaves, root {report['tree_root']}, recomputed and as stored")


def hmac_key(text: str) -> bytes:
    if not text:
        raise argparse.ArgumentTypeError("an empty key is not a key")
    return text.encode("utf-8")


def korg_public_key(text: str) -> Ed25519PublicKey:
    try:
        return load_public_key(text)
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def verify_url(url: str, token_file: str | None = None) -> int:
    import aiohttp  # here: verifying a file needs no HTTP client

    headers = client_headers(token_file)

    async def fetch() -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{url.rstrip('/')}/api/v1/verify", headers=headers) as response,
        ):
            report: dict[str, Any] = await response.json(content_type=None)  # the verify report
            return report

    try:
        report = asyncio.run(fetch())
    except aiohttp.ClientError as exc:
        raise LedgerUnavailable(f"cannot read {url}: {exc}") from exc
    error = report.get("error")
    if isinstance(error, dict):  # refused (no or a wrong token, …): not a verdict
        return fail(f"{url}: {error.get('code')}: {error.get('message')}")
    if report.get("intact") and report.get("scope") == "tenant":  # a tenant token's view
        print(f"intact: {report['events']} events in {report['lanes']} lanes of tenant {report['tenant']}")
        return 0
    if report.get("intact"):
        print(
            f"intact: {report['events']} events in {report['lanes']} lanes, "
            f"positions 1..{report['last_position']}"
        )
        return 0
    fault = report.get("fault") or {}
    print(f"FAIL {fault.get('message', report)}")
    return 1
