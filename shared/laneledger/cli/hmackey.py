"""The ledger's HMAC key as the commands that recompute entry hashes read it
(``verify``, ``repair-stream``, ``prove``): from a file, as the sequencer and
the tail do, never from the command line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from laneledger.contract.errors import InvalidRequest

HMAC_KEY_FILE_ENV = "LANELEDGER_HMAC_KEY_FILE"  # the sequencer's and the tail's, too


def read_hmac_key_file(path: str | None) -> bytes | None:
    """The key in ``path`` (surrounding whitespace stripped); None without a file."""
    if not path:
        return None
    key = Path(path).read_bytes().strip()
    if not key:
        raise InvalidRequest("the HMAC key file is empty", file=path)
    return key


def add_hmac_key_file_option(
    parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, help: str
) -> None:
    """``--hmac-key-file FILE``, defaulting to ``$LANELEDGER_HMAC_KEY_FILE``."""
    parser.add_argument(
        "--hmac-key-file",
        metavar="FILE",
        default=os.environ.get(HMAC_KEY_FILE_ENV),
        help=f"{help} (env {HMAC_KEY_FILE_ENV})",
    )
