"""Every string, list and map a producer or reader sends has a bound
(spec/wire.md, "Field bounds"): one past it is ``invalid_request`` naming
the field; at the bound the message decodes. In-process, no nats-server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from laneledger.compat.korg_append import read_tool_call
from laneledger.contract.contentref import MAX_REFS_PER_APPEND
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import (
    MAX_ATTRIBUTES,
    MAX_ATTRIBUTES_BYTES,
    MAX_ID_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_NAME_LENGTH,
    AppendRequest,
    CheckpointCommand,
    Command,
    decode,
)
from laneledger.sdk.client import make_event
from laneledger.services.checkpoint.http import _command

SHA = "0" * 64


def append(**event: Any) -> dict[str, Any]:
    proposed = msgspec.to_builtins(make_event("lane-1", "stream.text_delta", actor_id="actor-1"))
    return {
        "lane_id": "lane-1",
        "expected_last_seq": 0,
        "append_id": "a-1",
        "events": [{**proposed, **event}],
    }


def ensure_actor(**fields: Any) -> dict[str, Any]:
    return {"op": "ensure_actor", "tenant": "acme", "key": "agent:x", "kind": "agent", **fields}


def create_action(**fields: Any) -> dict[str, Any]:
    base = {"op": "create_action", "lane_id": "l", "turn_id": "t", "action_type": "tool_call", "name": "n"}
    return {**base, "effect": "read", "idempotency": "keyed", **fields}


def save(checkpoint: dict[str, Any]) -> dict[str, Any]:
    base = {"id": "c-1", "key": "k", "format": "application/json", "state": {}}
    return {"op": "save", "expected_revision": 0, "checkpoint": {**base, **checkpoint}}


def korg(**fields: Any) -> dict[str, Any]:
    base = {"source_agent": "agent:x", "tool_name": "t", "args": {}, "result": {}, "success": True}
    return {**base, "duration_ms": 1, **fields}


def ref(**fields: Any) -> dict[str, Any]:
    """A payload or artifact reference: ``{sha256, size_bytes, …}``."""
    return {"sha256": SHA, "size_bytes": 1, **fields}


def attributes_of(size: int) -> dict[str, str]:
    """One entry whose JSON is ``size`` bytes: ``{"a":"xxx…"}``."""
    return {"a": "x" * (size - len('{"a":""}'))}


def decoded_as(kind: Any) -> Callable[[dict[str, Any]], object]:
    return lambda body: decode(msgspec.json.encode(body), kind)


def korg_decoded(body: dict[str, Any]) -> object:
    return read_tool_call(msgspec.json.encode(body))


def over_http(body: dict[str, Any]) -> object:
    """A checkpoint command as the service's HTTP reads build it (strings)."""
    op = body.pop("op")
    return _command(op, body)


def chars(body: Callable[[str], dict[str, Any]]) -> Callable[[int], dict[str, Any]]:
    """A body builder taking a string field's length."""
    return lambda n: body("x" * n)


APPEND, COMMAND, CHECKPOINT = decoded_as(AppendRequest), decoded_as(Command), decoded_as(CheckpointCommand)
LANE = {"op": "create_lane", "tenant": "acme", "session_id": "s", "run_id": "r", "name": "n"}
ID, LABEL, NAME = MAX_ID_LENGTH, MAX_LABEL_LENGTH, MAX_NAME_LENGTH
INT = 2**53 - 1

