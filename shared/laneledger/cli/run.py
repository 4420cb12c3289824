"""``up``: run the whole system locally."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from laneledger.cli.natsoption import add_nats_option
from laneledger.devtools.demo import run_demo
from laneledger.devtools.up import DEFAULT_PORTS, SERVICES, run_up


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "up",
        help="run the whole system locally",
        description="Start an embedded nats-server (or use --nats URL) and the laneledger "
        "services as child processes, print their URLs, and stop everything on Ctrl-C or "
        "SIGTERM. Restarting on the same --data continues the same ledger.",
    )
    sub.add_argument("--data", default=".laneledger", help="data directory (default ./.laneledger)")
    add_nats_option(
        sub, default=None, help="use this nats-server (or these, comma-separated) instead of an embedded one"
    )
    sub.add_argument(
        "--nats-port", type=int, default=4222, help="port of the embedded nats-server (0: let it choose)"
    )
    for name in SERVICES:
        sub.add_argument(
            f"--{name}-port",
            type=int,
            default=DEFAULT_PORTS[name],
            help=f"{name} HTTP port (default {DEFAULT_PORTS[name]}; 0: pick a free one)",
        )
    sub.add_argument(
        "--free-ports",
        action="store_true",
        help="let every service and the embedded nats-server pick a free port",
    )
    sub.add_argument(
        "--demo",
        action="store_true",
        help="once everything is up, run the demo harness; keep running after it",
    )
    sub.add_argument(
        "--standby",
        action="store_true",
        help="also run a standby sequencer on its own file (DATA/standby), which takes over "
        "when the first one stops",
    )
    add_demo_options(sub)
    sub.set_defaults(run=cmd_up)

    sub = commands.add_parser(
        "demo",
        help="run a simulated multi-agent harness against a running laneledger",
        description="Run simulated agents, each its own OS process: main agents spawning "
        "sub-agents on their own lanes, model calls with tokens and costs, tool calls with "
        "retries and failures, a human-in-the-loop pause and its answer, a checkpoint linked "
        "with run completion. Shows progress, then a summary read back from the services: "
        "events committed, chain verification, cost totals. Exit 1 if the chain does not verify.",
    )
    add_nats_option(sub)
    sub.add_argument("--tail", default=f"http://127.0.0.1:{DEFAULT_PORTS['tail']}", help="tail service URL")
    sub.add_argument(
        "--metrics", default=f"http://127.0.0.1:{DEFAULT_PORTS['metrics']}", help="metrics service URL"
    )
    add_demo_options(sub)
    sub.set_defaults(run=cmd_demo)


def add_demo_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--agents", type=int, default=3, help="agent processes (default 3)")
    sub.add_argument("--turns", type=int, default=4, help="turns per agent (default 4)")
    sub.add_argument("--pace", type=float, default=0.3, help="seconds a model call takes (default 0.3)")


def cmd_up(args: argparse.Namespace) -> int:
    ports = {name: 0 if args.free_ports else getattr(args, f"{name}_port") for name in SERVICES}

    async def demo(nats_url: str, urls: dict[str, str]) -> None:
        await run_demo(
            nats_url, urls["tail"], urls["metrics"], agents=args.agents, turns=args.turns, pace=args.pace
        )
        print("\nthe demo is done; laneledger keeps running (Ctrl-C stops it)", flush=True)
        await asyncio.Event().wait()

    return asyncio.run(
        run_up(
            Path(args.data),
            nats_url=args.nats,
            nats_port=0 if args.free_ports else args.nats_port,
            ports=ports,
            standby=args.standby,
            after_start=demo if args.demo else None,
        )
    )


def cmd_demo(args: argparse.Namespace) -> int:
    return asyncio.run(
        run_demo(
            args.nats,
            args.tail.rstrip("/"),
            args.metrics.rstrip("/"),
            agents=args.agents,
            turns=args.turns,
            pace=args.pace,
        )
    )
