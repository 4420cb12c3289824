"""``witness``: cosign a ledger's checkpoints from its tail service, each
only once the tree is proved to extend the last one cosigned (spec/tlog.md,
"Witnessing a ledger").

Every round prints one line: ``cosigned ORIGIN at size N``, or ``REFUSED
ORIGIN at size N: WHY`` when the tail shows a tree that shrank or forked
from the one this witness vouched for. With ``--once`` a refusal is exit 1;
running on, the witness keeps refusing (its state never moves to such a
tree) and keeps polling. A tail that cannot be reached is a line on stderr
and another try next round (with ``--once``, exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from laneledger.cli.clienttoken import CLIENT_TOKEN_FILE_ENV, client_headers
from laneledger.cli.report import PROG, fail
from laneledger.contract.errors import IntegrityError, LedgerError

if TYPE_CHECKING:
    from laneledger.tlog.witness import Witness

DEFAULT_INTERVAL_S = 10.0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "witness",
        help="cosign a ledger's checkpoints once each is proved to extend the last (spec/tlog.md)",
        description="Fetch the newest signed checkpoint from a tail service, check the log's "
        "signature and a consistency proof from the last checkpoint this witness cosigned, "
        "cosign it (C2SP tlog-cosignature) and hand the cosignature to the tail, which serves "
        "it with the checkpoint. A tree that shrank or forked is refused, and the state file "
        "keeps the last tree cosigned across restarts. Each round prints 'cosigned ORIGIN at "
        "size N' or 'REFUSED ORIGIN at size N: WHY'.",
    )
    sub.add_argument("--url", required=True, help="the tail service's URL")
    sub.add_argument(
        "--log-key",
        metavar="KEY",
        required=True,
        help="the log's public note key (`laneledger tlog note-key`)",
    )
    sub.add_argument(
        "--key-file",
        metavar="FILE",
        required=True,
        help="this witness's cosigning key (`laneledger tlog keygen --witness`)",
    )
    sub.add_argument(
        "--state",
        metavar="FILE",
        required=True,
        help="where the last cosigned checkpoint is kept (written before a cosignature is handed out)",
    )
    sub.add_argument(
        "--interval-s",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"how often to look for a new checkpoint (default {DEFAULT_INTERVAL_S:g})",
    )
    sub.add_argument("--once", action="store_true", help="one round, then exit (1 when it refused)")
    sub.add_argument(
        "--token-file",
        metavar="FILE",
        default=os.environ.get(CLIENT_TOKEN_FILE_ENV),
        help="a bearer token for the tail, if it asks one of witnesses "
        f"(the checkpoint routes are public; env {CLIENT_TOKEN_FILE_ENV})",
    )
    sub.set_defaults(run=cmd_witness)


def cmd_witness(args: argparse.Namespace) -> int:
    from laneledger.tlog.cosignature import Cosigner
    from laneledger.tlog.note import Ed25519Verifier, read_key_file
    from laneledger.tlog.witness import Witness

    if not args.interval_s > 0:
        return fail("witness: --interval-s must be a positive number of seconds")
    log = Ed25519Verifier.from_text(args.log_key)
    witness = Witness(
        Cosigner.from_text(read_key_file(args.key_file)), log, origin=log.name, state=args.state
    )
    return asyncio.run(_run(witness, args))


async def _run(witness: Witness, args: argparse.Namespace) -> int:
    from laneledger.tlog.client import LogClient
    from laneledger.tlog.witnessing import witness_once

    async with LogClient(args.url, headers=client_headers(args.token_file)) as tail:
        while True:
            status = 0
            try:
                done = await witness_once(witness, tail)
                if done.refused is not None:
                    print(
                        f"REFUSED {witness.origin} at size {done.checkpoint.size}: {done.refused.message}",
                        flush=True,
                    )
                    status = 1
                elif done.cosigned:
                    print(f"cosigned {witness.origin} at size {done.checkpoint.size}", flush=True)
            except IntegrityError as refusal:  # not the log's checkpoint
                print(f"REFUSED {witness.origin}: {refusal.message}", flush=True)
                status = 1
            except LedgerError as exc:  # the tail away, or an answer that is not a checkpoint
                if args.once:
                    raise
                print(f"{PROG}: witness: {exc}", file=sys.stderr, flush=True)
            if args.once:
                return status
            await asyncio.sleep(args.interval_s)
