"""How the CLI reports problems: one line on stderr, exit status 2 (1 for a
command that ran and declined)."""

from __future__ import annotations

import sys
from typing import Any

from laneledger.contract.errors import RequestError

PROG = "laneledger"
STDIN = "-"


def fail(line: str) -> int:
    print(f"{PROG}: {line}", file=sys.stderr)
    return 2


def refused(line: str) -> int:
    """A command that ran and declined (exit status 1, as a failed check)."""
    print(f"{PROG}: {line}", file=sys.stderr)
    return 1


def display(file: str | None) -> str:
    return "<stdin>" if file in (None, STDIN) else str(file)


def located(exc: RequestError, default_file: str) -> str:
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


def json_type(value: Any) -> str:
    names = {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
