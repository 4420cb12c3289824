"""CPU cost of redaction (spec/content.md) on the append benchmark's event mix.

    .venv/bin/python bench/redaction.py [--events N]

Times, in one process and without I/O, what redaction adds where it runs:
the sequencer's append step 0 (``prepare_append`` with and without the
redactor: decode, redact, digest) and the SDK's content step
(``prepare_content``: redact, then check for values to externalize), per
event, on ``bench/producer.py``'s events (~300-500 bytes each; model and tool
calls, deltas, costs). Best of three passes of process CPU time. The last
line is one JSON object.

    .venv/bin/python bench/redaction.py --adversarial [--kib N]

Times instead, per rule, the worst of the adversarial inputs of
tests/test_redaction_linear.py (N KiB each, 1024 by default): the rule as
its pattern states it under Python's regex engine ("before"; quadratic rules
are timed on a tenth of the input and scaled by 100, since 1 MiB takes
minutes, and marked ``before_estimated`` in the JSON line) and as the
redactor runs it ("after").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from producer import EventFactory, request_body

from laneledger.contract.model import Lane
from laneledger.contract.redaction import Redactor
from laneledger.sdk.content import prepare_content
from laneledger.store.append import prepare_append


def best_of_three(fn) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def adversarial(kib: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_redaction_linear import ADVERSARIAL, USER_MATCH_FLOOD, USER_PATTERNS, fill

    redactor = Redactor(USER_PATTERNS)
    shapes = redactor.shapes
    patterns = {**redactor.patterns}
    figures = {}
    for rule, units in ADVERSARIAL.items():
        before = after = 0.0
        estimated = False  # the worst "before" is a tenth's time x 100, not a measurement
        shape, regex = shapes[rule], re.compile(patterns[rule])
        for unit in units:
            text, tenth = fill(unit, kib << 10), fill(unit, (kib << 10) // 10)
            after = max(after, best_of_three(partial(shape.subn, text)) * 1000)
            small = best_of_three(partial(regex.subn, "x", tenth)) * 1000
            whole = best_of_three(partial(regex.subn, "x", text)) * 1000 if small < 50 else small * 100
            if whole > before:
                before, estimated = whole, small >= 50
        figures[rule] = {"before_ms": round(before, 1), "after_ms": round(after, 1)}
        if estimated:
            figures[rule]["before_estimated"] = True
        print(f"{rule:20s} before {before:9.1f} ms   after {after:6.1f} ms   ({kib} KiB, worst input)")
    flood = fill(USER_MATCH_FLOOD, kib << 10)
    flood_ms = best_of_three(partial(shapes["acme_key"].subn, flood)) * 1000
    print(f"acme_key on its densest flood of matches  {flood_ms:6.1f} ms ({kib} KiB)")
    print(json.dumps({"kib": kib, "rules": figures, "acme_key_match_flood_ms": round(flood_ms, 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--adversarial", action="store_true")
    parser.add_argument("--kib", type=int, default=1024)
    args = parser.parse_args()
    if args.adversarial:
        adversarial(args.kib)
        return
    n = args.events
    lane = Lane(
        id="lane-1", tenant="acme", session_id="s", run_id="r", name="main", created_at="2026-01-01T00:00:00Z"
    )
    events = EventFactory(lane, "actor-1").batch(n)
    bodies = [request_body(lane, i, f"a-{i}", [e]) for i, e in enumerate(events)]
    redactor = Redactor()
    plain = best_of_three(lambda: [prepare_append(b) for b in bodies]) / n * 1e6
    redacted = best_of_three(lambda: [prepare_append(b, redactor=redactor) for b in bodies]) / n * 1e6
    sdk = best_of_three(lambda: [prepare_content(e, redactor) for e in events]) / n * 1e6
    print(f"sequencer step 0 without redaction  {plain:6.1f} µs CPU/event")
    print(f"sequencer step 0 with redaction     {redacted:6.1f} µs CPU/event (+{redacted - plain:.1f})")
    print(f"SDK content step (redact, refs)     {sdk:6.1f} µs CPU/event")
    print(
        json.dumps(
            {
                "events": n,
                "step0_us": round(plain, 1),
                "step0_redacted_us": round(redacted, 1),
                "redaction_added_us": round(redacted - plain, 1),
                "sdk_content_us": round(sdk, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
