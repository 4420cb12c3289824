"""Rewind (Korg §3) and lane forks: the pure invalidation rules, and recording
them through the real sequencer."""

from __future__ import annotations

import msgspec
import pytest
from ledger_fixtures import client_of_ledger_under_test
from worked_example import TENANT, record_worked_example

from laneledger.contract.errors import EntityConflict, EntityNotFound, InvalidPayload, InvalidRequest
from laneledger.contract.model import ForkPoint
from laneledger.contract.vocabulary import check_payload
from laneledger.history.branching import fork_lane, rewind_session
from laneledger.history.causality import Graph, Node, Subject, nodes_of, role_of
from laneledger.history.rewind import Invalidation, invalidated, ranges
from laneledger.sdk.client import LedgerClient, make_event

# The tests that take a client run in-process and over NATS.
client = pytest.fixture(client_of_ledger_under_test, name="client")


def node(position: int, lane: str, role: str, cause: int | None, name: str = "x") -> Node:
    return Node(
        position=position,
        event_id=f"e{position}",
        lane_id=lane,
        seq=position,
        actor_id=lane,
        event_type="ext.korg.agent_tool_call",
        role=role,
        name=name,
        summary=name,
        cause_id=None if cause is None else f"e{cause}",
        cause=cause,
    )


# Korg §2b's worked example, as nodes.
WORKED = Graph.of(
    [
        node(1, "human", "prompt", None, "user_prompt"),
        node(2, "main", "inference", 1, "llm_inference"),
        node(3, "sub", "prompt", 2, "user_prompt"),
        node(4, "sub", "inference", 3, "llm_inference"),
        node(5, "sub", "tool", 4, "Read"),
        node(6, "main", "tool", 2, "Agent"),
        node(7, "main", "inference", 6, "llm_inference"),
    ]
)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (5, [6, 7]),
        (3, [4, 5, 6, 7]),
        (2, [3, 4, 5, 6, 7]),  # §3, verbatim
        (7, []),
        (6, [7]),
        (4, [5, 6, 7]),
        (1, [2, 3, 4, 5, 6, 7]),
    ],
)
def test_the_worked_example_of_section_3(target: int, expected: list[int]) -> None:
    assert invalidated(WORKED, target) == expected


def test_rule_2_invalidates_the_inference_that_consumed_a_sibling_tool_result() -> None:
    # One round: the inference at 2 calls Read (3) and Edit (4); the next
    # inference (5) points at 2 (§2a) and read both results. No causation
    # edge leads from 3 to 5: a topology-only rewind would invalidate nothing.
    graph = Graph.of(
        [
            node(1, "main", "prompt", None),
            node(2, "main", "inference", 1),
            node(3, "main", "tool", 2, "Read"),
            node(4, "main", "tool", 2, "Edit"),
            node(5, "main", "inference", 2),
            node(6, "main", "tool", 5, "Bash"),
        ]
    )
    assert invalidated(graph, 3) == [5, 6]
    assert invalidated(graph, 4) == [5, 6]
    assert invalidated(graph, 5) == [6]


def test_rule_4_reaches_the_parent_when_the_spawn_was_recorded_before_the_sub_agent() -> None:
    # A harness that records the spawn call when it is made (3) and points the
    # sub-agent's first event at it: rewinding inside the sub-agent keeps the
    # spawn call but invalidates what consumed its return value (6), and
    # rule 3 makes the spawn call own the whole sub-agent.
    graph = Graph.of(
        [
            node(1, "main", "prompt", None),
            node(2, "main", "inference", 1),
            node(3, "main", "tool", 2, "Agent"),
            node(4, "sub", "prompt", 3),
            node(5, "sub", "tool", 4, "Read"),
            node(6, "main", "inference", 2),
        ]
    )
    assert invalidated(graph, 5) == [6]
    assert invalidated(graph, 3) == [4, 5, 6]
    assert graph.spawners == {"sub": [3]}


def test_two_sub_agents_of_one_inference_each_link_to_every_named_spawn() -> None:
    graph = Graph.of(
        [
            node(1, "main", "prompt", None),
            node(2, "main", "inference", 1),
            node(3, "a", "prompt", 2),
            node(4, "b", "prompt", 2),
            node(5, "main", "tool", 2, "Grep"),
            node(6, "main", "tool", 2, "Agent"),
            node(7, "main", "tool", 2, "Agent"),
            node(8, "main", "inference", 7),
        ]
    )
    assert graph.spawners == {"a": [6, 7], "b": [6, 7]}
    assert invalidated(graph, 3) == [6, 7, 8]  # not the unrelated Grep (5)


