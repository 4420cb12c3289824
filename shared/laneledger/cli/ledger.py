"""``export``, ``inspect`` and ``reconcile``: read a ledger as files and as people."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from decimal import Decimal
from typing import BinaryIO

import msgspec

from laneledger.audit.export import export_ledger
from laneledger.cli.natsoption import add_nats_option
from laneledger.cli.verify import hmac_key
from laneledger.compat.korg_export import export_session_from_db
from laneledger.contract.model import CheckpointInfo, Lane, RunView, SessionView
from laneledger.contract.vocabulary import TERMINAL_EVENT_TYPES, cost_amount
from laneledger.sdk.checkpoints import reconcile
from laneledger.sdk.client import LedgerClient

EXPORT_FORMATS = ("laneledger", "korg-ledger-v1")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "export",
        help="write a ledger's committed events as JSONL (verifiable with `verify`)",
        description="Write every committed event of a ledger database, in position order, one "
        "canonical JSON object per line with its chain fields (seq, position, prev_hash, "
        "entry_hash). `laneledger verify FILE` checks the result offline. With --format "
        "korg-ledger-v1, write one session (--session) as a Korg journal instead: flat "
        "AgentToolCall records with seq_id, triggered_by, rewind_of and a korg-ledger-v1 "
        "prev_hash/entry_hash chain (`laneledger verify --format korg-ledger-v1 FILE`).",
    )
    sub.add_argument("--db", metavar="FILE", required=True, help="a ledger SQLite database")
    sub.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    sub.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="laneledger",
        help="laneledger (default: the whole ledger) or korg-ledger-v1 (one session)",
    )
    sub.add_argument(
        "--session",
        dest="session_id",
        metavar="SESSION",
        help="the session to export (korg-ledger-v1 only, and required there)",
    )
    sub.add_argument(
        "--tenant",
        help="korg-ledger-v1: whose session (ids are each tenant's own): needed only when "
        "several have the id",
    )
    sub.add_argument(
        "--hmac-key",
        metavar="KEY",
        type=hmac_key,
        help="korg-ledger-v1: chain with HMAC-SHA256 under KEY (UTF-8)",
    )
    sub.set_defaults(run=cmd_export)

    sub = commands.add_parser(
        "inspect",
        help="summarize a session or a run",
        description="Read a session or a run from the sequencer over NATS and summarize it: "
        "lanes (sub-agent lanes under their parents), events by type, cost, terminal events, "
        "attempts without an outcome. --json prints the raw view.",
    )
    sub.add_argument("what", choices=("session", "run"))
    sub.add_argument("session_id", metavar="SESSION")
    sub.add_argument("run_id", metavar="RUN", nargs="?", help="the run (for `inspect run`)")
    add_nats_option(sub)
    sub.add_argument("--json", action="store_true", help="print the view as JSON")
    sub.add_argument(
        "--tenant",
        help="whose session or lane (ids are each tenant's own): needed only when several have the id",
    )
    sub.set_defaults(run=cmd_inspect)

    sub = commands.add_parser(
        "reconcile",
        help="list terminal checkpoints saved but never linked (a crash in between)",
        description="Ask the checkpoint service for terminal checkpoint revisions that no "
        "lane.framework.checkpoint.linked event links: the run's final state was saved but the "
        "harness died before recording it. Exit 1 when there are any (each needs its harness "
        "to link it or decide), 0 when there are none.",
    )
    sub.add_argument("--session", dest="session_id", metavar="SESSION")
    sub.add_argument("--run", dest="run_id", metavar="RUN")
    sub.add_argument("--key", metavar="KEY", help="one checkpoint key")
    add_nats_option(sub)
    sub.set_defaults(run=cmd_reconcile)


def cmd_export(args: argparse.Namespace) -> int:
    if args.format == "korg-ledger-v1":
        if not args.session_id:
            print("laneledger: export --format korg-ledger-v1 needs --session", file=sys.stderr)
            return 2

        def write(out: BinaryIO) -> int:
            return export_session_from_db(
                args.db, args.session_id, out, key=args.hmac_key, tenant=args.tenant
            )
    else:
        if args.session_id or args.hmac_key or args.tenant:
            print(
                "laneledger: --session, --tenant and --hmac-key are for --format korg-ledger-v1",
                file=sys.stderr,
            )
            return 2

        def write(out: BinaryIO) -> int:
            return export_ledger(args.db, out)

    if args.output:
        with open(args.output, "wb") as out:
            count = write(out)
    else:
        count = write(sys.stdout.buffer)
        sys.stdout.buffer.flush()
    print(f"exported {count} events", file=sys.stderr)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    if args.what == "run" and not args.run_id:
        print("laneledger: inspect run needs SESSION and RUN", file=sys.stderr)
        return 2
    view = asyncio.run(_load(args))
    if args.json:
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(view)) + b"\n")
        return 0
    print(render(view))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    async def unlinked() -> list[CheckpointInfo]:
        async with await LedgerClient.connect(args.nats) as client:
            return await reconcile(client, session_id=args.session_id, run_id=args.run_id, key=args.key)

    found = asyncio.run(unlinked())
    for info in found:
        print(
            f"unlinked: checkpoint {info.id} key {info.key} revision {info.revision} "
            f"session {info.session_id} run {info.run_id} saved {info.created_at}"
        )
    print(f"{len(found)} terminal checkpoint(s) saved but not linked", file=sys.stderr)
    return 1 if found else 0


async def _load(args: argparse.Namespace) -> SessionView | RunView:
    async with await LedgerClient.connect(args.nats) as client:
        if args.what == "session":
            return await client.load_session(args.session_id, tenant=args.tenant)
        return await client.load_run(args.session_id, args.run_id, tenant=args.tenant)


def render(view: SessionView | RunView) -> str:
    """A short human summary of a SessionView or RunView."""
    lines = [f"session {view.session_id}" + (f" run {view.run_id}" if hasattr(view, "run_id") else "")]
    children: dict[str | None, list[Lane]] = {}
    for lane in view.lanes:
        children.setdefault(lane.parent_lane_id, []).append(lane)

    def walk(parent: str | None, depth: int) -> None:
        for lane in children.get(parent, []):
            lines.append(
                f"{'  ' * depth}- lane {lane.name} [{lane.kind}] run {lane.run_id}: "
                f"{lane.last_seq} events ({lane.id})"
            )
            walk(lane.id, depth + 1)

    walk(None, 1)
    types = Counter(e.event_type for e in view.events)
    lines.append(f"{len(view.events)} events: " + ", ".join(f"{t} {n}" for t, n in types.most_common()))
    # An erased cost's amount is gone with its content (spec/erasure.md): it adds nothing.
    costs = [e for e in view.events if e.event_type == "cost.recorded" and e.erased is msgspec.UNSET]
    cost = sum((cost_amount(e.payload) for e in costs), Decimal(0))
    lines.append(f"cost: {cost}")
    terminal = {t for ts in TERMINAL_EVENT_TYPES.values() for t in ts}
    ends = [
        e
        for e in view.events
        if e.event_type in terminal and e.event_type.split(".")[0] in ("run", "session")
    ]
    for e in ends:
        lines.append(f"terminal: {e.event_type} ({e.subject_id}) at position {e.position}")
    requested = {e.subject_id for e in view.events if e.event_type == "attempt.requested"}
    resolved = {e.subject_id for e in view.events if e.event_type in ("attempt.completed", "attempt.failed")}
    open_attempts = sorted(requested - resolved)
    lines.append(
        f"attempts without an outcome: {len(open_attempts)}"
        + ("" if not open_attempts else " (" + ", ".join(open_attempts) + ")")
    )
    return "\n".join(lines)
