"""The sequencer's own operational metrics (served on its /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class SequencerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "laneledger_sequencer_append_requests_total",
            "Append requests handled, by outcome and error code",
            ["outcome", "code"],
            registry=registry,
        )
        self.events = Counter(
            "laneledger_sequencer_events_committed_total",
            "Events committed to the ledger",
            registry=registry,
        )
        self.batch_size = Histogram(
            "laneledger_sequencer_batch_requests",
            "Append requests per committed batch",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=registry,
        )
        self.commit_seconds = Histogram(
            "laneledger_sequencer_commit_seconds",
            "Time to apply and commit one batch in SQLite",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=registry,
        )
        self.commands = Counter(
            "laneledger_sequencer_commands_total",
            "Request/reply commands handled, by op and outcome",
            ["op", "outcome"],
            registry=registry,
        )
        self.erased_events = Counter(
            "laneledger_sequencer_erased_events_total",
            "Events whose content this sequencer erased (spec/erasure.md), by tenant and by what"
            " asked: an erase request or the tenant's retention",
            ["tenant", "trigger"],
            registry=registry,
        )
        self.stream_copies_pending = Gauge(
            "laneledger_sequencer_stream_copies_pending",
            "Erased events whose copies on LEDGER_EVENTS and LEDGER_TXLOG are still to remove"
            " (spec/erasure.md, The streams)",
            registry=registry,
        )
        self.retention_would_erase = Gauge(
            "laneledger_sequencer_retention_would_erase",
            "Events a tenant's retention would erase now, for a tenant whose retention is a dry run",
            ["tenant"],
            registry=registry,
        )
        self.batch_failures = Counter(
            "laneledger_sequencer_batch_failures_total",
            "Batches whose commit failed (nothing written, messages redelivered)",
            registry=registry,
        )
        self.txlog_moved = Counter(
            "laneledger_sequencer_txlog_moved_total",
            "Transactions refused because the transaction log had moved on (another writer,"
            " or an append of unknown outcome); read back, the work is redone",
            registry=registry,
        )
        self.txlog_applied = Counter(
            "laneledger_sequencer_txlog_applied_total",
            "Transactions applied to the ledger file from the transaction log (a rebuild,"
            " a crash's last commits, another writer's)",
            registry=registry,
        )
        self.active = Gauge(
            "laneledger_sequencer_active",
            "1 while this sequencer holds the lease and commits, 0 while it is a standby",
            registry=registry,
        )
        self.lease_holder = Gauge(
            "laneledger_sequencer_lease_holder",
            "1 for the ledger file (meta.file_id) this sequencer last saw holding the lease",
            ["holder"],
            registry=registry,
        )
        self.failovers = Counter(
            "laneledger_sequencer_failovers_total",
            "Times this sequencer took the lease over after being a standby",
            registry=registry,
        )
        self.lease_lost = Counter(
            "laneledger_sequencer_lease_lost_total",
            "Times this sequencer found its lease gone (expired or taken) and stood down",
            registry=registry,
        )
        self.txlog_lag = Gauge(
            "laneledger_sequencer_txlog_lag_records",
            "Transaction log records the ledger file had not applied at its last look"
            " (a standby's catch-up lag)",
            registry=registry,
        )
        self.txlog_seq = Gauge(
            "laneledger_sequencer_txlog_sequence",
            "The transaction log position the ledger file holds",
            registry=registry,
        )
        self.tree_heads_signed = Counter(
            "laneledger_sequencer_tree_heads_signed_total",
            "Signed checkpoints of the Merkle tree published on LEDGER_TLOG (spec/tlog.md)",
            registry=registry,
        )
        self.tree_head_size = Gauge(
            "laneledger_sequencer_tree_head_size",
            "The tree size of the last checkpoint this sequencer signed",
            registry=registry,
        )
        self.last_position = Gauge(
            "laneledger_sequencer_last_position",
            "Last committed ledger position",
            registry=registry,
        )
        self.mirror_backlog = Gauge(
            "laneledger_sequencer_mirror_backlog_batches",
            "Committed batches waiting to be published on the committed stream",
            registry=registry,
        )
        # Also in append_requests_total; named on its own because nobody was
        # told: the producer sees only a receipt that never comes.
        self.unanswered_rejections = Counter(
            "laneledger_sequencer_rejections_unanswered_total",
            "Append requests refused that named no reply inbox (no Ledger-Reply-To "
            "header), by error code: counted and dropped",
            ["code"],
            registry=registry,
        )
        # Also visible in append_requests_total by outcome/code; named on their
        # own so dashboards and alerts (conflict rate) need no label matching.
        self.lane_conflicts = Counter(
            "laneledger_sequencer_lane_conflicts_total",
            "Appends rejected because the lane head moved (lane_conflict)",
            registry=registry,
        )
        self.replays = Counter(
            "laneledger_sequencer_idempotent_replays_total",
            "Appends answered with their stored receipt (same append id, same content)",
            registry=registry,
        )
        # Receipts and replies not sent because the request named a reply
        # subject outside its own inbox (subjects.reply_refusal): the append
        # or command was refused. Command refusals are also in commands_total
        # (outcome reply_refused).
        self.refused_replies = Counter(
            "laneledger_sequencer_refused_reply_subjects_total",
            "Requests refused for naming a reply subject outside the requester's inbox, "
            "by kind (receipt: Ledger-Reply-To of an append; reply: a command's reply subject)",
            ["kind"],
            registry=registry,
        )
        self.stream_faults = Counter(
            "laneledger_sequencer_stream_faults_total",
            "Times the committed stream was found holding what the ledger did not write, by kind "
            "(foreign_message, message_deleted, stream_ahead); the sequencer then commits nothing "
            "until it is repaired",
            ["kind"],
            registry=registry,
        )
        self.stream_fault = Gauge(
            "laneledger_sequencer_stream_fault",
            "1 while the committed stream holds what the ledger did not write (not committing, "
            "not ready; spec/wire.md, 'Foreign messages'), else 0",
            registry=registry,
        )
        self.redactions = Counter(
            "laneledger_sequencer_redactions_total",
            "Secret-shaped values the sequencer replaced in append requests before "
            "hashing, by rule (spec/content.md); 0 while producers redact themselves",
            ["rule"],
            registry=registry,
        )
        self.blob_checks = Counter(
            "laneledger_sequencer_blob_lookups_total",
            "Blob-store lookups for content references, by result (present: committed; "
            "copied: from the tenant's uploads; missing; refused: the upload is not the blob; "
            "error); references already known present are not looked up again",
            ["result"],
            registry=registry,
        )
        self.inbound_backlog = Gauge(
            "laneledger_sequencer_inbound_backlog_requests",
            "Append requests on the append streams not yet committed (undelivered plus "
            "delivered and unacked), refreshed periodically from the consumers' info",
            registry=registry,
        )
        self.stream_backlog = Gauge(
            "laneledger_sequencer_stream_backlog_requests",
            "inbound_backlog_requests by append stream: LEDGER_APPEND, or with a tenants "
            "file LEDGER_APPEND_<tenant token> each (its backlog limit bounds it)",
            ["stream"],
            registry=registry,
        )
