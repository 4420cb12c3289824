"""The tail's operational metrics, in its own registry (served on /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class TailMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.subscribers = Gauge("laneledger_tail_subscribers", "Open SSE subscriptions.", registry=registry)
        self.frames = Counter(
            "laneledger_tail_frames_sent_total", "SSE event frames written.", registry=registry
        )
        self.applied_position = Gauge(
            "laneledger_tail_applied_position",
            "Last ledger position committed to the read model.",
            registry=registry,
        )
        self.stream_last = Gauge(
            "laneledger_tail_stream_last_sequence",
            "LEDGER_EVENTS' last sequence when last asked.",
            registry=registry,
        )
        self.lag = Gauge(
            "laneledger_tail_lag_events",
            "Events on the committed stream not yet in the read model.",
            registry=registry,
        )
        self.apply_seconds = Histogram(
            "laneledger_tail_apply_seconds",
            "Time to commit one batch to the read model.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=registry,
        )
        self.follower_restarts = Counter(
            "laneledger_tail_follower_restarts_total",
            "Times the stream follower was re-opened (error, stall or stream missing).",
            registry=registry,
        )
        self.requests = Counter(
            "laneledger_tail_http_requests_total",
            "HTTP requests answered, by route and status.",
            ["route", "status"],
            registry=registry,
        )
        self.tlog_checkpoint_size = Gauge(
            "laneledger_tail_tlog_checkpoint_size",
            "Tree size of the latest checkpoint the tail serves (0: none yet).",
            registry=registry,
        )
        self.tlog_checkpoint_mismatches = Counter(
            "laneledger_tail_tlog_checkpoint_mismatches_total",
            "LEDGER_TLOG messages not served: a root that is not the tail's tree's, or not a checkpoint.",
            registry=registry,
        )
        self.expensive_reads = Gauge(
            "laneledger_tail_expensive_reads_in_flight",
            "Session proofs, verifications and history pages being served now (limits.py).",
            registry=registry,
        )
        self.read_memory = Gauge(
            "laneledger_tail_read_memory_bytes",
            "Bytes of event pages held for readers now, against --read-memory-mib (budget.py).",
            registry=registry,
        )
        self.erasures_pending = Gauge(
            "laneledger_tail_erasures_pending",
            "Erasures folded from the stream and not yet carried out in the read model.",
            registry=registry,
        )
        self.erased_events = Counter(
            "laneledger_tail_erased_events_total",
            "Events the read model rewrote to their erased form.",
            registry=registry,
        )
