"""Fixtures for tests of laneledger as deployed (``deployment_support.py``):
the users' passwords, and a real nats-server on ``deploy/nats.conf`` as
shipped (``secured_server``) or rendered for two tenants (``tenant_server``,
by ``laneledger.runtime.natsconfig``, as ``laneledger nats-config`` does)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment_support import CONF, TENANTS, USERS
from failure_logs import show_log_on_failure

from laneledger.devtools.natsserver import NatsServer, find_nats_server
from laneledger.runtime.natsconfig import password_variable, render


@pytest.fixture
def passwords(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    found = {user: f"test-{user}-secret" for user in USERS}
    monkeypatch.setenv("LANELEDGER_NATS_STORE_DIR", "/tmp/unused-by-nats-server-t")
    for user, password in found.items():
        monkeypatch.setenv(f"LANELEDGER_{user.upper().replace('-', '_')}_PASSWORD", password)
    return found


@pytest.fixture
def secured_server(
    tmp_path: Path, passwords: dict[str, str], request: pytest.FixtureRequest
) -> Iterator[NatsServer]:
    """deploy/nats.conf as shipped. Its fixed ports are overridden: the
    client port is chosen by the server, and -m -1 moves monitoring to a
    port of its choosing too."""
    server = NatsServer(tmp_path / "nats", config=CONF, extra_args=("-m", "-1"))
    show_log_on_failure(request, server)
    with server:
        yield server


@pytest.fixture
def tenant_server(
    tmp_path: Path, passwords: dict[str, str], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[NatsServer]:
    """deploy/nats.conf rendered for the tenants acme and globex."""
    for tenant in TENANTS:
        passwords[f"producer-{tenant}"] = f"test-{tenant}-secret"
        monkeypatch.setenv(password_variable(tenant), passwords[f"producer-{tenant}"])
    rendered = tmp_path / "nats.conf"
    rendered.write_text(render(CONF.read_text(), TENANTS))
    result = subprocess.run([find_nats_server(), "-t", "-c", str(rendered)], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    server = NatsServer(tmp_path / "nats", config=rendered, extra_args=("-m", "-1"))
    show_log_on_failure(request, server)
    with server:
        yield server
