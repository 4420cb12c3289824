"""laneledger exactly as the docs tell ops (docs/tenants.md) to deploy it for many tenants:
``laneledger nats-config --tenants-file`` renders ``deploy/nats.conf``, a real
nats-server runs on the rendered file (port picked by the server, its store
in the test's directory), and every service runs as its own OS process and
its own NATS user, with the same tenants file:

* an active and a standby sequencer (``sequencer`` and, for receipts,
  ``sequencer-replies``), each on its own ledger file, signing the
  transparency log's checkpoints with one key (``tlog_key``);
* the tail, the ingest service (Korg's HTTP writes) and the checkpoint
  service, guarded by per-tenant HTTP tokens (the checkpoint service
  replying as ``checkpoint-replies``);
* the metrics service;

and tenants' producers connect as ``producer-<tenant>`` (in the tenant's
own NATS account). The fixture is ``rendered_deployment``
(``deployment_fixtures.py``)::

    async def test_x(rendered_deployment):
        d = rendered_deployment
        async with await d.connect("acme") as acme:        # a LedgerClient as producer-acme
            ...
        recorder = await d.lane("globex")                   # a LaneRecorder of a new globex lane
        d.token("acme")                                     # acme's HTTP bearer token
        await d.get(d.tail, "/api/v1/sessions", tenant="acme")  # (status, body) with acme's token
        await d.send(d.ingest, "POST", "/api/agent/tool-call", json=body)  # the operator's token
        d.sequencer, d.standby, d.tail, d.ingest, d.checkpoint, d.metrics   # ServiceProcess handles
        await d.fail_over()                                 # kill the active; the standby takes over
        await d.restart_standby()                           # the killed one back, as the standby
        async with d.admin() as nc: ...                     # a NATS connection as `sequencer` (stream info)
        d.permission_violations()                           # what nats-server refused anyone
        # (at teardown the fixture fails if it refused a service's user anything)
        await d.verify()                                    # `laneledger verify --db` on the active's file
        mcp = await d.start_mcp()                           # `laneledger mcp --serve` over the tail

The tenants are ``TENANTS`` (acme and globex), with the limits of
``TENANTS_FILE``; a test sets others with ``@pytest.mark.tenants_file(text)``.
Nothing here is fixed
globally: ports are chosen by the server or the OS, files live in the test's
``tmp_path``, so tests using it may run in parallel.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import nats
from deployment_support import CONF, TENANTS, url_for
from nats.aio.client import Client as NATS
from polling import eventually
from sequencer_process import SequencerProcess
from service_process import REPO, ServiceProcess

from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.tlog.note import Signer

TENANTS_FILE = """\
[defaults]
append_rate = 2000
append_burst = 250
append_backlog = 20000

[tenants.acme]

[tenants.globex]
"""
assert all(f"[tenants.{t}]" in TENANTS_FILE for t in TENANTS)
# Short, so a failover takes about a second (spec/replication.md, "The lease").
LEASE_TTL_S = "1"
TLOG_ORIGIN = "laneledger.test/rendered"
TLOG_INTERVAL_S = "0.5"  # checkpoints signed this often while the tree grows
# What nats-server logs when it refuses a user's publish or subscription.
_VIOLATION = re.compile(r"^.*(?:Publish|Subscription) Violation.*$", re.MULTILINE)
# ... - "LEDGER/user:sequencer" - Publish Violation - Subject "..."
_SERVICE_USER = re.compile(r'"LEDGER/user:(?!producer")[^"]+"')


def render_config(tenants_file: Path, out: Path) -> None:
    """``laneledger nats-config --tenants-file`` as ops run it (the fixture
    then has ``nats-server -t`` check the file before serving it)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "laneledger.cli",
            "nats-config",
            "--tenants-file",
            str(tenants_file),
            "--template",
            str(CONF),
            "-o",
            str(out),
        ],
        check=True,
        cwd=REPO,
        timeout=60,
    )


