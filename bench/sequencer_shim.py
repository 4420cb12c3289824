"""Runs ``python -m services.sequencer`` unchanged, except for one work-around
(used by ``bench/append.py`` unless it is given ``--no-workaround``).

The work-around: nats-py 2.16's ``PullSubscription.fetch`` can raise a bare
``asyncio.TimeoutError`` (``_fetch_n``: "deadline <= 0" and the re-raise after
``next_msg``) instead of ``nats.errors.TimeoutError``. The sequencer's pull loop
catches only the latter, so the pull task dies and the sequencer exits with
code 1; this happens when it goes from busy to idle, e.g. right after a
max-load phase. Here such a timeout is turned into ``nats.errors.TimeoutError``
(what the pull loop expects: "nothing to fetch, try again"), and counted on
stderr. The fix in the sequencer is to catch ``asyncio.TimeoutError`` (a base
class of ``nats.errors.TimeoutError``) in ``_pull_loop``.

Nothing else differs: same module, same arguments, same event loop.
"""

from __future__ import annotations

import asyncio
import os
import runpy
import sys

import nats.errors
from nats.js.client import JetStreamContext

_fetch = JetStreamContext.PullSubscription.fetch
_seen = 0


async def fetch(self, *args, **kwargs):
    global _seen
    try:
        return await _fetch(self, *args, **kwargs)
    except nats.errors.TimeoutError:
        raise
    except asyncio.TimeoutError as exc:
        _seen += 1
        print(f"bench shim: fetch raised a bare asyncio.TimeoutError (#{_seen}); "
              f"passed on as nats.errors.TimeoutError", file=sys.stderr, flush=True)
        raise nats.errors.TimeoutError from exc


JetStreamContext.PullSubscription.fetch = fetch

# A diagnostic knob, off unless set: the GIL switch interval of the sequencer
# process in milliseconds (CPython's default is 5 ms), to see how much its
# event-loop thread and writer thread lose waiting for each other.
if os.environ.get("LANELEDGER_BENCH_SWITCH_INTERVAL_MS"):
    sys.setswitchinterval(float(os.environ["LANELEDGER_BENCH_SWITCH_INTERVAL_MS"]) / 1000.0)

if __name__ == "__main__":
    sys.argv = ["laneledger-sequencer", *sys.argv[1:]]
    runpy.run_module("services.sequencer", run_name="__main__", alter_sys=True)
