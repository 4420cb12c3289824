"""A write that crosses tenants is refused loudly through the real sequencer:
a typed ``tenant_mismatch`` naming what crossed, counted in the sequencer's
metrics by code, and the ledger unchanged. Every path: an append with
another tenant's actor, an append published under another tenant's
subject, and the structure command that can cross (a lane whose actor is
another tenant's). A lane of globex in a session id acme uses crosses
nothing: every id is its tenant's own (spec/object-model.md, "Identity")."""

from __future__ import annotations

import msgspec
import pytest

from laneledger.contract import errors
from laneledger.sdk.client import make_event


def rejected(sequencer, code: str) -> float:
    value = sequencer._metrics.registry.get_sample_value(
        "laneledger_sequencer_append_requests_total", {"outcome": "rejected", "code": code}
    )
    return value or 0.0


def refused_commands(sequencer, op: str) -> float:
    value = sequencer._metrics.registry.get_sample_value(
        "laneledger_sequencer_commands_total", {"op": op, "outcome": "tenant_mismatch"}
    )
    return value or 0.0


async def test_cross_tenant_appends_are_typed_counted_and_change_nothing(client, sequencer, actor):
    lane = await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    stranger = await client.ensure_actor("globex", "agent:tests/main@1", "agent")

    # An append names no other tenant: another tenant's actor or lane is "not found".
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.append(
            lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=stranger.id, payload={"text": "x"})]
        )
    assert caught.value.details == {"kind": "actor", "id": stranger.id}
    assert rejected(sequencer, "entity_not_found") == 1

    disguised = msgspec.structs.replace(lane, tenant="globex")  # published under globex's subject
    with pytest.raises(errors.EntityNotFound) as caught:
        await client.append(
            disguised, 0, [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "x"})]
        )
    assert caught.value.details == {"kind": "lane", "id": lane.id}
    assert rejected(sequencer, "entity_not_found") == 2

    assert (await client.get_lane(lane.id)).last_seq == 0  # nothing was written


async def test_cross_tenant_structure_commands_are_typed_and_counted(client, sequencer, actor):
    await client.create_lane("acme", "s1", "r1", "main", actor_id=actor.id)
    stranger = await client.ensure_actor("globex", "agent:tests/main@1", "agent")

    theirs = await client.create_lane("globex", "s1", "r1", "theirs")  # globex's own session s1
    assert (await client.load_session("s1", tenant="globex")).lanes == [theirs]
    assert [lane.name for lane in (await client.load_session("s1", tenant="acme")).lanes] == ["main"]

    with pytest.raises(errors.TenantMismatch) as caught:  # acme's lane, globex's actor
        await client.create_lane("acme", "s2", "r1", "main", actor_id=stranger.id)
    assert caught.value.details["what"] == "actor"
    assert caught.value.details["tenant"] == "globex"
    assert refused_commands(sequencer, "create_lane") == 1

    with pytest.raises(errors.EntityNotFound):  # neither refusal created the lane
        await client.load_session("s2")
