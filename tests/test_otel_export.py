"""`laneledger otel export` end to end, into a real OTLP receiver (Arize
Phoenix, ``otel_fixtures.py``): a demo session committed through a real
nats-server and sequencer arrives as its span tree, every span once; the
live exporter, SIGKILLed mid-run and restarted, sends every span exactly once."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from deployment_support import connections_of, deployed_sequencer, url_for
from metrics_support import free_port
from nats.js.errors import NotFoundError
from otel_fixtures import Phoenix
from otel_support import TAIL, TENANT, expected_tree, record_demo_run
from polling import eventually

from laneledger.contract.errors import LedgerError
from laneledger.contract.subjects import EVENTS_STREAM
from laneledger.otel import ids
from laneledger.otel.history import map_history
from laneledger.otel.live import DEFAULT_CONSUMER
from laneledger.otel.mapping import SpanMapper
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.guard import Guard

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "laneledger.cli", "otel", "export"]
PROGRESS = re.compile(r"^exported (\d+) span\(s\) through position (\d+)$")


def tree_in(stored: list[dict[str, Any]]) -> dict[int, tuple[int | None, str]]:
    """span id -> (parent, name) as Phoenix stored them (OTLP JSON: hex ids)."""
    return {
        int(s["span_id"], 16): (int(s["parent_span_id"], 16) if s["parent_span_id"] else None, s["name"])
        for s in stored
    }


def attribute(span: dict[str, Any], key: str) -> Any:
    (value,) = [a["value"] for a in span["attributes"] if a["key"] == key]
    return value["int_value"] if value["int_value"] is not None else value["string_value"]


async def test_export_session_sends_every_span_once_with_its_parent(
    nats_server, client: LedgerClient, checkpoint_service, phoenix: Phoenix
) -> None:
    session = "s-otel-e2e"
    for seed, run in enumerate(("r1", "r2")):
        await record_demo_run(nats_server.url, session, run, seed=seed)
    mapped = await map_history(client, SpanMapper(tail_url=TAIL), session, tenant=TENANT)
    expected = expected_tree(await client.load_structure(session, tenant=TENANT))
    assert {s.span_id: (s.parent_span_id, s.name) for s in mapped.spans} == expected
    traces = [f"{ids.trace_id(TENANT, session, run):032x}" for run in ("r1", "r2")]

    export = [*CLI, "--session", session, "--tenant", TENANT, "--nats", nats_server.url]
    export += ["--endpoint", phoenix.traces_endpoint, "--tail-url", TAIL]
    for _ in range(2):  # a second export sends the same ids: nothing new is stored
        done = await asyncio.to_thread(subprocess.run, export, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"exported {len(expected)} span(s)" in done.stderr
        stored = await eventually(
            lambda: phoenix.spans(traces),
            what=f"Phoenix holding the session's {len(expected)} spans",
            until=lambda found: len(found) >= len(expected),
        )
        assert len(stored) == len(expected), "every span once"
        assert tree_in(stored) == expected, "the right parents"

    r1 = [s for s in mapped.spans if s.trace_id == ids.trace_id(TENANT, session, "r1")]
    one_run = await asyncio.to_thread(
        subprocess.run, [*export, "--run", "r1"], capture_output=True, text=True, timeout=60
    )
    assert one_run.returncode == 0, one_run.stderr
    assert f"exported {len(r1)} span(s)" in one_run.stderr and 0 < len(r1) < len(expected)

    by_id = {int(s["span_id"], 16): s for s in stored}
    for span in mapped.spans:
        got = by_id[span.span_id]
        # Phoenix keeps times to the microsecond (and answers through a float).
        assert abs(int(got["start_time_unix_nano"]) - span.start_ns) < 1000
        assert abs(int(got["end_time_unix_nano"]) - span.end_ns) < 1000
        assert attribute(got, "laneledger.end.position") == span.attributes["laneledger.end.position"]
        assert attribute(got, "laneledger.end.entry_hash") == span.attributes["laneledger.end.entry_hash"]


async def test_export_refuses_a_run_without_its_session() -> None:
    done = await asyncio.to_thread(subprocess.run, [*CLI, "--run", "r1"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "--run needs --session" in done.stderr


class LiveExporter:
    """``otel export --live`` as a process, and the progress lines it printed."""

    def __init__(self, nats_url: str, endpoint: str, *extra: str) -> None:
        self.args = [*CLI, "--live", "--nats", nats_url, "--endpoint", endpoint, "--tail-url", TAIL, *extra]
        self.proc: asyncio.subprocess.Process | None = None
        self.sent: list[tuple[int, int]] = []  # (spans, through position), every process's

    async def start(self) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115  # a file, not a pipe: never fills up; closed with the test process
        self.proc = await asyncio.create_subprocess_exec(
            *self.args, stdout=asyncio.subprocess.PIPE, stderr=self.stderr
        )

    async def read_until(self, done: Any, timeout: float = 60.0) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while not done():
                line = (await self.proc.stdout.readline()).decode().strip()
                if not line:  # it ended: say why
                    self.stderr.seek(0)
                    why = self.stderr.read().decode()[-4000:]
                    raise AssertionError(f"the exporter ended (exit {await self.proc.wait()}):\n{why}")
                match = PROGRESS.match(line)
                assert match, line
                self.sent.append((int(match[1]), int(match[2])))

    async def kill(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        self.proc.kill()  # SIGKILL: no clean shutdown
        await self.proc.wait()
        # What it printed before it died (each line after its acknowledgement) counts.
        for line in (await self.proc.stdout.read()).decode().splitlines():
            match = PROGRESS.match(line.strip())
            assert match, line
            self.sent.append((int(match[1]), int(match[2])))

    @property
    def spans_sent(self) -> int:
        return sum(n for n, _ in self.sent)

    @property
    def through(self) -> int:
        return max((p for _, p in self.sent), default=0)


async def test_live_export_resumes_after_sigkill_and_sends_each_span_once(
    nats_server, client: LedgerClient, checkpoint_service, phoenix: Phoenix
) -> None:
    session = "s-otel-live"
    exporter = LiveExporter(nats_server.url, phoenix.traces_endpoint)
    await exporter.start()
    try:
        await eventually(
            lambda: client.nc.jetstream().consumer_info(EVENTS_STREAM, DEFAULT_CONSUMER),
            what="the exporter's durable consumer",
            retry_on=NotFoundError,
        )
        # A paced run, so the exporter is killed while it is still open: its
        # run span started below the acknowledged position, and must be rebuilt.
        run1 = asyncio.create_task(record_demo_run(nats_server.url, session, "r1", seed=5, pace=0.5))
        await exporter.read_until(lambda: exporter.spans_sent > 0)
        assert not run1.done(), "killed mid-run"
        await exporter.kill()
        killed_through = exporter.through
        await run1
        await record_demo_run(nats_server.url, session, "r2", seed=6)  # while no exporter runs

        last = (await client.nc.jetstream().stream_info(EVENTS_STREAM)).state.last_seq
        assert killed_through < last
        await exporter.start()
        await exporter.read_until(lambda: exporter.through >= last)
    finally:
        if exporter.proc is not None and exporter.proc.returncode is None:
            await exporter.kill()

    expected = expected_tree(await client.load_structure(session, tenant=TENANT))
    assert exporter.spans_sent == len(expected), "no span sent twice or left out, across the kill"
    traces = [f"{ids.trace_id(TENANT, session, run):032x}" for run in ("r1", "r2")]
    stored = await eventually(
        lambda: phoenix.spans(traces),
        what=f"Phoenix holding {len(expected)} spans",
        until=lambda found: len(found) >= len(expected),
    )
    assert len(stored) == len(expected)
    assert tree_in(stored) == expected
    mapped = await map_history(client, SpanMapper(tail_url=TAIL), session, tenant=TENANT)
    by_id = {int(s["span_id"], 16): s for s in stored}
    run_span = by_id[ids.run_span_id(TENANT, session, "r1")]
    want = next(s for s in mapped.spans if s.span_id == ids.run_span_id(TENANT, session, "r1"))
    assert abs(int(run_span["start_time_unix_nano"]) - want.start_ns) < 1000, "the open run span, rebuilt"
    assert attribute(run_span, "laneledger.start.position") == want.attributes["laneledger.start.position"]
    assert int(want.attributes["laneledger.start.position"]) <= killed_through < want.end_position, (
        "run.started was acknowledged before the kill, its end came after: the restart rebuilt it"
    )


async def test_live_export_acknowledges_nothing_the_receiver_did_not_take(
    nats_server, client: LedgerClient, checkpoint_service, phoenix: Phoenix
) -> None:
    session = "s-otel-down"
    await record_demo_run(nats_server.url, session, "r1", seed=7)
    await record_demo_run(nats_server.url, session, "r1", seed=8, tenant="globex")  # not exported
    js = client.nc.jetstream()
    last = (await js.stream_info(EVENTS_STREAM)).state.last_seq
    nobody = f"http://127.0.0.1:{free_port()}/v1/traces"  # no receiver listens there
    down = LiveExporter(nats_server.url, nobody, "--timeout-s", "1")
    await down.start()
    try:
        info = await eventually(
            lambda: js.consumer_info(EVENTS_STREAM, DEFAULT_CONSUMER),
            what="the exporter holding delivered, unacknowledged events",
            until=lambda info: info.num_ack_pending > 0,
            retry_on=NotFoundError,
        )
        assert info.ack_floor.stream_seq == 0, "nothing acknowledged while the receiver is away"
    finally:
        await down.kill()
    assert down.sent == []

    up = LiveExporter(nats_server.url, phoenix.traces_endpoint, "--tenant", TENANT)
    await up.start()
    try:
        await up.read_until(lambda: up.through >= last)
    finally:
        await up.kill()
    expected = expected_tree(await client.load_structure(session, tenant=TENANT))
    assert up.spans_sent == len(expected)
    stored = await eventually(
        lambda: phoenix.spans([f"{ids.trace_id(TENANT, session, 'r1'):032x}"]),
        what=f"Phoenix holding {len(expected)} spans",
        until=lambda found: len(found) >= len(expected),
    )
    assert tree_in(stored) == expected
    assert phoenix.spans([f"{ids.trace_id('globex', session, 'r1'):032x}"]) == [], (
        "--tenant acme: acme's only"
    )


async def test_live_export_goes_on_across_a_nats_server_restart(
    nats_server, client: LedgerClient, checkpoint_service, phoenix: Phoenix
) -> None:
    session = "s-otel-restart"
    js = client.nc.jetstream()
    exporter = LiveExporter(nats_server.url, phoenix.traces_endpoint)
    await exporter.start()
    try:
        await record_demo_run(nats_server.url, session, "r1", seed=9)
        first = (await js.stream_info(EVENTS_STREAM)).state.last_seq
        await exporter.read_until(lambda: exporter.through >= first)
        nats_server.restart()
        await eventually(
            lambda: client.ensure_actor(TENANT, "agent:otel-restart/main@1", "agent"),
            what="the sequencer answering again after the restart",
            retry_on=LedgerError,
        )
        await record_demo_run(nats_server.url, session, "r2", seed=10)
        last = (await js.stream_info(EVENTS_STREAM)).state.last_seq
        await exporter.read_until(lambda: exporter.through >= last)
    finally:
        await exporter.kill()
    expected = expected_tree(await client.load_structure(session, tenant=TENANT))
    assert exporter.spans_sent == len(expected)
    traces = [f"{ids.trace_id(TENANT, session, run):032x}" for run in ("r1", "r2")]
    stored = await eventually(
        lambda: phoenix.spans(traces),
        what=f"Phoenix holding {len(expected)} spans",
        until=lambda found: len(found) >= len(expected),
    )
    assert tree_in(stored) == expected


async def test_live_export_runs_as_the_deployed_otel_user(
    secured_server, passwords, tmp_path, phoenix: Phoenix
) -> None:
    """deploy/nats.conf's `otel` user may do all the live exporter does."""
    seq_nc, seq_replies = await connections_of(secured_server, "sequencer", passwords)
    sequencer = deployed_sequencer(seq_nc, seq_replies, tmp_path / "ledger.db")
    await sequencer.start()
    session = "s-otel-user"
    exporter = LiveExporter(url_for(secured_server, "otel", passwords), phoenix.traces_endpoint)
    try:
        async with await LedgerClient.connect(url_for(secured_server, "producer", passwords)) as client:
            actor = await client.ensure_actor(TENANT, "agent:otel-user/main@1", "agent")
            guard = await Guard.open(client, TENANT, session, "r1", "main", actor.id)
            await guard.start_run()
            async with guard.turn() as turn:
                async with turn.model_call("claude-sonnet", provider="anthropic") as call:
                    async with call.attempt() as attempt:
                        attempt.inference(text="hi", input_tokens=3, output_tokens=1)
                async with turn.tool_call("Read", effect="read", idempotency="inherent") as tool:
                    async with tool.attempt() as attempt:
                        attempt.complete(bytes=1)
            await guard.commit(guard.event("run.completed", "r1", {}))
        last = (await seq_nc.jetstream().stream_info(EVENTS_STREAM)).state.last_seq
        await exporter.start()
        await exporter.read_until(lambda: exporter.through >= last)
    finally:
        if exporter.proc is not None:
            await exporter.kill()
        await sequencer.stop()
        await seq_nc.close()
        await seq_replies.close()
    assert exporter.spans_sent == 3, "the run, its model call and its tool call"
    stored = await eventually(
        lambda: phoenix.spans([f"{ids.trace_id(TENANT, session, 'r1'):032x}"]),
        what="Phoenix holding the run's 3 spans",
        until=lambda found: len(found) >= 3,
    )
    names = sorted(s["name"] for s in stored)
    assert names == ["chat claude-sonnet", "execute_tool Read", "invoke_agent main"]
