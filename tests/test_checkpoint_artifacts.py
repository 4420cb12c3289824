"""Artifacts: state too large (or not JSON) for inline goes to a content-addressed
blob in the service's object store bucket; a checkpoint references it by
sha256, size and media type, and the service refuses a reference whose blob
is absent or does not match."""

from __future__ import annotations

import hashlib
import os

import pytest

from laneledger.contract import errors
from laneledger.contract.model import ArtifactRef
from laneledger.sdk.checkpoints import (
    DEFAULT_ARTIFACT_BUCKET,
    ArtifactMismatch,
    ArtifactMissing,
    CheckpointClient,
    artifact_name,
)

FORMAT = "application/vnd.tests.model-weights;version=1"


async def test_referencing_an_uploaded_artifact(checkpoints: CheckpointClient):
    blob = os.urandom(300_000)  # several object store chunks
    ref = await checkpoints.put_artifact(blob, "application/octet-stream")
    assert ref == ArtifactRef(
        sha256=hashlib.sha256(blob).hexdigest(), size_bytes=len(blob), media_type="application/octet-stream"
    )
    assert await checkpoints.put_artifact(blob, "application/octet-stream") == ref  # stored once
    saved = await checkpoints.save("art1", expected_revision=0, format=FORMAT, artifact=ref)
    assert saved.artifact == ref and saved.digest == ref.sha256 and saved.state is None
    fetched = await checkpoints.get(saved.id)
    assert fetched == saved
    assert await checkpoints.load_state(fetched) == blob
    info = (await checkpoints.revisions("art1")).revisions[0]
    assert info.artifact == ref and info.state_bytes == 0


async def test_saving_bytes_uploads_them_first(checkpoints: CheckpointClient):
    saved = await checkpoints.save(
        "art2", expected_revision=0, format=FORMAT, data=b"\x00\x01weights", media_type="application/x-tests"
    )
    assert saved.artifact.media_type == "application/x-tests"
    assert await checkpoints.read_artifact(saved.artifact) == b"\x00\x01weights"


async def test_a_reference_to_an_absent_blob_is_refused(checkpoints: CheckpointClient):
    absent = ArtifactRef(
        sha256=hashlib.sha256(b"never uploaded").hexdigest(),
        size_bytes=14,
        media_type="application/octet-stream",
    )
    with pytest.raises(ArtifactMissing) as caught:
        await checkpoints.save("art3", expected_revision=0, format=FORMAT, artifact=absent)
    assert isinstance(caught.value, errors.EntityNotFound)
    assert caught.value.details["kind"] == "artifact" and caught.value.details["id"] == absent.sha256
    assert await checkpoints.latest("art3") is None


async def test_a_reference_of_the_wrong_size_is_refused(checkpoints: CheckpointClient):
    ref = await checkpoints.put_artifact(b"twelve bytes", "text/plain")
    wrong = ArtifactRef(sha256=ref.sha256, size_bytes=13, media_type="text/plain")
    with pytest.raises(ArtifactMismatch) as caught:
        await checkpoints.save("art4", expected_revision=0, format=FORMAT, artifact=wrong)
    assert caught.value.details["fields"] == ["size_bytes"]
    assert caught.value.details["stored_size_bytes"] == 12


async def test_a_blob_that_does_not_hash_to_its_name_is_an_integrity_failure(
    checkpoints: CheckpointClient, js
):
    claimed = hashlib.sha256(b"the real content").hexdigest()
    bucket = await js.object_store(DEFAULT_ARTIFACT_BUCKET)
    await bucket.put(artifact_name(claimed), b"something else!!")  # same length, other bytes
    ref = ArtifactRef(sha256=claimed, size_bytes=16, media_type="text/plain")
    with pytest.raises(errors.IntegrityError) as caught:
        await checkpoints.save("art5", expected_revision=0, format=FORMAT, artifact=ref)
    assert caught.value.details["sha256"] == claimed
    with pytest.raises(errors.IntegrityError):
        await checkpoints.read_artifact(ref)


async def test_inline_state_and_an_artifact_together_are_refused(checkpoints: CheckpointClient, nc):
    from laneledger.contract.ids import new_id
    from laneledger.contract.model import ProposedCheckpoint, SaveCheckpoint, encode

    ref = await checkpoints.put_artifact(b"x", "text/plain")
    proposal = ProposedCheckpoint(id=new_id(), key="art6", format=FORMAT, state={"a": 1}, artifact=ref)
    reply = await nc.request(
        "ledger.checkpoint.save", encode(SaveCheckpoint(expected_revision=0, checkpoint=proposal)), timeout=5
    )
    assert b'"invalid_request"' in reply.data and b'"$.checkpoint.state"' in reply.data
    with pytest.raises(errors.InvalidRequest):
        await checkpoints.save("art6", expected_revision=0, format=FORMAT, state=1, artifact=ref)
