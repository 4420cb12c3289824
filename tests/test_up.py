"""`laneledger up` as a user runs it: everything starts, answers, stops on
SIGTERM leaving no process behind, and a restart continues the same ledger."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from failure_logs import show_log_on_failure
from mcp import Client
from mcp.shared.exceptions import MCPError
from polling import eventually, eventually_sync
from tail_support import korg_call

from laneledger.sdk.client import LaneRecorder, LedgerClient

UP_TIMEOUT_S = 60

pytestmark = [pytest.mark.nats, pytest.mark.slow]  # `laneledger up` starts a nats-server


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


class Up:
    def __init__(self, data: Path, *extra: str) -> None:
        self.data = data
        self.extra = extra
        self.log = data.with_suffix(".log")

    def launch(self) -> None:
        with open(self.log, "ab") as out:  # the child has its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("laneledger")),
                    "up",
                    "--data",
                    str(self.data),
                    "--free-ports",
                    *self.extra,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @property
    def log_path(self) -> Path:
        return self.log

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def output_once(self, condition: Callable[[str], bool]) -> Callable[[], str | None]:
        """A probe for ``eventually``: its output once ``condition`` holds for
        it, else None; it fails at once if the process exited first."""

        def probe() -> str | None:
            exited = self.proc.poll() is not None
            text = self.log_text()
            if condition(text):
                return text
            assert not exited, f"laneledger up exited with {self.proc.returncode}:\n{text}"
            return None

        return probe

    def start(self) -> dict[str, str]:
        """Launch it and wait (synchronously: the test's loop has nothing to
        serve meanwhile) for its next "laneledger is up"; returns its URLs."""
        ups = getattr(self, "ups", 0)
        self.launch()
        text = eventually_sync(
            self.output_once(lambda text: text.count("laneledger is up") > ups),
            what="laneledger up to say it is up (its log is in the report)",
            timeout=UP_TIMEOUT_S,
            interval=0.1,
        )
        self.ups = text.count("laneledger is up")
        tail = text.rsplit("laneledger is up", 1)[1]
        return dict(re.findall(r"^  (.+?)\s{2,}(\S+)$", tail, re.MULTILINE))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


async def test_up_runs_everything_and_leaves_nothing_behind(tmp_path, request):
    up = Up(tmp_path / "data")
    show_log_on_failure(request, up)
    urls = up.start()
    try:
        assert {
            "NATS",
            "console",
            "live tail",
            "MCP (agents)",
            "ledger metrics",
            "sequencer ops",
            "tail ops",
            "checkpoint ops",
            "Korg writes",
            "ingest ops",
        } <= urls.keys()
        async with aiohttp.ClientSession() as http:
            for label in ("sequencer ops", "tail ops", "ledger metrics", "checkpoint ops", "ingest ops"):
                base = urls[label].rsplit("/metrics", 1)[0]
                async with http.get(f"{base}/healthz") as response:
                    assert response.status == 200, label
            async with http.get(urls["MCP (agents)"].replace("/mcp", "/healthz")) as response:
                assert response.status == 200
        async with await LedgerClient.connect(urls["NATS"]) as client:
            actor = await client.ensure_actor("acme", "agent:up@1", "agent")
            lane = await LaneRecorder.open(client, "acme", "s", "r", "main", actor_id=actor.id)
            receipt = await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r")])
        # An agent reads it over MCP, at the URL printed, the way `claude mcp add` would add it.
        async with Client(urls["MCP (agents)"]) as agent:
            recent = await eventually(
                lambda: agent.read_resource("korg://acme/ledger/recent"),
                what="the MCP server serving acme's ledger",
                until=lambda found: json.loads(found.contents[0].text)["events"],
                retry_on=(MCPError,),
            )
            assert json.loads(recent.contents[0].text)["events"][0]["seq_id"] == receipt.positions[0]
            # Korg's writes go to the ingest service, at the URL printed; the MCP server reads them back.
            async with (
                aiohttp.ClientSession() as http,
                http.post(urls["Korg writes"], json=korg_call("human:dusk", "user_prompt")) as posted,
            ):
                assert posted.status == 200, await posted.text()
                seq_id = (await posted.json())["seq_id"]
            korg = await eventually(
                lambda: agent.read_resource("korg://local/ledger/recent"),
                what="the MCP server serving the Korg tenant's call",
                until=lambda found: json.loads(found.contents[0].text)["events"],
                retry_on=(MCPError,),
            )
            assert json.loads(korg.contents[0].text)["events"][0]["seq_id"] == seq_id
    finally:
        assert up.stop() == 0
    assert processes_mentioning(str(tmp_path / "data")) == []
    assert processes_mentioning(urls["console"].rstrip("/")) == []  # the MCP server's --url: stopped too
    assert processes_mentioning(urls["NATS"]) == []  # every service's --nats, the ingest's among them
    assert "laneledger stopped" in up.log.read_text()

    urls = up.start()  # the same data dir: the same ledger
    try:
        async with await LedgerClient.connect(urls["NATS"]) as client:
            actor = await client.ensure_actor("acme", "agent:up@1", "agent")
            lane = await LaneRecorder.open(client, "acme", "s", "r", "main", actor_id=actor.id)
            assert lane.head == 1
            receipt = await lane.append([lane.event("run.completed", actor_id=actor.id, subject_id="r")])
            assert receipt.positions == [seq_id + 1]  # after the run.started and the Korg call
    finally:
        assert up.stop() == 0
    assert processes_mentioning(str(tmp_path / "data")) == []


async def test_up_with_a_standby_runs_a_second_sequencer_that_follows(tmp_path, request):
    up = Up(tmp_path / "data", "--standby")
    show_log_on_failure(request, up)
    urls = up.start()
    try:
        roles = {}
        async with aiohttp.ClientSession() as http:
            for label in ("sequencer ops", "standby ops"):
                base = urls[label].rsplit("/metrics", 1)[0]
                async with http.get(f"{base}/readyz") as response:
                    assert response.status == 200, label
                    roles[label] = (await response.json())["role"]
        assert roles == {"sequencer ops": "active", "standby ops": "standby"}
    finally:
        assert up.stop() == 0
    assert (tmp_path / "data" / "standby" / "ledger.db").exists()
    assert processes_mentioning(str(tmp_path / "data")) == []


async def test_up_with_the_demo_ends_in_an_intact_summary(tmp_path, request):
    up = Up(tmp_path / "data", "--demo", "--agents", "2", "--turns", "3", "--pace", "0")
    show_log_on_failure(request, up)
    up.launch()
    text = await eventually(
        up.output_once(lambda text: "the demo is done" in text),
        what="the demo to finish (its log is in the report)",
        timeout=120,
        interval=0.2,
    )
    summary = text.split("demo summary", 1)[1]
    assert "chain verification           intact" in summary
    assert re.search(r"events in the session\s+\d+ in 4 lanes", summary)  # 2 agents + 2 sub-agents
    assert re.search(r"cost, claude-sonnet\s+0\.\d+ USD", summary)
    # Recorded through the attempt guard: every attempt resolved, each run
    # shows a read retried and a failed write left alone, and the human's answer.
    assert re.search(r"attempts\s+\d+ \([1-9]\d* failed, 0 unresolved\)", summary)
    assert int(re.search(r"reads retried\s+(\d+)", summary).group(1)) >= 2
    assert int(re.search(r"writes failed, not retried\s+(\d+)", summary).group(1)) >= 2
    assert "human-in-the-loop pauses     2 answered, 0 pending" in summary
    assert "finished turn 3/3" in text
    assert up.stop() == 0
    assert processes_mentioning(str(tmp_path / "data")) == []
    # The demo's ledger passes its own verifier, identity conventions included
    # (main and sub-agent actor keys of Korg §2b's form).
    verified = await asyncio.to_thread(
        subprocess.run,
        [
            str(Path(sys.executable).with_name("laneledger")),
            "verify",
            "--db",
            str(tmp_path / "data" / "ledger.db"),
            "--strict-actors",
            "--json",
        ],
        capture_output=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["warnings"] == []
