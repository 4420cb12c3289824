"""The TypeScript SDK (sdk-ts/) against the real system: a real nats-server
and the real sequencer (the fixtures every SDK test uses) serve the compiled
node tests (sdk-ts/test/live.test.ts, told the server's URL in
LANELEDGER_TS_NATS_URL); then ``laneledger verify`` checks the ledger they
wrote, and an append the TypeScript SDK made is retried by the Python SDK
with the same append id: a replay, not a violation.

``make sdk-ts`` builds the package (``npm ci``, ``tsc``); ``make test`` runs
it first. Skips only when node is absent."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from external_programs import NODE

from laneledger.contract.chain import append_digest
from laneledger.contract.model import Lane
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LedgerClient
from laneledger.services.sequencer.service import Sequencer

pytestmark = [pytest.mark.nats, pytest.mark.skipif(not NODE.found, reason=NODE.missing)]

SDK = Path(__file__).resolve().parents[1] / "sdk-ts"
COMPILED = SDK / "dist" / "test"


def compiled_tests() -> list[str]:
    found = sorted(str(p) for p in COMPILED.glob("*.test.js"))
    assert found, f"{COMPILED} holds no compiled tests: run `make sdk-ts` (npm ci, tsc)"
    return found


async def run(*command: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """A program's exit status and output, without blocking the event loop
    the sequencer runs in."""
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=SDK,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(errors="replace")


async def test_the_typescript_sdk_against_a_real_ledger(
    nats_server: NatsServer, sequencer: Sequencer, tmp_path: Path
) -> None:
    handoff = tmp_path / "ts-append.json"
    code, out = await run(
        NODE.path or "node",
        "--test",
        "--test-reporter=tap",
        *compiled_tests(),
        env={"LANELEDGER_TS_NATS_URL": nats_server.url, "LANELEDGER_TS_OUT": str(handoff)},
    )
    assert code == 0, out
    assert "# fail 0" in out and "# skipped 0" in out, out

    # The Python SDK resends the TypeScript SDK's append: the same receipt, replayed.
    written = json.loads(handoff.read_text())
    assert written["receipt"]["digest"] == append_digest(written["events"])
    lane = Lane(**{k: v for k, v in written["lane"].items() if k != "forked_from"})
    async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
        receipt = await client.append(lane, 0, written["events"], append_id=written["append_id"])
    assert receipt.replayed
    assert (receipt.digest, receipt.entry_hashes) == (
        written["receipt"]["digest"],
        written["receipt"]["entry_hashes"],
    )

    db = str(tmp_path / "ledger.db")  # the sequencer fixture's file
    code, out = await run(sys.executable, "-m", "laneledger.cli", "verify", "--db", db)
    assert code == 0, out
