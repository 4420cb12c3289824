"""The metrics fold, store and collector without NATS: exact sums, durations,
open items, persistence across crashes, and bounded label cardinality."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path

from metrics_support import committed, parse, total, value
from prometheus_client import CollectorRegistry, generate_latest

from laneledger.services.metrics.collector import LedgerCollector, Progress
from laneledger.services.metrics.fold import OTHER, LabelPolicy, State, fold_message
from laneledger.services.metrics.store import MetricsStore, rows_of


def render(state: State, stream_last: int | None = None) -> str:
    registry = CollectorRegistry()
    last = state.position if stream_last is None else stream_last
    registry.register(LedgerCollector(lambda: state, lambda: Progress(state.position, last)))
    return generate_latest(registry).decode()


def fold_all(messages: list[bytes], policy: LabelPolicy | None = None) -> State:
    state = State(policy=policy or LabelPolicy())
    for position, body in enumerate(messages, 1):
        fold_message(state, position, body)
    return state


def cost(amount: str, model: str = "m", **extra) -> dict:
    return {"provider": "p", "model": model, "amount": amount, "currency": "USD", **extra}


def mixed_ledger(n: int) -> list[bytes]:
    """n positions of every kind the fold treats specially, interleaved."""
    out: list[bytes] = []
    for i in range(n):
        p = len(out) + 1
        match i % 9:
            case 0:
                out.append(committed(p, "attempt.requested", subject_id=f"att-{i}"))
            case 1:
                out.append(committed(p, "attempt.failed", subject_id=f"att-{i - 1}"))
            case 2:
                out.append(
                    committed(
                        p, "cost.recorded", tenant=f"t{i % 4}", payload=cost(f"0.{i:018d}", input_tokens=i)
                    )
                )
            case 3:
                out.append(
                    committed(
                        p,
                        "action.started",
                        subject_id=f"act-{i}",
                        payload={"action_type": "tool_call", "name": f"tool{i % 3}"},
                        occurred_at="2026-01-01T00:00:00.000000001Z",
                    )
                )
            case 4:
                out.append(
                    committed(
                        p,
                        "action.completed",
                        subject_id=f"act-{i - 1}",
                        occurred_at=f"2026-01-01T00:00:0{i % 10}.25Z",
                    )
                )
            case 5:
                out.append(committed(p, "hitl.paused", payload={"pause_id": f"p{i}", "trigger": "x"}))
            case 6:
                out.append(
                    committed(p, "hitl.responded", payload={"pause_id": f"p{i - 1}", "decision": "edited"})
                )
            case 7:
                out.append(committed(p, f"ext.acme.kind{i % 5}"))
            case _:
                out.append(committed(p, "run.completed"))
    return out


def test_folding_a_position_again_changes_nothing():
    state = State()
    body = committed(1, "cost.recorded", payload=cost("0.5", input_tokens=3))
    fold_message(state, 1, body)
    before = render(state)
    fold_message(state, 1, body)  # a redelivery
    fold_message(state, 1, committed(1, "run.completed"))
    assert render(state) == before
    assert (
        value(parse(before), "laneledger_cost_total", tenant="acme", provider="p", model="m", currency="USD")
        == 0.5
    )


def test_cost_sums_are_exact_decimals_at_rest(tmp_path: Path):
    amounts = ["0.000000000000000001"] * 1000 + ["123456789012345678901234567890.1", "-0.25"]
    messages = [committed(p, "cost.recorded", payload=cost(a)) for p, a in enumerate(amounts, 1)]
    state = fold_all(messages)
    labels = ("acme", "p", "m", "USD")
    assert state.values["laneledger_cost"][labels] == Decimal(
        "123456789012345678901234567890.100000000000001"
    )
    assert state.values["laneledger_cost_credited"][labels] == Decimal("0.25")
    store = MetricsStore(tmp_path / "m.db")
    store.save(rows_of(state, state.take_changes()))
    store.close()
    db = sqlite3.connect(tmp_path / "m.db")
    stored = {
        metric: Decimal(text)
        for metric, text in db.execute(
            "SELECT metric, value FROM series WHERE metric LIKE 'laneledger_cost%'"
        )
    }
    assert stored == {
        "laneledger_cost": Decimal("123456789012345678901234567890.100000000000001"),
        "laneledger_cost_credited": Decimal("0.25"),
    }
    reloaded = MetricsStore(tmp_path / "m.db").load(LabelPolicy())
    assert reloaded.values["laneledger_cost"] == state.values["laneledger_cost"]


def test_durations_from_occurred_at_or_payload():
    state = fold_all(
        [
            committed(
                1,
                "action.started",
                subject_id="a",
                payload={"action_type": "tool_call", "name": "sh"},
                occurred_at="2026-01-01T01:00:00.123456789+01:00",
            ),
            committed(2, "action.completed", subject_id="a", occurred_at="2026-01-01T00:00:00.623456789Z"),
            committed(
                3, "action.started", subject_id="b", payload={"action_type": "model_call", "name": "m1"}
            ),
            committed(4, "action.failed", subject_id="b", payload={"duration_s": "42.5"}),
            # no start and no measured duration: nothing to observe
            committed(5, "action.completed", subject_id="c", payload={"name": "sh"}),
            # a terminal event that says what it was and how long it took
            committed(
                6,
                "action.completed",
                subject_id="d",
                payload={"action_type": "tool_call", "name": "sh", "duration_ms": 1500},
            ),
            # ended before it started (clock skew between producers): not observed
            committed(7, "action.started", subject_id="e", occurred_at="2026-01-01T00:00:09Z"),
            committed(8, "action.completed", subject_id="e", occurred_at="2026-01-01T00:00:01Z"),
        ]
    )
    samples = parse(render(state))
    sh = dict(action_type="tool_call", name="sh", outcome="completed")
    assert value(samples, "laneledger_action_duration_seconds_count", **sh) == 2
    assert value(samples, "laneledger_action_duration_seconds_sum", **sh) == 2.0
    assert value(samples, "laneledger_action_duration_seconds_bucket", **sh, le="0.5") == 1
    assert value(samples, "laneledger_action_duration_seconds_bucket", **sh, le="1.0") == 1
    assert value(samples, "laneledger_action_duration_seconds_bucket", **sh, le="2.5") == 2
    m1 = dict(action_type="model_call", name="m1", outcome="failed")
    assert value(samples, "laneledger_action_duration_seconds_sum", **m1) == 42.5
    assert value(samples, "laneledger_action_duration_seconds_bucket", **m1, le="30.0") == 0
    assert value(samples, "laneledger_action_duration_seconds_bucket", **m1, le="60.0") == 1
    assert total(samples, "laneledger_action_duration_seconds_count") == 3
    assert state.actions == {}


def test_open_items_rise_and_fall():
    state = State()
    steps = [
        ("attempt.requested", "x", {}, 1, 0),
        ("attempt.requested", "x", {}, 1, 0),  # requested again: still one attempt
        ("hitl.paused", "l", {"pause_id": "p1", "trigger": "t"}, 1, 1),
        ("attempt.completed", "x", {}, 0, 1),
        ("attempt.failed", "x", {}, 0, 1),  # a second terminal event closes nothing
        ("hitl.responded", "l", {"pause_id": "p1", "decision": "rejected"}, 0, 0),
        ("hitl.responded", "l", {"pause_id": "p9", "decision": "approved"}, 0, 0),
    ]
    for position, (event_type, subject, payload, unresolved, waiting) in enumerate(steps, 1):
        fold_message(state, position, committed(position, event_type, subject_id=subject, payload=payload))
        samples = parse(render(state))
        # A gauge series exists from its first rise on, and stays (at 0) after.
        assert (value(samples, "laneledger_attempts_unresolved", tenant="acme") or 0) == unresolved
        assert (value(samples, "laneledger_hitl_waiting", tenant="acme") or 0) == waiting
    assert value(samples, "laneledger_hitl_waiting", tenant="acme") == 0
    assert value(samples, "laneledger_attempts_failed_total", tenant="acme") == 1


def test_undecodable_message_is_counted_and_skipped():
    newer = json.loads(committed(3, "run.completed"))
    newer["a_field_from_a_later_ledger"] = 1  # ignored, not a reason to skip the event
    state = fold_all([b"not json", committed(2, "run.failed"), json.dumps(newer).encode()])
    samples = parse(render(state))
    assert value(samples, "laneledger_metrics_undecodable_events_total") == 1
    assert value(samples, "laneledger_runs_total", tenant="acme", outcome="failed") == 1
    assert value(samples, "laneledger_runs_total", tenant="acme", outcome="completed") == 1
    assert state.position == 3


def test_reloading_at_any_batch_boundary_equals_one_fold(tmp_path: Path):
    """Crash after any batch, or in the middle of one before its commit: the
    reloaded state refolded from its position equals folding everything once."""
    messages = mixed_ledger(400)
    expected = render(fold_all(messages, LabelPolicy(max_values=3)))
    policy = LabelPolicy(max_values=3)
    store = MetricsStore(tmp_path / "m.db")
    state = store.load(policy)
    batch = 7
    for crash_round in range(12):
        start = state.position
        stop = min(len(messages), start + batch * (crash_round % 4 + 1))
        for first in range(start, stop, batch):
            for position in range(first + 1, min(stop, first + batch) + 1):
                fold_message(state, position, messages[position - 1])
            store.save(rows_of(state, state.take_changes()))
        # Fold part of the next batch, then "crash" before its commit.
        for position in range(stop + 1, min(len(messages), stop + 3) + 1):
            fold_message(state, position, messages[position - 1])
        store.close()
        store = MetricsStore(tmp_path / "m.db")
        state = store.load(policy)
        assert state.position == stop
    for position in range(state.position + 1, len(messages) + 1):
        fold_message(state, position, messages[position - 1])
    store.save(rows_of(state, state.take_changes()))
    assert render(state) == expected
    store.close()
    assert render(MetricsStore(tmp_path / "m.db").load(policy)) == expected


def test_a_store_from_another_fold_version_is_refolded(tmp_path: Path):
    store = MetricsStore(tmp_path / "m.db")
    state = fold_all([committed(1, "run.completed")])
    store.save(rows_of(state, state.take_changes()))
    store.close()
    db = sqlite3.connect(tmp_path / "m.db")
    with db:
        db.execute("UPDATE meta SET value = 'old' WHERE key = 'fold_version'")
    db.close()
    reloaded = MetricsStore(tmp_path / "m.db").load(LabelPolicy())
    assert reloaded.position == 0 and reloaded.values["laneledger_runs"] == {}


def series_per_family(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for (name, _labels), _v in parse(text).items():
        counts[name] = counts.get(name, 0) + 1
    return counts


def test_a_flood_of_distinct_label_values_stays_bounded():
    cap = 5
    messages: list[bytes] = []
    for i in range(3000):
        p = len(messages) + 1
        if i % 3 == 0:
            messages.append(
                committed(
                    p,
                    "cost.recorded",
                    tenant=f"tenant-{i}",
                    payload={
                        "provider": f"prov-{i}",
                        "model": f"model-{i}",
                        "amount": "1",
                        "currency": f"C{i}",
                        "input_tokens": 1,
                        "output_tokens": 1,
                    },
                )
            )
        elif i % 3 == 1:
            messages.append(committed(p, f"ext.flood.kind{i}", tenant=f"tenant-{i}"))
        else:
            messages.append(
                committed(
                    p,
                    "action.completed",
                    subject_id=f"a{i}",
                    tenant=f"tenant-{i}",
                    payload={"action_type": f"x.flood.type{i}", "name": f"tool-{i}", "duration_ms": 5},
                )
            )
    state = fold_all(messages, LabelPolicy(max_values=cap))
    text = render(state)
    counts = series_per_family(text)
    samples = parse(text)
    # (cap kept + other) per capped label, multiplied over the labels of each family.
    assert counts["laneledger_cost_total"] <= (cap + 1) ** 4
    assert counts["laneledger_tokens_total"] <= (cap + 1) ** 3 * 2
    assert counts["laneledger_events_total"] <= ((cap + 1) + 2) * (cap + 1)
    buckets = 18
    assert counts["laneledger_action_duration_seconds_bucket"] <= (cap + 1) ** 2 * buckets
    assert len(state.admitted[("", "tenant")]) == cap
    assert value(samples, "laneledger_metrics_label_values", label="tenant", tenant="") == cap
    for label in ("provider", "model", "currency", "event_type", "action_type", "name"):
        # Each tenant's own budget; the tenants past the cap share "other"'s.
        scopes = {scope for scope, name in state.admitted if name == label}
        assert scopes <= {f"tenant-{i}" for i in range(3000)} | {OTHER}
        assert all(len(state.admitted[(scope, label)]) <= cap for scope in scopes)
        assert len(state.admitted[(OTHER, label)]) == cap
        assert value(samples, "laneledger_metrics_label_values", label=label, tenant=OTHER) == cap
    assert total(samples, "laneledger_events_total") == 3000  # nothing lost, only merged
    assert total(samples, "laneledger_events_total", tenant=OTHER) == 3000 - cap
    assert total(samples, "laneledger_cost_total") == 1000
    assert value(samples, "laneledger_metrics_label_overflow_total", label="tenant", tenant="") == 3000 - cap
    assert len(text) < 200_000  # the whole exposition stays small


def test_allow_lists_and_per_label_caps():
    policy = LabelPolicy(max_values=100, caps={"model": 1}, allow={"tenant": frozenset({"acme"})})
    state = fold_all(
        [
            committed(1, "cost.recorded", tenant="acme", payload=cost("1", model="a")),
            committed(2, "cost.recorded", tenant="globex", payload=cost("2", model="b")),
            committed(3, "cost.recorded", tenant="initech", payload=cost("4", model="a")),
        ],
        policy,
    )
    samples = parse(render(state))
    assert (
        value(samples, "laneledger_cost_total", tenant="acme", provider="p", model="a", currency="USD") == 1
    )
    # globex and initech are "other" tenants, and share that tenant's budget
    # of one model: globex's "b" takes it, initech's "a" is "other".
    assert value(samples, "laneledger_cost_total", tenant=OTHER, provider="p", model="b", currency="USD") == 2
    assert (
        value(samples, "laneledger_cost_total", tenant=OTHER, provider="p", model=OTHER, currency="USD") == 4
    )
    assert ("", "tenant") not in state.admitted  # an allow-list admits nothing beyond itself


def test_one_tenant_cannot_push_another_tenants_values_into_other():
    """acme floods models and event types past the cap: its own excess is
    'other'; globex's first values keep their names."""
    cap = 3
    flood = [
        committed(i + 1, "cost.recorded", tenant="acme", payload=cost("1", model=f"m{i}")) for i in range(50)
    ]
    flood += [committed(51 + i, f"ext.acme.kind{i}", tenant="acme") for i in range(50)]
    late = [
        committed(101, "cost.recorded", tenant="globex", payload=cost("2", model="globex-model")),
        committed(102, "ext.globex.kind", tenant="globex"),
    ]
    samples = parse(render(fold_all(flood + late, LabelPolicy(max_values=cap))))
    assert total(samples, "laneledger_cost_total", tenant="acme", model=OTHER) == 50 - cap
    assert total(samples, "laneledger_cost_total", tenant="globex", model="globex-model") == 2
    assert total(samples, "laneledger_events_total", tenant="globex", event_type="ext.globex.kind") == 1
    assert value(samples, "laneledger_metrics_label_overflow_total", label="model", tenant="acme") == 50 - cap
    assert value(samples, "laneledger_metrics_label_overflow_total", label="model", tenant="globex") is None


def test_core_event_types_are_never_capped():
    state = fold_all(
        [
            committed(1, "ext.a.one"),
            committed(2, "ext.a.two"),
            committed(3, "run.started"),
            committed(4, "memory.proposed"),
        ],
        LabelPolicy(max_values=1),
    )
    samples = parse(render(state))
    types = {dict(labels)["event_type"] for (name, labels) in samples if name == "laneledger_events_total"}
    assert types == {"ext.a.one", OTHER, "run.started", "memory.proposed"}


def test_lag_is_never_negative():
    assert Progress(folded=10, stream_last=25).lag == 15
    assert Progress(folded=30, stream_last=25).lag == 0
