"""``canonicalize`` and ``digest``: RFC 8785 bytes and append digests of files."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from laneledger.cli.report import STDIN, display, json_type
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import append_digest
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.strictjson import decode_json


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "canonicalize",
        help="print the RFC 8785 canonical bytes of a JSON document",
        description="Write the RFC 8785 (JCS) canonical bytes of one JSON document to stdout: "
        "exactly those bytes, followed by a newline only when stdout is a terminal. "
        "Input must be I-JSON: UTF-8, no duplicate object keys, no NaN/Infinity.",
    )
    add_file(sub)
    sub.set_defaults(run=cmd_canonicalize)

    sub = commands.add_parser(
        "digest",
        help="print the append digest of a batch of proposed events",
        description="Print the lowercase hex SHA-256 of the RFC 8785 bytes of a JSON array of "
        "proposed events, exactly as sent in an append request, and a newline.",
    )
    add_file(sub)
    sub.set_defaults(run=cmd_digest)


def cmd_canonicalize(args: argparse.Namespace) -> int:
    out = canonicalize(read_json(args.file))
    sys.stdout.buffer.write(out)
    if sys.stdout.isatty():
        sys.stdout.buffer.write(b"\n")
    sys.stdout.buffer.flush()
    return 0


def cmd_digest(args: argparse.Namespace) -> int:
    events = read_json(args.file)
    if not isinstance(events, list):
        raise InvalidRequest(f"expected a JSON array of proposed events, found {json_type(events)}")
    print(append_digest(events))
    return 0


def add_file(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "file", metavar="FILE", nargs="?", default=STDIN, help="input file; '-' or absent: stdin"
    )


def read_json(file: str) -> Any:
    if file == STDIN:
        data = sys.stdin.buffer.read()
    else:
        with open(file, "rb") as stream:
            data = stream.read()
    return decode_json(data, file=display(file))
