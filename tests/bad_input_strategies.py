"""Hypothesis strategies for bad input to the sequencer: append requests and
commands that are almost right (one to three things wrong with a valid one)
and bytes that are not a request at all.

``tests/test_bad_input.py`` pins one hand-written case per error code; these
strategies explore the space around them. ``World`` names what exists in the
ledger under test (lanes, actors, committed events) so that mutations can
point at real things in the wrong place: another lane's id, an event of
another session, an actor of another tenant.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import strategies as st

from laneledger.contract.subjects import Subjects, token
from laneledger.sdk.client import make_event


def fuzz_examples(default: int) -> int:
    """Examples per fuzz test: ``LANELEDGER_FUZZ_EXAMPLES`` for a long run,
    else the default sized for the CI budget."""
    return int(os.environ.get("LANELEDGER_FUZZ_EXAMPLES", default))


@dataclass(frozen=True)
class World:
    subjects: Subjects
    tenant: str
    lane_id: str  # the target lane (tenant, session s1)
    other_lane_id: str  # same tenant, another session
    foreign_lane_id: str  # another tenant
    actor_id: str
    foreign_actor_id: str  # an actor of the other tenant
    committed_ids: tuple[str, ...]  # events committed on the target lane
    other_session_ids: tuple[str, ...]  # events committed in the other session
    committed_append_id: str  # an append id already used


@dataclass(frozen=True)
class Message:
    """One publish: the subject, the body, and whether it names a reply inbox."""

    subject: str
    body: bytes
    reply: bool
    what: str  # the mutations applied, for the failure report

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 300 else self.body[:300] + b"..."
        return f"Message({self.what!r}, {self.subject!r}, reply={self.reply}, {body!r})"


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
BAD_IDS = st.one_of(
    st.just(""), st.text(min_size=257, max_size=300), JSON_SCALARS.filter(lambda v: not isinstance(v, str))
)

EVENT_FIELDS = (
    "schema_version",
    "id",
    "lane_id",
    "subject_id",
    "event_type",
    "actor_id",
    "occurred_at",
    "payload",
    "extensions",
)
REQUEST_FIELDS = ("lane_id", "expected_last_seq", "append_id", "events")


def _event(world: World, **fields: Any) -> dict[str, Any]:
    return {
        **make_event(world.lane_id, "stream.text_delta", actor_id=world.actor_id, payload={"text": "hi"}),
        **fields,
    }


@st.composite
def _mutation(draw: st.DrawFn, world: World, request: dict[str, Any]) -> str:
    """Change ``request`` in place in one way; return what was done."""
    events = request.get("events")
    if not (isinstance(events, list) and events and all(isinstance(e, dict) for e in events)):
        events = [_event(world)]  # an earlier mutation broke the list: change a scratch event
    event = events[draw(st.integers(0, len(events) - 1))]
    if not isinstance(event.get("payload"), dict):
        event["payload"] = {}
    kind = draw(
        st.sampled_from(
            [
                "request_type",
                "request_missing",
                "request_extra",
                "event_type",
                "event_missing",
                "event_extra",
                "bad_id",
                "huge_int",
                "huge_string",
                "lane_other",
                "lane_unknown",
                "lane_foreign",
                "causation",
                "duplicate_in_append",
                "duplicate_committed",
                "append_id_reused",
                "expected_seq",
                "event_type_value",
                "core_payload",
                "actor",
                "subject",
                "occurred_at",
                "events_empty",
                "deep_payload",
            ]
        )
    )
    if kind == "request_type":
        name = draw(st.sampled_from(REQUEST_FIELDS))
        request[name] = draw(JSON_VALUES)
    elif kind == "request_missing":
        name = draw(st.sampled_from(REQUEST_FIELDS))
        request.pop(name, None)
    elif kind == "request_extra":
        request[draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in REQUEST_FIELDS))] = draw(
            JSON_VALUES
        )
    elif kind == "event_type":
        name = draw(st.sampled_from((*EVENT_FIELDS, "causation_id")))
        event[name] = draw(JSON_VALUES)
    elif kind == "event_missing":
        event.pop(draw(st.sampled_from(EVENT_FIELDS)), None)
    elif kind == "event_extra":
        event[
            draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in (*EVENT_FIELDS, "causation_id")))
        ] = draw(JSON_VALUES)
    elif kind == "bad_id":
        target, name = draw(
            st.sampled_from(
                [
                    (request, "append_id"),
                    (request, "lane_id"),
                    (event, "id"),
                    (event, "actor_id"),
                    (event, "subject_id"),
                    (event, "lane_id"),
                    (event, "causation_id"),
                ]
            )
        )
        target[name] = draw(BAD_IDS)
    elif kind == "huge_int":
        event["payload"]["n"] = draw(st.integers(min_value=2**53, max_value=2**80)) * draw(
            st.sampled_from([1, -1])
        )
    elif kind == "huge_string":  # over the test sequencer's 16 KiB request limit
        event["payload"]["blob"] = "x" * draw(st.integers(16 * 1024, 40 * 1024))
    elif kind == "lane_other":
        request["lane_id"] = event["lane_id"] = world.other_lane_id
    elif kind == "lane_unknown":
        request["lane_id"] = event["lane_id"] = draw(st.text(min_size=1, max_size=40))
    elif kind == "lane_foreign":
        event["lane_id"] = world.foreign_lane_id
    elif kind == "causation":
        event["causation_id"] = draw(
            st.sampled_from(
                # Its own id (absent when an earlier mutation dropped it: no id at all).
                [event.get("id"), draw(st.text(min_size=1, max_size=40)), *world.other_session_ids]
            )
        )
    elif kind == "duplicate_in_append":
        events.append(dict(event, payload=dict(event["payload"])))
    elif kind == "duplicate_committed":
        event["id"] = draw(st.sampled_from(world.committed_ids))
    elif kind == "append_id_reused":
        request["append_id"] = world.committed_append_id
    elif kind == "expected_seq":
        request["expected_last_seq"] = draw(st.integers(min_value=-5, max_value=2**70))
    elif kind == "event_type_value":
        event["event_type"] = draw(
            st.text(max_size=40)
            | st.sampled_from(["core", "run.nonsense", "stream.acme", "x.ledger.reserved", "lane.a.b.c"])
        )
    elif kind == "core_payload":
        event["event_type"] = draw(
            st.sampled_from(["cost.recorded", "hitl.paused", "hitl.responded", "attempt.requested"])
        )
        event["payload"] = draw(
            st.dictionaries(
                st.sampled_from(
                    ["provider", "model", "currency", "amount", "attempt_id", "question", "answer"]
                ),
                JSON_VALUES,
                max_size=4,
            )
        )
    elif kind == "actor":
        event["actor_id"] = draw(st.sampled_from([world.foreign_actor_id, "nobody"]))
    elif kind == "subject":
        event["subject_id"] = draw(
            st.sampled_from([world.other_lane_id, world.foreign_lane_id, "no-such-subject"])
        )
    elif kind == "occurred_at":
        event["occurred_at"] = draw(
            st.sampled_from(["yesterday", "2026-01-01", "2026-01-01T00:00:00", "2026-13-45T99:99:99Z", ""])
            | st.text(max_size=30)
        )
    elif kind == "events_empty":
        request["events"] = []
    elif kind == "deep_payload":
        event["payload"]["deep"] = _Deep(draw(st.integers(200, 3000)))
    return kind


class _Deep:
    """A JSON array nested ``depth`` deep, rendered by ``_render``."""

    def __init__(self, depth: int) -> None:
        self.depth = depth


def _render(value: Any) -> bytes:
    """The JSON bytes of a request; a ``_Deep`` placeholder becomes its
    nesting written out as bytes (too deep for an encoder to recurse into)."""
    deep: list[_Deep] = []

    def hook(obj: Any) -> Any:
        if isinstance(obj, _Deep):
            deep.append(obj)
            return f"@@deep{len(deep) - 1}@@"
        raise TypeError(type(obj).__name__)

    body = msgspec.json.encode(value, enc_hook=hook)
    for index, d in enumerate(deep):
        body = body.replace(f'"@@deep{index}@@"'.encode(), b"[" * d.depth + b"]" * d.depth)
    return body


@st.composite
def append_messages(draw: st.DrawFn, world: World) -> Message:
    """A valid request with one to three mutations, published on the target
    lane's subject (or, sometimes, on a wrong one)."""
    request = {
        "lane_id": world.lane_id,
        "expected_last_seq": draw(st.integers(0, 3)),
        "append_id": draw(st.uuids()).hex,
        "events": [_event(world) for _ in range(draw(st.integers(1, 3)))],
    }
    kinds = [draw(_mutation(world, request)) for _ in range(draw(st.integers(1, 3)))]
    subject = world.subjects.append(world.tenant, world.lane_id)
    lane = request.get("lane_id")
    if isinstance(lane, str) and lane:
        subject = world.subjects.append(world.tenant, lane)
    subject = draw(
        st.sampled_from(
            [
                subject,
                subject,
                subject,
                world.subjects.append("globex", world.lane_id),
                world.subjects.append(world.tenant, world.other_lane_id),
                f"{world.subjects.prefix}.append.{token(world.tenant)}.a.b",
                f"{world.subjects.prefix}.append.{token(world.tenant)}",
            ]
        )
    )
    return Message(subject, _render(request), draw(st.booleans()), "+".join(kinds))


