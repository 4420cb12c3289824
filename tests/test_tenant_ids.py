"""Every id is its tenant's own, past the sequencer too (issue 19;
spec/object-model.md, "Identity"; spec/tail.md, "Access").

acme and globex each have a session ``shared`` with a lane of the same lane
id, the same event ids and the same turn id. Each tenant's token reads only
its own through every route that names a session or a lane; the operator
token is asked to name the tenant (``tenant=``) and then reads that one;
both chains verify, on the tail, in the ledger file and in the metrics fold.

Real parts: nats-server, the sequencer, the checkpoint service and the tail
on a real HTTP port.
"""

from __future__ import annotations

import pytest
import pytest_asyncio
from tail_support import wait_applied

from laneledger.audit.ledger import audit_ledger
from laneledger.contract import errors
from laneledger.contract.ids import new_id
from laneledger.contract.model import Anchor
from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.client import LaneRecorder
from laneledger.services.metrics.fold import State, fold_message

pytestmark = pytest.mark.nats

TOKENS = {"acme": "acme-token-0123456789abcdef", "globex": "globex-token-0123456789abcdef"}
OPERATOR = "operator-token-0123456789abcdef"
SESSION = "shared"
FORMAT = "application/vnd.tests.state+json;version=1"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest_asyncio.fixture
async def twins(client, sequencer, start_tail, tmp_path):
    """The two tenants' look-alike sessions, and a tail with their tokens."""
    lane_id, turn_id, event_ids = new_id(), new_id(), [new_id(), new_id(), new_id()]
    last = 0
    for tenant in ("acme", "globex"):
        who = await client.ensure_actor(tenant, "agent:twin/main@1", "agent")
        lane = await LaneRecorder.open(
            client, tenant, SESSION, "r1", "main", actor_id=who.id, lane_id=lane_id
        )
        await client.create_turn(lane_id, 1, turn_id=turn_id, tenant=tenant)
        receipt = await lane.append(
            [
                lane.event("run.started", actor_id=who.id, subject_id="r1", event_id=event_ids[0]),
                lane.event("turn.started", actor_id=who.id, subject_id=turn_id, event_id=event_ids[1]),
                lane.event(
                    "stream.text_delta",
                    actor_id=who.id,
                    payload={"text": f"{tenant} says"},
                    causation_id=event_ids[1],
                    event_id=event_ids[2],
                ),
            ]
        )
        assert receipt.event_ids == event_ids
        last = receipt.positions[-1]
    tail = await start_tail(access=AccessPolicy.from_tokens(TOKENS, operator=OPERATOR))
    await wait_applied(tail.service, last)
    return {"tail": tail, "lane_id": lane_id, "db": tmp_path / "ledger.db", "last": last}


ROUTES = (
    "/api/v1/sessions/{session}",
    "/api/v1/sessions/{session}/runs/r1",
    "/api/v1/sessions/{session}/runs/r1/inspection",
    "/api/v1/sessions/{session}/causal-tree",
    "/api/v1/sessions/{session}/activity",
    "/api/v1/sessions/{session}/timeline",
    "/api/v1/lanes/{lane}/events",
)


def path_of(route: str, twins) -> str:
    return route.format(session=SESSION, lane=twins["lane_id"])


async def test_each_tenant_reads_its_own_look_alike(twins):
    api = twins["tail"].api
    for tenant, token in TOKENS.items():
        other = next(t for t in TOKENS if t != tenant).encode()
        for route in ROUTES:
            answer = await api.request("GET", path_of(route, twins), headers=bearer(token))
            assert answer.status == 200, (route, answer.body)
            assert other not in answer.body, (tenant, route)
            if "says" in answer.body.decode():
                assert f"{tenant} says".encode() in answer.body, route
        session = (await api.request("GET", f"/api/v1/sessions/{SESSION}", headers=bearer(token))).json()
        assert session["tenant"] == tenant and len(session["events"]) == 3
        assert [lane["tenant"] for lane in session["lanes"]] == [tenant]
        tree = (
            await api.request("GET", f"/api/v1/sessions/{SESSION}/causal-tree", headers=bearer(token))
        ).json()
        # The delta's cause is its own tenant's turn.started, not the other's of the same id.
        assert [n["cause"] for n in tree["nodes"]] == [None, None, tree["nodes"][1]["position"]]
        report = (
            await api.request(
                "GET", "/api/v1/verify", params={"lane_id": twins["lane_id"]}, headers=bearer(token)
            )
        ).json()
        assert report["scope"] == "lane" and report["intact"] and report["events"] == 3


