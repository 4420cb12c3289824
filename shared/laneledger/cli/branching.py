"""``rewind`` and ``fork``: branch a session's history without changing it."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec

from laneledger.cli.natsoption import add_nats_option
from laneledger.compat.korg_append import actor_kind_of  # as the ingest service registers Korg's agents
from laneledger.contract.model import Lane
from laneledger.history.branching import Rewound, fork_lane, rewind_session
from laneledger.sdk.client import LedgerClient


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "rewind",
        help="rewind a session to one of its events (records a session.rewound event)",
        description="Compute which events a rewind of SESSION to TARGET invalidates (Korg §3: "
        "causal descendants, inferences that consumed an invalidated tool result, sub-agents "
        "spawned by one, and the parent inferences that consumed a sub-agent's result) and "
        "record it as a session.rewound event by --actor. Nothing is deleted. Prints the "
        "payload as JSON.",
    )
    sub.add_argument("session_id", metavar="SESSION")
    sub.add_argument("target", metavar="TARGET", help="a ledger position or an event id")
    sub.add_argument(
        "--actor",
        required=True,
        metavar="KEY",
        help="who rewinds, e.g. human:dusk (created in the session's tenant if new)",
    )
    sub.add_argument(
        "--lane",
        dest="lane_id",
        metavar="LANE",
        help="record on this lane of the session (default: the target's lane)",
    )
    sub.add_argument("--reason", help="why, recorded in the event")
    sub.add_argument("--dry-run", action="store_true", help="compute and print, record nothing")
    sub.add_argument(
        "--tenant",
        help="whose session or lane (ids are each tenant's own): needed only when several have the id",
    )
    add_nats_option(sub)
    sub.set_defaults(run=cmd_rewind)

    sub = commands.add_parser(
        "fork",
        help="fork a lane at one of its events into a new lane",
        description="Create lane NAME in the lane's session that starts after the lane's event "
        "SEQ: the ledger records the origin (lane, seq, position, event id, entry hash) and the "
        "fork's first event is lane.created naming it. The fork references the origin's events "
        "up to SEQ; it does not copy them. Prints the new lane as JSON.",
    )
    sub.add_argument("lane_id", metavar="LANE")
    sub.add_argument("seq", metavar="SEQ", type=int)
    sub.add_argument("name", metavar="NAME")
    sub.add_argument("--actor", required=True, metavar="KEY", help="the fork's owner, e.g. agent:x@1")
    sub.add_argument(
        "--tenant",
        help="whose session or lane (ids are each tenant's own): needed only when several have the id",
    )
    add_nats_option(sub)
    sub.set_defaults(run=cmd_fork)


def cmd_rewind(args: argparse.Namespace) -> int:
    target: int | str = int(args.target) if args.target.isdigit() else args.target

    async def run() -> Rewound:
        async with await LedgerClient.connect(args.nats) as client:
            view = await client.load_session(args.session_id, tenant=args.tenant)
            actor = await client.ensure_actor(view.tenant, args.actor, actor_kind_of(args.actor))
            return await rewind_session(
                client,
                args.session_id,
                target,
                actor_id=actor.id,
                lane_id=args.lane_id,
                reason=args.reason,
                dry_run=args.dry_run,
                tenant=view.tenant,
            )

    done = asyncio.run(run())
    sys.stdout.buffer.write(msgspec.json.encode(done.payload) + b"\n")
    where = (
        "not recorded (dry run)"
        if done.receipt is None
        else f"recorded at position {done.receipt.positions[0]} on lane {done.lane_id}"
    )
    print(f"invalidated {done.payload['invalidated_count']} events; {where}", file=sys.stderr)
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    async def run() -> Lane:
        async with await LedgerClient.connect(args.nats) as client:
            origin = await client.get_lane(args.lane_id, tenant=args.tenant)
            actor = await client.ensure_actor(origin.tenant, args.actor, actor_kind_of(args.actor))
            return await fork_lane(
                client, args.lane_id, args.seq, args.name, actor_id=actor.id, tenant=origin.tenant
            )

    lane = asyncio.run(run())
    sys.stdout.buffer.write(msgspec.json.encode(lane) + b"\n")
    return 0
