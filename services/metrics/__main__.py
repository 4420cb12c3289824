"""`python -m laneledger.services.metrics` (also `laneledger-metrics`): fold the committed
ledger into Prometheus metrics, served on /metrics (spec/metrics.md).

Every option also reads an environment variable, so a container needs no
arguments. On SIGTERM or SIGINT it stops following, lets the batch in hand
commit, and closes its NATS connection.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from laneledger.contract.subjects import Subjects
from laneledger.runtime.config import Setting, common_settings, parse_settings, positive_float, positive_int
from laneledger.runtime.follow import StreamIdentity, rebuild_if_replaced
from laneledger.runtime.opsserver import ops_routes, start_http
from laneledger.runtime.servicemain import close_nats, run_main, stop_event, until_stopped
from laneledger.sdk.natsconnect import connect_nats
from laneledger.sqlite import remove_database

from .fold import CAPPED_LABELS, LabelPolicy
from .service import MetricsService, MetricsSettings
from .store import MetricsStore

log = logging.getLogger("laneledger.metrics")


def _refuse(message: str) -> None:
    """A value that does not parse: exit status 2 naming it, like every other
    setting (``laneledger.runtime.config``)."""
    print(f"laneledger-metrics: {message}", file=sys.stderr)
    raise SystemExit(2)


def _label_assignments(values: list[str], what: str) -> dict[str, str]:
    """``LABEL=VALUE`` items (repeated options, or ``;``-separated in the env)."""
    found: dict[str, str] = {}
    for item in values:
        label, sep, value = item.partition("=")
        if not sep or label not in CAPPED_LABELS:
            _refuse(f"{what} wants LABEL=..., LABEL one of {', '.join(CAPPED_LABELS)}; got {item!r}")
        found[label] = value
    return found


def _semicolon_list(text: str) -> list[str]:
    return [item for item in text.split(";") if item]


SETTINGS = [
    *common_settings("metrics", 8472),
    Setting(
        "--data",
        "METRICS_DATA",
        ".laneledger/metrics",
        help="directory for the service's own SQLite file (metrics.db)",
    ),
    Setting(
        "--stream",
        "EVENTS_STREAM",
        None,
        help="the committed stream (default: the prefix's, LEDGER_EVENTS for 'ledger')",
    ),
    Setting(
        "--consumer",
        "METRICS_CONSUMER",
        "laneledger-metrics",
        help="name of its (ephemeral) consumer; unique per running instance",
    ),
    Setting("--batch-size", "METRICS_BATCH", 500, positive_int, help="events per folded batch"),
    Setting(
        "--lag-interval",
        "METRICS_LAG_INTERVAL",
        1.0,
        positive_float,
        help="seconds between reads of the stream's last sequence (lag)",
    ),
    Setting(
        "--max-label-values",
        "METRICS_MAX_LABEL_VALUES",
        100,
        positive_int,
        help="distinct values kept per producer-supplied label; later ones become 'other'",
    ),
    Setting(
        "--label-caps",
        "METRICS_LABEL_CAPS",
        [],
        _semicolon_list,
        help="per-label caps overriding --max-label-values, 'LABEL=N;LABEL=N'",
    ),
    Setting(
        "--allow",
        "METRICS_ALLOW",
        [],
        _semicolon_list,
        help="keep only these values of a label, the rest become 'other': 'LABEL=V1,V2;…'",
    ),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = parse_settings("laneledger-metrics", __doc__, SETTINGS, argv)
    args.stream = args.stream or Subjects(args.prefix).events_stream
    args.label_cap = args.label_caps
    try:
        caps = {k: int(v) for k, v in _label_assignments(args.label_cap, "--label-caps").items()}
    except ValueError as exc:
        _refuse(f"--label-caps wants LABEL=N: {exc}")
    allow = {
        k: frozenset(filter(None, v.split(","))) for k, v in _label_assignments(args.allow, "--allow").items()
    }
    args.policy = LabelPolicy(max_values=args.max_label_values, caps=caps, allow=allow)
    return args


async def run(args: argparse.Namespace) -> None:
    registry = CollectorRegistry()
    nc = await connect_nats(args.nats, name="laneledger-metrics")
    data = Path(args.data)
    identity = StreamIdentity(data / "stream-identity")
    # A committed stream recreated by `laneledger repair-stream`: refold from it.
    await rebuild_if_replaced(
        nc, args.stream, identity, lambda: remove_database(data / "metrics.db"), what="the metrics fold"
    )
    store = MetricsStore(data / "metrics.db")
    settings = MetricsSettings(
        stream=args.stream,
        consumer=args.consumer,
        batch_size=args.batch_size,
        lag_refresh_s=args.lag_interval,
        policy=args.policy,
        identity=identity,
    )
    service = MetricsService(nc, store, registry, settings)
    app = web.Application()
    app.add_routes(ops_routes(registry, lambda: service.ready and nc.is_connected))
    runner, port = await start_http(app, args.http_host, args.http_port)

    stop = stop_event()

    await service.start()
    print(
        f"laneledger-metrics ready http=http://{args.http_host}:{port} position={service.position}",
        flush=True,
    )
    try:
        await until_stopped(stop, service.wait())
    finally:
        await service.stop()
        await close_nats(nc)
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    return run_main("laneledger-metrics", run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
