"""`python -m laneledger.services.sequencer` (also `laneledger-sequencer`): run the sole writer.

Every option also reads an environment variable, so a container needs no
arguments. On SIGTERM or SIGINT it stops pulling, finishes the batch in hand,
flushes the committed stream and drains its NATS connection.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from laneledger.contract.redaction import Redactor, checked_keys, checked_patterns
from laneledger.contract.subjects import Subjects
from laneledger.runtime.config import (
    Setting,
    common_settings,
    on_off,
    parse_settings,
    positive_float,
    positive_int,
    reply_nats_setting,
    tenants_setting,
)
from laneledger.runtime.opsserver import ops_routes, start_http
from laneledger.runtime.servicemain import (
    close_nats,
    run_main,
    stop_event,
    tune_gc_after_start,
    until_stopped,
)
from laneledger.sdk.natsconnect import connect_nats
from laneledger.store import LedgerWriter, open_ledger
from laneledger.tlog.note import Signer

from .lease import LeaseSettings
from .metrics import SequencerMetrics
from .service import Sequencer, SequencerSettings
from .treeheads import TreeHeadSettings

log = logging.getLogger("laneledger.sequencer")


SETTINGS = [
    *common_settings("sequencer", 8470),
    reply_nats_setting("sequencer"),
    tenants_setting(),
    Setting("--db", "DB", ".laneledger/ledger.db", help="the ledger SQLite file"),
    Setting("--replicas", "REPLICAS", 1, positive_int, help="JetStream stream replicas"),
    Setting("--batch-size", "BATCH_SIZE", 500, positive_int, help="append requests per batch"),
    Setting(
        "--txlog",
        "TXLOG",
        True,
        on_off,
        help="on: store every transaction on LEDGER_TXLOG before the file commits it "
        "(spec/replication.md); off: the file alone (for comparison)",
    ),
    Setting(
        "--seal-content",
        "SEAL_CONTENT",
        True,
        on_off,
        help="on: seal each new event's content under a salt of its own, so that it can be "
        "erased (spec/canonical.md §3, spec/erasure.md); off: unsealed events (for comparison)",
    ),
    Setting(
        "--lease-ttl-s",
        "LEASE_TTL_S",
        2.0,
        positive_float,
        help="the active sequencer's lease expires this long after its last renewal; a standby "
        "takes it over then (spec/replication.md, 'The lease')",
    ),
    Setting(
        "--hmac-key-file",
        "HMAC_KEY_FILE",
        None,
        help="file holding the chain HMAC key; without it the chain is plain SHA-256",
    ),
    Setting(
        "--tlog-key-file",
        "TLOG_KEY_FILE",
        None,
        help="file holding the transparency log's signing key (PRIVATE+KEY+<origin>+…, from "
        "`laneledger tlog keygen`); with it the active sequencer signs checkpoints of the Merkle "
        "tree onto LEDGER_TLOG (spec/tlog.md); without it none are signed",
    ),
    Setting(
        "--tlog-checkpoint-interval-s",
        "TLOG_CHECKPOINT_INTERVAL_S",
        10.0,
        positive_float,
        help="sign a checkpoint this often when the tree grew (and on request, ledger.tlog.sign)",
    ),
    Setting(
        "--redact-patterns",
        "REDACT_PATTERNS",
        None,
        checked_patterns,
        help='extra secret shapes to redact: JSON {"name": "regex"} or ["regex", …]',
    ),
    Setting(
        "--redact-keys",
        "REDACT_KEYS",
        None,
        checked_keys,
        help="extra secret key words to redact, comma-separated (e.g. 'pin,otp_code')",
    ),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return parse_settings("laneledger-sequencer", __doc__, SETTINGS, argv)


async def run(args: argparse.Namespace) -> None:
    # Start-up, before the loop serves anything: blocking file calls are fine here.
    key = Path(args.hmac_key_file).read_bytes().strip() if args.hmac_key_file else None  # noqa: ASYNC240
    tree_heads = (
        TreeHeadSettings(
            Signer.from_file(args.tlog_key_file),
            interval_s=args.tlog_checkpoint_interval_s,
        )
        if args.tlog_key_file
        else None
    )
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    writer = LedgerWriter(open_ledger(args.db), hmac_key=key, seal=args.seal_content)
    registry = CollectorRegistry()
    metrics = SequencerMetrics(registry)
    nc = await connect_nats(args.nats, name="laneledger-sequencer")
    reply_nc = (
        await connect_nats(args.reply_nats, name="laneledger-sequencer-replies") if args.reply_nats else None
    )
    settings = SequencerSettings(
        subjects=Subjects(args.prefix),
        replicas=args.replicas,
        batch_size=args.batch_size,
        redactor=Redactor.from_config(args.redact_patterns, args.redact_keys),
        tenants=args.tenants_file,
        txlog=args.txlog,
        lease=LeaseSettings(
            ttl_s=args.lease_ttl_s, renew_s=args.lease_ttl_s / 5, try_s=args.lease_ttl_s / 10
        ),
        lease_nats=lambda: connect_nats(args.nats, name="laneledger-sequencer-lease"),
        tree_heads=tree_heads,
    )
    sequencer = Sequencer(nc, writer, metrics, settings, reply_nc=reply_nc)
    app = web.Application()
    app.add_routes(
        ops_routes(
            registry, lambda: sequencer.serving and nc.is_connected, details=lambda: {"role": sequencer.role}
        )
    )
    runner, port = await start_http(app, args.http_host, args.http_port)

    stop = stop_event()

    await sequencer.start()
    tune_gc_after_start()
    print(
        f"laneledger-sequencer ready http=http://{args.http_host}:{port} position={writer.last_position}"
        f" role={sequencer.role}",
        flush=True,
    )
    try:
        await until_stopped(stop, sequencer.wait())
    finally:
        await sequencer.stop()
        await close_nats(nc)
        if reply_nc is not None:
            await close_nats(reply_nc)
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    return run_main("laneledger-sequencer", run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
