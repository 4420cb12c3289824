"""The ingest service: the HTTP writes of clients without a NATS connection
(Korg's ``POST /api/agent/tool-call`` and ``PUT /api/blob/{sha256}``),
appended through the sequencer as the Korg tenant, and a tenant's erasures
(``POST /api/v1/erasures``, erasure.py), next to /healthz, /readyz and
/metrics. It reads nothing back but the committed event a
``triggered_by`` names; the tail serves the reads.

``IngestService`` takes its NATS connection and settings from the caller
(``__main__`` in production, the tests in-process), so the same object runs
both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry

from laneledger.contract.subjects import Subjects
from laneledger.runtime.access import AccessPolicy, access_middleware
from laneledger.runtime.httpjson import errors_middleware
from laneledger.runtime.opsserver import counting_middleware, ops_routes, start_http
from laneledger.sdk.client import LedgerClient

from .committed import CommittedEvents
from .erasure import HttpErasures
from .korg import KorgSettings, KorgWrites, missing_token_hint
from .metrics import IngestMetrics
from .openapi import openapi_route


@dataclass(frozen=True)
class IngestSettings:
    subjects: Subjects = Subjects()
    korg: KorgSettings = field(default_factory=KorgSettings)
    access: AccessPolicy = field(default_factory=AccessPolicy)  # no tokens: open (access.py)
    ledger_timeout_s: float = 5.0  # sequencer commands and appends, a committed-stream read


class IngestService:
    def __init__(self, nc: NATS, settings: IngestSettings, registry: CollectorRegistry | None = None) -> None:
        self.nc = nc
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.metrics = IngestMetrics(self.registry)
        # Korg writes as its tenant: its commands on the tenant's subjects,
        # its blobs in the tenant's buckets (its blob_bytes).
        self.korg_ledger = LedgerClient(
            nc, subjects=settings.subjects, timeout=settings.ledger_timeout_s, tenant=settings.korg.tenant
        )
        committed = CommittedEvents(nc.jetstream(), settings.subjects, settings.ledger_timeout_s)
        self._korg = KorgWrites(settings.korg, self.korg_ledger, committed)
        # Erasures are any token's tenant's: commands on that tenant's subjects.
        self._erasures = HttpErasures(nc, settings.subjects, settings.ledger_timeout_s)
        self._runner: web.AppRunner | None = None
        self.app = self._make_app()

    def _make_app(self) -> web.Application:
        access = access_middleware(self.settings.access, missing_token_hint=missing_token_hint)
        count = counting_middleware(self.metrics.requests)
        app = web.Application(middlewares=[count, errors_middleware, access])
        app.add_routes(ops_routes(self.registry, self.ready))
        app.add_routes([openapi_route(), *self._korg.routes(), *self._erasures.routes()])
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve; returns the bound HTTP port."""
        self._runner, bound = await start_http(self.app, host, port)
        return bound

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self.korg_ledger.close()

    def ready(self) -> bool:
        """Connected to NATS: every write goes through it."""
        return self.nc.is_connected