# (case, read by, the body given the field's size, the field's path, the
# largest size accepted: one more is refused)
Case = tuple[str, Callable[[dict[str, Any]], object], Callable[[int], dict[str, Any]], str, int]
CASES: list[Case] = [
    ("event id", APPEND, chars(lambda v: append(id=v)), "$.events[0].id", ID),
    (
        "schema_version",
        APPEND,
        chars(lambda v: append(schema_version=v)),
        "$.events[0].schema_version",
        LABEL,
    ),
    ("event_type", APPEND, chars(lambda v: append(event_type=v)), "$.events[0].event_type", 128),
    ("causation_id", APPEND, chars(lambda v: append(causation_id=v)), "$.events[0].causation_id", ID),
    ("events", APPEND, lambda n: {**append(), "events": append()["events"] * n}, "$.events", 1000),
    ("actor kind", COMMAND, chars(lambda v: ensure_actor(kind=v)), "$.kind", LABEL),
    ("display_name", COMMAND, chars(lambda v: ensure_actor(display_name=v)), "$.display_name", NAME),
    (
        "attribute entries",
        COMMAND,
        lambda n: ensure_actor(attributes=dict.fromkeys(map(str, range(n)), 0)),
        "$.attributes",
        MAX_ATTRIBUTES,
    ),
    ("attribute key", COMMAND, chars(lambda v: ensure_actor(attributes={v: 0})), "$.attributes", ID),
    (
        "attribute bytes",
        COMMAND,
        lambda n: ensure_actor(attributes=attributes_of(n)),
        "$.attributes",
        MAX_ATTRIBUTES_BYTES,
    ),
    ("lane kind", COMMAND, chars(lambda v: {**LANE, "kind": v}), "$.kind", LABEL),
    ("action_type", COMMAND, chars(lambda v: create_action(action_type=v)), "$.action_type", LABEL),
    ("action name", COMMAND, chars(lambda v: create_action(name=v)), "$.name", NAME),
    ("effect", COMMAND, chars(lambda v: create_action(effect=v)), "$.effect", LABEL),
    ("idempotency", COMMAND, chars(lambda v: create_action(idempotency=v)), "$.idempotency", LABEL),
    (
        "idempotency_key",
        COMMAND,
        chars(lambda v: create_action(idempotency_key=v)),
        "$.idempotency_key",
        NAME,
    ),
    ("checkpoint format", CHECKPOINT, chars(lambda v: save({"format": v})), "$.checkpoint.format", 256),
    (
        "artifact media_type",
        CHECKPOINT,
        chars(lambda v: save({"state": None, "artifact": ref(media_type=v)})),
        "$.checkpoint.artifact.media_type",
        256,
    ),
    ("erase keys", CHECKPOINT, lambda n: {"op": "erase", "keys": ["k"] * n}, "$.keys", 1000),
    (
        "erase key_prefixes",
        CHECKPOINT,
        lambda n: {"op": "erase", "key_prefixes": ["k"] * n},
        "$.key_prefixes",
        100,
    ),
    ("checkpoint key over HTTP", over_http, chars(lambda v: {"op": "latest", "key": v}), "$.key", ID),
    (
        "revisions limit over HTTP",
        over_http,
        lambda n: {"op": "revisions", "key": "k", "limit": str(n)},
        "$.limit",
        1000,
    ),
    ("korg tool_name", korg_decoded, chars(lambda v: korg(tool_name=v)), "$.tool_name", 256),
    ("korg duration_ms", korg_decoded, lambda n: korg(duration_ms=n), "$.duration_ms", INT),
    ("korg triggered_by", korg_decoded, lambda n: korg(triggered_by=n), "$.triggered_by", INT),
    ("korg triggered_by below", korg_decoded, lambda n: korg(triggered_by=-n), "$.triggered_by", INT),
    (
        "korg payload_refs",
        korg_decoded,
        lambda n: korg(payload_refs=[ref()] * n),
        "$.payload_refs",
        MAX_REFS_PER_APPEND,
    ),
    (
        "korg ref label",
        korg_decoded,
        chars(lambda v: korg(payload_refs=[ref(label=v)])),
        "$.payload_refs[0].label",
        NAME,
    ),
    (
        "korg ref media_type",
        korg_decoded,
        chars(lambda v: korg(payload_refs=[ref(media_type=v)])),
        "$.payload_refs[0].media_type",
        256,
    ),
    (
        "korg ref size_bytes",
        korg_decoded,
        lambda n: korg(payload_refs=[ref(size_bytes=n)]),
        "$.payload_refs[0].size_bytes",
        INT,
    ),
]


@pytest.mark.parametrize(
    ("read", "body", "path", "largest"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_field_is_accepted_at_its_bound_and_refused_past_it_by_name(read, body, path, largest):
    read(body(largest))
    with pytest.raises(InvalidRequest) as refusal:
        read(body(largest + 1))
    assert refusal.value.details["path"] == path


def test_the_trial_display_name_is_refused_before_any_work():
    """The 819,196-character name a trial stored (issue 34)."""
    with pytest.raises(InvalidRequest, match="length <= 1024"):
        decode(msgspec.json.encode(ensure_actor(display_name="n" * 819_196)), Command)