def test_bad_targets_are_typed_errors() -> None:
    with pytest.raises(EntityNotFound):
        invalidated(WORKED, 99)
    rewound = Graph.of(
        [*WORKED.nodes.values(), Node(8, "e8", "main", 8, "main", "session.rewound", "rewind", "r", "r")]
    )
    with pytest.raises(InvalidRequest):
        invalidated(rewound, 8)
    assert invalidated(rewound, 5) == [6, 7]  # the rewind event itself is never invalidated


def test_roles_of_native_and_korg_events() -> None:
    model, tool = Subject("model_call", "claude"), Subject("tool_call", "Bash")
    assert role_of("attempt.completed", {}, model) == ("inference", "claude")
    assert role_of("attempt.requested", {}, tool) == ("tool", "Bash")
    assert role_of("cost.recorded", {}, None) == ("other", "cost.recorded")
    assert role_of("ext.korg.agent_tool_call", {"tool_name": "user_prompt"}, None)[0] == "prompt"
    assert role_of("ext.korg.agent_tool_call", {"tool_name": 5}, None)[0] == "other"


def test_ranges_span_only_this_sessions_events() -> None:
    # Positions 4, 6, 9 belong to other sessions; 7 to this one, not invalidated.
    assert ranges([1, 2, 3, 5, 7, 8, 10], {3, 5, 8, 10}) == [[3, 5], [8, 10]]
    seen = Invalidation([{"invalidated": [[3, 5]]}, {"invalidated": [[8, 10], [5, 6]]}])
    assert seen.spans() == [[3, 6], [8, 10]] and seen.rewinds == 2
    assert [p for p in range(12) if p in seen] == [3, 4, 5, 6, 8, 9, 10]
    assert not Invalidation()


def test_the_rewound_payload_shape_is_checked() -> None:
    good = {
        "target_event_id": "e5",
        "target_position": 5,
        "as_of_position": 9,
        "invalidated": [[6, 7], [9, 9]],
        "invalidated_count": 3,
    }
    check_payload("session.rewound", good)
    for field, bad in [
        ("invalidated", [[5, 7]]),
        ("invalidated", [[6, 10]]),
        ("invalidated", [[8, 9], [6, 7]]),
        ("invalidated_count", 99),
        ("as_of_position", 4),
    ]:
        with pytest.raises(InvalidPayload) as err:
            check_payload("session.rewound", {**good, field: bad})
        assert err.value.details["field"] == f"payload.{field}"


# -- through the sequencer -----------------------------------------------------------------


async def test_rewinds_of_the_worked_example_are_recorded_and_never_delete(client: LedgerClient) -> None:
    ex = await record_worked_example(client)
    pos = ex.positions
    assert list(pos.values()) == list(range(pos[1], pos[1] + 7))
    rewinder = (await client.ensure_actor(TENANT, "human:dusk", "human")).id
    expected = {5: [6, 7], 3: [4, 5, 6, 7], 2: [3, 4, 5, 6, 7]}
    recorded = []
    for target, korg_seqs in expected.items():
        done = await rewind_session(
            client, ex.session_id, ex.ids[target], actor_id=rewinder, reason=f"rewind to {target}"
        )
        p = done.payload
        assert p["target_position"] == pos[target] and p["target_event_id"] == ex.ids[target]
        assert p["invalidated"] == [[pos[korg_seqs[0]], pos[korg_seqs[-1]]]]
        assert p["invalidated_count"] == len(korg_seqs)
        assert done.lane_id == ex.lanes["sub" if target in (3, 5) else "main"].id
        recorded.append(done.receipt.positions[0])

    view = await client.load_session(ex.session_id)
    assert len(view.events) == 10  # nothing deleted: 7 calls and 3 rewinds
    rewinds = [e for e in view.events if e.event_type == "session.rewound"]
    assert [e.position for e in rewinds] == recorded
    assert all(e.subject_id == ex.session_id and e.actor_id == rewinder for e in rewinds)
    seen = Invalidation(msgspec.to_builtins(e.payload) for e in rewinds)
    assert [e.position for e in view.events if e.position not in seen] == [pos[1], pos[2], *recorded]

    # by position too, and a dry run records nothing
    dry = await rewind_session(client, ex.session_id, pos[5], actor_id=rewinder, dry_run=True)
    assert dry.receipt is None and dry.payload["invalidated"] == [[pos[6], pos[7]]]
    assert len((await client.load_session(ex.session_id)).events) == 10
    with pytest.raises(EntityNotFound):
        await rewind_session(client, ex.session_id, "no-such-event", actor_id=rewinder)
    with pytest.raises(InvalidRequest):
        await rewind_session(client, ex.session_id, recorded[0], actor_id=rewinder)


