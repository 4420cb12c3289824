"""`python -m laneledger.services.tail` (also `laneledger-tail`): the live tail and HTTP API.

Follows the committed stream into its own SQLite read model under ``--data``
and serves SSE, history, blobs, verification, Korg's reads and a console
(spec/tail.md); Korg's writes are the ingest service's. Every option also
reads an environment variable, so a container needs no arguments. On SIGTERM or SIGINT it ends open tails,
stops following, and flushes and closes its NATS connection.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.subjects import Subjects
from laneledger.runtime.access import access_settings, policy_of
from laneledger.runtime.config import (
    Setting,
    common_settings,
    parse_settings,
    positive_float,
    positive_int,
)
from laneledger.runtime.follow import StreamIdentity, rebuild_if_replaced
from laneledger.runtime.servicemain import (
    check_sdk_environment,
    close_nats,
    run_main,
    stop_event,
    until_stopped,
)
from laneledger.sdk.natsconnect import connect_nats
from laneledger.sqlite import remove_database
from laneledger.tlog.cosignature import CosignatureVerifier

from .limits import LimitSettings
from .service import TailService, TailSettings

log = logging.getLogger("laneledger.tail")


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def witness_key(text: str) -> CosignatureVerifier:
    try:
        return CosignatureVerifier.from_text(text)
    except InvalidRequest as exc:
        raise ValueError(exc.message) from None


SETTINGS = [
    *common_settings("tail", 8471),
    Setting("--data", "TAIL_DATA", ".laneledger/tail", help="directory for the read model (tail.db)"),
    Setting(
        "--stream",
        "EVENTS_STREAM",
        None,
        help="the committed stream (default: the prefix's, LEDGER_EVENTS for 'ledger')",
    ),
    Setting(
        "--heartbeat-s",
        "TAIL_HEARTBEAT_S",
        15.0,
        positive_float,
        help="seconds between keepalive comments on an idle SSE connection",
    ),
    Setting(
        "--ready-max-lag",
        "TAIL_READY_MAX_LAG",
        1000,
        non_negative_int,
        help="/readyz is 503 while the read model is further behind the stream (events)",
    ),
    Setting(
        "--ring-size",
        "TAIL_RING_SIZE",
        4096,
        non_negative_int,
        help="recent events held in memory for live subscribers (0: none)",
    ),
    Setting(
        "--hmac-key-file",
        "HMAC_KEY_FILE",
        None,
        help="file holding the chain's HMAC key, to verify a keyed ledger",
    ),
    Setting(
        "--korg-tenant",
        "KORG_TENANT",
        "korg",
        help="tenant whose journal and blobs the Korg read routes serve",
    ),
    *access_settings(),
    Setting(
        "--max-tails-per-token",
        "TAIL_MAX_TAILS_PER_TOKEN",
        LimitSettings.tails_per_token,
        positive_int,
        help="open live tails (SSE) per token at once; more are 429 (a tenant's tokens share one count)",
    ),
    Setting(
        "--max-reads-per-token",
        "TAIL_MAX_READS_PER_TOKEN",
        LimitSettings.reads_per_token,
        positive_int,
        help="session proofs, verifications and history pages per token at once; more are 429",
    ),
    Setting(
        "--read-memory-mib",
        "TAIL_READ_MEMORY_MIB",
        LimitSettings.read_memory_bytes >> 20,
        positive_int,
        help="MiB of event pages held for all readers at once (a quarter per token); "
        "beyond it readers wait, a history page 5 s at most, then 429",
    ),
    Setting(
        "--tlog-witness-key",
        "TLOG_WITNESS_KEYS",
        (),
        witness_key,
        help="a witness's public cosignature key, name+keyid+base64, whose cosignatures of the "
        "checkpoints the tail keeps and serves (repeat for several; the variable: separated by spaces)",
        repeated=True,
    ),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = parse_settings("laneledger-tail", __doc__, SETTINGS, argv)
    args.stream = args.stream or Subjects(args.prefix).events_stream
    check_sdk_environment("laneledger-tail")  # it reads structure and Korg blobs through the SDK
    return args


def settings_of(args: argparse.Namespace) -> TailSettings:
    key = Path(args.hmac_key_file).read_bytes().strip() if args.hmac_key_file else None
    return TailSettings(
        data_dir=Path(args.data),
        subjects=Subjects(args.prefix),
        events_stream=args.stream,
        heartbeat_s=args.heartbeat_s,
        ready_max_lag=args.ready_max_lag,
        ring_size=args.ring_size,
        hmac_key=key,
        korg_tenant=args.korg_tenant,
        access=policy_of("laneledger-tail", args, args.http_host),
        tlog_witnesses=args.tlog_witness_key,
        limits=LimitSettings(args.max_tails_per_token, args.max_reads_per_token, args.read_memory_mib << 20),
    )


async def run(args: argparse.Namespace) -> None:
    settings = settings_of(args)
    nc = await connect_nats(args.nats, name="laneledger-tail")
    data = Path(settings.data_dir)
    # A committed stream recreated by `laneledger repair-stream`: the read
    # model is rebuilt from it (follow.rebuild_if_replaced).
    await rebuild_if_replaced(
        nc,
        settings.events_stream,
        StreamIdentity(data / "stream-identity"),
        lambda: remove_database(data / "tail.db"),
        what="the read model",
    )
    service = TailService(nc, settings)
    stop = stop_event()
    try:
        port = await service.start(args.http_host, args.http_port)
        print(
            f"laneledger-tail ready http=http://{args.http_host}:{port} position={service.feed.applied}",
            flush=True,
        )
        await until_stopped(stop, service.wait())
    finally:
        await service.stop()
        await close_nats(nc)


def main(argv: list[str] | None = None) -> int:
    return run_main("laneledger-tail", run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
