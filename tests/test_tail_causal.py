"""The tail's causal tree and its ``exclude_invalidated`` reads, over HTTP
against the tail's app in-process, its read model fed by an in-process writer
(tail_fixtures.py; every answer is checked against the tail's OpenAPI
document by ``TailAPI``)."""

from __future__ import annotations

import pytest
import pytest_asyncio
from tail_fixtures import client_in_process, start_tail_in_process
from tail_support import wait_applied
from worked_example import SPINES, TENANT, record_worked_example

from laneledger.contract.model import StructureCursor
from laneledger.history.branching import fork_lane, rewind_session
from laneledger.sdk.client import LedgerClient, make_event

client = pytest.fixture(client_in_process, name="client")
start_tail = pytest_asyncio.fixture(start_tail_in_process, name="start_tail")

TREE = "/api/v1/sessions/{}/causal-tree"


async def test_the_causal_tree_of_the_worked_example_with_a_rewind_and_a_fork(
    client: LedgerClient, start_tail
) -> None:
    tail = await start_tail()
    ex = await record_worked_example(client)
    pos = ex.positions
    rewinder = (await client.ensure_actor(TENANT, "human:dusk", "human")).id
    rewound = await rewind_session(client, ex.session_id, ex.ids[5], actor_id=rewinder)
    fork = await fork_lane(client, ex.lanes["main"].id, 1, "main-retry", actor_id=ex.actors["main"])
    last = (await client.load_lane(fork.id)).events[0].position
    await wait_applied(tail.service, last)

    tree = (await tail.api.get(TREE.format(ex.session_id))).json()
    nodes = {n["position"]: n for n in tree["nodes"]}
    assert list(nodes) == [*pos.values(), rewound.receipt.positions[0], last]
    korg_seq = {p: s for s, p in pos.items()}
    causes = {korg_seq[p]: korg_seq.get(n["cause"]) for p, n in nodes.items() if p in korg_seq}
    assert causes == {1: None, 2: 1, 3: 2, 4: 3, 5: 4, 6: 2, 7: 6}  # §2b, as committed
    assert [nodes[pos[s]]["role"] for s in range(1, 8)] == [
        "prompt",
        "inference",
        "prompt",
        "inference",
        "tool",
        "tool",
        "inference",
    ]
    assert nodes[pos[5]]["summary"] == "Read" and nodes[pos[5]]["cause_id"] == ex.ids[4]
    assert [p for p, n in nodes.items() if n["invalidated"]] == [pos[6], pos[7]]
    assert nodes[last]["cause"] == pos[2] and nodes[last]["event_type"] == "lane.created"
    assert tree["roots"] == [pos[1]]
    assert tree["rewinds"] == [
        {
            "position": rewound.receipt.positions[0],
            "actor_id": rewinder,
            "target_position": pos[5],
            "invalidated": [[pos[6], pos[7]]],
            "invalidated_count": 2,
        }
    ]
    spines = {s["name"]: s for s in tree["spines"]}
    assert set(spines) == set(SPINES.values()) | {"main-retry"}
    sub = spines[SPINES["sub"]]
    assert (sub["kind"], sub["events"], sub["first_cause"]) == ("subagent", 3, pos[2])
    assert sub["spawned_by"] is None  # Korg tool calls do not name their spawn
    assert spines[SPINES["main"]]["first_cause"] == pos[1]
    assert spines[SPINES["human"]]["first_cause"] is None
    assert spines["main-retry"]["forked_from"]["position"] == pos[2]
    assert tree["structure_complete"] and not tree["has_more"] and tree["next_cursor"] == last

    # excluding, and paged: the pages join up to the whole tree
    seen, cursor = [], 0
    while True:
        page = (
            await tail.api.get(
                TREE.format(ex.session_id),
                params={"exclude_invalidated": "true", "limit": "3", "cursor": str(cursor)},
            )
        ).json()
        seen += [n["position"] for n in page["nodes"]]
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    assert seen == [p for p in nodes if p not in (pos[6], pos[7])]

    # history and the live tail leave the same events out on request
    session = (
        await tail.api.get(f"/api/v1/sessions/{ex.session_id}", params={"exclude_invalidated": "true"})
    ).json()
    assert [e["position"] for e in session["events"]] == seen
    full = (await tail.api.get(f"/api/v1/sessions/{ex.session_id}/runs/r1")).json()
    assert len(full["events"]) == len(nodes)
    async with tail.api.stream({"session_id": ex.session_id, "exclude_invalidated": "true"}) as s:
        frames = await s.collect(len(seen))
    assert [f.position for f in frames] == seen

    # bad requests are typed; another session is a 404
    for params, parameter in (
        ({"exclude_invalidated": "1"}, "exclude_invalidated"),
        ({"limit": "0"}, "limit"),
        ({"bogus": "x"}, "bogus"),
    ):
        answer = await tail.api.get(TREE.format(ex.session_id), params=params)
        assert answer.status == 400 and answer.error["details"]["parameter"] == parameter
    answer = await tail.api.get(TREE.format("no-such-session"))
    assert answer.status == 404 and answer.error["code"] == "entity_not_found"
    # (the live tail without session_id: tests/test_tail_rewind_reads.py)


