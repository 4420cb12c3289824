"""The two read endpoints behind the console's cost and session views:
``/api/v1/costs`` (exact decimal totals by currency, model and tenant, a
series by time bucket) and ``/api/v1/sessions/{id}/activity`` (outcome,
duration and cost of each turn, action and attempt; pending pauses), with
their errors; and that a tenant token narrows both. Every answer is checked
against the OpenAPI document by ``TailAPI``."""

from __future__ import annotations

import pytest
import pytest_asyncio
from tail_fixtures import client_in_process, start_tail_in_process
from tail_support import new_lane, wait_applied

from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.client import make_event

# Route logic: the tail's app in-process over an in-process writer (tail_fixtures.py).
client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

pytestmark = pytest.mark.timeout(90)


def cost(lane, actor, model: str, amount: str, when: str, currency: str = "USD", **extra) -> dict:
    return make_event(
        lane.id,
        "cost.recorded",
        actor_id=actor.id,
        occurred_at=when,
        payload={
            "provider": "anthropic",
            "model": model,
            "amount": amount,
            "currency": currency,
            "input_tokens": 10,
            "output_tokens": 2,
            **extra,
        },
    )


async def _costs(client, actor) -> int:
    beta_actor = await client.ensure_actor("beta", "agent:tests/beta@1", "agent")
    a1 = await new_lane(client, actor, "s1", "r1")
    a2 = await new_lane(client, actor, "s2", "r1")
    b1 = await new_lane(client, beta_actor, "s3", "r1", tenant="beta")
    await client.append(
        a1,
        0,
        [
            cost(a1, actor, "sonnet", "0.1", "2026-11-30T10:00:01Z"),
            cost(a1, actor, "sonnet", "0.2", "2026-11-30T10:00:59Z"),
            cost(a1, actor, "haiku", "0.003", "2026-11-30T10:01:30Z"),
            cost(a1, actor, "sonnet", "5", "2026-11-30T10:02:31Z", currency="EUR"),
        ],
    )
    await client.append(a2, 0, [cost(a2, actor, "haiku", "1.000001", "2026-11-30T10:00:30Z")])
    receipt = await client.append(
        b1,
        0,
        [
            cost(b1, beta_actor, "sonnet", "7", "2026-11-30T10:00:10Z"),
            make_event(b1.id, "stream.text_delta", actor_id=beta_actor.id, payload={"text": "x"}),
        ],
    )
    return receipt.positions[-1]


async def test_costs_totals_groups_and_series_are_exact(client, actor, start_tail):
    tail = await start_tail()
    await wait_applied(tail.service, await _costs(client, actor))
    answer = await tail.api.get("/api/v1/costs", params={"bucket_s": "60"})
    assert answer.status == 200
    report = answer.json()
    assert report["events"] == 6 and report["bucket_s"] == 60
    assert report["tenant"] is None and report["session_id"] is None
    assert [(t["currency"], t["amount"], t["events"], t["input_tokens"]) for t in report["totals"]] == [
        ("EUR", "5", 1, 10),
        ("USD", "8.303001", 5, 50),
    ]
    assert [(m["model"], m["currency"], m["amount"]) for m in report["by_model"]] == [
        ("haiku", "USD", "1.003001"),
        ("sonnet", "EUR", "5"),
        ("sonnet", "USD", "7.3"),
    ]
    assert [(t["tenant"], t["currency"], t["amount"]) for t in report["by_tenant"]] == [
        ("acme", "EUR", "5"),
        ("acme", "USD", "1.303001"),
        ("beta", "USD", "7"),
    ]
    assert [(p["start"], p["model"], p["tenant"], p["currency"], p["amount"]) for p in report["series"]] == [
        ("2026-11-30T10:00:00Z", "haiku", "acme", "USD", "1.000001"),
        ("2026-11-30T10:00:00Z", "sonnet", "acme", "USD", "0.3"),
        ("2026-11-30T10:00:00Z", "sonnet", "beta", "USD", "7"),
        ("2026-11-30T10:01:00Z", "haiku", "acme", "USD", "0.003"),
        ("2026-11-30T10:02:00Z", "sonnet", "acme", "EUR", "5"),
    ]

    # Narrowed to a session and run; without bucket_s the bucket is chosen:
    # 150 s of spending is 151 buckets of 1 s, 31 of 5 s.
    one = (await tail.api.get("/api/v1/costs", params={"session_id": "s1", "run_id": "r1"})).json()
    assert one["events"] == 4 and one["session_id"] == "s1"
    assert one["bucket_s"] == 5
    beta = (await tail.api.get("/api/v1/costs", params={"tenant": "beta"})).json()
    assert [t["amount"] for t in beta["totals"]] == ["7"] and beta["bucket_s"] == 1
    none = (await tail.api.get("/api/v1/costs", params={"tenant": "nobody"})).json()
    assert none["events"] == 0 and none["totals"] == [] and none["series"] == []

    for params, name in (
        ({"bucket_s": "0"}, "bucket_s"),
        ({"bucket_s": "x"}, "bucket_s"),
        ({"bucket_s": str(31 * 86400 + 1)}, "bucket_s"),
        ({"model": "a"}, "model"),
        ({"tenant": ""}, "tenant"),
    ):
        bad = await tail.api.get("/api/v1/costs", params=params)
        assert bad.status == 400 and bad.error["details"]["parameter"] == name, params


