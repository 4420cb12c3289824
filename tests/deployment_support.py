"""Helpers for tests that run laneledger as deployed: a nats-server on
``deploy/nats.conf`` (its users and their permissions), each service on its
own NATS users. The fixtures (``passwords``, ``secured_server``,
``tenant_server``) are in ``deployment_fixtures.py``."""

from __future__ import annotations

from pathlib import Path

import nats
from nats.aio.client import Client as NATS
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.devtools.natsserver import NatsServer
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger

CONF = Path(__file__).resolve().parents[1] / "deploy" / "nats.conf"
USERS = (
    "producer",
    "sequencer",
    "sequencer-replies",
    "tail",
    "ingest",
    "metrics",
    "checkpoint",
    "checkpoint-replies",
    "otel",
)
TENANTS = ("acme", "globex")  # what ``tenant_server`` renders the config for


def url_for(server: NatsServer, user: str, passwords: dict[str, str]) -> str:
    return f"nats://{user}:{passwords[user]}@127.0.0.1:{server.port}"


async def connections_of(server: NatsServer, service: str, passwords: dict[str, str]) -> tuple[NATS, NATS]:
    """A service's two connections as deployed: its own user, and
    ``<service>-replies`` for what it sends to requesters."""
    return (
        await nats.connect(url_for(server, service, passwords)),
        await nats.connect(url_for(server, f"{service}-replies", passwords)),
    )


def deployed_sequencer(
    nc: NATS, reply_nc: NATS, db: Path, metrics: SequencerMetrics | None = None
) -> Sequencer:
    return Sequencer(
        nc,
        LedgerWriter(open_ledger(db)),
        metrics or SequencerMetrics(CollectorRegistry()),
        reply_nc=reply_nc,
    )


# No user may publish this: the server answers a connection's operations in
# order, so once its refusal is in, so is every refusal before it.
SENTINEL = "laneledger.tests.sentinel"


async def attempts(
    url: str, *, publish: tuple[str, ...] | list[str] = (), subscribe: tuple[str, ...] | list[str] = ()
) -> list[str]:
    """Publish and subscribe as the user of ``url``; the permission violations
    the server reported, lowercased."""
    violations: list[str] = []

    async def remember(exc: Exception) -> None:
        violations.append(str(exc).lower())

    nc = await nats.connect(url, error_cb=remember)
    try:
        for subject in subscribe:
            await nc.subscribe(subject)
        for subject in publish:
            await nc.publish(subject, b"{}")
        await nc.publish(SENTINEL, b"")
        await nc.flush()
        await eventually(
            lambda: violations,
            until=lambda found: refused(found, SENTINEL),
            what="the sentinel publish to be refused (after every other answer)",
        )
    finally:
        await nc.close()
    return [v for v in violations if not refused([v], SENTINEL)]


def refused(violations: list[str], subject: str) -> bool:
    return any("permissions violation" in v and f'"{subject.lower()}"' in v for v in violations)