async def test_a_live_tail_leaves_out_what_a_rewind_committed_while_it_is_open(
    client: LedgerClient, start_tail
) -> None:
    tail = await start_tail()
    ex = await record_worked_example(client)
    pos = ex.positions
    rewinder = (await client.ensure_actor(TENANT, "human:dusk", "human")).id
    await wait_applied(tail.service, pos[7])
    async with tail.api.stream({"session_id": ex.session_id, "exclude_invalidated": "true"}) as s:
        assert [f.position for f in await s.collect(7)] == list(pos.values())
        rewound = await rewind_session(client, ex.session_id, ex.ids[3], actor_id=rewinder)
        main = ex.lanes["main"]
        late = make_event(
            main.id,
            "ext.korg.agent_tool_call",
            actor_id=ex.actors["main"],
            causation_id=ex.ids[2],
            payload={
                "source_agent": SPINES["main"],
                "tool_name": "Bash",
                "args": {},
                "result": {},
                "success": True,
                "duration_ms": 1,
                "triggered_by": pos[2],
                "payload_refs": [],
            },
        )
        receipt = await client.append(main, (await client.get_lane(main.id)).last_seq, [late])
        frames = await s.collect(2)
    # the rewind frame itself, then the new event (which no rewind covers)
    assert [f.position for f in frames] == [rewound.receipt.positions[0], receipt.positions[0]]
    assert frames[0].json()["payload"]["invalidated"] == [[pos[4], pos[7]]]


async def test_native_events_get_roles_from_their_actions(
    client: LedgerClient, actor, start_tail, monkeypatch
) -> None:
    tail = await start_tail()
    lane = await client.create_lane(TENANT, "native", "r1", "main", actor_id=actor.id)
    turn = await client.create_turn(lane.id, 1)
    model = await client.create_action(
        lane.id, turn.id, "model_call", "claude-sonnet", effect="none", idempotency="not_applicable"
    )
    tool = await client.create_action(
        lane.id, turn.id, "tool_call", "shell", effect="write", idempotency="none"
    )
    attempt = await client.create_attempt(lane.id, tool.id, 1)
    started = make_event(lane.id, "run.started", actor_id=actor.id, subject_id="r1")
    inference = make_event(
        lane.id, "action.completed", actor_id=actor.id, subject_id=model.id, causation_id=started["id"]
    )
    call = make_event(
        lane.id, "attempt.requested", actor_id=actor.id, subject_id=attempt.id, causation_id=inference["id"]
    )
    # laneledger.sdk.spine's shape: the attempt names its action type in its payload
    done = make_event(
        lane.id,
        "attempt.completed",
        actor_id=actor.id,
        subject_id=attempt.id,
        causation_id=call["id"],
        payload={"action_type": "tool_call", "name": "shell"},
    )
    receipt = await client.append(lane, 0, [started, inference, call, done])
    await wait_applied(tail.service, receipt.positions[-1])
    tree = (await tail.api.get(TREE.format("native"))).json()
    assert tree["structure_complete"]
    assert [(n["role"], n["name"], n["summary"]) for n in tree["nodes"]] == [
        ("other", "run.started", "run.started"),
        ("inference", "claude-sonnet", "action.completed claude-sonnet"),
        ("tool", "shell", "attempt.requested shell"),
        ("tool", "shell", "attempt.completed shell"),
    ]
    assert [n["cause"] for n in tree["nodes"]] == [None, *receipt.positions[:3]]

    # a sub-agent whose prompt names its spawning call (laneledger.sdk.spine)
    sub = await client.create_lane(
        TENANT, "native", "r1", "sub-1", actor_id=actor.id, kind="subagent", parent_lane_id=lane.id
    )
    prompt = make_event(
        sub.id,
        "context.prompt_composed",
        actor_id=actor.id,
        causation_id=inference["id"],
        payload={"prompt_kind": "subagent", "spawned_by": call["id"]},
    )
    sub_receipt = await client.append(sub, 0, [prompt])
    await wait_applied(tail.service, sub_receipt.positions[0])
    tree = (await tail.api.get(TREE.format("native"))).json()
    spine = next(s for s in tree["spines"] if s["lane_id"] == sub.id)
    assert (spine["first_cause"], spine["spawned_by"]) == tuple(receipt.positions[1:3])
    assert spine["parent_lane_id"] == lane.id and tree["nodes"][-1]["role"] == "prompt"

    # the structure is read page by page (load_structure), so however large the
    # session, every role still comes from its action: here one row per page
    real_page = tail.service.ledger.load_structure_page
    pages = []

    async def one_row_pages(session_id, run_id=None, after=None, limit=1000, *, tenant=None):
        after = StructureCursor() if after is None else after  # the real default
        pages.append(after)
        return await real_page(session_id, run_id, after, 1, tenant=tenant)

    monkeypatch.setattr(tail.service.ledger, "load_structure_page", one_row_pages)
    tree = (await tail.api.get(TREE.format("native"))).json()
    assert len(pages) == 2  # one lane, turn, action and attempt a page: two pages
    assert tree["structure_complete"] and tree["spines"][0]["name"] == "main"
    assert [n["role"] for n in tree["nodes"]] == ["other", "inference", "tool", "tool", "prompt"]