async def test_the_operator_names_the_tenant(twins):
    api = twins["tail"].api
    for route in ROUTES:
        answer = await api.request("GET", path_of(route, twins), headers=bearer(OPERATOR))
        assert answer.status == 400, route
        error = answer.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["details"]["parameter"] == "tenant"
        assert error["details"]["tenants"] == ["acme", "globex"]
        for tenant in TOKENS:
            named = await api.request(
                "GET", path_of(route, twins), params={"tenant": tenant}, headers=bearer(OPERATOR)
            )
            assert named.status == 200, (route, named.body)
            other = next(t for t in TOKENS if t != tenant)
            assert f"{other} says".encode() not in named.body, route
    # A tenant token naming the other tenant is refused, whatever exists.
    answer = await api.request(
        "GET", f"/api/v1/sessions/{SESSION}", params={"tenant": "globex"}, headers=bearer(TOKENS["acme"])
    )
    assert answer.status == 403


async def test_both_look_alikes_verify_everywhere(twins):
    api = twins["tail"].api
    report = (await api.request("GET", "/api/v1/verify", headers=bearer(OPERATOR))).json()
    assert report["intact"] and report["scope"] == "ledger"
    assert report["events"] == twins["last"] and report["lanes"] == 2
    audit = audit_ledger(twins["db"])
    assert audit.lanes == 2 and set(audit.lane_tips) == {(t, twins["lane_id"]) for t in TOKENS}
    assert audit.causal_links == 2


def test_the_metrics_fold_keeps_look_alike_attempts_apart():
    # Two tenants' attempts of one id: each opens and closes its own.
    state = State()
    for position, (tenant, event_type) in enumerate(
        (("acme", "attempt.requested"), ("globex", "attempt.requested"), ("acme", "attempt.completed")), 1
    ):
        body = (
            f'{{"event_type":"{event_type}","subject_id":"att-1","occurred_at":"2026-12-02T00:00:00Z",'
            f'"tenant":"{tenant}","session_id":"s","payload":{{}}}}'
        )
        fold_message(state, position, body.encode())
    assert state.values["laneledger_attempts_unresolved"] == {("acme",): 0, ("globex",): 1}


async def test_checkpoints_anchor_in_their_own_tenants_lane(twins, client, checkpoint_service, checkpoints):
    # The look-alike lanes have the same id and the same event ids, so an
    # anchor names both: a trusted save is told to name the tenant, and then
    # belongs to that tenant's lane; recovery replays that tenant's events.
    lane = await client.get_lane(twins["lane_id"], tenant="globex")
    page = await client.load_lane(lane.id, 0, tenant="globex")
    anchor = Anchor(lane_id=lane.id, seq=2, event_id=page.events[1].id)
    with pytest.raises(errors.InvalidRequest) as ambiguous:
        await checkpoints.save("k", expected_revision=0, format=FORMAT, state={}, anchor=anchor)
    assert ambiguous.value.details["path"] == "$.checkpoint.tenant"
    assert ambiguous.value.details["tenants"] == ["acme", "globex"]
    for tenant in TOKENS:
        saved = await checkpoints.save(
            f"k-{tenant}", expected_revision=0, format=FORMAT, state={}, anchor=anchor, tenant=tenant
        )
        assert saved.tenant == tenant
        plan = await checkpoints.recovery_plan(key=f"k-{tenant}")
        assert plan.lane_id == lane.id and plan.after_seq == 2
        assert [e.tenant for e in plan.events] == [tenant]
        assert plan.events[0].payload == {"text": f"{tenant} says"}
    # Both tenants' checkpoints are anchored in a lane of this id: by lane,
    # the operator names the tenant, then recovers that tenant's.
    with pytest.raises(errors.InvalidRequest) as which:
        await checkpoints.recovery_plan(lane_id=lane.id)
    assert (which.value.details["path"], which.value.details["tenants"]) == ("$.tenant", list(TOKENS))
    for tenant in TOKENS:
        plan = await checkpoints.recovery_plan(lane_id=lane.id, tenant=tenant)
        assert plan.checkpoint is not None and plan.checkpoint.key == f"k-{tenant}"
        assert [e.tenant for e in plan.events] == [tenant]
