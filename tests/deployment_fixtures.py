"""Fixtures for tests of laneledger as deployed (``deployment_support.py``):
the users' passwords, and a real nats-server on ``deploy/nats.conf`` as
shipped (``secured_server``) or rendered for two tenants (``tenant_server``,
by ``laneledger.runtime.natsconfig``, as ``laneledger nats-config`` does), and
the whole system running on the rendered config, every service as its deploy
user with the tenants file (``rendered_deployment``: ``rendered_deployment.py``)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from deployment_support import CONF, TENANTS, USERS
from failure_logs import show_log_on_failure
from rendered_deployment import TENANTS_FILE, RenderedDeployment, render_config, start_rendered_deployment

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


def _tenant_passwords(passwords: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for tenant in TENANTS:
        passwords[f"producer-{tenant}"] = f"test-{tenant}-secret"
        monkeypatch.setenv(password_variable(tenant), passwords[f"producer-{tenant}"])


def _serve(rendered: Path, tmp_path: Path, request: pytest.FixtureRequest) -> NatsServer:
    """A nats-server on a rendered config, which ``nats-server -t`` accepts first."""
    result = subprocess.run([find_nats_server(), "-t", "-c", str(rendered)], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    server = NatsServer(tmp_path / "nats", config=rendered, extra_args=("-m", "-1"))
    show_log_on_failure(request, server)
    return server


@pytest.fixture
def tenant_server(
    tmp_path: Path, passwords: dict[str, str], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[NatsServer]:
    """deploy/nats.conf rendered for the tenants acme and globex."""
    _tenant_passwords(passwords, monkeypatch)
    rendered = tmp_path / "nats.conf"
    rendered.write_text(render(CONF.read_text(), TENANTS))
    with _serve(rendered, tmp_path, request) as server:
        yield server


@pytest_asyncio.fixture
async def rendered_deployment(
    tmp_path: Path, passwords: dict[str, str], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> AsyncIterator[RenderedDeployment]:
    """The whole system as deployed for acme and globex from
    ``laneledger nats-config --tenants-file`` (``rendered_deployment.py``);
    a test sets its own limits with ``@pytest.mark.tenants_file(text)``
    (every tenant of ``TENANTS`` in it)."""
    _tenant_passwords(passwords, monkeypatch)
    marker = request.node.get_closest_marker("tenants_file")
    tenants_text = TENANTS_FILE if marker is None else marker.args[0]
    missing = [t for t in TENANTS if f"[tenants.{t}]" not in tenants_text]
    assert not missing, f"the tenants_file mark lacks the tenants {missing}"
    (tmp_path / "tenants.toml").write_text(tenants_text)
    rendered = tmp_path / "nats.conf"
    await asyncio.to_thread(render_config, tmp_path / "tenants.toml", rendered)
    server = _serve(rendered, tmp_path, request)
    await server.astart()
    try:
        deployment = await start_rendered_deployment(tmp_path, server, passwords)
        for proc in deployment.services:
            show_log_on_failure(request, proc)
        try:
            yield deployment
        finally:
            await deployment.close_clients()
            await asyncio.to_thread(deployment.stop)
        # Whatever a test's producers tried, the services lacked no permission.
        assert deployment.permission_violations(services_only=True) == []
    finally:
        await server.astop()
