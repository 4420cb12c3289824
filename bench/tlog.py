"""Benchmark: what the transparency log costs (spec/tlog.md).

Run: .venv/bin/python bench/tlog.py [--events N] [--proofs P] [--target EVENTS_PER_S]

1. Tree cost in the ledger's own transactions: builds two ledgers with the
   real writer (``LedgerWriter``, the sequencer's code; FULL durability),
   batches of 100 appends of 10 events, round-robin over 100 lanes, each
   committed with ``apply_batch``. The writer extends the tree in every
   batch's transaction (``store/tree.py``, called from ``txlog.run_writes``);
   for the first ledger this bench replaces that call with a no-op (the
   product has no such switch), for the second it times it. Reports both
   rates, the tree's own time per event, and that time as a share of the
   per-event budget at the throughput target (``--target``: 0.6 × the raw
   JetStream rate of bench/results/append.json, 38,218/s, so 22,931
   events/s, 43.6 µs/event).
2. Disk: the tree's bytes per leaf (the two files, WAL checkpointed).
3. Proofs at the final size: generation from the stored tree (SQLite) and
   verification of P random inclusion proofs and P random consistency
   proofs, and their sizes; signing and opening one checkpoint.

The last line is JSON for scripts.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from laneledger.contract.model import CreateLane, EnsureActor, encode
from laneledger.sdk.client import make_event
from laneledger.store import LedgerWriter, open_ledger, txlog
from laneledger.store.append import prepare_append
from laneledger.tlog import merkle, store
from laneledger.tlog.checkpoint import TreeHead, open_checkpoint, sign_checkpoint
from laneledger.tlog.note import Signer

PER_APPEND = 10
APPENDS_PER_BATCH = 100
LANES = 100
TARGET = round(0.6 * 38_218)  # events/s: docs/performance.md (ratio target 0.6 of raw JetStream)


REAL_EXTEND_TREE = txlog.extend_tree


class Ledger:
    """A ledger file fed with identical batches; without ``with_tree`` the
    writer's tree step is skipped, with it that step is timed."""

    def __init__(self, db: Path, *, with_tree: bool) -> None:
        self.conn = open_ledger(db)
        self.writer = LedgerWriter(self.conn)
        self.with_tree = with_tree
        actor = self.writer.ensure_actor(EnsureActor(tenant="acme", key="agent:bench/main@1", kind="agent"))
        self.actor = actor.id
        self.lanes = [
            self.writer.create_lane(CreateLane(tenant="acme", session_id="s", run_id="r", name=f"l{i}"))
            for i in range(LANES)
        ]
        self.seqs = {lane.id: 0 for lane in self.lanes}
        self.appends = 0
        self.tree_seconds = 0.0

    def batch(self) -> list:
        batch = []
        for _ in range(APPENDS_PER_BATCH):
            lane = self.lanes[self.appends % LANES]
            events = [
                make_event(
                    lane.id, "action.started", actor_id=self.actor, payload={"n": self.appends, "k": k}
                )
                for k in range(PER_APPEND)
            ]
            body = encode(
                {
                    "lane_id": lane.id,
                    "expected_last_seq": self.seqs[lane.id],
                    "append_id": f"a-{self.appends}",
                    "events": events,
                }
            )
            batch.append(prepare_append(body))
            self.seqs[lane.id] += PER_APPEND
            self.appends += 1
        return batch

    def commit(self, batch: list) -> None:
        txlog.extend_tree = self._timed_extend_tree if self.with_tree else _no_tree
        try:
            self.writer.apply_batch(batch)
        finally:
            txlog.extend_tree = REAL_EXTEND_TREE

    def _timed_extend_tree(self, conn, events, **how) -> None:
        started = time.perf_counter()
        REAL_EXTEND_TREE(conn, events, **how)
        self.tree_seconds += time.perf_counter() - started


def _no_tree(conn, events, **how) -> None:
    return None


def build(ledgers: list[Ledger], events: int) -> dict[bool, dict]:
    """Feed every ledger the same batches, alternating which goes first, so
    both see the same machine; return seconds (wall and CPU) per ledger."""
    spent = {ledger.with_tree: {"wall": 0.0, "cpu": 0.0} for ledger in ledgers}
    round_no = 0
    while ledgers[0].writer.last_position < events:
        batches = [ledger.batch() for ledger in ledgers]  # preparing events is not timed
        order = list(zip(ledgers, batches, strict=True))
        if round_no % 2:
            order.reverse()
        for ledger, batch in order:
            wall, cpu = time.perf_counter(), time.process_time()
            ledger.commit(batch)
            spent[ledger.with_tree]["wall"] += time.perf_counter() - wall
            spent[ledger.with_tree]["cpu"] += time.process_time() - cpu
        round_no += 1
    return spent


def file_bytes(conn, path: Path) -> int:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def timed(fn, args_list) -> tuple[list, list[float]]:
    results, micros = [], []
    for args in args_list:
        started = time.perf_counter()
        results.append(fn(*args))
        micros.append((time.perf_counter() - started) * 1e6)
    return results, micros


