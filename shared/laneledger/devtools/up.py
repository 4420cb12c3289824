"""`laneledger up`: the whole system on one machine.

Starts an embedded nats-server (or uses ``--nats URL``) with its data under
``--data``, then each service as a child process with the same entry point
its container uses, waits until each says it is ready, prints the URLs,
streams their logs prefixed by service, and on Ctrl-C or SIGTERM stops
everything, children first, leaving no process behind.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laneledger.devtools.natsserver import NatsServer

READY_LINE = re.compile(r"ready http=(\S+)")


@dataclass
class ServiceSpec:
    name: str
    module: str
    args: list[str] = field(default_factory=list)


@dataclass
class RunningService:
    spec: ServiceSpec
    process: asyncio.subprocess.Process
    url: str | None = None
    pump: asyncio.Task[None] | None = None


async def _start(spec: ServiceSpec, ready_timeout: float) -> RunningService:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        spec.module,
        *spec.args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # our own signal handling decides when it stops
    )
    service = RunningService(spec, process)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def pump() -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip()
            print(f"{spec.name:>10} | {line}", flush=True)
            found = READY_LINE.search(line)
            if found and not ready.done():
                ready.set_result(found.group(1))
        if not ready.done():
            ready.set_exception(RuntimeError(f"{spec.name} exited before it was ready"))

    service.pump = asyncio.create_task(pump())
    try:
        service.url = await asyncio.wait_for(ready, ready_timeout)
    except BaseException:
        await _stop(service)
        raise
    return service


async def _stop(service: RunningService, timeout: float = 15.0) -> None:
    process = service.process
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    if service.pump is not None:
        await asyncio.gather(service.pump, return_exceptions=True)


SERVICES = ("sequencer", "tail", "metrics", "checkpoint", "ingest", "mcp")
DEFAULT_PORTS = {
    "sequencer": 8470,
    "tail": 8471,
    "metrics": 8472,
    "checkpoint": 8473,
    "mcp": 8475,
    "ingest": 8476,
}


def service_specs(
    data_dir: Path, nats_url: str, host: str, ports: dict[str, int], *, standby: bool = False
) -> list[ServiceSpec]:
    """The services, each started exactly as its container starts it;
    ``standby``: and a second sequencer on its own file, a standby until the
    first one stops (spec/replication.md, "The lease"), on a free port."""
    common = ["--nats", nats_url, "--http-host", host]
    sequencers = [("sequencer", str(ports["sequencer"]), data_dir / "ledger.db")]
    if standby:
        sequencers.append(("sequencer-standby", "0", data_dir / "standby" / "ledger.db"))
    return [
        *(
            ServiceSpec(
                name, "laneledger.services.sequencer", [*common, "--http-port", port, "--db", str(db)]
            )
            for name, port, db in sequencers
        ),
        *(
            ServiceSpec(
                name,
                f"services.{name}",
                [*common, "--http-port", str(ports[name]), "--data", str(data_dir / name)],
            )
            for name in ("tail", "metrics", "checkpoint")
        ),
        # Stateless: no --data.
        ServiceSpec("ingest", "laneledger.services.ingest", [*common, "--http-port", str(ports["ingest"])]),
    ]


def mcp_spec(host: str, port: int, tail_url: str, ingest_url: str) -> ServiceSpec:
    """The MCP server over the tail (its appends to the ingest service), as
    its container runs it (``laneledger mcp --serve``, spec/mcp.md): started
    once their URLs are known."""
    return ServiceSpec(
        "mcp",
        "laneledger.cli",
        ["mcp", "--serve", "--listen", f"{host}:{port}", "--url", tail_url, "--ingest-url", ingest_url],
    )


async def run_up(
    data_dir: Path,
    *,
    nats_url: str | None,
    nats_port: int,
    ports: dict[str, int],
    host: str = "127.0.0.1",
    ready_timeout: float = 30.0,
    standby: bool = False,
    after_start: Callable[[str, dict[str, str]], Coroutine[Any, Any, None]] | None = None,
) -> int:
    """Run until Ctrl-C/SIGTERM (or until ``after_start`` — e.g. the demo —
    returns, when given). Returns the exit status."""
    data_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - start-up, before anything runs
    nats: NatsServer | None = None
    if nats_url is None:
        nats = NatsServer(data_dir / "nats", port=nats_port, host=host, log_path=data_dir / "nats-server.log")
        await nats.astart()
        nats_url = nats.url
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    running: list[RunningService] = []
    code = 0
    try:
        for spec in service_specs(data_dir, nats_url, host, ports, standby=standby):
            running.append(await _start(spec, ready_timeout))
        started = {service.spec.name: service.url or "" for service in running}
        running.append(
            await _start(mcp_spec(host, ports["mcp"], started["tail"], started["ingest"]), ready_timeout)
        )
        urls = {service.spec.name: service.url or "" for service in running}
        print("\nlaneledger is up", flush=True)
        for label, url in (
            ("NATS", nats_url),
            ("console", f"{urls['tail']}/"),
            ("live tail", f"{urls['tail']}/api/v1/events"),
            ("Korg writes", f"{urls['ingest']}/api/agent/tool-call"),
            ("MCP (agents)", f"{urls['mcp']}/mcp"),
            ("ledger metrics", f"{urls['metrics']}/metrics"),
            *(
                (f"{name} ops", f"{urls[name]}/metrics")
                for name in ("sequencer", "tail", "checkpoint", "ingest")
            ),
            *((("standby ops", f"{urls['sequencer-standby']}/metrics"),) if standby else ()),
            ("data", str(data_dir)),
        ):
            print(f"  {label:<16}{url}", flush=True)
        print("Ctrl-C stops everything.\n", flush=True)
        waits: list[asyncio.Task[Any]] = [asyncio.create_task(s.process.wait()) for s in running]
        waits.append(asyncio.create_task(stop.wait()))
        if after_start is not None:
            waits.append(asyncio.create_task(after_start(nats_url, urls)))
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finished = done.pop()
        if finished in waits[: len(running)]:
            code = 1
            print("a service exited on its own; stopping the rest", file=sys.stderr, flush=True)
        elif after_start is not None and finished is waits[-1] and finished.exception() is not None:
            code = 1
            print(f"laneledger up: {finished.exception()}", file=sys.stderr, flush=True)
        for task in waits:
            task.cancel()
    except Exception as exc:  # noqa: BLE001 - reported, then everything is stopped
        print(f"laneledger up: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        for service in reversed(running):
            await _stop(service)
        if nats is not None:
            await nats.astop()
        print("laneledger stopped", flush=True)
    return code
