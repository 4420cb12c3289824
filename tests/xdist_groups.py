"""Which tests `make test` keeps together when it runs the suite in parallel
(pytest-xdist, ``-n N --dist loadgroup``; a pytest plugin, registered in
conftest.py).

Every other test is scheduled on its own, on whichever worker is free: each
worker is its own process, and a test gets its own ports (chosen by the
servers or the OS), ``tmp_path`` and servers, so an ordinary fixture-based
test is parallel-safe as it is. A group's tests run one after another on one
worker, so they never overlap each other:

* ``fault``: the fault suite (kills, full disks, lost nodes, leases timed);
* ``timing``: tests that assert a wall-clock bound;
* ``browser``: one Chromium at a time on the 2 cores;
* ``phoenix``: its OTLP receiver starts once per worker (about 14 s);
* ``wheel``, ``go``: one build of the wheel, one of the Go checker
  (module-scoped fixtures), not one per worker.

The scheduler hands out the groups first (largest first), then single
tests in collection order, one or two at a time to whichever worker is free.
So that no long test is left to run alone at the end while the other
workers idle, the collection puts the tests marked ``slow`` (more than about
5 s) before the others when the suite runs this way.

The groups are named here by nodeid prefix, not by ``xdist_group`` marks:
with pytest 9.2 xdist's loadgroup ignores those marks (it renames nodeids in
a way pytest no longer reads: pytest-xdist issue #1386), so the controller
decides from the nodeid alone (``GroupScheduling``). A collected test whose
markers put it in a group (``fault``, ``browser``, the ``phoenix`` fixture)
but whose nodeid is not listed here is a usage error naming this file.
"""

from __future__ import annotations

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadGroupScheduling

GROUPS: dict[str, tuple[str, ...]] = {
    "fault": ("tests/fault/",),
    "timing": (
        "tests/test_verify_stream_retry.py::",
        "tests/test_verify_live.py::test_verify_with_nats_under_load_reports_lag_not_a_fault",
        "tests/test_service_tasks.py::test_cancel_tasks_asks_again_when_a_task_swallowed_the_cancel",
        "tests/test_standby.py::test_the_standby_follows_and_takes_over_from_a_killed_active_sequencer",
        "tests/test_adversarial.py::",  # globex's latency under each attack
    ),
    "browser": ("tests/test_console_browser.py::", "tests/test_console_timeline_browser.py::"),
    "phoenix": ("tests/test_otel_export.py::",),
    "wheel": ("tests/test_packaging.py::",),
    "go": ("tests/test_tlog_go.py::",),
}


def group_of(nodeid: str) -> str | None:
    for group, prefixes in GROUPS.items():
        if nodeid.startswith(prefixes):
            return group
    return None


def _group_by_markers(item: pytest.Item) -> str | None:
    if item.get_closest_marker("fault"):
        return "fault"
    if item.get_closest_marker("browser"):
        return "browser"
    if "phoenix" in getattr(item, "fixturenames", ()):
        return "phoenix"
    return None


@pytest.hookimpl(trylast=True)  # after conftest.py added the fault marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getvalue("dist") == "loadgroup":  # the same order on every worker: a stable sort
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    for item in items:
        wanted = _group_by_markers(item)
        if wanted is not None and group_of(item.nodeid) != wanted:
            raise pytest.UsageError(
                f"{item.nodeid} belongs in the xdist group {wanted!r}: add its file to GROUPS"
                " in tests/xdist_groups.py"
            )


class GroupScheduling(LoadGroupScheduling):
    """loadgroup, with the groups above (and any ``xdist_group`` mark xdist
    does read again once it is fixed)."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid) or super()._split_scope(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> GroupScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None
    return GroupScheduling(config, log)