@st.composite
def raw_messages(draw: st.DrawFn, world: World) -> Message:
    """Bytes that are not a request: random bytes, non-UTF-8, truncation,
    NaN/Infinity literals, duplicate keys, trailing garbage, deep nesting."""
    good = _render(
        {
            "lane_id": world.lane_id,
            "expected_last_seq": 0,
            "append_id": draw(st.uuids()).hex,
            "events": [_event(world)],
        }
    )
    kind = draw(
        st.sampled_from(
            [
                "random",
                "not_utf8",
                "truncated",
                "nan",
                "duplicate_keys",
                "trailing",
                "deep",
                "scalar",
                "empty",
            ]
        )
    )
    if kind == "random":
        body = draw(st.binary(max_size=512))
    elif kind == "not_utf8":
        at = draw(st.integers(0, len(good)))
        body = good[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"])) + good[at:]
    elif kind == "truncated":
        body = good[: draw(st.integers(0, len(good) - 1))]
    elif kind == "nan":
        body = good.replace(
            b'"payload":{"text":"hi"}',
            b'"payload":{"v":'
            + draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-0"]))
            + b"}",
        )
    elif kind == "duplicate_keys":
        key = draw(st.sampled_from([b'"append_id":', b'"event_type":', b'"text":', b'"lane_id":']))
        body = good.replace(key, key + b'"dup",' + key, 1)
    elif kind == "trailing":
        body = good + draw(st.sampled_from([b" x", b"}", b"\x00", b"{}", b"\n\n["]))
    elif kind == "deep":
        depth = draw(st.integers(500, 100_000))
        body = b"[" * depth + b"]" * depth if draw(st.booleans()) else b'{"a":' * depth + b"1" + b"}" * depth
    elif kind == "scalar":
        body = draw(st.sampled_from([b"null", b"true", b"1", b'"s"', b"[]", b"{}", b"[{}]"]))
    else:
        body = b""
    subject = world.subjects.append(world.tenant, world.lane_id)
    return Message(subject, body, draw(st.booleans()), f"raw:{kind}")


def bad_appends(world: World) -> st.SearchStrategy[list[Message]]:
    """A handful of messages published together (so the sequencer sees bad
    requests side by side in one batch)."""
    return st.lists(append_messages(world) | raw_messages(world), min_size=1, max_size=5)


# -- commands (<prefix>.cmd.<op>) ------------------------------------------------------------

# A valid body per op (some ops have more than one shape), which the
# strategy below then breaks.
COMMAND_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("ensure_actor", {"tenant": "acme", "key": "agent:fuzz@1", "kind": "agent"}),
    ("create_lane", {"tenant": "acme", "session_id": "s-fuzz", "run_id": "r-fuzz", "name": "main"}),
    ("create_turn", {"lane_id": "LANE", "turn_no": 1}),
    (
        "create_action",
        {
            "lane_id": "LANE",
            "turn_id": "t-1",
            "action_type": "tool_call",
            "name": "read",
            "effect": "read",
            "idempotency": "inherent",
        },
    ),
    ("create_attempt", {"lane_id": "LANE", "action_id": "x-1", "attempt_no": 1}),
    ("get_lane", {"lane_id": "LANE"}),
    ("load_lane", {"lane_id": "LANE", "after_seq": 0, "limit": 10}),
    ("load_run", {"session_id": "s1", "run_id": "r1"}),
    ("load_session", {"session_id": "s1"}),
    ("load_structure", {"session_id": "s1", "run_id": "r1"}),
    ("load_structure", {"session_id": "s1", "run_id": "r1", "limit": 10}),
    ("get_receipt", {"append_id": "APPEND"}),
]
COMMAND_NAMES = sorted({op for op, _ in COMMAND_BODIES})


