"""A real LangGraph graph on ``LaneledgerSaver`` across processes
(spec/langgraph.md): a StateGraph with a fake chat model, a tool node and an
``interrupt()`` for approval (tests/langgraph_agent.py) runs in one process
(the sync API) up to the interrupt; a second process answers it and is
SIGKILLed inside the tool; a third resumes from the saver alone and
finishes. Then the run is read back from laneledger: the checkpoints, the
interrupt and its answer, every checkpoint's ledger event, and ``laneledger
verify`` intact. The sequencer and the checkpoint service are the real
ones, on the test's nats-server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.types import INTERRUPT, RESUME
from polling import eventually

from laneledger.adapters.langgraph import LaneledgerSaver
from laneledger.adapters.langgraph_records import CHECKPOINT_EVENT, WRITES_EVENT, record_id
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LedgerClient
from laneledger.services.checkpoint.service import CheckpointService

AGENT = Path(__file__).with_name("langgraph_agent.py")
SCRIPT = Path(sys.executable).with_name("laneledger")
QUESTION = {"question": "run this tool?", "tool": "write_note", "args": {"text": "buy milk"}}


def run_agent(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(AGENT), *args], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


@pytest.mark.slow
async def test_graph_is_killed_mid_run_and_resumes_in_a_new_process(
    nats_server: NatsServer, client: LedgerClient, checkpoint_service: CheckpointService, tmp_path: Path
) -> None:
    url, thread, notes = nats_server.url, "graph-thread-1", tmp_path / "notes.txt"

    first = await asyncio.to_thread(run_agent, "start", url, thread, str(notes))
    assert first["interrupts"] == [QUESTION]
    assert not notes.exists()

    # Approve, and die inside the tool.
    hung = await asyncio.create_subprocess_exec(
        sys.executable,
        str(AGENT),
        "resume",
        url,
        thread,
        str(notes),
        "approved",
        env={**os.environ, "LANGGRAPH_AGENT_HANG_IN_TOOL": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        started = Path(f"{notes}.started")
        await eventually(
            lambda: started.exists() or hung.returncode is not None, what="the tool to start", timeout=60
        )
        assert hung.returncode is None, "the agent ended before its tool started"
    finally:
        os.killpg(hung.pid, signal.SIGKILL)
        await hung.wait()
    assert not notes.exists()

    final = await asyncio.to_thread(run_agent, "continue", url, thread, str(notes))
    assert final["messages"][-1] == "Done: noted 'buy milk'", final
    assert final["interrupts"] == []
    assert notes.read_text() == "buy milk\n"  # the tool's one completed run

    # Read the run back from laneledger.
    saver = LaneledgerSaver(client, tenant="acme")
    await saver.setup()
    history = [t async for t in saver.alist({"configurable": {"thread_id": thread}})]
    assert history[0].checkpoint["channel_values"]["messages"][-1].content == "Done: noted 'buy milk'"
    writes = [w for t in history for w in t.pending_writes or []]
    interrupts = [w[2] for w in writes if w[1] == INTERRUPT]
    assert [i.value for i in interrupts[0]] == [QUESTION]
    # The answer, as LangGraph writes it: for the resumed task and for the thread.
    resumes = [w[2] for w in writes if w[1] == RESUME]
    assert resumes and all(r in ("approved", ["approved"]) for r in resumes), resumes

    session = await client.load_session(thread)
    events = [e for lane in session.lanes for e in (await client.load_lane(lane.id)).events]
    # Every stored checkpoint is anchored to the event that records it (the
    # killed process may have recorded one more that it never stored).
    recorded = {e.id: e.payload for e in events if e.event_type == CHECKPOINT_EVENT}
    for t in history:
        stored = await saver.checkpoints.get(record_id(thread, "", t.checkpoint["id"]))
        assert stored.anchor is not None
        payload = recorded[stored.anchor.event_id]
        assert (payload["checkpoint_id"], payload["digest"]) == (stored.id, stored.digest)
        assert payload["langgraph"]["checkpoint_id"] == t.checkpoint["id"]
    channels = {c for e in events if e.event_type == WRITES_EVENT for c in e.payload["langgraph"]["channels"]}
    assert {INTERRUPT, RESUME} <= channels
    assert len(session.run_ids) == 3  # one per invocation: LangGraph's run ids are laneledger runs

    verified = await asyncio.to_thread(
        subprocess.run,
        [str(SCRIPT), "verify", "--db", str(tmp_path / "ledger.db"), "--nats", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
