"""``up``: run the whole system locally."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path


def add_commands(commands: argparse._SubParsersAction) -> None:
    sub = commands.add_parser(
        "up",
        help="run the whole system locally",
        description="Start an embedded nats-server (or use --nats URL) and the laneledger "
        "services as child processes, print their URLs, and stop everything on Ctrl-C or "
        "SIGTERM. Restarting on the same --data continues the same ledger.",
    )
    sub.add_argument("--data", default=".laneledger", help="data directory (default ./.laneledger)")
    sub.add_argument("--nats", metavar="URL", help="use this nats-server instead of an embedded one")
    sub.add_argument("--nats-port", type=int, default=4222,
                     help="port of the embedded nats-server (0: let it choose)")
    sub.add_argument("--sequencer-port", type=int, default=8470,
                     help="sequencer /metrics port (0: pick a free one)")
    sub.set_defaults(run=cmd_up)


def cmd_up(args: argparse.Namespace) -> int:
    from laneledger.up import run_up

    return asyncio.run(run_up(
        Path(args.data), nats_url=args.nats, nats_port=args.nats_port,
        sequencer_port=args.sequencer_port,
    ))
