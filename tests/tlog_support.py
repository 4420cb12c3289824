"""Shared by the transparency log tests: the Go test's corruptions of a
proof (transparency-dev/merkle proof/verify_test.go), each of which must
fail to verify; a real sequencer that signs checkpoints; a ledger file's
root recomputed from its event bodies alone."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry

from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.services.sequencer.treeheads import TreeHeadSettings
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.tree import leaf_of
from laneledger.tlog import merkle
from laneledger.tlog.checkpoint import TreeHead
from laneledger.tlog.note import Signer

SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")
EMPTY_TREE = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


def _flipped(proof: list[bytes], i: int, bit: int) -> list[bytes]:
    changed = list(proof)
    changed[i] = bytes([changed[i][0] ^ bit]) + changed[i][1:]
    return changed


def corrupt_inclusion(
    index: int, size: int, proof: list[bytes], root: bytes, leaf: bytes
) -> Iterator[tuple[str, tuple[int, int, bytes, list[bytes], bytes]]]:
    """(description, (index, size, leaf, proof, root)) of each corruption."""
    yield "index - 1", (index - 1, size, leaf, proof, root)
    yield "index + 1", (index + 1, size, leaf, proof, root)
    yield "index ^ 2", (index ^ 2, size, leaf, proof, root)
    yield "size * 2", (index, size * 2, leaf, proof, root)
    yield "size // 2", (index, size // 2, leaf, proof, root)
    yield "wrong leaf", (index, size, SOME_HASH, proof, root)
    yield "empty root", (index, size, leaf, proof, EMPTY_TREE)
    yield "random root", (index, size, leaf, proof, SOME_HASH)
    yield "trailing root", (index, size, leaf, [*proof, root], root)
    yield "preceding root", (index, size, leaf, [root, *proof], root)
    for i in range(len(proof)):
        yield f"proof[{i}] bit 3 flipped", (index, size, leaf, _flipped(proof, i, 8), root)
    if proof:
        yield "removed component", (index, size, leaf, proof[:-1], root)
    if len(proof) > 1:
        yield "inserted component", (index, size, leaf, [proof[0], SOME_HASH, *proof[1:]], root)


def corrupt_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: list[bytes]
) -> Iterator[tuple[str, tuple[int, int, bytes, bytes, list[bytes]]]]:
    """(description, (size1, size2, root1, root2, proof)) of each corruption
    of a non-trivial proof (size1 not 0 and not size2)."""
    yield "size1 - 1", (size1 - 1, size2, root1, root2, proof)
    yield "size1 + 1", (size1 + 1, size2, root1, root2, proof)
    yield "size1 ^ 2", (size1 ^ 2, size2, root1, root2, proof)
    yield "size2 * 2", (size1, size2 * 2, root1, root2, proof)
    yield "size2 // 2", (size1, size2 // 2, root1, root2, proof)
    yield "wrong root1", (size1, size2, SOME_HASH, root2, proof)
    yield "wrong root2", (size1, size2, root1, SOME_HASH, proof)
    yield "swapped roots", (size1, size2, root2, root1, proof)
    yield "empty proof", (size1, size2, root1, root2, [])
    yield "trailing root1", (size1, size2, root1, root2, [*proof, root1])
    yield "trailing root2", (size1, size2, root1, root2, [*proof, root2])
    yield "preceding root1", (size1, size2, root1, root2, [root1, *proof])
    yield "preceding root2", (size1, size2, root1, root2, [root2, *proof])
    yield "preceding proof[0]", (size1, size2, root1, root2, [proof[0], *proof])
    yield "truncated proof", (size1, size2, root1, root2, proof[:-1])
    for i in range(len(proof)):
        yield f"proof[{i}] bit 4 flipped", (size1, size2, root1, root2, _flipped(proof, i, 16))


def committed_ledger(db, events: int, *, hmac_key: bytes | None = None):
    """A real ledger file (the sequencer's writer) with ``events`` events in
    3 lanes; the writer appends each batch's leaves to the tree in the
    batch's own transaction. Returns the writer's connection."""
    from laneledger.contract.model import AppendCommitted, CreateLane, EnsureActor, encode
    from laneledger.sdk.client import make_event
    from laneledger.store import LedgerWriter, open_ledger
    from laneledger.store.append import prepare_append

    conn = open_ledger(db)
    writer = LedgerWriter(conn, hmac_key=hmac_key)
    actor = writer.ensure_actor(EnsureActor(tenant="acme", key="agent:tlog/test@1", kind="agent"))
    lanes = [
        writer.create_lane(CreateLane(tenant="acme", session_id="s", run_id="r", name=f"l{i}"))
        for i in range(3)
    ]
    seqs = dict.fromkeys((lane.id for lane in lanes), 0)
    for start in range(0, events, 2):
        lane = lanes[start // 2 % 3]
        proposed = [
            make_event(lane.id, "action.started", actor_id=actor.id, payload={"n": n})
            for n in range(start, min(start + 2, events))
        ]
        body = encode(
            {
                "lane_id": lane.id,
                "expected_last_seq": seqs[lane.id],
                "append_id": f"a{start}",
                "events": proposed,
            }
        )
        seqs[lane.id] += len(proposed)
        receipt = writer.apply_batch([prepare_append(body)]).receipts[0]
        assert isinstance(receipt, AppendCommitted), receipt
    return conn


async def start_signing_sequencer(nc, db: Path, signer: Signer, interval_s: float = 0.2) -> Sequencer:
    """A real sequencer on ``db`` signing checkpoints with ``signer`` at its
    start and every ``interval_s`` when the tree grew."""
    service = Sequencer(
        nc,
        LedgerWriter(open_ledger(db)),
        SequencerMetrics(CollectorRegistry()),
        SequencerSettings(tree_heads=TreeHeadSettings(signer, interval_s=interval_s)),
    )
    await service.start()
    return service


def file_root(db: Path, size: int) -> bytes:
    """The root of the first ``size`` events of a ledger file, from their bodies alone."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        bodies = conn.execute("SELECT body FROM events WHERE position <= ? ORDER BY position", (size,))
        return merkle.root_of([leaf_of(body) for (body,) in bodies])
    finally:
        conn.close()


def size_of(note: str) -> int:
    """The tree size a signed checkpoint states."""
    return TreeHead.of_note(note).size
