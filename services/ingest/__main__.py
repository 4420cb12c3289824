"""`python -m laneledger.services.ingest` (also `laneledger-ingest`): HTTP writes.

Serves the writes of clients without a NATS connection (Korg's
``POST /api/agent/tool-call`` and ``PUT /api/blob/{sha256}``, spec/korg-mapping.md)
as the Korg tenant, through the sequencer, and a tenant's erasures
(``POST /api/v1/erasures``, spec/erasure.md); the tail serves the reads. Every
option also reads an environment variable, so a container needs no
arguments. Prints ``laneledger-ingest ready http=URL`` once it serves
requests. On SIGTERM or SIGINT it stops taking requests and closes NATS.
"""

from __future__ import annotations

import argparse
import sys

from laneledger.contract.subjects import Subjects
from laneledger.runtime.access import access_settings, policy_of
from laneledger.runtime.config import Setting, common_settings, parse_settings
from laneledger.runtime.servicemain import check_sdk_environment, close_nats, run_main, stop_event
from laneledger.sdk.natsconnect import connect_nats

from .korg import KorgSettings
from .service import IngestService, IngestSettings

SETTINGS = [
    *common_settings("ingest", 8476),
    Setting("--korg-tenant", "KORG_TENANT", "korg", help="tenant of Korg tool calls"),
    Setting("--korg-session", "KORG_SESSION", "korg", help="session of Korg tool calls that name none"),
    Setting("--korg-run", "KORG_RUN", "korg", help="run of Korg tool calls"),
    *access_settings(),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = parse_settings("laneledger-ingest", __doc__, SETTINGS, argv)
    check_sdk_environment("laneledger-ingest")  # it appends through the SDK
    return args


def settings_of(args: argparse.Namespace) -> IngestSettings:
    return IngestSettings(
        subjects=Subjects(args.prefix),
        korg=KorgSettings(args.korg_tenant, args.korg_session, args.korg_run),
        access=policy_of("laneledger-ingest", args, args.http_host),
    )


async def run(args: argparse.Namespace) -> None:
    settings = settings_of(args)
    nc = await connect_nats(args.nats, name="laneledger-ingest")
    service = IngestService(nc, settings)
    stop = stop_event()
    try:
        port = await service.start(args.http_host, args.http_port)
        print(f"laneledger-ingest ready http=http://{args.http_host}:{port}", flush=True)
        await stop.wait()
    finally:
        await service.stop()
        await close_nats(nc)


def main(argv: list[str] | None = None) -> int:
    return run_main("laneledger-ingest", run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
