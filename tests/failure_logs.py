"""A failing test's report shows the logs of the servers it used (a pytest plugin).

Fixtures that start a server (a nats-server, a service process, Prometheus)
call :func:`show_log_on_failure`; tests that start one themselves do too
(``from failure_logs import show_log_on_failure``). Anything with a
``log_path`` and a ``log_text()`` qualifies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pytest


class HasLog(Protocol):
    @property
    def log_path(self) -> Path: ...

    def log_text(self) -> str: ...


_SERVERS_TO_REPORT = pytest.StashKey[list[HasLog]]()
_LOG_LINES_IN_REPORT = 200


def show_log_on_failure(request: pytest.FixtureRequest, server: HasLog) -> None:
    """Add ``server``'s log to the report of the test if it fails (in setup,
    call or teardown)."""
    request.node.stash.setdefault(_SERVERS_TO_REPORT, []).append(server)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.failed:
        for server in item.stash.get(_SERVERS_TO_REPORT, []):
            tail = "\n".join(server.log_text().splitlines()[-_LOG_LINES_IN_REPORT:])
            report.sections.append((f"log {server.log_path}", tail or "(empty)"))
    return report
