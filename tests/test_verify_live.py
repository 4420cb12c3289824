"""`laneledger verify --db --nats` on a live ledger: the real sequencer process
committing what producer processes append while the verification runs. The
stream's normal lag behind SQLite is reported as lag (a ``stream_lag``
warning with its figure) once the stream catches up, never as a fault; every
position both hold is still compared byte for byte (spec/verify.md)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from polling import eventually
from producer_proc import create_lanes, start_producers, wait_for_producers
from sequencer_process import ledger_last_position, wait_for_ledger, wait_for_stream

from laneledger.audit.stream import StreamCheck, check_stream

SCRIPT = Path(sys.executable).with_name("laneledger")
LAG_TRIES_S = 20.0  # how long to look for a moment the stream trails SQLite


@pytest.mark.slow
async def test_verify_with_nats_under_load_reports_lag_not_a_fault(nats_server, sequencer_proc, js, tmp_path):
    db = tmp_path / "ledger.db"
    stop_file = tmp_path / "stop"
    actor_id, lanes = await create_lanes(nats_server.url, 24)
    producers = start_producers(
        nats_server.url,
        tmp_path,
        actor_id,
        lanes,
        producers=3,
        hot=0,
        requests=100_000,
        seed=11,
        concurrency=8,
        receipt_timeout=5.0,
        duration=60,
        time_limit=70,
        stop_file=str(stop_file),
    )
    try:
        await wait_for_ledger(db, 300)

        # In process, under load: each check compares everything both hold;
        # some catch the stream trailing SQLite, and it catches up.
        checks = []

        async def check() -> StreamCheck:
            checks.append(await check_stream(js, db, wait_s=5.0))
            return checks[-1]

        lagged = await eventually(
            check,
            until=lambda found: found.lag,
            what="a check under load that sees the stream trail SQLite",
            timeout=LAG_TRIES_S,
            interval=0,
        )
        assert 0 < lagged.lag <= lagged.messages and lagged.caught_up_s < 5.0
        assert [c.messages for c in checks] == sorted(c.messages for c in checks)

        # The command, under load: intact, and any lag is a warning with its figure.
        result = await asyncio.to_thread(
            subprocess.run,
            [str(SCRIPT), "verify", "--db", str(db), "--nats", nats_server.url, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        stream = report["stream"]
        assert report["intact"] and stream["identical"]
        assert stream["messages"] >= report["last_position"] >= lagged.messages
        lag_warnings = [w for w in report["warnings"] if w["kind"] == "stream_lag"]
        assert len(lag_warnings) == (1 if stream["lag"] else 0)
        if stream["lag"]:
            assert f"was {stream['lag']} events behind" in lag_warnings[0]["message"]
    finally:
        stop_file.touch()
        await wait_for_producers(producers, timeout=60)

    # Quiescent: no lag, every event compared.
    last = ledger_last_position(db)
    await wait_for_stream(js, last)
    idle = await check_stream(js, db, wait_s=0.0)
    assert (idle.messages, idle.lag) == (last, 0)
    print(
        f"verify live: {len(checks)} checks until one saw lag {lagged.lag} "
        f"(caught up in {lagged.caught_up_s * 1000:.0f} ms); command: {stream}"
    )


@pytest.mark.parametrize(
    ("env", "flag", "named"),
    [
        ("soon", None, "LANELEDGER_VERIFY_STREAM_WAIT_S='soon': not a number of seconds"),
        (None, "-1", "--stream-wait-s=-1.0: must be a number of seconds >= 0"),
    ],
)
def test_a_bad_stream_wait_is_exit_2_naming_it(tmp_path, env, flag, named):
    environ = {k: v for k, v in os.environ.items() if k != "LANELEDGER_VERIFY_STREAM_WAIT_S"}
    if env is not None:
        environ["LANELEDGER_VERIFY_STREAM_WAIT_S"] = env
    args = [
        str(SCRIPT),
        "verify",
        "--db",
        str(tmp_path / "ledger.db"),
        "--nats",
        "nats://127.0.0.1:4222",
        *(["--stream-wait-s", flag] if flag else []),
    ]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, env=environ)
    assert (result.returncode, result.stderr.strip()) == (2, f"laneledger: verify: {named}")
