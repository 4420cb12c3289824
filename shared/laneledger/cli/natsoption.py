"""``--nats``, as every command that talks to NATS takes it: one URL or
several comma-separated (a cluster's nodes, ``laneledger/sdk/natsconnect.py``),
checked before anything connects — a malformed one is a usage error (exit 2)
naming it."""

from __future__ import annotations

import argparse

from laneledger.sdk.natsconnect import DEFAULT_NATS, checked_nats


def nats_setting(text: str) -> str:
    try:
        return checked_nats(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_nats_option(
    parser: argparse.ArgumentParser, *, default: str | None = DEFAULT_NATS, help: str | None = None
) -> None:
    shown = f" (default {default})" if default else ""
    parser.add_argument(
        "--nats",
        metavar="URL[,URL…]",
        type=nats_setting,
        default=default,
        help=(help or "NATS server URL, or several comma-separated") + shown,
    )
