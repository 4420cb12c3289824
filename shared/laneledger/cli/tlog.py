"""``tlog``: the transparency log's keys and checkpoints (spec/tlog.md).

``keygen`` makes the log's signing key (a file for the sequencer's
``--tlog-key-file``) and prints its public note key, which auditors and
witnesses are given; ``note-key`` prints it again from the key file;
``sign`` asks the active sequencer for a checkpoint of the tree now.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

import msgspec

from laneledger.cli.natsoption import add_nats_option
from laneledger.contract.errors import InvalidRequest, LedgerUnavailable, error_from_wire
from laneledger.contract.subjects import Subjects

if TYPE_CHECKING:
    from laneledger.sdk.client import LedgerClient

SIGN_TIMEOUT_S = 10.0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tlog = commands.add_parser(
        "tlog",
        help="the transparency log: signing keys and checkpoints (spec/tlog.md)",
        description="The ledger's Merkle tree is signed as C2SP checkpoints by the active sequencer "
        "(--tlog-key-file). These commands make and show the key and ask for a checkpoint.",
    )
    sub = tlog.add_subparsers(title="tlog commands", metavar="COMMAND", required=True)

    keygen = sub.add_parser(
        "keygen",
        help="make the log's Ed25519 signing key; print its public note key",
        description="Write a new signing key to FILE (mode 0600; an existing file is never "
        "overwritten) and print the public note key (<origin>+<key id>+<base64>). The origin "
        "names the log in every checkpoint, e.g. ledger.example.com/acme: no spaces, no '+'.",
    )
    keygen.add_argument("--origin", required=True, help="the log's name (or the witness's): the key's name")
    keygen.add_argument("--key-file", metavar="FILE", required=True, help="where to write the key")
    keygen.add_argument(
        "--witness",
        action="store_true",
        help="a witness's cosigning key (C2SP tlog-cosignature, key type 0x04) instead of a log's",
    )
    keygen.set_defaults(run=cmd_keygen)

    note_key = sub.add_parser(
        "note-key",
        help="print the public note key of a signing key file",
        description="Print the verifier key (<name>+<key id>+<base64>) of the key in FILE: a log's "
        "or a witness's.",
    )
    note_key.add_argument("--key-file", metavar="FILE", required=True)
    note_key.set_defaults(run=cmd_note_key)

    sign = sub.add_parser(
        "sign",
        help="ask the active sequencer for a checkpoint of the tree now; print it",
        description="Request a signed checkpoint of the ledger's tree as committed now (the last "
        "one when the tree has not grown since). Exit 2 when no sequencer signs checkpoints.",
    )
    add_nats_option(sign)
    sign.add_argument("--prefix", default="ledger", help="subject prefix (default ledger)")
    sign.set_defaults(run=cmd_sign)


def cmd_keygen(args: argparse.Namespace) -> int:
    from laneledger.tlog.cosignature import Cosigner
    from laneledger.tlog.note import Signer, valid_name

    if not valid_name(args.origin):
        raise InvalidRequest(
            f"an origin is a key name: non-empty, no spaces, no '+' (got {args.origin!r})",
            file="--origin",
        )
    signer = Cosigner.generate(args.origin) if args.witness else Signer.generate(args.origin)
    try:
        fd = os.open(args.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidRequest(
            "the key file exists: a signing key is never overwritten", path="key_file", file=args.key_file
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(signer.to_text() + "\n")
    print(signer.verifier().to_text())
    return 0


def cmd_note_key(args: argparse.Namespace) -> int:
    from laneledger.tlog.cosignature import Cosigner
    from laneledger.tlog.note import Signer, read_key_file

    text = read_key_file(args.key_file)
    try:
        key: Signer | Cosigner = Signer.from_text(text)
    except InvalidRequest:
        key = Cosigner.from_text(text)  # a witness's, or refused naming what is wrong
    print(key.verifier().to_text())
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    from laneledger.sdk.client import LedgerClient

    async def sign() -> str:
        async with await LedgerClient.connect(args.nats) as client:
            return await request_checkpoint(client, Subjects(args.prefix))

    sys.stdout.write(asyncio.run(sign()))
    return 0


async def request_checkpoint(client: LedgerClient, subjects: Subjects) -> str:
    """A checkpoint of the tree as committed now, from the active sequencer."""
    from nats.errors import NoRespondersError, TimeoutError

    from laneledger.contract.model import Reply, ReplyError

    try:
        msg = await client.nc.request(subjects.tlog_sign, b"", timeout=SIGN_TIMEOUT_S)
    except (NoRespondersError, TimeoutError):
        raise LedgerUnavailable(
            "no sequencer signs checkpoints here (none active, or none has --tlog-key-file)",
            subject=subjects.tlog_sign,
        ) from None
    reply = msgspec.json.decode(msg.data, type=Reply)
    if isinstance(reply, ReplyError):
        raise error_from_wire(**msgspec.structs.asdict(reply.error))
    return str(reply.result["checkpoint"])
