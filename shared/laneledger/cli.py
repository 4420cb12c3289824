"""The ``laneledger`` command line.

Each subcommand is one ``_cmd_*`` function taking the parsed arguments and
returning an exit status; ``_build_parser`` wires them up. Exit statuses:

    0  success
    1  the check ran and failed (``verify`` found a bad record)
    2  bad usage or malformed input: one line on stderr,
       ``laneledger: FILE[:LINE]: [field PATH: ]PROBLEM``, never a traceback
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from laneledger import __version__
from laneledger.canonical import canonicalize
from laneledger.chain import ChainProfile, append_digest, verify_chain
from laneledger.errors import ChainFault, InvalidRequest, RequestError
from laneledger.korg import KORG_LEDGER_V1, decode_json, read_jsonl

PROG = "laneledger"
STDIN = "-"

# --format name -> (reader of a file into records, chain profile). A laneledger
# JSONL export format goes here once export exists.
VERIFY_FORMATS: dict[str, tuple[Callable[[str], Iterable[dict]], ChainProfile]] = {
    "korg-ledger-v1": (read_jsonl, KORG_LEDGER_V1),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        return args.run(args)
    except RequestError as exc:
        return _fail(_located(exc, _display(getattr(args, "file", None))))
    except BrokenPipeError:
        # The reader went away (`| head`): not our error. Point stdout at devnull
        # so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # missing file, a directory, no permission
        return _fail(f"{exc.filename or _display(getattr(args, 'file', None))}: {exc.strerror}")
    except KeyboardInterrupt:
        return 130


# -- commands -----------------------------------------------------------------


def _cmd_canonicalize(args: argparse.Namespace) -> int:
    out = canonicalize(_read_json(args.file))
    sys.stdout.buffer.write(out)
    if sys.stdout.isatty():
        sys.stdout.buffer.write(b"\n")
    sys.stdout.buffer.flush()
    return 0


def _cmd_digest(args: argparse.Namespace) -> int:
    events = _read_json(args.file)
    if not isinstance(events, list):
        raise InvalidRequest(f"expected a JSON array of proposed events, found {_json_type(events)}")
    print(append_digest(events))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    read, profile = VERIFY_FORMATS[args.format]
    try:
        tip = verify_chain(read(args.file), profile=profile, key=args.hmac_key)
    except ChainFault as fault:
        print(f"FAIL {fault.message}")
        return 1
    print(tip)
    return 0


# -- parser -------------------------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="laneledger: an execution ledger for AI-agent harnesses.",
        epilog="Exit status: 0 ok, 1 verification failed, 2 bad usage or malformed input.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    sub = commands.add_parser(
        "canonicalize",
        help="print the RFC 8785 canonical bytes of a JSON document",
        description="Write the RFC 8785 (JCS) canonical bytes of one JSON document to stdout: "
        "exactly those bytes, followed by a newline only when stdout is a terminal. "
        "Input must be I-JSON: UTF-8, no duplicate object keys, no NaN/Infinity.",
    )
    _add_file(sub)
    sub.set_defaults(run=_cmd_canonicalize)

    sub = commands.add_parser(
        "digest",
        help="print the append digest of a batch of proposed events",
        description="Print the lowercase hex SHA-256 of the RFC 8785 bytes of a JSON array of "
        "proposed events, exactly as sent in an append request, and a newline.",
    )
    _add_file(sub)
    sub.set_defaults(run=_cmd_digest)

    sub = commands.add_parser(
        "verify",
        help="verify a hash-chained ledger file",
        description="Verify a hash chain from its first record. Intact: print the tip entry_hash "
        "(64 zeros for an empty file) and exit 0. Broken: print "
        "'FAIL seq N: KIND (FIELD expected X, found Y)' for the first bad record, KIND one of "
        "not_chained, broken_link, content_tampered, and exit 1. A malformed line met before "
        "any fault exits 2.",
    )
    sub.add_argument("--format", required=True, choices=sorted(VERIFY_FORMATS), help="the file's chain format")
    sub.add_argument(
        "--hmac-key",
        metavar="KEY",
        type=_hmac_key,
        help="verify HMAC-SHA256 entry hashes under KEY (UTF-8) instead of plain SHA-256",
    )
    sub.add_argument("file", metavar="FILE", help="a JSON-lines ledger file")
    sub.set_defaults(run=_cmd_verify)

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
    sub.set_defaults(run=_cmd_up)
    return parser


def _cmd_up(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from .up import run_up

    return asyncio.run(run_up(
        Path(args.data), nats_url=args.nats, nats_port=args.nats_port,
        sequencer_port=args.sequencer_port,
    ))


def _add_file(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("file", metavar="FILE", nargs="?", default=STDIN, help="input file; '-' or absent: stdin")


def _hmac_key(text: str) -> bytes:
    if not text:
        raise argparse.ArgumentTypeError("an empty key is not a key")
    return text.encode("utf-8")


# -- input and errors -----------------------------------------------------------


def _read_json(file: str) -> Any:
    if file == STDIN:
        data = sys.stdin.buffer.read()
    else:
        with open(file, "rb") as stream:
            data = stream.read()
    return decode_json(data, file=_display(file))


def _located(exc: RequestError, default_file: str) -> str:
    """``FILE[:LINE]: [field PATH: ]MESSAGE`` from an error's details; errors
    raised without a file (canonicalize, the digest) get the command's input."""
    where = str(exc.details.get("file") or default_file)
    if exc.details.get("line"):
        where += f":{exc.details['line']}"
    message = exc.message
    path = exc.details.get("path")
    if path and str(path) not in message:
        message = f"field {path}: {message}"
    return f"{where}: {message}"


def _fail(line: str) -> int:
    print(f"{PROG}: {line}", file=sys.stderr)
    return 2


def _display(file: str | None) -> str:
    return "<stdin>" if file in (None, STDIN) else str(file)


def _json_type(value: Any) -> str:
    names = {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


if __name__ == "__main__":
    sys.exit(main())