async def test_the_sequencer_refuses_a_forged_or_malformed_rewind(client: LedgerClient) -> None:
    ex = await record_worked_example(client)
    other = await record_worked_example(client, session_id="other")
    lane, pos = ex.lanes["main"], ex.positions
    good = {
        "target_event_id": ex.ids[2],
        "target_position": pos[2],
        "as_of_position": pos[7],
        "invalidated": [[pos[3], pos[7]]],
        "invalidated_count": 5,
    }
    cases = [
        ({"invalidated": [[1, 2]]}, "payload.invalidated"),  # shape: not after the target
        (
            {"as_of_position": 10**6, "invalidated": [[pos[3], 10**6]]},  # reaching the future
            "payload.as_of_position",
        ),
        ({"target_event_id": "nothing"}, "payload.target_event_id"),
        ({"target_event_id": other.ids[2]}, "payload.target_event_id"),  # another session
        ({"target_position": pos[1], "invalidated": [[pos[2], pos[7]]]}, "payload.target_position"),
    ]
    for change, field in cases:
        event = make_event(
            lane.id,
            "session.rewound",
            actor_id=ex.actors["main"],
            subject_id=ex.session_id,
            payload={**good, **change},
        )
        with pytest.raises(InvalidPayload) as err:
            await client.append(lane, (await client.get_lane(lane.id)).last_seq, [event])
        assert err.value.details["field"] == field, change
    assert len((await client.load_session(ex.session_id)).events) == 7  # nothing committed
    event = make_event(
        lane.id, "session.rewound", actor_id=ex.actors["main"], subject_id=ex.session_id, payload=good
    )
    receipt = await client.append(lane, (await client.get_lane(lane.id)).last_seq, [event])
    assert receipt.positions[0] > pos[7]


async def test_a_fork_references_its_origin_and_starts_with_lane_created(client: LedgerClient) -> None:
    ex = await record_worked_example(client)
    main = ex.lanes["main"]
    fork = await fork_lane(client, main.id, 1, "main-retry", actor_id=ex.actors["main"])
    origin = fork.forked_from
    assert origin is not None
    assert (origin.lane_id, origin.seq, origin.position, origin.event_id) == (
        main.id,
        1,
        ex.positions[2],
        ex.ids[2],
    )
    assert fork.parent_lane_id == main.id and fork.kind == "branch" and fork.last_seq == 1
    page = await client.load_lane(fork.id)
    first = page.events[0]
    assert first.event_type == "lane.created" and first.causation_id == ex.ids[2]
    assert first.payload["forked_from"]["entry_hash"] == origin.entry_hash
    assert (await client.load_lane(main.id)).events[0].entry_hash == origin.entry_hash

    # idempotent: the same fork again is the same lane, its first event once
    again = await fork_lane(client, main.id, 1, "main-retry", actor_id=ex.actors["main"])
    assert again.id == fork.id and again.last_seq == 1

    with pytest.raises(EntityConflict) as err:  # same name, other fork point
        await client.create_lane(
            TENANT,
            ex.session_id,
            "r1",
            "main-retry",
            kind="branch",
            actor_id=ex.actors["main"],
            fork_of=ForkPoint(lane_id=main.id, seq=2),
        )
    assert "fork_of" in err.value.details["differing"]
    with pytest.raises(EntityNotFound) as err:  # beyond the origin's head
        await fork_lane(client, main.id, 9, "too-far", actor_id=ex.actors["main"])
    assert err.value.details["last_seq"] == 3  # main holds Korg seqs 2, 6 and 7
    with pytest.raises(InvalidRequest) as err:  # a fork's parent is its origin
        await client.create_lane(
            TENANT,
            ex.session_id,
            "r1",
            "odd",
            parent_lane_id=ex.lanes["sub"].id,
            fork_of=ForkPoint(lane_id=main.id, seq=1),
        )
    assert err.value.details["path"] == "$.parent_lane_id"
    with pytest.raises(EntityConflict):  # the origin must be in the same session
        await client.create_lane(
            TENANT, "another-session", "r1", "x", fork_of=ForkPoint(lane_id=main.id, seq=1)
        )


