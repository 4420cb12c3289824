"""``up``: run the whole system locally."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from laneledger.up import DEFAULT_PORTS, SERVICES, run_up


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
    for name in SERVICES:
        sub.add_argument(f"--{name}-port", type=int, default=DEFAULT_PORTS[name],
                         help=f"{name} HTTP port (default {DEFAULT_PORTS[name]}; 0: pick a free one)")
    sub.add_argument("--free-ports", action="store_true",
                     help="let every service and the embedded nats-server pick a free port")
    sub.set_defaults(run=cmd_up)


def cmd_up(args: argparse.Namespace) -> int:
    ports = {name: 0 if args.free_ports else getattr(args, f"{name}_port") for name in SERVICES}
    return asyncio.run(run_up(
        Path(args.data), nats_url=args.nats, nats_port=0 if args.free_ports else args.nats_port,
        ports=ports,
    ))
