"""The checkpoint service's operational metrics, on its own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class CheckpointMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.saves = Counter(
            "laneledger_checkpoint_saves_total",
            "Checkpoint saves by outcome: saved, replayed, or the refusal's reason or code.",
            ["outcome"],
            registry=registry,
        )
        self.conflicts = Counter(
            "laneledger_checkpoint_conflicts_total",
            "Saves refused as conflicts, by kind: revision, idempotency, anchor, artifact.",
            ["kind"],
            registry=registry,
        )
        self.requests = Counter(
            "laneledger_checkpoint_requests_total",
            "Requests served over NATS and HTTP, by op and outcome (ok or an error code).",
            ["op", "outcome"],
            registry=registry,
        )
        self.applied_position = Gauge(
            "laneledger_checkpoint_applied_position",
            "Last ledger position the anchor index has applied.",
            registry=registry,
        )
        self.stream_last = Gauge(
            "laneledger_checkpoint_stream_last_position",
            "Last sequence of LEDGER_EVENTS when last asked.",
            registry=registry,
        )
        self.anchor_wait = Histogram(
            "laneledger_checkpoint_anchor_wait_seconds",
            "Time a save spent finding its anchor in the index.",
            buckets=(0.001, 0.005, 0.02, 0.1, 0.5, 1, 2, 5, 10, 30),
            registry=registry,
        )
