"""The ``laneledger`` command line.

Commands live in small modules, each adding its subcommands to the parser:
``files`` (canonicalize, digest), ``verify`` (files, databases, a tail
service), ``ledger`` (export, inspect), ``branching`` (rewind, fork),
``tail`` (follow live), ``imports`` (import claude-code), ``hooks`` (hook claude-code),
``run`` (up, demo), ``natsconf`` (nats-config), ``repair`` (repair-stream), ``restore``
(restore), ``otel`` (otel export), ``tlog`` (keygen, note-key, sign), ``bundles`` (prove),
``witness`` (witness), ``mcp`` (mcp), ``erasure`` (erase). Every command is a function
taking the parsed arguments and returning an exit status:

    0  success
    1  the check ran and failed (``verify`` found a bad record)
    2  bad usage, malformed input, or a service that cannot be reached: one
       line on stderr, ``laneledger: WHERE: PROBLEM``, never a traceback
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from laneledger import __version__
from laneledger.cli.report import PROG, display, fail, located
from laneledger.contract.errors import LedgerError, RequestError

# Each command and the module under laneledger.cli that defines it (its
# add_commands), in the order `laneledger --help` lists them. Only the module
# of the command being run is imported: together they bring nats-py, aiohttp
# and most of laneledger, which `laneledger verify FILE` does not need (pip
# keeps its commands the same way). tests/test_cli.py checks this table
# against what the modules define.
COMMANDS: dict[str, str] = {
    "canonicalize": "files",
    "digest": "files",
    "verify": "verify",
    "export": "ledger",
    "inspect": "ledger",
    "reconcile": "ledger",
    "rewind": "branching",
    "fork": "branching",
    "erase": "erasure",
    "import": "imports",
    "hook": "hooks",
    "tail": "tail",
    "mcp": "mcp",
    "up": "run",
    "demo": "run",
    "nats-config": "natsconf",
    "repair-stream": "repair",
    "restore": "restore",
    "otel": "otel",
    "tlog": "tlog",
    "prove": "bundles",
    "witness": "witness",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command``'s module alone."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="laneledger: an execution ledger for AI-agent harnesses.",
        epilog="Exit status: 0 ok, 1 verification or check failed, 2 usage or input error "
        "(or a service that cannot be reached).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"laneledger.cli.{name}").add_commands(commands)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, when its first word is one."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command_named(argv)).parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.run  # set by each add_commands
    try:
        return command(args)
    except RequestError as exc:
        return fail(located(exc, display(getattr(args, "file", None))))
    except LedgerError as exc:  # a service answered with an error, or none answered
        return fail(str(exc))
    except BrokenPipeError:
        # The reader went away (`| head`): not our error. Point stdout at devnull
        # so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        if exc.filename is None and exc.strerror is None:  # not a file's: a timeout, a socket's
            return fail(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        # missing file, a directory, no permission
        return fail(f"{exc.filename or display(getattr(args, 'file', None))}: {exc.strerror}")
    except KeyboardInterrupt:
        return 130