@dataclass
class RenderedDeployment:
    """The running deployment (see the module text). ``sequencer`` is the
    active sequencer and ``standby`` the other; ``fail_over`` swaps them."""

    server: NatsServer
    passwords: dict[str, str]
    dir: Path
    tenants_file: Path
    tlog_key: Signer  # the transparency log's: verifier() checks its checkpoints
    tokens: dict[str, str]
    operator_token: str
    sequencer: SequencerProcess
    standby: SequencerProcess
    tail: ServiceProcess
    ingest: ServiceProcess
    checkpoint: ServiceProcess
    metrics: ServiceProcess
    tenants: tuple[str, ...] = TENANTS
    mcp: ServiceProcess | None = None  # started by start_mcp, for the tests that read over MCP
    _clients: list[LedgerClient] = field(default_factory=list)

    # -- who connects how -------------------------------------------------------

    def url(self, user: str) -> str:
        """The NATS URL of a deploy user (``sequencer``, ``producer-acme``, …)."""
        return url_for(self.server, user, self.passwords)

    async def connect(self, tenant: str, **kwargs: Any) -> LedgerClient:
        """A client of ``tenant``'s producer, as ``producer-<tenant>``
        (``LedgerClient.connect(url, tenant=T)``, as docs/nats-conf.md says)."""
        client = await LedgerClient.connect(self.url(f"producer-{tenant}"), tenant=tenant, **kwargs)
        self._clients.append(client)
        return client

    async def lane(
        self, tenant: str, name: str = "main", *, session_id: str = "s-1", run_id: str = "r-1"
    ) -> LaneRecorder:
        """A new lane of ``tenant``'s, with an agent actor, written through
        a client of its producer (``recorder.append(events)`` returns the
        receipt; ``recorder.client``, ``recorder.lane``)."""
        client = await self.connect(tenant, timeout=5.0)
        actor = await client.ensure_actor(tenant, f"agent:{tenant}@1", "agent")
        return await LaneRecorder.open(client, tenant, session_id, run_id, name, actor_id=actor.id)

    def token(self, tenant: str) -> str:
        """``tenant``'s HTTP bearer token for the tail and the checkpoint service."""
        return self.tokens[tenant]

    async def get(
        self,
        service: ServiceProcess,
        path: str,
        *,
        tenant: str | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """``GET path?params`` of the tail or the checkpoint service with
        ``tenant``'s token (None: the operator's); its status and body."""
        token = self.operator_token if tenant is None else self.token(tenant)
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
            http.get(f"{service.http_url}{path}", params=params) as resp,
        ):
            return resp.status, await resp.read()

    async def send(
        self, service: ServiceProcess, method: str, path: str, *, tenant: str | None = None, **body: Any
    ) -> tuple[int, bytes]:
        """``method path`` with ``body`` (aiohttp's ``json=`` or ``data=``) and
        ``tenant``'s token (None: the operator's); its status and body."""
        token = self.operator_token if tenant is None else self.token(tenant)
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
            http.request(method, f"{service.http_url}{path}", **body) as resp,
        ):
            return resp.status, await resp.read()

    @asynccontextmanager
    async def admin(self) -> AsyncIterator[NATS]:
        """A connection as the ``sequencer`` user (``$JS.API.>``): for a test
        to look at streams and consumers, not to act as a producer."""
        nc = await nats.connect(self.url("sequencer"))
        try:
            yield nc
        finally:
            await nc.close()

    async def start_mcp(self) -> ServiceProcess:
        """The MCP server as its container runs it (``laneledger mcp --serve``,
        its tail URL from the environment), on a port the OS picks; its
        endpoint is ``<http_url>/mcp``, each client with its own token."""
        if self.mcp is None:
            self.mcp = ServiceProcess(
                "laneledger.cli",
                ["mcp", "--serve"],
                self.dir / "mcp",
                log_name="mcp",
                env={
                    "LANELEDGER_MCP_LISTEN": "127.0.0.1:0",
                    "LANELEDGER_MCP_TAIL_URL": str(self.tail.http_url),
                },
            )
        await asyncio.to_thread(self.mcp.start, 30)
        return self.mcp

    # -- the sequencers -----------------------------------------------------------

    async def fail_over(self) -> SequencerProcess:
        """Kill the active sequencer (SIGKILL, a crash) and wait until the
        standby says it is active; it becomes ``sequencer``, the killed one
        ``standby`` (stopped until ``restart_standby``)."""
        killed, survivor = self.sequencer, self.standby
        killed.kill()
        await eventually(
            lambda: _role(survivor),
            until=lambda role: role == "active",
            what=f"{survivor.db_path.parent.name} active after the failover",
            retry_on=(aiohttp.ClientError,),
        )
        self.sequencer, self.standby = survivor, killed
        return survivor

    async def restart_standby(self) -> SequencerProcess:
        """Start the stopped standby again on its own file (off the event
        loop, so the test's clients keep running); it follows as a standby."""
        await asyncio.to_thread(self.standby.start, 30)
        assert "role=standby" in self.standby.ready_line, self.standby.ready_line
        return self.standby

    # -- what went wrong ------------------------------------------------------------

    def permission_violations(self, *, services_only: bool = False) -> list[str]:
        """Every publish or subscription nats-server refused, as it logged it;
        ``services_only``: those of the services' users (not producers'),
        which the fixture checks are none when the test ends."""
        found = _VIOLATION.findall(self.server.log_text())
        if services_only:
            found = [line for line in found if _SERVICE_USER.search(line)]
        return found

    async def close_clients(self) -> None:
        await asyncio.gather(*(c.close() for c in self._clients), return_exceptions=True)
        self._clients.clear()

    async def verify(self) -> subprocess.CompletedProcess[str]:
        """``laneledger verify --db`` on the active sequencer's ledger file."""
        return await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "laneledger.cli", "verify", "--db", str(self.sequencer.db_path)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )

    @property
    def services(self) -> tuple[ServiceProcess, ...]:
        found = (self.sequencer, self.standby, self.tail, self.ingest, self.checkpoint, self.metrics)
        return found if self.mcp is None else (*found, self.mcp)

    def stop(self) -> None:
        for proc in reversed(self.services):
            proc.stop()