def summary(micros: list[float]) -> dict:
    ordered = sorted(micros)
    return {
        "mean_us": round(statistics.fmean(ordered), 1),
        "p99_us": round(ordered[int(0.99 * (len(ordered) - 1))], 1),
    }


def proofs(conn, size: int, count: int) -> dict:
    rng = random.Random(24)
    root = store.root(conn, size)
    indexes = [(conn, rng.randrange(size), size) for _ in range(count)]
    inclusion, gen_inc = timed(store.inclusion_proof, indexes)
    leaves = store.StoredTree(conn).subtree_hashes([(0, i) for _, i, _ in indexes])
    checks = [(i, size, leaf, p, root) for (_, i, _), leaf, p in zip(indexes, leaves, inclusion, strict=True)]
    _, ver_inc = timed(merkle.verify_inclusion, checks)
    olds = [(conn, rng.randrange(1, size), size) for _ in range(count)]
    consistency, gen_con = timed(store.consistency_proof, olds)
    old_roots = [store.root(conn, old) for _, old, _ in olds]
    con_checks = [
        (old, size, r, root, p) for (_, old, _), r, p in zip(olds, old_roots, consistency, strict=True)
    ]
    _, ver_con = timed(merkle.verify_consistency, con_checks)
    return {
        "inclusion": {
            "generate": summary(gen_inc),
            "verify": summary(ver_inc),
            "hashes_max": max(map(len, inclusion)),
            "bytes_mean": round(32 * statistics.fmean(map(len, inclusion))),
        },
        "consistency": {
            "generate": summary(gen_con),
            "verify": summary(ver_con),
            "hashes_max": max(map(len, consistency)),
            "bytes_mean": round(32 * statistics.fmean(map(len, consistency))),
        },
    }


def checkpoint_costs(conn, size: int) -> dict:
    signer = Signer.generate("ledger.example/bench")
    cp = TreeHead(signer.name, size, store.root(conn, size))
    signed, sign_us = timed(sign_checkpoint, [(cp, signer)] * 200)
    verifiers = [signer.verifier()]
    _, open_us = timed(
        lambda note: open_checkpoint(note, verifiers, origin=signer.name), [(signed[0],)] * 200
    )
    return {"bytes": len(signed[0].encode()), "sign": summary(sign_us), "open": summary(open_us)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--proofs", type=int, default=2000)
    parser.add_argument("--target", type=int, default=TARGET, help="throughput target, events/s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="laneledger-tlog-") as tmp:
        paths = {False: Path(tmp) / "plain.db", True: Path(tmp) / "tree.db"}
        ledgers = [Ledger(paths[False], with_tree=False), Ledger(paths[True], with_tree=True)]
        spent = build(ledgers, args.events)
        plain, tree = ledgers
        events = tree.writer.last_position
        assert store.tree_size(tree.conn) == events == plain.writer.last_position
        assert store.tree_size(plain.conn) == 0
        tree_us = tree.tree_seconds / events * 1e6
        budget_us = 1e6 / args.target
        rate = {k: round(events / v["wall"]) for k, v in spent.items()}
        cpu_us = {k: round(v["cpu"] / events * 1e6, 1) for k, v in spent.items()}
        disk = (file_bytes(tree.conn, paths[True]) - file_bytes(plain.conn, paths[False])) / events
        result = {
            "events": events,
            "events_per_txn": PER_APPEND * APPENDS_PER_BATCH,
            "plain_events_per_s": rate[False],
            "tree_events_per_s": rate[True],
            "plain_cpu_us_per_event": cpu_us[False],
            "tree_cpu_us_per_event": cpu_us[True],
            "tree_us_per_event": round(tree_us, 2),
            "target_events_per_s": args.target,
            "tree_share_of_target_budget": round(tree_us / budget_us, 4),
            "tree_bytes_per_leaf": round(disk, 1),
            "proofs": proofs(tree.conn, events, args.proofs),
            "checkpoint": checkpoint_costs(tree.conn, events),
        }
        for ledger in ledgers:
            ledger.conn.close()
    p = result["proofs"]
    print(f"{events:,} events, {result['events_per_txn']} per transaction (FULL durability)")
    print(f"  without the tree: {rate[False]:,} events/s, {cpu_us[False]} µs CPU/event")
    print(f"  with the tree:    {rate[True]:,} events/s, {cpu_us[True]} µs CPU/event")
    print(
        f"  the tree's own time: {tree_us:.2f} µs/event = {100 * tree_us / budget_us:.1f} % of the "
        f"{budget_us:.1f} µs/event budget at the {args.target:,} events/s target (goal < 10 %)"
    )
    print(f"  the tree on disk: {disk:.0f} bytes per leaf")
    for kind in ("inclusion", "consistency"):
        k = p[kind]
        print(
            f"  {kind} proof at size {events:,}: generate {k['generate']['mean_us']} µs "
            f"(p99 {k['generate']['p99_us']}), verify {k['verify']['mean_us']} µs "
            f"(p99 {k['verify']['p99_us']}), {k['hashes_max']} hashes max, {k['bytes_mean']} bytes mean"
        )
    c = result["checkpoint"]
    print(f"  checkpoint: {c['bytes']} bytes, sign {c['sign']['mean_us']} µs, open {c['open']['mean_us']} µs")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
