"""The TypeScript SDK (sdk-ts/) against the real system: a real nats-server
and the real sequencer (the fixtures every SDK test uses) serve the compiled
node tests (sdk-ts/test/live.test.ts, told the server's URL in
LANELEDGER_TS_NATS_URL); then ``laneledger verify`` checks the ledger they
wrote, and an append the TypeScript SDK made is retried by the Python SDK
with the same append id: a replay, not a violation. A TypeScript producer
(sdk-ts/tools/producer.ts) keeps every receipt it was told through a
SIGKILL of the sequencer. LangGraph.js's conformance suite judges the
LangGraph saver (sdk-ts/src/langgraph.ts) on the real checkpoint service.
On the deployment as rendered, a tenant's client
(producer-acme, its own NATS account) stays within its grants.

``make sdk-ts`` builds the package (``npm ci``, ``tsc``); ``make test`` runs
it first. Skips only when node is absent or older than the SDK needs
(``external_programs.SDK_TS_NODE``)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from external_programs import NODE, sdk_ts_node_missing
from rendered_deployment import RenderedDeployment
from sequencer_process import SequencerProcess

from laneledger.contract.chain import append_digest
from laneledger.contract.model import Lane
from laneledger.devtools.natsserver import NatsServer
from laneledger.sdk.client import LedgerClient
from laneledger.services.checkpoint.service import CheckpointService
from laneledger.services.sequencer.service import Sequencer

NODE_MISSING = sdk_ts_node_missing()
pytestmark = [pytest.mark.nats, pytest.mark.skipif(NODE_MISSING is not None, reason=NODE_MISSING or "")]

SDK = Path(__file__).resolve().parents[1] / "sdk-ts"
COMPILED = SDK / "dist" / "test"


def compiled(*names: str) -> list[str]:
    """The compiled node tests ``names`` (sdk-ts/test/<name>.test.ts)."""
    found = [COMPILED / f"{name}.test.js" for name in names]
    missing = [p.name for p in found if not p.exists()]
    assert not missing, f"{COMPILED} lacks {missing}: run `make sdk-ts` (npm ci, tsc)"
    return [str(p) for p in found]


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


@pytest.mark.slow
async def test_the_typescript_sdk_against_a_real_ledger(
    nats_server: NatsServer, sequencer: Sequencer, checkpoint_service: CheckpointService, tmp_path: Path
) -> None:
    handoff = tmp_path / "ts-append.json"
    code, out = await run(
        NODE.path or "node",
        "--test",
        "--test-reporter=tap",
        *compiled("vectors", "data_subjects", "erase", "live", "langgraph", "openai_agents"),
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

    await verify(tmp_path / "ledger.db")  # the sequencer fixture's file


# The one case of LangGraph.js's suite not run, and why: it asks a saver to
# store only the channels `newVersions` names (Postgres's blobs by version).
# LaneledgerSaver stores a checkpoint's channel values whole, as the Python
# saver does, and as LangGraph.js's MemorySaver and SqliteSaver do (the suite
# skips it for them: "TODO: ... doesn't store channel deltas").
NOT_RUN = "should only store channel_values that have changed (based on newVersions)"


@pytest.mark.slow
async def test_the_langgraph_saver_passes_langgraphs_conformance_suite(
    nats_server: NatsServer, sequencer: Sequencer, checkpoint_service: CheckpointService, tmp_path: Path
) -> None:
    """LangGraph.js's own suite (@langchain/langgraph-checkpoint-validation
    1.1.1, pinned in sdk-ts/package-lock.json, on vitest) judges
    LaneledgerSaver on the real services: every case passes but NOT_RUN;
    then the ledger the saver wrote verifies."""
    code, out = await run(
        NODE.path or "node",
        "node_modules/vitest/vitest.mjs",
        "run",
        "--globals",
        "--testNamePattern",
        f"^(?!.*{re.escape(NOT_RUN)}).*$",
        "dist/tools/langgraph.conformance.test.js",
        env={"LANELEDGER_TS_NATS_URL": nats_server.url, "NO_COLOR": "1", "CI": "1"},
    )
    assert code == 0, out
    summary = re.search(r"Tests\s+(\d+) passed \| (\d+) skipped \((\d+)\)", out)
    assert summary is not None, out
    passed, skipped, total = map(int, summary.groups())
    assert (skipped, passed + skipped) == (1, total) and passed >= 700, out
    await verify(tmp_path / "ledger.db")


async def test_a_killed_sequencer_loses_nothing_the_typescript_producer_was_told(
    nats_server: NatsServer, sequencer_proc: SequencerProcess
) -> None:
    """SIGKILL the sequencer (a real process) while a TypeScript producer
    appends: it resends with the same append ids until the restarted
    sequencer answers, and every receipt it was given is in the ledger."""
    count = 40
    proc = await asyncio.create_subprocess_exec(
        NODE.path or "node",
        str(SDK / "dist" / "tools" / "producer.js"),
        nats_server.url,
        "crash-session",
        str(count),
        cwd=SDK,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    told: list[dict[str, Any]] = []
    try:
        while len(told) < 10:  # up and committing
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, (await proc.stderr.read()).decode()
            told.append(json.loads(line))
        sequencer_proc.kill()
        await asyncio.sleep(0.5)  # down: the producer's appends wait in the stream
        await asyncio.to_thread(sequencer_proc.start, 30.0)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    told += [json.loads(line) for line in out.decode().splitlines()]
    assert [r["last_seq"] for r in told] == list(range(1, count + 1))

    async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
        for receipt in told:
            kept = await client.get_receipt(receipt["append_id"], tenant="acme")
            assert (kept.digest, kept.positions) == (receipt["digest"], receipt["positions"])
    assert sequencer_proc.starts == 2
    # One append spanned the outage: the kill hit traffic, not a pause.
    assert max(r["waited_ms"] for r in told) >= 500, told
    await verify(sequencer_proc.db_path)


async def test_the_readme_typescript_example_runs_on_a_real_ledger(
    nats_server: NatsServer, sequencer: Sequencer, tmp_path: Path
) -> None:
    """The README's TypeScript example (sdk-ts/examples/readme.ts, which
    tsc type-checks; tests/test_doc_examples.py holds the README's block to
    it) as compiled, its URL swapped for the test server's: it commits its
    two events and prints their receipt; the ledger then verifies."""
    example = SDK / "dist" / "examples" / "readme.js"
    assert example.exists(), f"{example} is missing: run `make sdk-ts` (npm ci, tsc)"
    # Inside the package, so that "@laneledger/sdk" resolves to dist/ as it does for users.
    runnable = example.with_name(f"readme.{os.getpid()}.mjs")
    runnable.write_text(example.read_text().replace("nats://127.0.0.1:4222", nats_server.url))
    try:
        code, out = await run(NODE.path or "node", str(runnable))
    finally:
        runnable.unlink()
    assert code == 0, out
    printed = re.fullmatch(r"(\d+) (\d+) \[\s*'([0-9a-f]{64})',\s*'([0-9a-f]{64})'\s*\]\s*", out)
    assert printed is not None, out
    assert int(printed[2]) == int(printed[1]) + 1, out
    await verify(tmp_path / "ledger.db")


async def verify(db: Path) -> None:
    """``laneledger verify --db``: the ledger file is intact."""
    code, out = await run(sys.executable, "-m", "laneledger.cli", "verify", "--db", str(db))
    assert code == 0, out


@pytest.mark.slow
async def test_a_tenants_typescript_client_on_the_rendered_deployment(
    rendered_deployment: RenderedDeployment,
) -> None:
    """As producer-acme and producer-globex, each in its own NATS account:
    the TypeScript client stays within the tenant's grants (nats-server
    refuses it nothing), its receipts come to its own inbox, its blobs go
    through its uploads bucket, and it sees nothing of the other tenant."""
    d = rendered_deployment
    code, out = await run(
        NODE.path or "node",
        "--test",
        "--test-reporter=tap",
        *compiled("tenants"),
        env={
            "LANELEDGER_TS_ACME_URL": d.url("producer-acme"),
            "LANELEDGER_TS_GLOBEX_URL": d.url("producer-globex"),
            "LANELEDGER_TS_PRODUCER_URL": d.url("producer"),
        },
    )
    assert code == 0, out
    assert "# pass 2" in out, out
    # nats-server refused the SDK nothing but the shared producer's inbox of
    # a tenant the config does not render (initech: the test's undeclared one).
    assert [v for v in d.permission_violations() if "_INBOX_initech." not in v] == []
    verified = await d.verify()
    assert verified.returncode == 0, verified.stdout + verified.stderr
