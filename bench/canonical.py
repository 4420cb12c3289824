"""Benchmark: laneledger.contract.canonical.canonicalize against rfc8785.dumps.

Run: .venv/bin/python bench/canonical.py

One realistic proposed event (~500 canonical bytes: UUIDs, an RFC 3339
timestamp, a nested payload with small ints, a bool and the float 0.25),
canonicalized in a tight loop; the figure is the best of several runs, in
microseconds per event. The last line is JSON for scripts.
"""

from __future__ import annotations

import json
import time

import rfc8785

from laneledger.contract.canonical import canonicalize

EVENT = {
    "schema_version": "1.0",
    "id": "018f0c2a-7b3c-7d2e-9a41-5c6d7e8f9012",
    "lane_id": "018f0c2a-0000-7000-8000-000000000002",
    "subject_id": "018f0c2a-0000-7000-8000-000000000003",
    "actor_id": "018f0c2a-0000-7000-8000-000000000001",
    "causation_id": "018f0c2a-7b3c-7d2e-9a41-5c6d7e8f9011",
    "event_type": "tool.call.completed",
    "occurred_at": "2026-01-02T03:04:05.123456Z",
    "payload": {
        "tool": "bash",
        "attempt": 1,
        "exit_code": 0,
        "duration_ms": 1834,
        "temperature": 0.25,
        "output": {"bytes": 5321, "truncated": False, "summary": "ran 12 tests, all passed"},
    },
    "extensions": {},
}

RUNS = 7


def best_us(fn, iterations: int) -> float:
    """Best of RUNS timed loops, in µs per call (the minimum is the figure
    least disturbed by other work on the machine)."""
    best = float("inf")
    for _ in range(RUNS):
        start = time.perf_counter_ns()
        for _ in range(iterations):
            fn(EVENT)
        best = min(best, (time.perf_counter_ns() - start) / iterations)
    return best / 1000


def main() -> None:
    out = canonicalize(EVENT)
    assert out == rfc8785.dumps(EVENT), "canonicalize disagrees with rfc8785"
    print(f"event: {len(out)} canonical bytes")
    for fn in (canonicalize, rfc8785.dumps):  # warm up
        for _ in range(1000):
            fn(EVENT)
    ours = best_us(canonicalize, 100_000)
    theirs = best_us(rfc8785.dumps, 5_000)
    print(f"{'laneledger.contract.canonical.canonicalize':<36}{ours:>8.2f} µs/event")
    print(f"{'rfc8785.dumps':<36}{theirs:>8.2f} µs/event   ({theirs / ours:.0f}x)")
    print(json.dumps({"ours_us": round(ours, 3), "rfc8785_us": round(theirs, 3), "event_bytes": len(out)}))


if __name__ == "__main__":
    main()