async def _role(seq: SequencerProcess) -> str | None:
    async with aiohttp.ClientSession() as http, http.get(f"{seq.http_url}/readyz") as resp:
        role: str | None = (await resp.json()).get("role")
        return role


def _sequencer(d: Path, name: str, server: NatsServer, passwords: dict[str, str]) -> SequencerProcess:
    return SequencerProcess(
        url_for(server, "sequencer", passwords),
        d / name / "ledger.db",
        log_dir=d / name,
        extra_args=(
            "--reply-nats",
            url_for(server, "sequencer-replies", passwords),
            "--tenants-file",
            str(d / "tenants.toml"),
            "--lease-ttl-s",
            LEASE_TTL_S,
            "--tlog-key-file",
            str(d / "tlog.key"),
            "--tlog-checkpoint-interval-s",
            TLOG_INTERVAL_S,
        ),
    )


def _service(
    module: str, d: Path, user: str, server: NatsServer, passwords: dict[str, str], *args: str
) -> ServiceProcess:
    name = module.rsplit(".", 1)[-1]
    data = [] if name == "ingest" else ["--data", str(d / name)]  # the ingest keeps no state
    return ServiceProcess(
        module,
        [
            "--nats",
            url_for(server, user, passwords),
            *data,
            "--http-host",
            "127.0.0.1",
            "--http-port",
            "0",
            *args,
        ],
        d / name,
    )


async def start_rendered_deployment(
    d: Path, server: NatsServer, passwords: dict[str, str]
) -> RenderedDeployment:
    """Start every service on ``server`` (which runs the config
    ``render_config`` wrote for ``d / "tenants.toml"``); the active
    sequencer first, so it is the one holding the lease."""
    tenants_file = d / "tenants.toml"
    tokens = {t: f"{t}-read-token-{secrets.token_hex(8)}" for t in TENANTS}
    tokens_file = d / "tokens"
    tokens_file.write_text("".join(f"{t} {tok}\n" for t, tok in tokens.items()))
    operator_file = d / "operator-token"
    operator_token = f"operator-token-{secrets.token_hex(8)}"
    operator_file.write_text(operator_token + "\n")
    guarded = ("--tokens-file", str(tokens_file), "--operator-token-file", str(operator_file))
    tlog_key = Signer.generate(TLOG_ORIGIN)
    (d / "tlog.key").write_text(tlog_key.to_text() + "\n")
    (d / "tlog.key").chmod(0o600)
    deployment = RenderedDeployment(
        server=server,
        passwords=passwords,
        dir=d,
        tenants_file=tenants_file,
        tlog_key=tlog_key,
        tokens=tokens,
        operator_token=operator_token,
        sequencer=_sequencer(d, "sequencer-a", server, passwords),
        standby=_sequencer(d, "sequencer-b", server, passwords),
        tail=_service("laneledger.services.tail", d, "tail", server, passwords, *guarded),
        ingest=_service("laneledger.services.ingest", d, "ingest", server, passwords, *guarded),
        checkpoint=_service(
            "laneledger.services.checkpoint",
            d,
            "checkpoint",
            server,
            passwords,
            "--reply-nats",
            url_for(server, "checkpoint-replies", passwords),
            "--tenants-file",
            str(tenants_file),
            *guarded,
        ),
        metrics=_service("laneledger.services.metrics", d, "metrics", server, passwords),
    )
    try:
        await asyncio.to_thread(deployment.sequencer.start, 30)
        assert "role=active" in deployment.sequencer.ready_line, deployment.sequencer.ready_line
        others = (
            deployment.standby,
            deployment.tail,
            deployment.ingest,
            deployment.checkpoint,
            deployment.metrics,
        )
        await asyncio.gather(*(asyncio.to_thread(proc.start, 30) for proc in others))
        assert "role=standby" in deployment.standby.ready_line, deployment.standby.ready_line
    except BaseException:
        deployment.stop()
        raise
    return deployment
