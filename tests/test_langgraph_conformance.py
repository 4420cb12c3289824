"""LangGraph's own conformance suite (langgraph-checkpoint-conformance)
against ``LaneledgerSaver`` on a real nats-server, the real sequencer and
the real checkpoint service (spec/langgraph.md). The report is printed;
the test fails if any base capability, or any extended one the saver
implements, fails."""

from __future__ import annotations

from collections.abc import AsyncIterator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from laneledger.adapters.langgraph import LaneledgerSaver
from laneledger.sdk.client import LedgerClient
from laneledger.services.checkpoint.service import CheckpointService

IMPLEMENTED_EXTENDED = {"prune", "copy_thread", "delete_for_runs"}


async def test_conformance_suite(client: LedgerClient, checkpoint_service: CheckpointService) -> None:
    @checkpointer_test(name="LaneledgerSaver")
    async def laneledger_saver() -> AsyncIterator[LaneledgerSaver]:
        saver = LaneledgerSaver(client, tenant="acme")
        await saver.setup()
        yield saver

    report = await validate(laneledger_saver, progress=ProgressCallbacks.verbose())
    report.print_report()
    failures = {name: r.failures for name, r in report.results.items() if r.passed is False}
    assert report.passed_all_base(), failures
    detected = {name for name, r in report.results.items() if r.detected}
    assert detected >= {c.value for c in BASE_CAPABILITIES} | IMPLEMENTED_EXTENDED
    assert report.passed_all(), failures
