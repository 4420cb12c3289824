"""`python -m laneledger.services.checkpoint` (also `laneledger-checkpoint`): the checkpoint store.

Every option also reads an environment variable, so a container needs no
arguments. Prints ``laneledger-checkpoint ready http=URL position=N`` once it
serves requests (``position``: the ledger position its anchor index has
applied). On SIGTERM or SIGINT it stops taking requests, lets those in hand
finish (bounded), stops following the stream and closes NATS.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry

from laneledger.contract.redaction import Redactor
from laneledger.contract.subjects import Subjects
from laneledger.runtime.access import access_settings, policy_of
from laneledger.runtime.config import (
    Setting,
    common_settings,
    parse_settings,
    positive_int,
    reply_nats_setting,
    tenants_setting,
)
from laneledger.runtime.follow import StreamIdentity, rebuild_if_replaced
from laneledger.runtime.opsserver import start_http
from laneledger.runtime.servicemain import (
    check_sdk_environment,
    close_nats,
    run_main,
    stop_event,
    until_stopped,
)
from laneledger.sdk.checkpoints import DEFAULT_ARTIFACT_BUCKET
from laneledger.sdk.natsconnect import connect_nats

from .http import checkpoint_app
from .metrics import CheckpointMetrics
from .service import CheckpointService, CheckpointSettings
from .store import CheckpointStore

log = logging.getLogger("laneledger.checkpoint")

MAX_INLINE_CEILING = 768 * 1024  # inline state must fit in one NATS reply with room to spare


def inline_limit(text: str) -> int:
    value = int(text)
    if not 0 <= value <= MAX_INLINE_CEILING:
        raise ValueError(f"must be 0..{MAX_INLINE_CEILING} (inline state must fit in one NATS reply)")
    return value


def seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value < float("inf"):
        raise ValueError("must be a number of seconds >= 0")
    return value


def count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def bucket_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise ValueError("a bucket name is letters, digits, '_' and '-'")
    return text


SETTINGS = [
    *common_settings("checkpoint", 8473),
    reply_nats_setting("checkpoint"),
    tenants_setting(),
    Setting(
        "--data", "CHECKPOINT_DATA", ".laneledger/checkpoint", help="directory for the service's SQLite file"
    ),
    Setting(
        "--max-inline-bytes",
        "CHECKPOINT_MAX_INLINE_BYTES",
        256 * 1024,
        inline_limit,
        help="largest inline state (RFC 8785 bytes); larger state goes in an artifact",
    ),
    Setting(
        "--anchor-wait-s",
        "CHECKPOINT_ANCHOR_WAIT_S",
        5.0,
        seconds,
        help="how long a save waits for an anchor the service has not consumed yet",
    ),
    Setting(
        "--artifact-bucket",
        "CHECKPOINT_BUCKET",
        DEFAULT_ARTIFACT_BUCKET,
        bucket_name,
        help="JetStream object store bucket for artifact blobs",
    ),
    Setting("--replicas", "REPLICAS", 1, positive_int, help="replicas of the artifact bucket's stream"),
    Setting(
        "--ready-max-lag",
        "CHECKPOINT_READY_MAX_LAG",
        1000,
        count,
        help="/readyz fails while the index is more events behind the committed stream",
    ),
    *access_settings(),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = parse_settings("laneledger-checkpoint", __doc__, SETTINGS, argv)
    check_sdk_environment("laneledger-checkpoint")  # it commands the sequencer through the SDK
    return args


async def run(args: argparse.Namespace) -> None:
    access = policy_of("laneledger-checkpoint", args, args.http_host)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - start-up, before the loop serves anything
    store = CheckpointStore.open(data / "checkpoints.db")
    metrics = CheckpointMetrics(CollectorRegistry())
    nc = await connect_nats(args.nats, name="laneledger-checkpoint")
    identity = StreamIdentity(data / "stream-identity")
    # A committed stream recreated by `laneledger repair-stream`: rebuild the
    # anchor index from it (the checkpoints themselves stay).
    await rebuild_if_replaced(
        nc, Subjects(args.prefix).events_stream, identity, store.reset_index, what="the anchor index"
    )
    reply_nc = (
        await connect_nats(args.reply_nats, name="laneledger-checkpoint-replies") if args.reply_nats else None
    )
    settings = CheckpointSettings(
        subjects=Subjects(args.prefix),
        artifact_bucket=args.artifact_bucket,
        max_inline_bytes=args.max_inline_bytes,
        anchor_wait_s=args.anchor_wait_s,
        replicas=args.replicas,
        ready_max_lag=args.ready_max_lag,
        identity=identity,
        redactor=Redactor.from_env(),  # LANELEDGER_REDACT_*, as the SDK reads them
        tenants=args.tenants_file,
    )
    service = CheckpointService(nc, store, metrics, settings, reply_nc=reply_nc)
    app = checkpoint_app(service, access)
    runner = None
    stop = stop_event()
    try:
        await service.start()
        runner, port = await start_http(app, args.http_host, args.http_port)
        print(
            f"laneledger-checkpoint ready http=http://{args.http_host}:{port} "
            f"position={service.anchors.applied}",
            flush=True,
        )
        await until_stopped(stop, service.wait())
    finally:
        await service.stop()
        for connection in (nc, reply_nc):
            if connection is not None and not connection.is_closed:
                await close_nats(connection)
        if runner is not None:
            await runner.cleanup()
        store.close()


def main(argv: list[str] | None = None) -> int:
    return run_main("laneledger-checkpoint", run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
