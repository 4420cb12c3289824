"""Cost of looking for secrets in an uploaded blob (spec/content.md, "Redaction").

    .venv/bin/python bench/blob_scan.py [--mib N]

Times ``secret_rules`` (what the sequencer runs on a tenant's upload before
it copies it) on N MiB of log-like text full of the redaction rules' hints
(the slow case: every rule runs on every window), as raw text and as the
JSON string the SDK would externalize, and the event loop's worst delay
while a worker thread scans it (the sequencer scans off its loop; a regex
call holds the GIL, hence the windows). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import msgspec

from laneledger.contract.redaction import DEFAULT_REDACTOR
from laneledger.contract.secretscan import secret_rules

LINE = (
    "INFO request handled token_count=5 auth ok key=value-abc password reset link https://x.example.com/a\n"
)


async def worst_loop_delay(data: bytes) -> float:
    """The longest a 1 ms sleep on the loop took while a thread scanned ``data``."""
    worst = 0.0
    task = asyncio.create_task(asyncio.to_thread(secret_rules, data, DEFAULT_REDACTOR))
    while not task.done():
        start = time.perf_counter()
        await asyncio.sleep(0.001)
        worst = max(worst, time.perf_counter() - start)
    await task
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    mib = parser.parse_args().mib
    text = (LINE * ((mib << 20) // len(LINE) + 1))[: mib << 20]
    figures: dict[str, float] = {"mib": mib}
    for kind, data in (("text", text.encode()), ("json", msgspec.json.encode(text))):
        start = time.perf_counter()
        found = secret_rules(data, DEFAULT_REDACTOR)
        seconds = time.perf_counter() - start
        assert not found, found  # the text is clean: every window is looked at
        figures[f"{kind}_s_per_mib"] = round(seconds / mib, 3)
        print(f"{kind:4}  {mib} MiB in {seconds:5.2f} s  ({seconds / mib * 1000:.0f} ms/MiB)")
    delay = asyncio.run(worst_loop_delay(text.encode()))
    figures["worst_loop_delay_ms"] = round(delay * 1000, 1)
    print(f"worst event-loop delay while a thread scans it: {delay * 1000:.0f} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
