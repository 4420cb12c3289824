"""Several NATS URLs (`laneledger/sdk/natsconnect.py`): every entry point takes a
comma-separated list — the nodes of a cluster — so a process starting while
one node is down connects to another; a malformed entry is refused up front,
naming it (exit 2 for services and the CLI, InvalidRequest in the SDK)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import nats
import pytest
from failure_logs import show_log_on_failure
from polling import eventually
from sequencer_process import SequencerProcess, ledger_last_position

from laneledger.contract.errors import InvalidRequest, LedgerUnavailable
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.sdk.natsconnect import nats_servers

SCRIPT = Path(sys.executable).with_name("laneledger")


@pytest.mark.parametrize(
    ("setting", "bad"),
    [
        ("nats://127.0.0.1:4222,http://127.0.0.1:4223", "'http://127.0.0.1:4223'"),
        ("nats://127.0.0.1:4222, 127.0.0.1:4223", "'127.0.0.1:4223'"),
        ("nats://127.0.0.1:4222,,nats://127.0.0.1:4223", "an empty entry"),
        ("tls://127.0.0.1:99999", "'tls://127.0.0.1:99999' has an invalid port"),
        ("nats://:4222", "'nats://:4222' names no host"),
    ],
)
def test_a_malformed_entry_is_named(setting, bad):
    with pytest.raises(ValueError, match=bad):
        nats_servers(setting)


def test_a_list_parses_to_its_urls():
    assert nats_servers(" nats://a:4222 ,tls://u:p@b:4223,nats://c") == [
        "nats://a:4222",
        "tls://u:p@b:4223",
        "nats://c",
    ]
    assert nats_servers(["nats://a:4222"]) == ["nats://a:4222"]


async def test_a_bad_url_in_the_list_stops_every_entry_point_naming_it():
    setting = "nats://127.0.0.1:4222,htp://127.0.0.1:4223"
    named = "'htp://127.0.0.1:4223' is not a nats:// or tls:// URL"
    service = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "laneledger.services.tail"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LANELEDGER_NATS_URL": setting},
    )
    assert service.returncode == 2
    assert service.stderr.strip() == f"laneledger-tail: LANELEDGER_NATS_URL={setting!r}: {named}"
    command = await asyncio.to_thread(
        subprocess.run,
        [str(SCRIPT), "inspect", "session", "s1", "--nats", setting],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert command.returncode == 2 and f"argument --nats: {named}" in command.stderr
    with pytest.raises(InvalidRequest, match=re.escape("htp://127.0.0.1:4223")):
        await LedgerClient.connect(setting)


async def wait_for_jetstream(urls: list[str], timeout: float = 30.0) -> None:
    """Until the nodes still up answer JetStream requests (a meta leader)."""
    nc = await nats.connect(urls, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        await eventually(
            nc.jetstream().account_info,
            what=f"JetStream to answer on {urls}",
            timeout=timeout,
            interval=0.2,
            retry_on=nats.errors.Error,  # an election under way
        )
    finally:
        await nc.close()


@pytest.mark.slow
async def test_a_service_starting_while_the_first_node_is_down_connects(cluster, tmp_path, request):
    cluster.stop_node(0)
    await wait_for_jetstream(cluster.urls[1:])
    with pytest.raises(LedgerUnavailable):  # alone, the first node is no way in
        await LedgerClient.connect(cluster.urls[0], connect_timeout=1.0)
    setting = ",".join(cluster.urls)  # the first one refuses connections
    sequencer = SequencerProcess(setting, tmp_path / "ledger.db", log_dir=tmp_path)
    show_log_on_failure(request, sequencer)
    try:
        await asyncio.to_thread(sequencer.start, 60.0)
        async with await LedgerClient.connect(setting, timeout=10.0) as client:
            actor = await client.ensure_actor("acme", "agent:tests/urls@1", "agent")
            lane = await LaneRecorder.open(client, "acme", "s1", "r1", "main")
            receipt = await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r1")])
        assert receipt.positions == [1]
        assert ledger_last_position(tmp_path / "ledger.db") == 1
    finally:
        sequencer.stop()
