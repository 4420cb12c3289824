"""Retention (spec/erasure.md, "Retention"): the active sequencer erases, once
a day, the content of every event of a tenant committed more than its
``content_retention_days`` ago, by the same erasure as a request's.

One erasure a tenant a day: its id is ``retention-<tenant>-<day>`` and its
time the start of that day (UTC) less the tenant's days, so running it again
the same day (every ``interval_s``, after a restart, by the next active
sequencer) continues that one erasure and nothing is erased twice. It is
asked for by the tenant's ``service:laneledger/retention`` actor. A tenant
with ``retention_dry_run`` only has what would be erased counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec

from laneledger.contract.clock import format_timestamp
from laneledger.contract.errors import LedgerError
from laneledger.contract.model import Erase, ErasurePage
from laneledger.contract.subjects import token
from laneledger.runtime.tenants import Tenants

from .metrics import SequencerMetrics

log = logging.getLogger("laneledger.sequencer.retention")

RETENTION_ACTOR = "service:laneledger/retention"
REASON = "retention: content older than {days} days (tenants file, content_retention_days)"


@dataclass(frozen=True)
class RetentionRound:
    """What one tenant's round did: erased (or, dry, would erase)."""

    tenant: str
    erasure_id: str
    committed_before: str
    erased: int
    dry_run: bool


class Retention:
    def __init__(
        self,
        tenants: Tenants,
        *,
        erase: Callable[[Erase], Awaitable[ErasurePage]],
        actor_of: Callable[[str], Awaitable[str]],
        metrics: SequencerMetrics,
        interval_s: float = 3600.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._tenants = tenants
        self._erase = erase  # one page, through the sequencer (writer thread, committed stream)
        self._actor_of = actor_of  # the tenant's retention actor's id
        self._metrics = metrics
        self._interval_s = interval_s
        self._now = now

    async def run(self) -> None:
        """A round now and every ``interval_s`` while active (cancelled on
        standing down; the next active sequencer goes on)."""
        while True:
            try:
                await self.round()
            except LedgerError as exc:  # the ledger unavailable, say: the next round tries again
                log.warning("retention round failed: %s", exc)
            await asyncio.sleep(self._interval_s)

    async def round(self) -> list[RetentionRound]:
        done = []
        for tenant, limits in sorted(self._tenants.limits.items()):
            if limits.content_retention_days > 0:
                done.append(
                    await self._tenant_round(tenant, limits.content_retention_days, limits.retention_dry_run)
                )
        return done

    async def _tenant_round(self, tenant: str, days: int, dry_run: bool) -> RetentionRound:
        today = self._now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        before = format_timestamp(today - timedelta(days=days))
        erasure_id = f"retention-{token(tenant)}-{today.date().isoformat()}"
        cmd = Erase(
            erasure_id=erasure_id,
            actor_id=await self._actor_of(tenant),
            reason=REASON.format(days=days),
            committed_before=before,
            dry_run=True,
            tenant=tenant,
        )
        erased = 0
        if not dry_run:
            # Nothing to erase: no erasure event (a tenant idle for months
            # would otherwise get one a day).
            first = await self._erase(cmd)
            if first.erasure is None and first.erased == 0 and not first.has_more:
                return RetentionRound(tenant, erasure_id, before, 0, dry_run)
            cmd = msgspec.structs.replace(cmd, dry_run=False)
        while True:
            page = await self._erase(cmd)
            erased += page.erased
            if not page.has_more:
                break
            cmd = msgspec.structs.replace(cmd, after_position=page.next_after_position)
        if dry_run:
            self._metrics.retention_would_erase.labels(tenant).set(erased)
        else:
            self._metrics.erased_events.labels(tenant, "retention").inc(erased)
        if erased:
            log.info(
                "retention %s: %s %d events of %s committed before %s",
                erasure_id,
                "would erase" if dry_run else "erased",
                erased,
                tenant,
                before,
            )
        return RetentionRound(tenant, erasure_id, before, erased, dry_run)
