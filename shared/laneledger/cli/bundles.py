"""``prove`` and ``verify --note-key``: proofs of inclusion for outsiders
(spec/tlog.md, "Offline bundles", "Session bundles").

``laneledger prove`` writes, from a ledger file and the log's signed
checkpoints on LEDGER_TLOG, a C2SP tlog-proof for one event (``--position``)
or a session bundle (``--session``). ``laneledger verify BUNDLE --note-key
KEY`` checks either with no connection at all.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from laneledger.cli.natsoption import add_nats_option
from laneledger.cli.report import fail
from laneledger.contract.errors import IntegrityError, InvalidRequest
from laneledger.contract.subjects import Subjects


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "prove",
        help="write a proof that events are in the ledger, checkable offline (spec/tlog.md)",
        description="Write a C2SP tlog-proof of one event (--position) or a session bundle of "
        "every event of a session (--session), each proved against the latest signed checkpoint "
        "on LEDGER_TLOG (a fresh one is asked for when it does not cover them yet). The "
        "checkpoint must be of this file's tree. Check the result with `laneledger verify FILE "
        "--note-key KEY`.",
    )
    sub.add_argument("--db", metavar="FILE", required=True, help="the ledger SQLite database (read only)")
    what = sub.add_mutually_exclusive_group(required=True)
    what.add_argument("--position", type=int, help="the event's ledger position")
    what.add_argument("--session", metavar="SESSION_ID", help="every event of this session")
    sub.add_argument("--tenant", help="with --session: the session's tenant (needed when several have it)")
    sub.add_argument("-o", "--out", metavar="FILE", help="write here instead of standard output")
    add_nats_option(sub)
    sub.add_argument("--prefix", default="ledger", help="subject prefix (default ledger)")
    sub.set_defaults(run=cmd_prove)


def add_verify_options(verify: argparse.ArgumentParser) -> None:
    """``verify FILE --note-key KEY``: FILE is a bundle (spec/tlog.md)."""
    verify.add_argument(
        "--note-key",
        metavar="KEY",
        help="FILE is a bundle (a .tlog-proof or a session bundle from `laneledger prove`): check it "
        "offline against the log's public note key (`laneledger tlog note-key`)",
    )
    verify.add_argument(
        "--witness",
        metavar="KEY",
        action="append",
        default=[],
        help="with --note-key: a witness's public cosignature key (repeat for several)",
    )
    verify.add_argument(
        "--quorum",
        metavar="K",
        type=int,
        default=None,
        help="with --note-key: how many of the --witness keys must have cosigned (default: all given)",
    )


def cmd_prove(args: argparse.Namespace) -> int:
    from laneledger.store import open_ledger

    conn = open_ledger(args.db, readonly=True)
    try:
        needed, make = _what_to_prove(conn, args)
        checkpoint = asyncio.run(_checkpoint_covering(args.nats, Subjects(args.prefix), needed))
        data = make(checkpoint)
    finally:
        conn.close()
    if args.out:
        Path(args.out).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


def _what_to_prove(conn: sqlite3.Connection, args: argparse.Namespace) -> tuple[int, Callable[[str], bytes]]:
    """The last position the proof needs, and how to make it from a checkpoint."""
    from laneledger.tlog.bundle import make_bundle
    from laneledger.tlog.sessionbundle import make_session_bundle

    if args.position is not None:
        position: int = args.position
        row = conn.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()
        if row is None:
            raise InvalidRequest("the ledger has no event at this position", path="position", found=position)
        event = bytes(row[0])
        return position, lambda cp: make_bundle(conn, position, cp, event=event).format().encode()
    session: str = args.session
    tenants = sorted(
        t for (t,) in conn.execute("SELECT DISTINCT tenant FROM events WHERE session_id = ?", (session,))
    )
    tenant: str | None = args.tenant
    if tenant is None and len(tenants) == 1:
        tenant = tenants[0]
    if tenant is None or tenant not in tenants:
        raise InvalidRequest(
            "name the session's tenant (--tenant)" if tenants else "the ledger has no such session",
            path="session_id",
            found=session,
            tenants=tenants,
        )
    (last,) = conn.execute(
        "SELECT max(position) FROM events WHERE session_id = ? AND tenant = ?", (session, tenant)
    ).fetchone()
    chosen = tenant
    return last, lambda cp: make_session_bundle(conn, chosen, session, cp).format()


async def _checkpoint_covering(nats_url: str, subjects: Subjects, position: int) -> str:
    """The latest checkpoint on LEDGER_TLOG if its tree holds ``position``,
    else a fresh one from the active sequencer."""
    from nats.js.errors import NotFoundError

    from laneledger.cli.tlog import request_checkpoint
    from laneledger.sdk.client import LedgerClient
    from laneledger.tlog.checkpoint import Checkpoint
    from laneledger.tlog.note import split_note

    async with await LedgerClient.connect(nats_url) as client:
        try:
            msg = await client.nc.jetstream().get_last_msg(subjects.tlog_stream, subjects.tlog_checkpoint)
            note = (msg.data or b"").decode()
            if Checkpoint.parse(split_note(note)[0]).size >= position:
                return note
        except NotFoundError:
            pass
        note = await request_checkpoint(client, subjects)
    if Checkpoint.parse(split_note(note)[0]).size < position:
        raise InvalidRequest("no signed checkpoint covers the position yet", path="position", found=position)
    return note


def verify_bundle_file(args: argparse.Namespace, hmac_key: bytes | None) -> int:
    """``verify FILE --note-key KEY``: exit 0 intact, 1 a proof that fails."""
    from laneledger.tlog.bundle import HEADER, Bundle, verify_bundle
    from laneledger.tlog.cosignature import CosignatureVerifier
    from laneledger.tlog.note import Verifier
    from laneledger.tlog.sessionbundle import verify_session_bundle

    log = Verifier.from_text(args.note_key)
    witnesses = [CosignatureVerifier.from_text(text) for text in args.witness]
    quorum = len(witnesses) if args.quorum is None else args.quorum
    if not 0 <= quorum <= len(witnesses):
        return fail(f"verify: --quorum must be 0..{len(witnesses)} (the --witness keys given)")
    data = Path(args.file).read_bytes()
    try:
        if data.startswith(HEADER.encode() + b"\n"):
            bundle = Bundle.parse(data.decode("utf-8"))
            try:
                one = verify_bundle(
                    bundle, log, origin=log.name, hmac_key=hmac_key, witnesses=witnesses, quorum=quorum
                )
            except IntegrityError as fault:
                fault.details.setdefault("position", bundle.index + 1)
                raise
            print(
                f"intact: position {bundle.index + 1} is in {log.name}'s tree of {one.checkpoint.size}"
                + _cosigned(one.witnesses)
            )
        else:
            many = verify_session_bundle(
                data, log, origin=log.name, hmac_key=hmac_key, witnesses=witnesses, quorum=quorum
            )
            print(
                f"intact: {many.events} events, each in {log.name}'s tree of {many.checkpoint_size}"
                + _cosigned(many.witnesses)
            )
    except IntegrityError as fault:
        where = fault.details.get("position")
        print(f"FAIL {'position ' + str(where) + ': ' if where else ''}{fault.message}")
        return 1
    return 0


def _cosigned(witnesses: tuple[str, ...]) -> str:
    return f"; cosigned by {', '.join(witnesses)}" if witnesses else ""