async def test_a_tenant_token_sees_its_own_costs_and_sessions_only(client, actor, start_tail):
    acme_token, beta_token = "acme-token-0123456789", "beta-token-0123456789"
    tail = await start_tail(access=AccessPolicy.from_tokens({"acme": acme_token, "beta": beta_token}))
    await wait_applied(tail.service, await _costs(client, actor))
    as_beta = {"Authorization": f"Bearer {beta_token}"}
    report = (await tail.api.get("/api/v1/costs", headers=as_beta)).json()
    assert report["tenant"] == "beta" and [t["amount"] for t in report["totals"]] == ["7"]
    other = await tail.api.get("/api/v1/costs", params={"tenant": "acme"}, headers=as_beta)
    assert other.status == 403 and other.error["code"] == "tenant_mismatch"
    assert (await tail.api.get("/api/v1/costs")).status == 401
    assert (await tail.api.get("/api/v1/sessions/s3/activity", headers=as_beta)).status == 200
    hidden = await tail.api.get("/api/v1/sessions/s1/activity", headers=as_beta)
    assert hidden.status == 404 and hidden.error["details"] == {"kind": "session", "id": "s1"}


async def test_session_activity_outcomes_durations_costs_and_pauses(client, actor, start_tail):
    tail = await start_tail()
    lane = await new_lane(client, actor, "s1", "r1")
    turn = await client.create_turn(lane.id, 1)
    action = await client.create_action(
        lane.id, turn.id, "tool_call", "Edit", effect="write", idempotency="none"
    )
    first = await client.create_attempt(lane.id, action.id, 1)
    second = await client.create_attempt(lane.id, action.id, 2)

    def e(event_type, subject, when, **payload):
        return make_event(
            lane.id,
            event_type,
            actor_id=actor.id,
            subject_id=subject,
            occurred_at=f"2026-11-30T10:00:{when}Z",
            payload=payload,
        )

    receipt = await client.append(
        lane,
        0,
        [
            e("turn.started", turn.id, "00.000"),
            e("action.started", action.id, "00.000"),
            e("attempt.requested", first.id, "01.000"),
            e("attempt.failed", first.id, "01.125"),
            e(
                "cost.recorded",
                action.id,
                "01.125",
                provider="p",
                model="m",
                amount="0.5",
                currency="USD",
                attempt_id=first.id,
                action_id=action.id,
            ),
            e("attempt.requested", second.id, "02.000"),
            e("hitl.paused", lane.id, "03.000", pause_id="p1", trigger="approve edit"),
            e("hitl.paused", lane.id, "04.000", pause_id="p2", trigger="approve delete"),
            e("hitl.responded", lane.id, "05.000", pause_id="p1", decision="approved"),
            e("turn.completed", turn.id, "06.500"),
        ],
    )
    await wait_applied(tail.service, receipt.positions[-1])
    answer = await tail.api.get("/api/v1/sessions/s1/activity")
    assert answer.status == 200
    got = answer.json()
    p = receipt.positions
    assert got["turns"] == [
        {
            "id": turn.id,
            "lane_id": lane.id,
            "run_id": "r1",
            "started_position": p[0],
            "started_at": "2026-11-30T10:00:00.000Z",
            "outcome": "completed",
            "ended_position": p[9],
            "ended_at": "2026-11-30T10:00:06.500Z",
            "duration_ms": 6500,
            "cost": [],
        }
    ]
    (act,) = got["actions"]
    assert act["outcome"] is None and act["cost"] == [{"currency": "USD", "amount": "0.5"}]
    attempts = {a["id"]: a for a in got["attempts"]}
    assert attempts[first.id]["outcome"] == "failed"
    assert attempts[first.id]["duration_ms"] == 125
    assert attempts[first.id]["cost"] == [{"currency": "USD", "amount": "0.5"}]
    assert attempts[second.id]["outcome"] is None  # unresolved
    assert attempts[second.id]["started_position"] == p[5]
    assert attempts[second.id]["duration_ms"] is None
    assert [(x["pause_id"], x["decision"], x["responded_position"]) for x in got["pauses"]] == [
        ("p1", "approved", p[8]),
        ("p2", None, None),
    ]
    assert got["cost"] == [{"currency": "USD", "amount": "0.5"}]

    # Sums stay exact past Decimal's default 28 significant digits (here 29).
    exact = [
        {"currency": "USD", "amount": "0.5"},
        {"currency": "XAU", "amount": "10000000000.000000000000000001"},
    ]
    more = await client.append(
        lane,
        receipt.last_seq,
        [
            e(
                "cost.recorded",
                action.id,
                "07.000",
                provider="p",
                model="m",
                amount=amount,
                currency="XAU",
                action_id=action.id,
            )
            for amount in ("10000000000", "0.000000000000000001")
        ],
    )
    await wait_applied(tail.service, more.positions[-1])
    got = (await tail.api.get("/api/v1/sessions/s1/activity")).json()
    assert got["cost"] == got["actions"][0]["cost"] == exact
    costs = (await tail.api.get("/api/v1/costs", params={"session_id": "s1"})).json()
    assert [{"currency": t["currency"], "amount": t["amount"]} for t in costs["totals"]] == exact
    assert [m["amount"] for m in costs["by_model"]] == [t["amount"] for t in exact]
    assert [p["amount"] for p in costs["series"] if p["currency"] == "XAU"] == [exact[1]["amount"]]

    missing = await tail.api.get("/api/v1/sessions/nope/activity")
    assert missing.status == 404 and missing.error["details"] == {"kind": "session", "id": "nope"}
    bad = await tail.api.get("/api/v1/sessions/s1/activity", params={"limit": "3"})
    assert bad.status == 400 and bad.error["details"]["parameter"] == "limit"
