"""What recording costs an OpenAI Agents SDK run (spec/openai-agents.md).

    .venv/bin/python bench/openai_agents.py [--runs N] [--model-ms MS]

Everything on 127.0.0.1 in a temporary directory: its own nats-server and
the sequencer as a subprocess. The run is the tests' support agents
(tests/openai_agents_fakes.py): triage calls a function tool, hands off to
billing, which answers; three model calls on a scripted model that answers
at once (or after ``--model-ms`` for triage's two), so the figures are the
SDK's and the recorder's own work, not a model's. Three ways, N runs each, one after the other:

* ``off``: tracing on, no processor;
* ``processor``: ``recorder.processor`` only (every report handed to the
  recorder thread, the run never waits for the ledger);
* ``strict``: the processor and ``run_hooks()`` (the tool waits for its
  request's commit).

Per way: ``Runner.run`` latency p50/p99, and for the recorded ways the time
spent inside the processor's callbacks on the run's thread (per callback),
and how long the recorder took to record all N runs (events/s, from the
first run's start to the flush). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the scripted model, the sequencer process

from agents import RunConfig, Runner, set_trace_processors  # noqa: E402
from agents.tracing import Span, Trace, TracingProcessor, set_tracing_disabled  # noqa: E402
from openai_agents_fakes import support_agents  # noqa: E402
from sequencer_process import SequencerProcess  # noqa: E402

from laneledger.adapters.openai_agents import OpenAIAgentsRecorder  # noqa: E402
from laneledger.devtools.natsserver import NatsServer  # noqa: E402
from laneledger.sdk.client import LedgerClient  # noqa: E402


class Timed(TracingProcessor):
    """The recorder's processor, its callbacks timed on the caller's thread."""

    def __init__(self, inner: TracingProcessor) -> None:
        self.inner = inner
        self.calls = 0
        self.seconds = 0.0

    def _time(self, call: Any, item: Any) -> None:
        started = time.perf_counter()
        call(item)
        self.seconds += time.perf_counter() - started
        self.calls += 1

    def on_trace_start(self, trace: Trace) -> None:
        self._time(self.inner.on_trace_start, trace)

    def on_trace_end(self, trace: Trace) -> None:
        self._time(self.inner.on_trace_end, trace)

    def on_span_start(self, span: Span[Any]) -> None:
        self._time(self.inner.on_span_start, span)

    def on_span_end(self, span: Span[Any]) -> None:
        self._time(self.inner.on_span_end, span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def runs(way: str, n: int, hooks: Any, model_s: float) -> list[float]:
    async def think() -> None:
        await asyncio.sleep(model_s)

    latencies = []
    for i in range(n):
        ran: list[str] = []
        agent = support_agents(ran, before=think if model_s else None)
        started = time.perf_counter()
        await Runner.run(
            agent, "where is my refund?", hooks=hooks, run_config=RunConfig(group_id=f"{way}-{i}")
        )
        latencies.append(time.perf_counter() - started)
        assert ran == ["A-17"]
    return latencies


def figures(latencies: list[float]) -> dict[str, float]:
    return {
        "runs_per_s": round(len(latencies) / sum(latencies), 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
    }


async def measure(url: str, n: int, model_s: float) -> dict[str, Any]:
    set_tracing_disabled(False)
    results: dict[str, Any] = {"runs": n, "model_ms": model_s * 1000}
    set_trace_processors([])
    await runs("warm", 5, None, model_s)
    results["off"] = figures(await runs("off", n, None, model_s))
    print("off       ", results["off"], flush=True)
    async with await LedgerClient.connect(url) as reader:
        for way, strict in (("processor", False), ("strict", True)):
            recorder = await OpenAIAgentsRecorder.connect(url, tenant="bench", strict_tools=strict)
            timed = Timed(recorder.processor)
            set_trace_processors([timed])
            try:
                started = time.perf_counter()
                latencies = await runs(way, n, recorder.run_hooks() if strict else None, model_s)
                await recorder.flush(timeout=600)
                recorded_s = time.perf_counter() - started
            finally:
                set_trace_processors([])
                await recorder.close()
            counts = [
                len((await reader.load_session(f"{way}-{i}", tenant="bench")).events) for i in (0, n - 1)
            ]
            per_run = sum(counts) / 2
            results[way] = {
                **figures(latencies),
                "callback_us": round(timed.seconds / timed.calls * 1e6, 1),
                "callbacks_per_run": timed.calls / n,
                "events_per_run": per_run,
                "recorded_events_per_s": round(per_run * n / recorded_s, 1),
                "lost": recorder.lost,
            }
            print(f"{way:10s}", results[way], flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument(
        "--model-ms",
        type=float,
        default=0.0,
        help="triage's model thinks this long per call (0: the worst case, a queue never drained)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="oa-bench-") as tmp, NatsServer(Path(tmp) / "nats") as server:
        sequencer = SequencerProcess(server.url, Path(tmp) / "ledger.db", log_dir=Path(tmp)).start()
        try:
            results = asyncio.run(measure(server.url, args.runs, args.model_ms / 1000))
        finally:
            sequencer.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
