"""The ingest service's operational metrics, on its own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class IngestMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "laneledger_ingest_http_requests_total",
            "HTTP requests by route and status.",
            ["route", "status"],
            registry=registry,
        )
