"""OpenTelemetry export: the ledger's runs, sub-agents, model and tool calls
as GenAI spans for an OTLP receiver (Langfuse, Phoenix, …; ``spec/otel.md``).

``mapping`` (events to spans) and ``ids`` need nothing beyond laneledger;
``sdkspans``, ``history`` and ``live`` send them and need the ``otel`` extra
(``pip install 'laneledger[otel]'``).
"""
