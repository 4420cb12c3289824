"""``erase``: the operator erases the content of a tenant's session, or of
one run of it (spec/erasure.md), over NATS as a trusted client."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec

from laneledger.cli.natsoption import add_nats_option
from laneledger.compat.korg_append import actor_kind_of
from laneledger.contract.model import ErasurePage
from laneledger.sdk.client import LedgerClient


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "erase",
        help="erase the content of a tenant's session, or of one run of it",
        description="Erase the content (payloads, extensions) of the events of SESSION of TENANT "
        "committed so far, or of one run of it, keeping every hash and proof (spec/erasure.md): "
        "commits an ext.laneledger.erased event naming who asks (--actor-key) and why "
        "(--reason, kept forever: no personal data in it), then erases page by page. Prints the "
        "totals as JSON (an ErasurePage) and a summary on stderr. Run it again with the printed "
        "--erasure-id to finish an erasure a timeout interrupted.",
    )
    sub.add_argument("--session", dest="session_id", required=True, metavar="SESSION")
    sub.add_argument("--run", dest="run_id", metavar="RUN", help="erase this run of the session only")
    sub.add_argument("--tenant", required=True, help="whose session (ids are each tenant's own)")
    sub.add_argument("--reason", required=True, metavar="TEXT", help="why (1-1024 characters)")
    sub.add_argument(
        "--actor-key",
        required=True,
        metavar="KEY",
        help="who asks, e.g. human:dpo (an actor of the tenant, registered if new)",
    )
    sub.add_argument("--erasure-id", metavar="ID", help="continue this erasure (default: a new one)")
    sub.add_argument("--dry-run", action="store_true", help="count what would be erased; change nothing")
    add_nats_option(sub)
    sub.set_defaults(run=cmd_erase)


def cmd_erase(args: argparse.Namespace) -> int:
    async def run() -> ErasurePage:
        async with await LedgerClient.connect(args.nats) as client:
            actor = await client.ensure_actor(args.tenant, args.actor_key, actor_kind_of(args.actor_key))
            return await client.erase(
                args.session_id,
                actor_id=actor.id,
                reason=args.reason,
                run_id=args.run_id,
                erasure_id=args.erasure_id,
                dry_run=args.dry_run,
                tenant=args.tenant,
            )

    done = asyncio.run(run())
    sys.stdout.buffer.write(msgspec.json.encode(done) + b"\n")
    scope = f"session {args.session_id}" + (f" run {args.run_id}" if args.run_id else "")
    verb = "would erase" if done.dry_run else "erased"
    where = "" if done.erasure is None else f" (erasure event at position {done.erasure.position})"
    print(
        f"{verb} {done.erased} events of {scope} of tenant {args.tenant}{where}; "
        f"{done.already_erased} already erased, {done.unsealed} unsealed left as they are",
        file=sys.stderr,
    )
    return 0
