"""OpenTelemetry export: the ledger's runs, sub-agents, model and tool calls
as GenAI spans for an OTLP receiver (Langfuse, Phoenix, …; ``spec/otel.md``).

``mapping`` (events to spans), ``ids`` and ``history`` (a session's spans)
need nothing beyond laneledger; ``sdkspans`` and ``live`` send them and need
the ``otel`` extra (``pip install 'laneledger[otel]'``).
"""
