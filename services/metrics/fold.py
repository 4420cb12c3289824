"""The fold: committed events -> the ledger's metric state (spec/metrics.md).

Pure: no I/O and no clock, so the same events in the same order always give
the same state, whether folded in one go or across restarts. ``State`` holds
plain values keyed by label tuples; every change is also recorded in
``State.changes`` so the store can persist exactly what one batch changed, in
the same transaction as the position it reached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, TypeVar

import msgspec

from laneledger.contract.vocabulary import ACTION_TYPES, CORE_EVENT_TYPES, COST_SUM, family_of

OTHER = "other"  # what a label value beyond its cap (or off its allow-list) becomes
UNKNOWN = "unknown"  # an action whose type or name no event carried

V = TypeVar("V")  # what an open-item table holds

# Seconds. Tool calls run from milliseconds (a file read) to many minutes (a
# build); model calls from a fraction of a second to a few minutes.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
)
_BUCKET_NS = tuple(int(b * 1_000_000_000) for b in DURATION_BUCKETS)

TOKEN_DIRECTIONS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_tokens": "cache_read",
    "cache_write_tokens": "cache_write",
}

# Label names whose values come from producers, so are capped (see LabelPolicy).
CAPPED_LABELS = ("tenant", "provider", "model", "currency", "event_type", "action_type", "name")


@dataclass(frozen=True)
class Metric:
    """One folded metric family: its exposition name, type and labels."""

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    labels: tuple[str, ...]
    help: str
    exact: bool = False  # values are Decimal (cost) rather than int


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(
            "laneledger_events",
            "counter",
            ("event_type", "family", "tenant"),
            "Committed events, by event type, family and tenant",
        ),
        Metric(
            "laneledger_cost",
            "counter",
            ("tenant", "provider", "model", "currency"),
            "Cost recorded by cost.recorded events with a non-negative amount, in the currency unit",
            exact=True,
        ),
        Metric(
            "laneledger_cost_credited",
            "counter",
            ("tenant", "provider", "model", "currency"),
            "Absolute value of negative cost.recorded amounts (credits, refunds), in the currency unit",
            exact=True,
        ),
        Metric(
            "laneledger_tokens",
            "counter",
            ("tenant", "provider", "model", "direction"),
            "Tokens reported by cost.recorded events, by direction",
        ),
        Metric(
            "laneledger_attempts_failed", "counter", ("tenant",), "Attempts that ended with attempt.failed"
        ),
        Metric(
            "laneledger_attempts_unresolved",
            "gauge",
            ("tenant",),
            "Attempts with attempt.requested and no attempt.completed or attempt.failed yet",
        ),
        Metric(
            "laneledger_runs",
            "counter",
            ("tenant", "outcome"),
            "Runs that reached a terminal event, by outcome",
        ),
        Metric("laneledger_hitl_pauses", "counter", ("tenant",), "Human-in-the-loop pauses (hitl.paused)"),
        Metric(
            "laneledger_hitl_responses",
            "counter",
            ("tenant", "decision"),
            "Human-in-the-loop responses (hitl.responded), by decision",
        ),
        Metric(
            "laneledger_hitl_waiting", "gauge", ("tenant",), "Human-in-the-loop pauses with no response yet"
        ),
        Metric(
            "laneledger_checkpoints_linked",
            "counter",
            ("tenant",),
            "Checkpoints linked to a lane (lane.framework.checkpoint.linked)",
        ),
        Metric(
            "laneledger_action_duration_seconds",
            "histogram",
            ("action_type", "name", "outcome"),
            "Duration of finished actions (tool and model calls), by action type, name and outcome",
        ),
        Metric(
            "laneledger_metrics_label_overflow",
            "counter",
            ("label", "tenant"),
            "Label values folded into 'other' because their label reached its cap (for that "
            "tenant) or allow-list",
        ),
        Metric(
            "laneledger_metrics_undecodable_events",
            "counter",
            (),
            "Committed-stream messages that did not decode as a committed event (skipped)",
        ),
    )
}


@dataclass(frozen=True)
class LabelPolicy:
    """Bounds the values a producer-supplied label can take: a label with an
    allow-list keeps only those values; any other keeps the first
    ``max_values`` distinct values it sees (``caps`` overrides per label),
    counted per tenant, so one tenant's values can never push another's
    into ``other`` (the ``tenant`` label itself is counted once for all).
    Everything else becomes ``other``."""

    max_values: int = 100
    caps: dict[str, int] = field(default_factory=dict)
    allow: dict[str, frozenset[str]] = field(default_factory=dict)

    def cap(self, label: str) -> int:
        return self.caps.get(label, self.max_values)


@dataclass
class PendingAction:
    started_ns: int | None
    action_type: str
    name: str


@dataclass
class Changes:
    """What a batch changed, for the store."""

    values: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    histograms: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    open_put: dict[tuple[str, str], Any] = field(default_factory=dict)
    open_del: set[tuple[str, str]] = field(default_factory=set)
    admitted: list[tuple[str, str, str]] = field(default_factory=list)  # (scope, label, value)


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    sum_ns: int = 0  # integer nanoseconds: exact across restarts

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, ns: int) -> None:
        i = 0
        while i < len(_BUCKET_NS) and ns > _BUCKET_NS[i]:
            i += 1
        self.counts[i] += 1
        self.sum_ns += ns


@dataclass
class State:
    policy: LabelPolicy = field(default_factory=LabelPolicy)
    position: int = 0
    values: dict[str, dict[tuple[str, ...], int | Decimal]] = field(
        default_factory=lambda: {m.name: {} for m in METRICS.values() if m.kind != "histogram"}
    )
    histograms: dict[str, dict[tuple[str, ...], Histogram]] = field(
        default_factory=lambda: {m.name: {} for m in METRICS.values() if m.kind == "histogram"}
    )
    # Open items: what a later event closes. Keyed by tenant + the subject
    # (attempt, action) or tenant + session + pause id (``item_key``): every id
    # is its tenant's own.
    attempts: dict[str, str] = field(default_factory=dict)  # key -> tenant label
    pauses: dict[str, str] = field(default_factory=dict)  # key -> tenant label
    actions: dict[str, PendingAction] = field(default_factory=dict)
    # Values admitted per (scope, label): the scope is the tenant label of
    # the event ("" for the tenant label itself), so each tenant has its own
    # budget of values; tenants past the tenant cap share "other"'s.
    admitted: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    changes: Changes = field(default_factory=Changes)

    # -- changes ----------------------------------------------------------------

    def take_changes(self) -> Changes:
        changes, self.changes = self.changes, Changes()
        return changes

    def add(self, metric: str, labels: tuple[str, ...], amount: int | Decimal = 1) -> None:
        series = self.values[metric]
        old = series.get(labels, 0)
        series[labels] = COST_SUM.add(old, amount) if isinstance(amount, Decimal) else old + amount
        self.changes.values.add((metric, labels))

    def observe(self, metric: str, labels: tuple[str, ...], ns: int) -> None:
        self.histograms[metric].setdefault(labels, Histogram()).observe(ns)
        self.changes.histograms.add((metric, labels))

    def open_item(self, kind: str, table: dict[str, V], key: str, value: V) -> None:
        table[key] = value
        self.changes.open_put[(kind, key)] = value
        self.changes.open_del.discard((kind, key))

    def close_item(self, kind: str, table: dict[str, V], key: str) -> V | None:
        value = table.pop(key, None)
        if value is not None:
            self.changes.open_put.pop((kind, key), None)
            self.changes.open_del.add((kind, key))
        return value

    # -- labels -------------------------------------------------------------------

    def label(self, label: str, value: str, tenant: str = "") -> str:
        """The value a producer-supplied label is exposed with (bounded), for
        an event of ``tenant`` (its tenant label; "" for the tenant label)."""
        allowed = self.policy.allow.get(label)
        if allowed is not None:
            if value in allowed:
                return value
        else:
            seen = self.admitted.setdefault((tenant, label), set())
            if value in seen:
                return value
            if len(seen) < self.policy.cap(label):
                seen.add(value)
                self.changes.admitted.append((tenant, label, value))
                return value
        self.add("laneledger_metrics_label_overflow", (label, tenant))
        return OTHER


# -- the fold --------------------------------------------------------------------------


class FoldedEvent(msgspec.Struct, frozen=True):
    """The fields of a committed event (spec/object-model.md) the fold reads.
    Unknown fields are ignored on purpose: a ledger-owned field added later
    must not make every event undecodable here."""

    event_type: str
    subject_id: str
    occurred_at: str
    tenant: str
    session_id: str
    payload: dict[str, Any] = {}


_event_decoder = msgspec.json.Decoder(FoldedEvent)


def fold_message(state: State, position: int, body: bytes) -> None:
    """Fold one committed-stream message. Positions at or below the folded one
    are ignored (a redelivery), so folding is idempotent per position."""
    if position <= state.position:
        return
    try:
        event = _event_decoder.decode(body)
    except msgspec.DecodeError:
        # Cannot happen with a healthy sequencer; never let one message stop the fold.
        state.add("laneledger_metrics_undecodable_events", ())
    else:
        fold_event(state, event)
    state.position = position


def item_key(*parts: str) -> str:
    """The key of an open item: its tenant and ids, joined by a separator no id holds."""
    return "\x1f".join(parts)


def fold_event(state: State, ev: FoldedEvent) -> None:
    et, payload = ev.event_type, ev.payload
    subject = item_key(ev.tenant, ev.subject_id)
    tenant = state.label("tenant", ev.tenant)
    type_label = et if et in CORE_EVENT_TYPES else state.label("event_type", et, tenant)
    state.add("laneledger_events", (type_label, family_of(et), tenant))
    match et:
        case "cost.recorded":
            _fold_cost(state, tenant, payload)
        case "attempt.requested":
            if subject not in state.attempts:
                state.open_item("attempt", state.attempts, subject, tenant)
                state.add("laneledger_attempts_unresolved", (tenant,))
        case "attempt.completed" | "attempt.failed":
            opened = state.close_item("attempt", state.attempts, subject)
            if opened is not None:
                state.add("laneledger_attempts_unresolved", (opened,), -1)
            if et == "attempt.failed":
                state.add("laneledger_attempts_failed", (tenant,))
        case "action.started":
            pending = PendingAction(
                _epoch_ns(ev.occurred_at),
                _action_type(state, payload.get("action_type"), tenant),
                _name(state, payload.get("name"), tenant),
            )
            state.open_item("action", state.actions, subject, pending)
        case "action.completed" | "action.failed":
            _fold_action_end(state, ev, subject, et.rsplit(".", 1)[1], tenant)
        case "run.completed" | "run.failed" | "run.cancelled":
            state.add("laneledger_runs", (tenant, et.rsplit(".", 1)[1]))
        case "hitl.paused":
            key = item_key(ev.tenant, ev.session_id, str(payload.get("pause_id")))
            if key not in state.pauses:
                state.open_item("pause", state.pauses, key, tenant)
                state.add("laneledger_hitl_waiting", (tenant,))
            state.add("laneledger_hitl_pauses", (tenant,))
        case "hitl.responded":
            key = item_key(ev.tenant, ev.session_id, str(payload.get("pause_id")))
            opened = state.close_item("pause", state.pauses, key)
            if opened is not None:
                state.add("laneledger_hitl_waiting", (opened,), -1)
            # The ledger checks decision is one of three values: no cap needed.
            state.add("laneledger_hitl_responses", (tenant, str(payload.get("decision"))))
        case "lane.framework.checkpoint.linked":
            state.add("laneledger_checkpoints_linked", (tenant,))
        case _:
            pass


def _fold_cost(state: State, tenant: str, payload: dict[str, Any]) -> None:
    provider = state.label("provider", str(payload.get("provider")), tenant)
    model = state.label("model", str(payload.get("model")), tenant)
    currency = state.label("currency", str(payload.get("currency")), tenant)
    try:
        amount = Decimal(payload["amount"])  # a checked decimal string: exact
    except (KeyError, TypeError, InvalidOperation):
        amount = None
    if amount is not None and amount.is_finite():
        # A counter never decreases: credits (negative amounts) count apart.
        if amount.is_signed() and amount != 0:
            state.add("laneledger_cost_credited", (tenant, provider, model, currency), -amount)
        else:
            state.add("laneledger_cost", (tenant, provider, model, currency), amount)
    for field_name, direction in TOKEN_DIRECTIONS.items():
        count = payload.get(field_name)
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            state.add("laneledger_tokens", (tenant, provider, model, direction), count)


def _fold_action_end(state: State, ev: FoldedEvent, subject: str, outcome: str, tenant: str) -> None:
    started: PendingAction | None = state.close_item("action", state.actions, subject)
    payload = ev.payload
    action_type = started.action_type if started else _action_type(state, payload.get("action_type"), tenant)
    name = started.name if started else _name(state, payload.get("name"), tenant)
    ns = _payload_duration_ns(payload)
    if ns is None and started is not None and started.started_ns is not None:
        ended = _epoch_ns(ev.occurred_at)
        if ended is not None and ended >= started.started_ns:
            ns = ended - started.started_ns
    if ns is not None:
        state.observe("laneledger_action_duration_seconds", (action_type, name, outcome), ns)


def _action_type(state: State, value: Any, tenant: str) -> str:
    if not isinstance(value, str):
        return UNKNOWN
    return value if value in ACTION_TYPES else state.label("action_type", value, tenant)


def _name(state: State, value: Any, tenant: str) -> str:
    return state.label("name", value, tenant) if isinstance(value, str) else UNKNOWN


def _payload_duration_ns(payload: dict[str, Any]) -> int | None:
    """A producer-measured duration on the terminal event wins over the
    occurred_at difference: ``duration_ms`` or ``duration_s``, a number or a
    decimal string, >= 0."""
    for field_name, scale in (("duration_ms", 1_000_000), ("duration_s", 1_000_000_000)):
        value = payload.get(field_name)
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            continue
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            continue
        if number.is_finite() and number >= 0:
            return int(number * scale)
    return None


_TIMESTAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")


def _epoch_ns(timestamp: str) -> int | None:
    """RFC 3339 (as the object model pins it) to integer epoch nanoseconds,
    keeping all nine fractional digits (datetime keeps six)."""
    found = _TIMESTAMP.match(timestamp)
    if found is None:
        return None
    whole, fraction, offset = found.groups()
    try:
        seconds = datetime.fromisoformat(whole + ("+00:00" if offset == "Z" else offset))
    except ValueError:
        return None
    return int(seconds.timestamp()) * 1_000_000_000 + int((fraction or "").ljust(9, "0"))
