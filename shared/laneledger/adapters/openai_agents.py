"""Recording what the OpenAI Agents SDK does: a tracing processor, and run
hooks for the calls that must be recorded before they run
(spec/openai-agents.md).

    recorder = await OpenAIAgentsRecorder.connect("nats://127.0.0.1:4222", tenant="acme",
                                                  strict_tools=True)
    agents.add_trace_processor(recorder.processor)
    result = await Runner.run(agent, "…", hooks=recorder.run_hooks())
    await recorder.close()

The SDK calls a tracing processor synchronously, on whatever thread made the
span, and swallows what it raises (``agents.tracing.provider``'s
``SynchronousMultiTracingProcessor`` logs it): a processor can neither wait
for the ledger nor stop anything. So ``LaneledgerTracingProcessor`` copies
each trace and span the moment it is reported and posts the copy to the
recorder's own thread (``LoopThread``: its own event loop and NATS
connection), which records the copies one by one, in order, retrying while
the ledger is unreachable. Everything it records is ``best_effort``.

A tool's request is different: ``RunHooks.on_tool_start`` is awaited inside
the function span, before the tool runs, and what it raises stops the run
(the SDK re-raises it as ``agents.UserError``, the ledger's typed error as
its ``__cause__``; the tool does not run). With ``strict_tools=True`` the
hooks from ``run_hooks()`` commit the request there, through the same thread
(so after everything reported before it), and raise when it cannot commit:
``requested_before_call`` is then ``strict`` for function tools.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from agents import RunContextWrapper, RunHooks, Tool
from agents import __version__ as sdk_version
from agents.tracing import Span, Trace, TracingProcessor, get_current_span
from agents.tracing.span_data import FunctionSpanData, ResponseSpanData

from laneledger.adapters.loopthread import LoopThread, result_within
from laneledger.adapters.openai_agents_mapping import Pricing, TraceMapper, guarantees
from laneledger.adapters.openai_agents_spans import SpanInfo, ToolRequest, TraceInfo
from laneledger.contract.errors import InvalidRequest, LedgerError, LedgerUnavailable
from laneledger.sdk.client import LedgerClient

__all__ = ["LaneledgerRunHooks", "LaneledgerTracingProcessor", "OpenAIAgentsRecorder", "guarantees"]

log = logging.getLogger(__name__)


def _json(value: Any) -> Any:
    """A deep copy as JSON values: the SDK keeps filling a span's data after
    it is reported, and the copy is read on another thread."""
    return json.loads(json.dumps(value, default=str))


def trace_info(trace: Trace) -> TraceInfo:
    exported = trace.export() or {}
    metadata = exported.get("metadata")
    return TraceInfo(
        trace_id=trace.trace_id,
        workflow_name=str(exported.get("workflow_name") or trace.name),
        group_id=exported.get("group_id"),
        metadata=_json(metadata) if isinstance(metadata, Mapping) and metadata else None,
    )


def span_info(span: Span[Any]) -> SpanInfo:
    data = dict(span.span_data.export())
    if isinstance(span.span_data, ResponseSpanData) and span.span_data.response is not None:
        # A response span exports only the response id; the model, output
        # and usage are on the Response object.
        response = span.span_data.response
        data["model"] = response.model
        data["output"] = [item.model_dump() for item in response.output]
        if data.get("usage") is None and response.usage is not None:
            data["usage"] = response.usage.model_dump()
    error = span.error
    return SpanInfo(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_id,
        data=_json(data),
        started_at=span.started_at,
        ended_at=span.ended_at,
        error=_json(dict(error)) if error else None,
    )


class OpenAIAgentsRecorder:
    """Records OpenAI Agents SDK runs into ``tenant``'s ledger, through a
    thread of its own; ``connect`` (or ``connect_sync``) starts it."""

    def __init__(
        self,
        nats_url: str,
        *,
        tenant: str,
        strict_tools: bool = False,
        pricing: Pricing | None = None,
        provider: str = "openai",
        timeout: float = 5.0,
        data_subject: str | None = None,
        **connect_options: Any,
    ) -> None:
        """``strict_tools``: function tool requests are committed by
        ``run_hooks()`` before the tool runs (pass them to every
        ``Runner.run``). ``pricing(model, tokens)``: a model call's price in
        USD, recorded as ``cost.recorded``. ``timeout``: how long a tool
        waits for its request to commit before it is stopped (and each
        append for its receipt). ``data_subject``: named on every event
        recorded (spec/erasure.md). ``connect_options``: for ``LedgerClient.connect``."""
        self.tenant = tenant
        self.strict_tools = strict_tools
        self.timeout = timeout
        self.guarantees = guarantees(strict_tools=strict_tools, priced=pricing is not None)
        self.processor = LaneledgerTracingProcessor(self)
        self._mapper: TraceMapper | None = None

        async def open_state() -> TraceMapper:
            client = await LedgerClient.connect(nats_url, **{"timeout": timeout, **connect_options})
            self._mapper = TraceMapper(
                client,
                tenant=tenant,
                strict_tools=strict_tools,
                pricing=pricing,
                provider=provider,
                sdk_version=sdk_version,
                timeout=timeout,
                data_subject=data_subject,
            )
            return self._mapper

        async def close_state(mapper: TraceMapper) -> None:
            try:
                await mapper.retrying("the last appends", mapper.settle)
            finally:
                await mapper.client.close()

        self._thread: LoopThread[TraceMapper] = LoopThread(
            open_state, close_state, name=f"laneledger-openai-agents-{tenant}"
        )

    @classmethod
    async def connect(cls, nats_url: str, *, tenant: str, **options: Any) -> OpenAIAgentsRecorder:
        """A started recorder (the options are ``__init__``'s); a connection
        failure is the client's typed error."""
        recorder = cls(nats_url, tenant=tenant, **options)
        await asyncio.wrap_future(recorder._thread.start())
        return recorder

    @classmethod
    def connect_sync(cls, nats_url: str, *, tenant: str, **options: Any) -> OpenAIAgentsRecorder:
        """``connect`` for synchronous code (``Runner.run_sync``); blocks until connected."""
        recorder = cls(nats_url, tenant=tenant, **options)
        recorder._thread.start().result()
        return recorder

    # -- hand-over --------------------------------------------------------------------------

    def post(self, what: str, job: Any) -> None:
        """Queue a best-effort recording job (retried while the ledger is down)."""

        async def run(mapper: TraceMapper) -> None:
            await mapper.retrying(what, lambda: job(mapper))

        self._thread.post(run)

    async def flush(self, timeout: float | None = 30.0) -> None:
        """Wait until everything reported so far is committed (or given up)."""
        await asyncio.wait_for(asyncio.wrap_future(self._thread.post(_settled)), timeout)

    def flush_sync(self, timeout: float | None = 30.0) -> None:
        result_within(self._thread.post(_settled), timeout)

    def _give_up_in(self, seconds: float) -> None:
        if self._mapper is not None:
            self._mapper.give_up_at = time.monotonic() + seconds

    async def close(self, timeout: float = 10.0) -> None:
        """Record what is queued (retrying for at most ``timeout`` seconds
        while the ledger is unreachable), then disconnect."""
        self._give_up_in(timeout)
        await asyncio.wrap_future(self._thread.close())

    def close_sync(self, timeout: float = 10.0) -> None:
        self._give_up_in(timeout)
        result_within(self._thread.close(), timeout + 5.0)

    @property
    def lost(self) -> int:
        """Reports the ledger refused, or that were still unrecorded at close."""
        return self._mapper.lost if self._mapper is not None else 0

    # -- strict tool requests -----------------------------------------------------------------

    def run_hooks(self) -> LaneledgerRunHooks:
        """``Runner.run(…, hooks=recorder.run_hooks())``: function tool
        requests committed before the tool runs."""
        if not self.strict_tools:
            raise InvalidRequest(
                "run hooks record tool requests only for a recorder connected with strict_tools=True",
                field="strict_tools",
            )
        return LaneledgerRunHooks(self)

    async def request_tool(self, request: ToolRequest) -> None:
        """Commit a tool's request through the recorder thread, after
        everything reported before it; raise when it cannot commit in time."""

        async def job(mapper: TraceMapper) -> None:
            await mapper.tool_requested(request)

        try:
            await self._thread.call(job, wait=self.timeout)
        except LedgerError:
            raise
        except RuntimeError as exc:  # the thread is not running: nothing can be recorded
            raise LedgerUnavailable(f"the laneledger recorder is not running: {exc}") from exc

    def withdraw_tool(self, request: ToolRequest) -> None:
        async def job(mapper: TraceMapper) -> None:
            mapper.tool_withdrawn(request.trace_id, request.span_id)

        self._thread.post(job)


class LaneledgerTracingProcessor(TracingProcessor):
    """The SDK's callbacks, copied and handed to the recorder thread; never
    blocks, never raises."""

    def __init__(self, recorder: OpenAIAgentsRecorder) -> None:
        self._recorder = recorder

    def _hand_over(self, what: str, make: Any) -> None:
        try:
            self._recorder.post(what, make())
        except Exception:
            log.exception("laneledger: could not hand %s to the recorder", what)

    def on_trace_start(self, trace: Trace) -> None:
        self._hand_over("a trace start", lambda: _job("trace_started", trace_info(trace)))

    def on_trace_end(self, trace: Trace) -> None:
        self._hand_over("a trace end", lambda: _job("trace_ended", trace_info(trace)))

    def on_span_start(self, span: Span[Any]) -> None:
        self._hand_over("a span start", lambda: _job("span_started", span_info(span)))

    def on_span_end(self, span: Span[Any]) -> None:
        self._hand_over("a span end", lambda: _job("span_ended", span_info(span)))

    def shutdown(self) -> None:
        """The SDK's exit hook: record what is queued, then disconnect."""
        try:
            self._recorder.close_sync()
        except Exception:
            log.exception("laneledger: the recorder did not close cleanly")

    def force_flush(self) -> None:
        try:
            self._recorder.flush_sync()
        except Exception:
            log.exception("laneledger: the recorder did not flush")


async def _settled(mapper: TraceMapper) -> None:
    await mapper.retrying("the submitted appends", mapper.settle)


def _job(method: str, info: Any) -> Any:
    """A job calling ``TraceMapper.<method>(info)``; ``info`` was copied on the caller's thread."""

    async def job(mapper: TraceMapper) -> None:
        await getattr(mapper, method)(info)

    return job


class LaneledgerRunHooks(RunHooks[Any]):
    """``on_tool_start`` commits a local tool's request (any tool the SDK
    runs in a function span: function, computer, shell, …) before the tool
    runs; raising there stops the run, and the tool does not run."""

    def __init__(self, recorder: OpenAIAgentsRecorder) -> None:
        self._recorder = recorder

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Tool) -> None:
        span = get_current_span()  # the SDK calls this hook inside the tool's function span
        if span is None or span.trace_id in (None, "no-op"):
            raise InvalidRequest(
                f"tool {tool.name!r} runs outside a recorded trace (is tracing disabled?)", tool=tool.name
            )
        if not isinstance(span.span_data, FunctionSpanData):
            return  # not a local tool call the processor sees as one
        arguments = getattr(context, "tool_arguments", None)  # a function tool's ToolContext
        if arguments is None and span.span_data.input is not None:  # computer, shell: the span's
            arguments = str(span.span_data.input)
        request = ToolRequest(
            trace_id=span.trace_id,
            span_id=span.span_id,
            tool_call_id=getattr(context, "tool_call_id", None),
            name=tool.name,
            arguments=arguments,
        )
        try:
            await self._recorder.request_tool(request)
        except BaseException:
            self._recorder.withdraw_tool(request)
            raise
