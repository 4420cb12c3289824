"""Reading a run for recovery and inspection in pieces that each fit one NATS
reply, so runs of any size work: the structure with the sequencer's paged
``load_structure``, then each lane's events with ``load_lane``
(``LedgerClient.lane_pages``), folded into ``RunFacts`` as they arrive.

Not one snapshot, but a consistent cut: each lane is read through the head
its structure row had, and every attempt an event up to there names was
created before that event, so before the lanes were read, and is in the
attempt pages that follow them.
"""

from __future__ import annotations

from laneledger.contract.errors import EntityNotFound
from laneledger.runtime.access import OPEN, Scope
from laneledger.sdk.client import LedgerClient

from .recovery import RunFacts

LANE_PAGE = 1000  # events per load_lane request, halved while a reply is too large


async def read_run(
    ledger: LedgerClient, session_id: str, run_id: str, scope: Scope = OPEN, tenant: str | None = None
) -> RunFacts:
    """The run's facts. ``EntityNotFound`` (kind ``run``) when the run has
    no lane, its session does not exist, or ``scope`` may not see it —
    checked before any event is read. ``tenant``: whose session (ids are
    each tenant's own; default the scope's, needed only when several have it)."""
    try:
        structure = await ledger.load_structure(session_id, run_id, tenant=tenant or scope.tenant)
    except EntityNotFound as err:
        if err.details.get("kind") != "session":
            raise
        raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id) from err
    scope.not_found_unless(structure.tenant, "run", id=run_id, session_id=session_id)
    run = RunFacts(
        session_id=session_id,
        run_id=run_id,
        tenant=structure.tenant,
        lanes=structure.lanes,
        actions=structure.actions,
        attempts=structure.attempts,
    )
    for lane in structure.lanes:
        pages = ledger.lane_pages(lane.id, limit=LANE_PAGE, through_seq=lane.last_seq, tenant=lane.tenant)
        async for page in pages:
            for event in page.events:
                run.fold(event)
    run.settle()
    return run
