"""The checkpoint store's contract: revisions, idempotency, reads, inline
limits. Run twice (``checkpoints_under_test``): against the checkpoint
service in-process, and over a real nats-server through the real service
and sequencer; what only NATS does (raw requests, artifacts) over NATS alone."""

from __future__ import annotations

import pytest
from checkpoint_fixtures import CHECKPOINTS_OVER_NATS_ONLY, checkpoints_of_checkpoints_under_test

from laneledger.contract import errors
from laneledger.contract.ids import new_id
from laneledger.contract.model import ProposedCheckpoint, SaveCheckpoint, encode
from laneledger.sdk.checkpoints import CheckpointClient, RevisionConflict, content_digest, state_digest

FORMAT = "application/vnd.tests.loop-state+json;version=1"

checkpoints = pytest.fixture(checkpoints_of_checkpoints_under_test, name="checkpoints")


async def test_first_save_is_revision_one_and_each_save_the_next(checkpoints: CheckpointClient):
    first = await checkpoints.save("k1", expected_revision=0, format=FORMAT, state={"turn": 1})
    assert first.revision == 1 and first.key == "k1" and first.format == FORMAT
    assert first.state == {"turn": 1}
    assert first.digest == state_digest({"turn": 1})[0]
    second = await checkpoints.save("k1", expected_revision=1, format=FORMAT, state={"turn": 2})
    assert second.revision == 2 and second.id != first.id
    assert await checkpoints.latest("k1") == second
    assert await checkpoints.get(first.id) == first  # revisions never change
    page = await checkpoints.revisions("k1")
    assert [r.revision for r in page.revisions] == [1, 2] and not page.has_more
    assert [r.id for r in page.revisions] == [first.id, second.id]
    assert page.revisions[0].state_bytes == len(b'{"turn":1}')
    page = await checkpoints.revisions("k1", after_revision=1, limit=1)
    assert [r.revision for r in page.revisions] == [2]
    assert await checkpoints.latest("other-key") is None


async def test_a_stale_expected_revision_is_a_conflict_naming_both(checkpoints: CheckpointClient):
    await checkpoints.save("k2", expected_revision=0, format=FORMAT, state=1)
    await checkpoints.save("k2", expected_revision=1, format=FORMAT, state=2)
    with pytest.raises(RevisionConflict) as caught:
        await checkpoints.save("k2", expected_revision=1, format=FORMAT, state=3)
    err = caught.value
    assert isinstance(err, errors.EntityConflict) and err.code == "entity_conflict"
    assert err.details["expected_revision"] == 1 and err.details["actual_revision"] == 2
    assert err.details["kind"] == "checkpoint" and err.details["key"] == "k2"
    with pytest.raises(RevisionConflict) as caught:
        await checkpoints.save("new-key", expected_revision=3, format=FORMAT, state=0)
    assert caught.value.details["actual_revision"] == 0
    assert (await checkpoints.latest("k2")).state == 2


async def test_same_id_same_content_returns_the_original(checkpoints: CheckpointClient):
    cid = new_id()
    original = await checkpoints.save(
        "k3", expected_revision=0, format=FORMAT, state={"a": [1, 2]}, checkpoint_id=cid
    )
    await checkpoints.save("k3", expected_revision=1, format=FORMAT, state={"a": [3]})
    # A resend after the key moved on: the original, not a conflict.
    again = await checkpoints.save(
        "k3", expected_revision=0, format=FORMAT, state={"a": [1, 2]}, checkpoint_id=cid
    )
    assert again == original
    assert [r.revision for r in (await checkpoints.revisions("k3")).revisions] == [1, 2]


async def test_same_id_other_content_is_refused_before_the_revision(checkpoints: CheckpointClient):
    cid = new_id()
    await checkpoints.save("k4", expected_revision=0, format=FORMAT, state={"v": 1}, checkpoint_id=cid)
    # Both the content and the revision are wrong: idempotency is checked first.
    with pytest.raises(errors.IdempotencyViolation) as caught:
        await checkpoints.save("k4", expected_revision=0, format=FORMAT, state={"v": 2}, checkpoint_id=cid)
    details = caught.value.details
    assert details["id"] == cid and details["stored_digest"] != details["digest"]
    with pytest.raises(errors.IdempotencyViolation):
        await checkpoints.save(
            "k4", expected_revision=1, format="text/plain", state={"v": 1}, checkpoint_id=cid
        )
    assert [r.revision for r in (await checkpoints.revisions("k4")).revisions] == [1]


