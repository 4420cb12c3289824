"""Helpers for the metrics service's tests: a known workload with its expected
metrics, the service in-process and as a subprocess, scraping, Prometheus.

Every wait here is an ``eventually()`` (polling.py): bounded in time, and a
timeout fails naming what was awaited.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
from external_programs import PROMETHEUS
from polling import eventually
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from service_process import ServiceProcess

from laneledger.contract.model import CommittedEvent, Lane
from laneledger.runtime.opsserver import ops_routes, start_http
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.metrics.service import MetricsService, MetricsSettings
from laneledger.services.metrics.store import MetricsStore

# -- scraping ---------------------------------------------------------------------

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Exposition text -> {(sample name, labels): value}."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(samples: Samples, name: str, /, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: Samples, name: str, /, **labels: str) -> float:
    """Sum of every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            assert resp.status == 200, resp.status
            return await resp.text()


def ledger_samples(samples: Samples) -> Samples:
    """The folded ledger metrics only (not the service's own process counters)."""
    own = ("laneledger_metrics_batches_folded", "laneledger_metrics_store_commit_seconds")
    return {k: v for k, v in samples.items() if k[0].startswith("laneledger_") and not k[0].startswith(own)}


# -- committed events for pure fold tests ------------------------------------------


def committed(
    position: int,
    event_type: str,
    *,
    tenant: str = "acme",
    subject_id: str = "lane-1",
    payload: dict | None = None,
    occurred_at: str = "2026-01-01T00:00:00Z",
    session_id: str = "s1",
    run_id: str = "r1",
) -> bytes:
    """A committed event's bytes as the stream carries them (hashes are not checked)."""
    event = CommittedEvent(
        schema_version="1.0",
        id=f"ev-{position}",
        lane_id="lane-1",
        subject_id=subject_id,
        event_type=event_type,
        actor_id="actor-1",
        occurred_at=occurred_at,
        payload=payload or {},
        extensions={},
        tenant=tenant,
        session_id=session_id,
        run_id=run_id,
        seq=position,
        position=position,
        append_id=f"ap-{position}",
        committed_at="2026-01-01T00:00:00Z",
        prev_hash="0" * 64,
        entry_hash="0" * 64,
    )
    return msgspec.json.encode(event)


# -- the known workload ------------------------------------------------------------


@dataclass
class Workload:
    """Three stages of appends over three lanes in two tenants. ``EXPECTED``
    below is worked out by hand from these events, not by the fold."""

    client: LedgerClient
    stages: list[list[tuple[Lane, list[dict]]]] = field(default_factory=list)
    heads: dict[str, int] = field(default_factory=dict)
    last_position: int = 0

    async def run_stage(self, index: int) -> int:
        for lane, events in self.stages[index]:
            receipt = await self.client.append(lane, self.heads.get(lane.id, 0), events)
            self.heads[lane.id] = receipt.last_seq
            self.last_position = max(self.last_position, receipt.positions[-1])
        return self.last_position

    async def run(self) -> int:
        for index in range(len(self.stages)):
            await self.run_stage(index)
        return self.last_position


