"""The sequencer as a process whose event loop a test can keep busy:
``python -m busy_loop_sequencer ARGS`` (with tests/ on PYTHONPATH) runs the
real sequencer with ARGS; each SIGUSR1 holds its main thread, the one its
event loop runs on, in pure-Python CPU work for ``LANELEDGER_TEST_BUSY_S``
seconds, as a heavy request would (tests/test_lease_busy_loop.py)."""

from __future__ import annotations

import os
import signal
import sys
import time

from laneledger.services.sequencer.__main__ import main

BUSY_S = float(os.environ["LANELEDGER_TEST_BUSY_S"])


def _busy(signum: int, frame: object) -> None:
    # A signal handler runs on the main thread between two bytecodes: the
    # event loop does nothing else until it returns.
    print(f"busy for {BUSY_S} s", flush=True)
    end = time.monotonic() + BUSY_S
    while time.monotonic() < end:
        sum(range(1000))
    print("busy no more", flush=True)


signal.signal(signal.SIGUSR1, _busy)

if __name__ == "__main__":
    sys.exit(main())
