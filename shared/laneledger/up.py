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
from dataclasses import dataclass, field
from pathlib import Path

from .natsserver import NatsServer

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
    pump: asyncio.Task | None = None


async def _start(spec: ServiceSpec, ready_timeout: float) -> RunningService:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", spec.module, *spec.args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
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
        except asyncio.TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    if service.pump is not None:
        await asyncio.gather(service.pump, return_exceptions=True)


async def run_up(
    data_dir: Path,
    *,
    nats_url: str | None,
    nats_port: int,
    sequencer_port: int,
    host: str = "127.0.0.1",
    ready_timeout: float = 30.0,
) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    nats: NatsServer | None = None
    if nats_url is None:
        nats = NatsServer(data_dir / "nats", port=nats_port, host=host,
                          log_path=data_dir / "nats-server.log")
        await nats.astart()
        nats_url = nats.url
    specs = [
        ServiceSpec("sequencer", "services.sequencer", [
            "--nats", nats_url, "--db", str(data_dir / "ledger.db"),
            "--http-host", host, "--http-port", str(sequencer_port),
        ]),
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    running: list[RunningService] = []
    code = 0
    try:
        for spec in specs:
            running.append(await _start(spec, ready_timeout))
        print("\nlaneledger is up", flush=True)
        print(f"  NATS       {nats_url}", flush=True)
        for service in running:
            print(f"  {service.spec.name:<10} {service.url}/metrics", flush=True)
        print(f"  data       {data_dir}", flush=True)
        print("Ctrl-C stops everything.\n", flush=True)
        exited = [asyncio.create_task(s.process.wait()) for s in running]
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopped, *exited], return_when=asyncio.FIRST_COMPLETED)
        if stopped not in done:
            code = 1
            print("a service exited on its own; stopping the rest", file=sys.stderr, flush=True)
        for task in [stopped, *exited]:
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
