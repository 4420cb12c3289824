"""What the benchmarks (``bench/``) and the tests that run their scenarios
share: child processes that end with their parent, and percentiles."""

from __future__ import annotations

import ctypes
import math
import os
import signal
import subprocess


def die_with_parent() -> None:
    """In a child, before exec: SIGTERM it when this process dies (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def terminate(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """SIGTERM a child started in its own session and wait; SIGKILL its group if it hangs."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]