@st.composite
def command_messages(draw: st.DrawFn, world: World) -> Message:
    """A command body for an op (valid, or with its fields mutated, or not a
    command at all), on that op's subject or another."""
    op, valid = draw(st.sampled_from(COMMAND_BODIES))
    body_obj: dict[str, Any] = {"op": op}
    for name, value in valid.items():
        body_obj[name] = (
            {"LANE": world.lane_id, "APPEND": world.committed_append_id}.get(value, value)
            if isinstance(value, str)
            else value
        )
    kind = draw(
        st.sampled_from(
            ["valid", "wrong_type", "missing", "extra", "bad_id", "huge_int", "op_mismatch", "raw", "deep"]
        )
    )
    fields = [k for k in body_obj if k != "op"]
    if kind == "wrong_type":
        body_obj[draw(st.sampled_from([*fields, "op"]))] = draw(JSON_VALUES)
    elif kind == "missing":
        body_obj.pop(draw(st.sampled_from([*fields, "op"])))
    elif kind == "extra":
        body_obj[draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in body_obj))] = draw(
            JSON_VALUES
        )
    elif kind == "bad_id":
        body_obj[draw(st.sampled_from(fields))] = draw(BAD_IDS)
    elif kind == "huge_int":
        body_obj[draw(st.sampled_from(fields))] = draw(st.integers(min_value=2**62, max_value=2**80))
    elif kind == "op_mismatch":
        body_obj["op"] = draw(st.sampled_from(COMMAND_NAMES) | st.text(max_size=12))
    body = _render(body_obj)
    if kind == "raw":
        body = draw(st.binary(max_size=256) | st.sampled_from([b"", b"null", b"[]", b"\xff{"]))
    elif kind == "deep":
        body = b'{"op":' * 5000 + b"1" + b"}" * 5000
    subject_op = draw(
        st.sampled_from([op, op, op, "no_such_op", "get_lane"])
        | st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
    )
    return Message(world.subjects.command(subject_op), body, draw(st.booleans()), f"cmd:{op}:{kind}")
