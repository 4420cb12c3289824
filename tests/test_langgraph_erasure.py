"""LangGraph deletes erase for real (spec/langgraph.md, "Erasure"): after
``delete_thread`` and ``prune`` the erased values are in no file of the
test (the checkpoint service's SQLite and WAL, the ledger's SQLite, the
nats-server's JetStream store, which holds the artifact blobs), the
checkpoint service answers "erased", the ledger holds the erasure as an
event, and ``laneledger verify --db --nats`` still passes. A second thread,
left alone, shows the search finds what is there. Also: secrets in channel
values and writes are redacted before serde, so no file ever holds them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from polling import eventually

from laneledger.adapters.langgraph import LaneledgerSaver
from laneledger.adapters.langgraph_records import (
    CHECKPOINT_FORMAT,
    DEFAULT_RUN,
    ERASED_EVENT,
    ROOT_LANE,
    record_id,
)
from laneledger.contract.errors import ArtifactMissing, EntityNotFound
from laneledger.devtools.natsserver import NatsServer

SCRIPT = Path(sys.executable).with_name("laneledger")
BIG = 20_000  # over the fixture service's 4 KiB inline limit: the record is an artifact


def encodings(marker: bytes) -> list[bytes]:
    """The marker itself and its encoding in a record (the saver stores serde
    bytes as lowercase hex in JSON)."""
    return [marker, marker.hex().encode()]


def files_holding(root: Path, marker: bytes) -> list[str]:
    forms = encodings(marker)
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # gone since listed (nats-server's *.blk.tmp while it compacts)
            continue
        if any(form in data for form in forms):
            hits.append(str(path.relative_to(root)))
    return hits


def checkpoint(values: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {name: 1 for name in values}
    return cp


async def put(saver: LaneledgerSaver, thread: str, values: dict[str, Any], parent: Any = None) -> Any:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    cp = checkpoint(values)
    return await saver.aput(config, cp, {"source": "loop", "step": 1}, dict(cp["channel_versions"]))


async def test_delete_thread_erases_bytes_and_keeps_the_ledger_verifying(
    saver: LaneledgerSaver, nats_server: NatsServer, tmp_path: Path
) -> None:
    small, big, write, kept = (
        f"marker-{name}-7f3a9c1e5b".encode() for name in ("small", "big", "write", "kept")
    )
    first = await put(saver, "doomed", {"notes": small.decode()})
    second = await put(saver, "doomed", {"doc": big.decode() + "x" * BIG}, parent=first)
    await saver.aput_writes(second, [("notes", write.decode())], "task-1")
    await put(saver, "kept", {"notes": kept.decode()})
    stored = await saver.checkpoints.get(record_id("doomed", "", second["configurable"]["checkpoint_id"]))
    assert stored.artifact is not None  # the big record is a blob in the object store

    # Before: every value is found where it is kept, and never in the ledger.
    for marker in (small, big, write, kept):
        hits = await eventually(lambda m=marker: files_holding(tmp_path, m), what=f"{marker!r} on disk")
        assert not [h for h in hits if h.startswith("ledger.db")], hits
    assert any(h.startswith("nats/") for h in files_holding(tmp_path, big))

    await saver.adelete_thread("doomed")

    # After: the erased values are in no file; the kept thread's still is.
    for marker in (small, big, write):
        await eventually(lambda m=marker: not files_holding(tmp_path, m), what=f"{marker!r} erased from disk")
    assert files_holding(tmp_path, kept)
    assert await saver.aget_tuple({"configurable": {"thread_id": "doomed", "checkpoint_ns": ""}}) is None
    assert [t async for t in saver.alist({"configurable": {"thread_id": "doomed"}})] == []
    assert await saver.aget_tuple({"configurable": {"thread_id": "kept", "checkpoint_ns": ""}}) is not None
    with pytest.raises(EntityNotFound) as erased:
        await saver.checkpoints.get(stored.id)
    assert erased.value.details["reason"] == "erased"
    assert stored.artifact is not None
    with pytest.raises(ArtifactMissing):
        await saver.checkpoints.read_artifact(stored.artifact)

    # The ledger: the erasure is an event naming what was erased by digest,
    # and the whole ledger (chains, stream, blobs) still verifies.
    lane = await saver.client.create_lane("acme", "doomed", DEFAULT_RUN, ROOT_LANE, actor_id=saver.actor_id)
    events = (await saver.client.load_lane(lane.id)).events
    erasures = [e for e in events if e.event_type == ERASED_EVENT]
    assert len(erasures) == 1
    named = {
        c["checkpoint_id"]: c["digest"]
        for c in erasures[0].payload["checkpoints"]
        if c["format"] == CHECKPOINT_FORMAT
    }
    assert named[stored.id] == stored.digest and len(named) == 2
    result = await asyncio.to_thread(
        subprocess.run,
        [str(SCRIPT), "verify", "--db", str(tmp_path / "ledger.db"), "--nats", nats_server.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


async def test_prune_erases_all_but_the_latest(saver: LaneledgerSaver, tmp_path: Path) -> None:
    old, new = b"marker-old-4c1d8e2a90", b"marker-new-4c1d8e2a90"
    first = await put(saver, "pruned", {"notes": old.decode()})
    await saver.aput_writes(first, [("notes", old.decode() + "-write")], "task-1")
    latest = await put(saver, "pruned", {"notes": new.decode()}, parent=first)
    await eventually(lambda: files_holding(tmp_path, old), what="the old value on disk")

    await saver.aprune(["pruned"])

    await eventually(lambda: not files_holding(tmp_path, old), what="the old value erased")
    assert files_holding(tmp_path, new)
    listed = [t async for t in saver.alist({"configurable": {"thread_id": "pruned", "checkpoint_ns": ""}})]
    assert [t.config["configurable"]["checkpoint_id"] for t in listed] == [
        latest["configurable"]["checkpoint_id"]
    ]
    # A save after the prune continues the key's revisions: none is reused.
    after = await put(saver, "pruned", {"notes": "later"}, parent=latest)
    saved = await saver.checkpoints.get(record_id("pruned", "", after["configurable"]["checkpoint_id"]))
    assert saved.revision == 3


async def test_secrets_are_redacted_before_serde(saver: LaneledgerSaver, tmp_path: Path) -> None:
    secret = "sk-ant-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
    stored = await put(saver, "secretive", {"messages": [f"my key is {secret}"], "api_key": secret})
    await saver.aput_writes(stored, [("notes", {"password": "hunter2-hunter2"})], "task-1")

    found = await saver.aget_tuple(stored)
    assert found is not None
    assert found.checkpoint["channel_values"]["messages"] == ["my key is [REDACTED:anthropic_api_key]"]
    assert found.checkpoint["channel_values"]["api_key"] == "[REDACTED:anthropic_api_key]"
    assert found.pending_writes == [("task-1", "notes", {"password": "[REDACTED:secret_key]"})]
    assert not files_holding(tmp_path, secret.encode())
    assert not files_holding(tmp_path, b"hunter2-hunter2")