async def build_workload(client: LedgerClient) -> Workload:
    c = client
    agent = await c.ensure_actor("acme", "agent:metrics-tests/1", "agent")
    human = await c.ensure_actor("acme", "human:dusk", "human")
    bot = await c.ensure_actor("globex", "agent:metrics-tests/2", "agent")
    main = await c.create_lane("acme", "s1", "r1", "main", actor_id=agent.id)
    side = await c.create_lane("acme", "s1", "r2", "side", actor_id=agent.id)
    other = await c.create_lane("globex", "s2", "r1", "main", actor_id=bot.id)
    turn = await c.create_turn(main.id, 1)
    shell = await c.create_action(main.id, turn.id, "tool_call", "shell", effect="write", idempotency="none")
    llm = await c.create_action(
        main.id, turn.id, "model_call", "claude-sonnet-4", effect="none", idempotency="not_applicable"
    )
    fetch = await c.create_action(
        main.id, turn.id, "tool_call", "fetch", effect="read", idempotency="inherent"
    )
    a1 = await c.create_attempt(main.id, shell.id, 1)
    a2 = await c.create_attempt(main.id, llm.id, 1)
    a3 = await c.create_attempt(main.id, fetch.id, 1)

    def ev(
        lane: Lane,
        event_type: str,
        subject: str | None = None,
        payload: dict | None = None,
        at: str | None = None,
        who: str | None = None,
    ) -> dict:
        actor = who or (bot.id if lane is other else agent.id)
        return make_event(
            lane.id,
            event_type,
            actor_id=actor,
            subject_id=subject or lane.id,
            payload=payload,
            occurred_at=at,
        )

    def cost(
        lane: Lane, provider: str, model: str, amount: str, currency: str = "USD", **tokens: int
    ) -> dict:
        return ev(
            lane,
            "cost.recorded",
            payload={"provider": provider, "model": model, "amount": amount, "currency": currency, **tokens},
        )

    w = Workload(client)
    w.stages.append(
        [
            (
                main,
                [
                    ev(main, "session.started", "s1"),
                    ev(main, "run.started", "r1"),
                    ev(main, "turn.started", turn.id),
                    ev(
                        main,
                        "action.started",
                        shell.id,
                        {"action_type": "tool_call", "name": "shell"},
                        at="2026-01-01T00:00:00Z",
                    ),
                    ev(main, "attempt.requested", a1.id, {"attempt_no": 1}),
                    ev(main, "hitl.paused", shell.id, {"pause_id": "pause-1", "trigger": "side_effect"}),
                ],
            )
        ]
    )
    w.stages.append(
        [
            (
                main,
                [
                    ev(
                        main,
                        "hitl.responded",
                        shell.id,
                        {"pause_id": "pause-1", "decision": "approved"},
                        who=human.id,
                    ),
                    ev(main, "attempt.completed", a1.id),
                    ev(main, "action.completed", shell.id, at="2026-01-01T00:00:01.5Z"),
                ],
            )
        ]
    )
    w.stages.append(
        [
            (
                main,
                [
                    ev(
                        main,
                        "action.started",
                        llm.id,
                        {"action_type": "model_call", "name": "claude-sonnet-4"},
                        at="2026-01-01T00:00:02Z",
                    ),
                    ev(main, "attempt.requested", a2.id),
                    cost(
                        main,
                        "anthropic",
                        "claude-sonnet-4",
                        "0.0123",
                        input_tokens=1520,
                        output_tokens=310,
                        cache_read_tokens=4096,
                    ),
                    ev(main, "attempt.failed", a2.id),
                    ev(main, "action.failed", llm.id, at="2026-01-01T00:00:02.300000000+00:00"),
                    ev(main, "action.started", fetch.id, {"action_type": "tool_call", "name": "fetch"}),
                    ev(main, "attempt.requested", a3.id),
                    ev(main, "action.completed", fetch.id, {"duration_ms": 250}),
                    cost(main, "anthropic", "claude-sonnet-4", "0.1", input_tokens=100, output_tokens=20),
                    ev(main, "hitl.paused", fetch.id, {"pause_id": "pause-2", "trigger": "review"}),
                    ev(main, "lane.framework.checkpoint.linked", main.id, {"checkpoint_id": "cp-1"}),
                    ev(main, "ext.acme.round_audit", main.id, {"round": 2}),
                    ev(main, "run.completed", "r1"),
                ],
            ),
            (
                side,
                [
                    ev(side, "run.started", "r2"),
                    cost(side, "openai", "gpt-4.1", "0.000000000000000001", output_tokens=7),
                    cost(side, "openai", "gpt-4.1", "-0.05"),
                    ev(side, "run.failed", "r2"),
                ],
            ),
            (
                other,
                [
                    ev(other, "run.started", "r1"),
                    cost(other, "anthropic", "claude-haiku", "1.5", "EUR", input_tokens=10),
                    ev(other, "run.cancelled", "r1"),
                ],
            ),
        ]
    )
    return w


WORKLOAD_EVENTS = 29

# After stage 0 and 1: the gauges rise, then fall back to zero.
EXPECTED_GAUGES = [
    {"laneledger_attempts_unresolved": 1, "laneledger_hitl_waiting": 1},
    {"laneledger_attempts_unresolved": 0, "laneledger_hitl_waiting": 0},
    {"laneledger_attempts_unresolved": 1, "laneledger_hitl_waiting": 1},
]

ACME_SONNET = dict(tenant="acme", provider="anthropic", model="claude-sonnet-4")
ACME_GPT = dict(tenant="acme", provider="openai", model="gpt-4.1")
GLOBEX_HAIKU = dict(tenant="globex", provider="anthropic", model="claude-haiku")

