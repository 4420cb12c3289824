"""Where the suite's CPU goes (docs/testing.md): with
``LANELEDGER_CPU_REPORT=DIR`` each pytest process (each xdist worker) writes
the CPU seconds each test used, its own and its reaped child processes'
(nats-servers, services, CLI calls, Chromium), to ``DIR/<worker>.json``; the
run then prints the totals and the test files that used the most. Off
without the variable.

The suite runs on two cores and mostly runs real processes, so its wall time
is bound by the CPU it uses, not by waiting: this is the figure to cut.
A child is counted when it is reaped, so a process that outlives its test (a
session fixture's) is counted in the test that reaped it, and in the total.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

_ENV = "LANELEDGER_CPU_REPORT"
_rows: list[tuple[str, float, float, float]] = []


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get(_ENV)
    if out and os.environ.get("PYTEST_XDIST_WORKER") is None:  # the controller, before any worker
        for stale in Path(out).glob("gw*.json"):  # an earlier run's
            stale.unlink()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None]:
    if not os.environ.get(_ENV):
        yield
        return
    own0, children0 = _cpu()
    started = time.monotonic()
    yield
    own1, children1 = _cpu()
    _rows.append((item.nodeid, own1 - own0, children1 - children0, time.monotonic() - started))


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(_ENV)
    if not out:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    own, children = _cpu()
    if worker is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        report = {"tests": _rows, "own_s": own, "children_s": children}
        (Path(out) / f"{worker}.json").write_text(json.dumps(report))
    else:  # the controller (or a run without xdist: its own rows)
        _print_summary(Path(out), own if not _rows else 0.0, _rows)


def _print_summary(out: Path, controller_s: float, rows: list[tuple[str, float, float, float]]) -> None:
    total = controller_s
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    reports = [json.loads(p.read_text()) for p in sorted(out.glob("gw*.json"))]
    for report in reports:
        total += report["own_s"] + report["children_s"]
        rows = rows + [tuple(r) for r in report["tests"]]
    if not reports:
        own, children = _cpu()
        total = own + children
    for nodeid, own_s, children_s, wall_s in rows:
        entry = by_file[nodeid.split("::")[0]]
        entry[0] += own_s + children_s
        entry[1] += wall_s
        entry[2] += 1
    print(f"\nCPU of the run: {total:.0f} s (every pytest process and its reaped children)")
    for name, (cpu_s, wall_s, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"  {cpu_s:7.1f} s CPU  {wall_s:7.1f} s of tests  {n:4d} tests  {name}")
