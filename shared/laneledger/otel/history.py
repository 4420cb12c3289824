"""Exporting a session or a run that is already in the ledger.

Read over NATS from the sequencer (``load_structure`` for the lanes, then
each lane page by page, so a session of any size), merged into ledger order
and mapped once. A span whose end is not committed yet is not sent: it is
counted as open.
"""

from __future__ import annotations

from dataclasses import dataclass

from laneledger.contract.model import CommittedEvent
from laneledger.otel.mapping import SpanMapper, SpanRecord
from laneledger.sdk.client import LedgerClient


@dataclass(frozen=True)
class HistoryExport:
    events: int
    spans: list[SpanRecord]
    open_spans: int


async def map_history(
    client: LedgerClient,
    mapper: SpanMapper,
    session_id: str,
    run_id: str | None = None,
    *,
    tenant: str | None = None,
) -> HistoryExport:
    structure = await client.load_structure(session_id, run_id, tenant=tenant)
    events: list[CommittedEvent] = []
    for lane in structure.lanes:
        mapper.add_lane(lane)
        async for page in client.lane_pages(lane.id, tenant=structure.tenant):
            events.extend(page.events)
    events.sort(key=lambda e: e.position)
    spans = [span for event in events for span in mapper.feed(event)]
    return HistoryExport(events=len(events), spans=spans, open_spans=mapper.open_spans)