# (sample name, labels, value) after the whole workload.
EXPECTED: list[tuple[str, dict[str, str], float]] = [
    ("laneledger_events_total", dict(event_type="cost.recorded", family="cost", tenant="acme"), 4),
    ("laneledger_events_total", dict(event_type="cost.recorded", family="cost", tenant="globex"), 1),
    ("laneledger_events_total", dict(event_type="run.started", family="lifecycle", tenant="acme"), 2),
    ("laneledger_events_total", dict(event_type="attempt.requested", family="lifecycle", tenant="acme"), 3),
    ("laneledger_events_total", dict(event_type="hitl.paused", family="hitl", tenant="acme"), 2),
    (
        "laneledger_events_total",
        dict(event_type="ext.acme.round_audit", family="extension", tenant="acme"),
        1,
    ),
    ("laneledger_cost_total", dict(**ACME_SONNET, currency="USD"), 0.1123),
    ("laneledger_cost_total", dict(**ACME_GPT, currency="USD"), 1e-18),
    ("laneledger_cost_credited_total", dict(**ACME_GPT, currency="USD"), 0.05),
    ("laneledger_cost_total", dict(**GLOBEX_HAIKU, currency="EUR"), 1.5),
    ("laneledger_tokens_total", dict(**ACME_SONNET, direction="input"), 1620),
    ("laneledger_tokens_total", dict(**ACME_SONNET, direction="output"), 330),
    ("laneledger_tokens_total", dict(**ACME_SONNET, direction="cache_read"), 4096),
    ("laneledger_tokens_total", dict(**ACME_GPT, direction="output"), 7),
    ("laneledger_tokens_total", dict(**GLOBEX_HAIKU, direction="input"), 10),
    ("laneledger_attempts_failed_total", dict(tenant="acme"), 1),
    ("laneledger_attempts_unresolved", dict(tenant="acme"), 1),
    ("laneledger_runs_total", dict(tenant="acme", outcome="completed"), 1),
    ("laneledger_runs_total", dict(tenant="acme", outcome="failed"), 1),
    ("laneledger_runs_total", dict(tenant="globex", outcome="cancelled"), 1),
    ("laneledger_hitl_pauses_total", dict(tenant="acme"), 2),
    ("laneledger_hitl_responses_total", dict(tenant="acme", decision="approved"), 1),
    ("laneledger_hitl_waiting", dict(tenant="acme"), 1),
    ("laneledger_checkpoints_linked_total", dict(tenant="acme"), 1),
    (
        "laneledger_action_duration_seconds_count",
        dict(action_type="tool_call", name="shell", outcome="completed"),
        1,
    ),
    (
        "laneledger_action_duration_seconds_sum",
        dict(action_type="tool_call", name="shell", outcome="completed"),
        1.5,
    ),
    (
        "laneledger_action_duration_seconds_bucket",
        dict(action_type="tool_call", name="shell", outcome="completed", le="1.0"),
        0,
    ),
    (
        "laneledger_action_duration_seconds_bucket",
        dict(action_type="tool_call", name="shell", outcome="completed", le="2.5"),
        1,
    ),
    (
        "laneledger_action_duration_seconds_sum",
        dict(action_type="model_call", name="claude-sonnet-4", outcome="failed"),
        0.3,
    ),
    (
        "laneledger_action_duration_seconds_sum",
        dict(action_type="tool_call", name="fetch", outcome="completed"),
        0.25,
    ),
]


def check_expected(samples: Samples, *, extra_events: int = 0) -> list[str]:
    """What differs from ``EXPECTED`` (empty when all is as expected)."""
    wrong = []
    for name, labels, want in EXPECTED:
        got = value(samples, name, **labels)
        if got != want:
            wrong.append(f"{name}{labels}: {got} != {want}")
    events = total(samples, "laneledger_events_total")
    if events != WORKLOAD_EVENTS + extra_events:
        wrong.append(f"laneledger_events_total summed: {events} != {WORKLOAD_EVENTS + extra_events}")
    return wrong


async def bulk(client: LedgerClient, tenant: str, appends: int, per_append: int, name: str = "bulk") -> int:
    """``appends`` appends of ``per_append`` stream.text_delta events on a new
    lane; returns the last position."""
    actor = await client.ensure_actor(tenant, f"agent:{name}", "agent")
    lane = await client.create_lane(tenant, f"s-{name}", "r1", name, actor_id=actor.id)
    last, head = 0, 0
    for _ in range(appends):
        events = [
            make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "x"})
            for _ in range(per_append)
        ]
        receipt = await client.append(lane, head, events)
        head, last = receipt.last_seq, receipt.positions[-1]
    return last


# -- the service in this process ---------------------------------------------------