async def test_concurrent_saves_at_one_revision_make_exactly_one_winner(checkpoints: CheckpointClient):
    import asyncio

    await checkpoints.save("k5", expected_revision=0, format=FORMAT, state=0)
    outcomes = await asyncio.gather(
        *(checkpoints.save("k5", expected_revision=1, format=FORMAT, state=i) for i in range(8)),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(winners) == 1 and winners[0].revision == 2
    assert all(isinstance(o, RevisionConflict) for o in outcomes if isinstance(o, Exception))


async def test_get_of_an_unknown_id_is_not_found(checkpoints: CheckpointClient):
    with pytest.raises(errors.EntityNotFound) as caught:
        await checkpoints.get("no-such-checkpoint")
    assert caught.value.details == {"kind": "checkpoint", "id": "no-such-checkpoint"}


@CHECKPOINTS_OVER_NATS_ONLY
async def test_inline_state_over_the_limit_is_refused_or_spilled(checkpoints: CheckpointClient, nc):
    big = {"text": "x" * 5000}  # the fixture's service allows 4096 inline bytes
    proposal = ProposedCheckpoint(id=new_id(), key="k6", format=FORMAT, state=big)
    reply = await nc.request(
        "ledger.checkpoint.save", encode(SaveCheckpoint(expected_revision=0, checkpoint=proposal)), timeout=5
    )
    assert b'"request_too_large"' in reply.data and b'"limit_bytes":4096' in reply.data
    # The SDK moves state that is too large into a JSON artifact by itself.
    saved = await checkpoints.save("k6", expected_revision=0, format=FORMAT, state=big)
    assert saved.state is None and saved.artifact is not None
    assert saved.artifact.media_type == "application/json"
    assert saved.digest == state_digest(big)[0] == saved.artifact.sha256
    assert await checkpoints.load_state(saved) == big


@CHECKPOINTS_OVER_NATS_ONLY
async def test_adversarial_inline_state_is_refused_promptly_and_the_service_goes_on(
    checkpoints: CheckpointClient, nc
):
    """The issue's input as inline state (~800 KB of what made redaction
    quadratic: PEM BEGIN markers without END, ``eyJ-`` chains): the service
    redacts before it measures, in linear time, so the refusal comes at once
    (before: minutes of its event loop) and the next save is served."""
    state = {"notes": ("-----BEGIN PRIVATE KEY-----\n" * 15_000) + ("eyJ-" * 100_000)}
    proposal = ProposedCheckpoint(id=new_id(), key="k-adv", format=FORMAT, state=state)
    reply = await nc.request(
        "ledger.checkpoint.save", encode(SaveCheckpoint(expected_revision=0, checkpoint=proposal)), timeout=5
    )
    assert b'"request_too_large"' in reply.data
    saved = await checkpoints.save("k-adv", expected_revision=0, format=FORMAT, state={"turn": 1})
    assert saved.revision == 1


@CHECKPOINTS_OVER_NATS_ONLY
async def test_requests_are_checked(checkpoints: CheckpointClient, nc):
    with pytest.raises(errors.InvalidRequest):
        await checkpoints.save("k7", expected_revision=0, format=FORMAT, state=1, terminal=True)
    reply = await nc.request("ledger.checkpoint.get", b'{"op": "latest", "key": "k"}', timeout=5)
    assert b'"invalid_request"' in reply.data and b'"$.op"' in reply.data
    reply = await nc.request("ledger.checkpoint.save", b"{not json", timeout=5)
    assert b'"malformed_message"' in reply.data
    reply = await nc.request("ledger.checkpoint.save", b'{"op": "save", "expected_revision": 0}', timeout=5)
    assert b'"invalid_request"' in reply.data
    with pytest.raises(errors.NotCanonicalizable) as caught:
        await checkpoints.save("k7", expected_revision=0, format=FORMAT, state={"n": 2**60})
    assert caught.value.details["path"] == "$.n"  # refused by the SDK before sending
    proposal = ProposedCheckpoint(id=new_id(), key="k7", format=FORMAT, state={"n": [2**60]})
    reply = await nc.request(
        "ledger.checkpoint.save", encode(SaveCheckpoint(expected_revision=0, checkpoint=proposal)), timeout=5
    )
    assert b'"not_canonicalizable"' in reply.data and b'"$.checkpoint.state.n[0]"' in reply.data


def test_content_digest_covers_everything_sent():
    base = ProposedCheckpoint(id="c", key="k", format=FORMAT, state={"a": 1})
    assert content_digest(base) == content_digest(
        ProposedCheckpoint(id="c", key="k", format=FORMAT, state={"a": 1})
    )
    for other in (
        ProposedCheckpoint(id="c", key="k", format=FORMAT, state={"a": 2}),
        ProposedCheckpoint(id="c", key="k2", format=FORMAT, state={"a": 1}),
        ProposedCheckpoint(id="c", key="k", format="text/plain", state={"a": 1}),
        ProposedCheckpoint(
            id="c", key="k", format=FORMAT, state={"a": 1}, terminal=True, session_id="s", run_id="r"
        ),
    ):
        assert content_digest(other) != content_digest(base)
