"""The suite's plugins and markers.

The fixtures live in plugin modules, registered here once (pytest takes
``pytest_plugins`` only from the rootdir's conftest), so a test names a
fixture as a parameter and imports nothing for it:

* failure_logs.py: a failing test's report shows the logs of the servers it used
* nats_fixtures.py: ``nats_server``, ``cluster``, ``nc``, ``js``
* ledger_fixtures.py: ``sequencer``, ``sequencer_proc``, ``client``, ``actor``,
  ``small_sequencer``, ``small_ledger``
* tail_fixtures.py: ``start_tail``; and, for route logic without NATS,
  ``client_in_process`` and ``start_tail_in_process`` (a module's overrides)
* checkpoint_fixtures.py: ``checkpoint_service``, ``checkpoints``,
  ``checkpoints_under_test`` (a contract suite's, in-process and over NATS)
* browser_fixtures.py: ``browser``
* deployment_fixtures.py: ``passwords``, ``secured_server``, ``tenant_server``,
  ``rendered_deployment``
  (deploy/nats.conf, its users and their permissions)
* otel_fixtures.py: ``phoenix`` (a real OTLP receiver, once per test session)
* xdist_groups.py: the tests ``make test`` (in parallel) keeps together
* cpu_report.py: with ``LANELEDGER_CPU_REPORT=DIR``, the CPU each test used

Markers (declared in pyproject.toml, ``--strict-markers``): ``nats`` is added
here to every test that uses a nats-server fixture; tests that start servers
of their own, ``browser``, ``fault`` and ``slow`` are marked where they are
(``fault`` for everything under tests/fault/ is added here too). A test
without the ``nats`` marker that starts a nats-server fails, naming the
marker, so ``make test-fast`` (``-m "not nats and not browser"``) never
waits on one.

``make test`` runs the suite in parallel; xdist_groups.py says how, and
which tests it keeps together (the fault suite, timed tests, the browser).

Async tests and fixtures run on a function-scoped loop (``asyncio_mode = "auto"``
in pyproject.toml); async fixtures are still declared with
``pytest_asyncio.fixture`` so they work in strict mode too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from laneledger.devtools.natsserver import NatsServer, find_nats_server

pytest_plugins = [
    "cpu_report",
    "failure_logs",
    "nats_fixtures",
    "ledger_fixtures",
    "tail_fixtures",
    "checkpoint_fixtures",
    "browser_fixtures",
    "deployment_fixtures",
    "otel_fixtures",
    "xdist_groups",
]

_FAULT_SUITE = Path(__file__).resolve().parent / "fault"
_NATS_FIXTURES = {"nats_server", "cluster", "secured_server", "tenant_server", "rendered_deployment"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _NATS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.nats)
        if _FAULT_SUITE in item.path.parents:
            item.add_marker(pytest.mark.fault)


@pytest.fixture(autouse=True)
def _nats_server_needs_the_nats_marker(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test not marked ``nats`` cannot start the real nats-server (through
    NatsServer or NatsCluster; a stand-in script as ``binary=`` may run), so
    ``-m "not nats"`` means no server to wait on."""
    if request.node.get_closest_marker("nats"):
        return
    start = NatsServer.start

    def start_only_a_stand_in(self: NatsServer, *args: Any, **kwargs: Any) -> NatsServer:
        if self.binary == find_nats_server():
            pytest.fail(
                f"{request.node.nodeid} starts a nats-server but is not marked nats:"
                " add @pytest.mark.nats (or use the nats_server fixture)",
                pytrace=False,
            )
        return start(self, *args, **kwargs)

    monkeypatch.setattr(NatsServer, "start", start_only_a_stand_in)