class MetricsRunner:
    """The metrics service on its own NATS connection, serving real HTTP on
    127.0.0.1 at a port the OS picks."""

    def __init__(self, nats_url: str, data_dir: Path, settings: MetricsSettings | None = None):
        self.nats_url = nats_url
        self.data_dir = data_dir
        self.settings = settings or MetricsSettings(lag_refresh_s=0.2)
        self.url = ""
        self.service: MetricsService | None = None

    async def start(self) -> MetricsRunner:
        from aiohttp import web

        self._nc = await nats.connect(
            self.nats_url,
            name="metrics-tests",
            connect_timeout=2,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=-1,
        )
        self.registry = CollectorRegistry()
        store = MetricsStore(self.data_dir / "metrics.db")
        self.service = MetricsService(self._nc, store, self.registry, self.settings)
        app = web.Application()
        app.add_routes(ops_routes(self.registry, lambda: True))
        self._runner, port = await start_http(app, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{port}"
        await self.service.start()
        return self

    async def wait_position(self, position: int, timeout: float = 20.0) -> int:
        """Until it has folded ``position``; returns the position it is at."""
        assert self.service is not None
        service = self.service
        return await eventually(
            lambda: service.position,
            until=lambda folded: folded >= position,
            what=f"the metrics service to fold position {position}",
            timeout=timeout,
        )

    async def samples(self) -> Samples:
        return parse(await scrape(self.url))

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()
            self.service = None
            await self._runner.cleanup()
            await self._nc.close()

    async def __aenter__(self) -> MetricsRunner:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


# -- a service as an OS process ----------------------------------------------------


def metrics_process(nats_url: str, data_dir: Path, log_dir: Path, *extra: str) -> ServiceProcess:
    return ServiceProcess(
        "laneledger.services.metrics",
        [
            "--nats",
            nats_url,
            "--data",
            str(data_dir),
            "--http-host",
            "127.0.0.1",
            "--http-port",
            "0",
            "--lag-interval",
            "0.2",
            *extra,
        ],
        log_dir,
    )


# -- ports and Prometheus ----------------------------------------------------------


def free_port() -> int:
    """A port nobody listens on right now (bound to 0, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape_config_for_test(text: str, targets: dict[str, str], *, interval: str = "1s") -> str:
    """deploy/prometheus.yml with each container target (``sequencer:8470``)
    replaced by the address this test's service listens on, and a short
    interval. Fails loudly when the file no longer names a target it should."""
    for container, address in targets.items():
        assert f'"{container}"' in text, f"deploy/prometheus.yml does not scrape {container}"
        text = text.replace(f'"{container}"', f'"{address}"')
    text, n = re.subn(r"(scrape_interval|evaluation_interval): \S+", rf"\1: {interval}", text)
    assert n >= 1, "deploy/prometheus.yml sets no scrape_interval"
    return text


class PrometheusProcess:
    """A real ``prometheus`` on 127.0.0.1 with a tmp TSDB; stopped by :meth:`stop`."""

    def __init__(self, config: Path, work_dir: Path) -> None:
        self.config = config
        self.work_dir = work_dir
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_path = work_dir / "prometheus.log"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def start(self, tries: int = 3, timeout: float = 20.0) -> PrometheusProcess:
        binary = PROMETHEUS.path
        assert binary is not None, PROMETHEUS.missing
        for attempt in range(tries):
            port = free_port()
            # Starting a process and opening its log take no time worth a thread.
            with open(self.log_path, "ab") as log:  # noqa: ASYNC230
                self._proc = subprocess.Popen(  # noqa: ASYNC220
                    [
                        binary,
                        f"--config.file={self.config}",
                        f"--storage.tsdb.path={self.work_dir / f'tsdb-{attempt}'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                        "--log.level=warn",
                    ],
                    cwd=self.work_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            self.url = f"http://127.0.0.1:{port}"
            if await self._ready(timeout):
                return self
            self.stop()  # most likely someone took the port in between: try another
        raise AssertionError(f"prometheus did not start:\n{self.log_text()[-4000:]}")

    async def _ready(self, timeout: float) -> bool:
        """Until /-/ready answers 200 (True) or the process exits (False)."""

        async def exited_or_ready() -> bool | None:
            assert self._proc is not None
            if self._proc.poll() is not None:
                return False
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{self.url}/-/ready", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    return True if resp.status == 200 else None

        return await eventually(
            exited_or_ready,
            until=lambda state: state is not None,
            what=f"prometheus to be ready at {self.url}",
            timeout=timeout,
            interval=0.1,
            retry_on=aiohttp.ClientError,
        )

    async def query(self, expr: str) -> list[dict]:
        async with aiohttp.ClientSession() as http:
            async with http.get(
                f"{self.url}/api/v1/query", params={"query": expr}, timeout=aiohttp.ClientTimeout(total=5)
            ) as resp:
                body = await resp.json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    async def get(self, path: str) -> Any:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{self.url}{path}", timeout=aiohttp.ClientTimeout(total=5)) as r:
                return await r.json()

    def stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._proc = None
