"""Content references per append are bounded, and references to blobs nobody
stored fail fast (spec/content.md, "What an event references"): one append
cannot make the sequencer look up thousands of blobs, nor try a copy of
each."""

from __future__ import annotations

import hashlib
import json
import time

import nats
import pytest
from raw_appends import Inbox

from laneledger.contract.contentref import MAX_REFS_PER_APPEND
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import AppendRejected
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import make_event
from laneledger.store.append import prepare_append

# Generous for a loaded 2-core machine: before the bound, 8,000 made-up
# references kept the sequencer busy about 10 s per append.
QUICKLY_S = 5.0


def _made_up(n: int) -> dict[str, dict[str, object]]:
    """A payload naming ``n`` blobs nobody stored."""
    return {
        f"r{i}": {"_ref": "sha256:" + hashlib.sha256(str(i).encode()).hexdigest(), "size_bytes": 10}
        for i in range(n)
    }


def _request(lane_id: str, actor_id: str, payload: dict[str, object]) -> bytes:
    event = make_event(lane_id, "ext.acme.x", actor_id=actor_id, payload=payload)
    body = {"lane_id": lane_id, "expected_last_seq": 0, "append_id": "refs-1", "events": [event]}
    return json.dumps(body).encode()


def test_an_append_naming_too_many_references_is_refused_naming_the_limit() -> None:
    with pytest.raises(InvalidRequest) as refused:
        prepare_append(_request("lane-1", "actor-1", _made_up(MAX_REFS_PER_APPEND + 1)))
    assert refused.value.details == {
        "path": "$.events",
        "limit": "refs_per_append",
        "limit_value": MAX_REFS_PER_APPEND,
        "found": MAX_REFS_PER_APPEND + 1,
    }
    prepare_append(_request("lane-1", "actor-1", _made_up(MAX_REFS_PER_APPEND)))  # the bound itself is fine


def test_references_spelled_with_escapes_are_counted_and_a_plain_request_is_not_searched() -> None:
    """Step 0 searches payloads for references only when the request's bytes
    may hold one: a ``"_ref"`` key spelled ``"\\u005fref"`` still counts."""
    escaped = _request("lane-1", "actor-1", _made_up(MAX_REFS_PER_APPEND + 1)).replace(
        b'"_ref"', b'"\\u005fref"'
    )
    assert b'"_ref"' not in escaped
    with pytest.raises(InvalidRequest) as refused:
        prepare_append(escaped)
    assert refused.value.details["found"] == MAX_REFS_PER_APPEND + 1
    assert prepare_append(_request("lane-1", "actor-1", _made_up(1))).may_reference
    assert not prepare_append(_request("lane-1", "actor-1", {"text": "no reference"})).may_reference


@pytest.mark.parametrize(
    ("refs", "code"),
    [(8000, "invalid_request"), (MAX_REFS_PER_APPEND, "blob_missing")],
    ids=["8000-refused-unread", "at-the-bound-missing"],
)
async def test_made_up_references_are_refused_quickly(
    nats_server, sequencer, client, actor, refs: int, code: str
) -> None:
    lane = await client.create_lane("acme", "s1", "r1", "raw", actor_id=actor.id)
    subject = Subjects().append("acme", lane.id)
    nc = await nats.connect(nats_server.url)
    try:
        async with Inbox(nc) as raw:
            started = time.monotonic()
            refused = await raw.ask(subject, _request(lane.id, actor.id, _made_up(refs)))
            took = time.monotonic() - started
    finally:
        await nc.close()
    assert isinstance(refused, AppendRejected) and refused.error.code == code, refused
    assert took < QUICKLY_S, f"{refs} made-up references took {took:.1f} s to refuse"
    assert (await client.get_lane(lane.id)).last_seq == 0
