"""The event loop's CPU per heavy append request: step 0 on the loop, or aside.

    .venv/bin/python bench/offloop.py [--rounds 5]

For each heavy request shape of the adversarial suite (tests/test_adversarial.py:
a redaction bomb of each kind, a 0.9 MiB inline event, 1000 events, 1000
references to made-up blobs), the CPU time the sequencer's event loop spends
on it in one stretch:

* **inline** (before services/sequencer/offloop.py): ``prepare_append`` with
  the default redactor, as ``Sequencer._prepare_batch`` ran it on the loop;
* **aside**: what the loop still does for a request prepared in the worker
  process (services/sequencer/prepworker.py): read its work
  (``intake.Work.of``), and decode the worker's answer (``prepworker.Done``:
  msgpack, the prepared append and the references it names).

Best of ``--rounds`` of process CPU time (no I/O, one process: no other
load distorts it beyond the machine's speed). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "shared"))

from laneledger.contract.ids import new_id  # noqa: E402
from laneledger.contract.redaction import DEFAULT_REDACTOR  # noqa: E402
from laneledger.sdk.client import make_event  # noqa: E402
from laneledger.services.sequencer import prepworker  # noqa: E402
from laneledger.services.sequencer.intake import Work  # noqa: E402
from laneledger.store.append import prepare_append  # noqa: E402

BOMB_BYTES = 800 * 1024
LANE = new_id()


def _request(payloads: list[Any]) -> bytes:
    events = [{**make_event(LANE, "stream.text_delta", actor_id="agent:a"), "payload": p} for p in payloads]
    return msgspec.json.encode(
        {"append_id": new_id(), "lane_id": LANE, "expected_last_seq": 0, "events": events}
    )


def _made_up_ref(i: int) -> dict[str, Any]:
    return {"_ref": "sha256:" + f"{i:064x}", "size_bytes": 2048}


SHAPES = {
    "redaction bomb (PEM headers)": _request(
        [{"text": "-----BEGIN PRIVATE KEY-----\n" * (BOMB_BYTES // 28)}]
    ),
    "redaction bomb (JWT starts)": _request([{"text": "eyJhbGciOi." * (BOMB_BYTES // 11)}]),
    "0.9 MiB inline event": _request([{"text": "x" * 900_000}]),
    "1000 events": _request([{"text": f"delta {i} " * 40} for i in range(1000)]),
    "1000 made-up refs": _request([{"content": _made_up_ref(i)} for i in range(1000)]),
}


def best_cpu(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    done_decoder = msgspec.msgpack.Decoder(prepworker.Done)
    results: dict[str, dict[str, float]] = {}
    for name, data in SHAPES.items():

        def inline(data: bytes = data) -> None:
            try:
                prepare_append(data, redactor=DEFAULT_REDACTOR)
            except Exception:  # noqa: BLE001 - a refusal costs what it costs
                pass

        # This process plays the worker too (a tenant's request: its references are found there).
        job = prepworker.Job(0, data, "acme", None, 1 << 20)
        answer = prepworker.frame(prepworker._do(job, DEFAULT_REDACTOR))[prepworker.HEADER.size :]

        def aside(data: bytes = data, answer: bytes = answer) -> None:
            Work.of(_Msg(data))
            done_decoder.decode(answer)

        results[name] = {
            "bytes": len(data),
            "inline_ms": round(best_cpu(inline, args.rounds) * 1e3, 2),
            "aside_ms": round(best_cpu(aside, args.rounds) * 1e3, 2),
        }
        r = results[name]
        print(
            f"{name:30} {r['bytes']:>8} B  inline {r['inline_ms']:7.2f} ms  aside {r['aside_ms']:6.2f} ms CPU"
        )
    print(json.dumps({"bench": "offloop", "rounds": args.rounds, "results": results}))


class _Msg:
    """What ``Work.of`` reads of a NATS message."""

    def __init__(self, data: bytes) -> None:
        self.data, self.subject, self.headers = data, "ledger.append.acme.l1", None


if __name__ == "__main__":
    main()
