"""``prove`` and ``verify --note-key``: proofs of inclusion for outsiders
(spec/tlog.md, "Offline bundles", "Session bundles").

``laneledger prove`` writes a C2SP tlog-proof for one event (``--position``)
or a session bundle (``--session``): from a ledger file and the log's signed
checkpoints on LEDGER_TLOG (``--db``), or as a tail service serves them
(``--url``), checked against the log's note key before it is written.
``laneledger verify BUNDLE --note-key KEY`` checks either with no connection
at all; ``laneledger verify --checkpoint OLD --checkpoint NEW --note-key KEY
--url TAIL`` checks that the newer tree extends the older one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from laneledger.cli.clienttoken import CLIENT_TOKEN_FILE_ENV, client_headers
from laneledger.cli.hmackey import add_hmac_key_file_option, read_hmac_key_file
from laneledger.cli.natsoption import add_nats_option
from laneledger.cli.report import fail, refused
from laneledger.contract.errors import IntegrityError, InvalidRequest
from laneledger.contract.subjects import Subjects
from laneledger.sdk.natsconnect import DEFAULT_NATS

if TYPE_CHECKING:
    from laneledger.tlog.cosignature import CosignatureVerifier
    from laneledger.tlog.note import Ed25519Verifier


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "prove",
        help="write a proof that events are in the ledger, checkable offline (spec/tlog.md)",
        description="Write a C2SP tlog-proof of one event (--position) or a session bundle of "
        "every event of a session (--session), each proved against a signed checkpoint. With "
        "--db: from the ledger file and the latest checkpoint on LEDGER_TLOG (a fresh one is "
        "asked for when it does not cover them yet; it must be of this file's tree). With "
        "--url: as the tail service serves it (a tenant's token proves its own events), "
        "checked against --note-key before it is written. Check the result anywhere with "
        "`laneledger verify FILE --note-key KEY`.",
    )
    source = sub.add_mutually_exclusive_group(required=True)
    source.add_argument("--db", metavar="FILE", help="the ledger SQLite database (read only)")
    source.add_argument("--url", metavar="URL", help="a tail service")
    what = sub.add_mutually_exclusive_group(required=True)
    what.add_argument("--position", type=int, help="the event's ledger position")
    what.add_argument("--session", metavar="SESSION_ID", help="every event of this session")
    sub.add_argument("--tenant", help="with --session: the session's tenant (needed when several have it)")
    sub.add_argument("-o", "--out", metavar="FILE", help="write here instead of standard output")
    sub.add_argument(
        "--note-key",
        metavar="KEY",
        help="the log's public note key: the proof is checked against it before it is written "
        "(required with --url)",
    )
    add_hmac_key_file_option(sub, "with --note-key: the ledger's HMAC key, for a keyed ledger's entry hashes")
    sub.add_argument(
        "--token-file",
        metavar="FILE",
        default=os.environ.get(CLIENT_TOKEN_FILE_ENV),
        help=f"with --url: the bearer token to read it with (env {CLIENT_TOKEN_FILE_ENV})",
    )
    add_nats_option(sub, default=None, help="with --db: the NATS server(s) of LEDGER_TLOG")
    sub.add_argument("--prefix", default="ledger", help="with --db: the subject prefix (default ledger)")
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
        "--checkpoint",
        metavar="FILE",
        action="append",
        default=[],
        help="twice, OLD then NEW, with --note-key and --url: check that the log signed both "
        "checkpoints and that NEW's tree extends OLD's (a consistency proof from the tail)",
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
    if args.url:
        if args.note_key is None:
            return fail("prove: --url needs --note-key: what a tail serves is checked before it is kept")
        if args.nats:
            return fail("prove: --nats is for --db")
        data = asyncio.run(_from_tail(args))
    else:
        data = _from_file(args)
    if args.note_key is not None:
        try:
            summary = check_bundle(
                data, _trust(args.note_key, [], None), read_hmac_key_file(args.hmac_key_file)
            )
        except IntegrityError as fault:
            return refused(f"prove: the proof does not verify: {_failure(fault)}")
        print(summary, file=sys.stderr)
    if args.out:
        Path(args.out).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


def _from_file(args: argparse.Namespace) -> bytes:
    from laneledger.store import open_ledger

    conn = open_ledger(args.db, readonly=True)
    try:
        needed, make = _what_to_prove(conn, args)
        checkpoint = asyncio.run(
            _checkpoint_covering(args.nats or DEFAULT_NATS, Subjects(args.prefix), needed)
        )
        return make(checkpoint)
    finally:
        conn.close()


async def _from_tail(args: argparse.Namespace) -> bytes:
    from laneledger.tlog.client import LogClient

    async with LogClient(args.url, headers=client_headers(args.token_file)) as tail:
        if args.position is not None:
            return (await tail.inclusion_bundle(args.position)).encode()
        return await tail.session_bundle(args.session, tenant=args.tenant)


def _what_to_prove(conn: sqlite3.Connection, args: argparse.Namespace) -> tuple[int, Callable[[str], bytes]]:
    """The last position the proof needs, and how to make it from a checkpoint."""
    from laneledger.tlog.bundle import make_bundle
    from laneledger.tlog.sessionbundle import session_bundle_chunks

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
    return last, lambda cp: b"".join(session_bundle_chunks(lambda: conn, chosen, session, cp))


async def _checkpoint_covering(nats_url: str, subjects: Subjects, position: int) -> str:
    """The latest checkpoint on LEDGER_TLOG if its tree holds ``position``,
    else a fresh one from the active sequencer."""
    from nats.js.errors import NotFoundError

    from laneledger.cli.tlog import request_checkpoint
    from laneledger.sdk.client import LedgerClient
    from laneledger.tlog.checkpoint import TreeHead

    async with await LedgerClient.connect(nats_url) as client:
        try:
            msg = await client.nc.jetstream().get_last_msg(subjects.tlog_stream, subjects.tlog_checkpoint)
            note = (msg.data or b"").decode()
            if TreeHead.of_note(note).size >= position:
                return note
        except NotFoundError:
            pass
        note = await request_checkpoint(client, subjects)
    if TreeHead.of_note(note).size < position:
        raise InvalidRequest("no signed checkpoint covers the position yet", path="position", found=position)
    return note


@dataclass(frozen=True)
class _Trust:
    log: Ed25519Verifier
    witnesses: list[CosignatureVerifier]
    quorum: int


def _trust(note_key: str, witness_keys: list[str], quorum: int | None) -> _Trust:
    """The log's key and the witnesses' from the command line (``InvalidRequest`` for a bad one)."""
    from laneledger.tlog.cosignature import CosignatureVerifier
    from laneledger.tlog.note import Ed25519Verifier

    witnesses = [CosignatureVerifier.from_text(text) for text in witness_keys]
    needed = len(witnesses) if quorum is None else quorum
    if not 0 <= needed <= len(witnesses):
        raise InvalidRequest(
            f"--quorum must be 0..{len(witnesses)} (the --witness keys given)", path="quorum"
        )
    return _Trust(Ed25519Verifier.from_text(note_key), witnesses, needed)


def verify_bundle_file(args: argparse.Namespace, hmac_key: bytes | None) -> int:
    """``verify FILE --note-key KEY``: exit 0 intact, 1 a proof that fails."""
    trust = _trust(args.note_key, args.witness, args.quorum)
    try:
        print(check_bundle(Path(args.file).read_bytes(), trust, hmac_key))
    except IntegrityError as fault:
        print(f"FAIL {_failure(fault)}")
        return 1
    return 0


def check_bundle(data: bytes, trust: _Trust, hmac_key: bytes | None) -> str:
    """Check a tlog-proof or a session bundle (told by its first line); the
    summary line, or the first failure raised (``IntegrityError`` with
    ``details.position``)."""
    from laneledger.tlog.bundle import HEADER, Bundle, verify_bundle
    from laneledger.tlog.sessionbundle import verify_session_bundle

    log, witnesses, quorum = trust.log, trust.witnesses, trust.quorum
    if data.startswith(HEADER.encode() + b"\n"):
        bundle = Bundle.parse(data.decode("utf-8"))
        try:
            one = verify_bundle(
                bundle, log, origin=log.name, hmac_key=hmac_key, witnesses=witnesses, quorum=quorum
            )
        except IntegrityError as fault:
            fault.details.setdefault("position", bundle.index + 1)
            raise
        return (
            f"intact: position {bundle.index + 1} is in {log.name}'s tree of {one.checkpoint.size}"
            + _cosigned(one.witnesses)
        )
    many = verify_session_bundle(
        data, log, origin=log.name, hmac_key=hmac_key, witnesses=witnesses, quorum=quorum
    )
    return f"intact: {many.events} events, each in {log.name}'s tree of {many.checkpoint_size}" + _cosigned(
        many.witnesses
    )


def verify_checkpoints(args: argparse.Namespace) -> int:
    """``verify --checkpoint OLD --checkpoint NEW --note-key KEY --url TAIL``:
    exit 0 when the log signed both and the newer tree extends the older."""
    from laneledger.tlog.checkpoint import TreeHead, verify_extension
    from laneledger.tlog.client import LogClient

    if len(args.checkpoint) != 2 or args.note_key is None or not args.url:
        return fail("verify: --checkpoint OLD --checkpoint NEW needs --note-key and --url (the tail to ask)")
    trust = _trust(args.note_key, args.witness, args.quorum)
    old_signed, new_signed = (Path(path).read_text(encoding="utf-8") for path in args.checkpoint)
    old_size, new_size = (TreeHead.of_note(text).size for text in (old_signed, new_signed))

    async def fetch() -> list[bytes]:
        if not 0 < old_size < new_size:
            return []  # nothing to ask: equal trees compare roots, and a smaller NEW fails
        async with LogClient(args.url, headers=client_headers(args.token_file)) as tail:
            return await tail.consistency_proof(old_size, new_size)

    try:
        old, new, cosigned = verify_extension(
            old_signed,
            new_signed,
            asyncio.run(fetch()),
            trust.log,
            origin=trust.log.name,
            witnesses=trust.witnesses,
            quorum=trust.quorum,
        )
    except IntegrityError as fault:
        print(f"FAIL {fault.message}")
        return 1
    print(
        f"consistent: {trust.log.name}'s tree of {new.size} extends its tree of {old.size}"
        + _cosigned(cosigned)
    )
    return 0


def _failure(fault: IntegrityError) -> str:
    where = fault.details.get("position")
    return f"{'position ' + str(where) + ': ' if where else ''}{fault.message}"


def _cosigned(witnesses: tuple[str, ...]) -> str:
    return f"; cosigned by {', '.join(witnesses)}" if witnesses else ""
