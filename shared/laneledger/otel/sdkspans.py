"""Sending ``SpanRecord``s with OpenTelemetry's SDK over OTLP/HTTP.

The spans are built as the SDK's ``ReadableSpan`` directly, not through a
tracer, so their ids and times are the ledger's (``mapping.py``), not ones a
tracer would draw at random or read off the clock. The SDK's OTLP/HTTP
exporter sends them (protobuf), retrying a transient failure with its own
backoff up to its timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from laneledger import __version__
from laneledger.contract.errors import LedgerUnavailable
from laneledger.otel.mapping import SpanRecord

DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
SERVICE_NAME = "laneledger"
SCOPE = InstrumentationScope("laneledger.otel", __version__)
# Spans per OTLP request: receivers cap a request's size (a few MiB), and a
# span here is one to two KiB of attributes.
SPANS_PER_REQUEST = 512
_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_STATUS = {"unset": StatusCode.UNSET, "ok": StatusCode.OK, "error": StatusCode.ERROR}


def readable_span(record: SpanRecord, resource: Resource) -> ReadableSpan:
    def context(span_id: int) -> SpanContext:
        return SpanContext(
            record.trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )

    return ReadableSpan(
        name=record.name,
        context=context(record.span_id),
        parent=None if record.parent_span_id is None else context(record.parent_span_id),
        resource=resource,
        attributes=dict(record.attributes),
        kind=_KINDS[record.kind],
        status=Status(_STATUS[record.status], record.status_message),
        start_time=record.start_ns,
        end_time=record.end_ns,
        instrumentation_scope=SCOPE,
    )


class SpanSender:
    """One OTLP/HTTP endpoint. ``send`` returns once the receiver took every
    span, or raises ``LedgerUnavailable`` (nothing to acknowledge then)."""

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        resource_attributes: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._exporter = OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout_s)
        self._resource = Resource.create({"service.name": SERVICE_NAME, **(resource_attributes or {})})

    async def send(self, records: Sequence[SpanRecord]) -> None:
        """Every span, in requests of at most ``SPANS_PER_REQUEST``. When one
        fails, those before it were taken: sending all again repeats them,
        with the same ids."""
        for first in range(0, len(records), SPANS_PER_REQUEST):
            spans = [readable_span(r, self._resource) for r in records[first : first + SPANS_PER_REQUEST]]
            # The exporter is synchronous (requests): off the event loop.
            result = await asyncio.to_thread(self._exporter.export, spans)
            if result is not SpanExportResult.SUCCESS:
                raise LedgerUnavailable(
                    f"the OTLP receiver at {self.endpoint} did not take {len(spans)} span(s)",
                    endpoint=self.endpoint,
                )

    def close(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]