def _body(
    position: int, lane: str, event_type: str, payload: dict, cause: int | None = None, subject: str = "x"
) -> dict:
    body = {
        "position": position,
        "id": f"e{position}",
        "lane_id": lane,
        "seq": position,
        "actor_id": lane,
        "event_type": event_type,
        "subject_id": subject,
        "payload": payload,
    }
    if cause is not None:
        body["causation_id"] = f"e{cause}"
    return body


def test_the_sdk_spine_shape_requests_outcomes_and_a_named_spawn() -> None:
    # laneledger.sdk.spine: an inference or tool call is an attempt (request, then
    # outcome pointing at it); the next inference's request points at the
    # previous inference's outcome; a sub-agent's prompt names its spawn call.
    inf = {"action_type": "model_call", "name": "claude"}
    prompt = "context.prompt_composed"
    graph = Graph.of(
        nodes_of(
            [
                _body(1, "main", prompt, {"prompt_kind": "user"}),
                _body(2, "main", "attempt.requested", inf, 1),
                _body(3, "main", "attempt.completed", inf, 2),
                _body(4, "main", "attempt.requested", {"action_type": "tool_call", "name": "Agent"}, 3),
                _body(5, "sub", prompt, {"prompt_kind": "subagent", "spawned_by": "e4"}, 3),
                _body(6, "sub", "attempt.requested", {"action_type": "tool_call", "name": "Read"}, 5),
                _body(7, "sub", "attempt.completed", {"action_type": "tool_call", "name": "Read"}, 6),
                _body(8, "main", "attempt.completed", {"action_type": "tool_call", "name": "Agent"}, 4),
                _body(9, "main", "attempt.requested", inf, 3),
                _body(10, "main", "attempt.completed", inf, 9),
            ],
            {},
        )
    )
    assert [graph.nodes[p].role for p in (1, 2, 4, 5, 7)] == ["prompt", "inference", "tool", "prompt", "tool"]
    assert graph.spawners == {"sub": [4]}
    # the Read's outcome: the spawn's return value (8) and the inference that read it (9, 10)
    assert invalidated(graph, 7) == [8, 9, 10]
    # the spawn's request: the whole sub-agent (rule 3), its outcome, the next inference
    assert invalidated(graph, 4) == [5, 6, 7, 8, 9, 10]
    # the spawn's outcome alone: only what consumed it — no causation edge leads there
    assert invalidated(graph, 8) == [9, 10]


async def test_a_claude_code_import_rewinds_across_its_sub_agent(client: LedgerClient) -> None:
    # The importer's spines (laneledger.sdk.spine) read back by the rewind rules:
    # the sub-agent names its spawn call, so a rewind inside the sub-agent
    # reaches the spawn's result and the parent inference that consumed it.
    from test_claude_code_import import CAPTURE, SESSION

    from laneledger.compat.claudecode import ClaudeCodeImport
    from laneledger.history.branching import session_graph

    await ClaudeCodeImport(client, tenant=TENANT).run(CAPTURE.read_bytes().splitlines(keepends=True))
    graph = session_graph(await client.load_session(SESSION))
    ((sub_lane, [spawn]),) = graph.spawners.items()
    assert graph.nodes[spawn].role == "tool" and graph.nodes[spawn].name in ("Task", "Agent")
    sub = graph.spines[sub_lane]
    target = next(p for p in sub if graph.nodes[p].role == "tool")
    gone = set(invalidated(graph, target))
    assert {p for p in sub if p > target} <= gone  # rule 1 within the sub-agent
    spawn_result = [p for p in graph.children[spawn] if graph.nodes[p].lane_id != sub_lane]
    assert spawn_result and set(spawn_result) <= gone  # rule 4: the spawn's return value
    main = graph.nodes[spawn].lane_id
    later_inferences = [
        p for p in graph.spines[main] if p > max(spawn_result) and graph.nodes[p].role == "inference"
    ]
    assert later_inferences and set(later_inferences) <= gone
    assert not {p for p in graph.nodes if p <= target} & gone
