"""Korg §8.5 subscriptions of one MCP session, notified from the tail's live
SSE of committed events (never by re-reading a journal: an idle session
with no subscription holds no connection; one with subscriptions holds one
SSE per ledger, which costs nothing while nothing commits).

The registry is per session (a 2026-07-28 client: per listen stream), in
memory, keyed by URI (§8.5.3: subscribe is idempotent, unsubscribe removes
the URI, no ids) and forward-looking (the feed starts after the ledger's
newest event at the first subscription).
Each committed event is matched against §8.5.2's predicates; a match sends
one ``notifications/resources/updated`` per URI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from laneledger.compat.korg_view import source_agent_of

from .tailclient import TailClient, TailError
from .uris import Target

log = logging.getLogger("laneledger.mcp")
RETRY_S = 1.0
MAX_SUBSCRIPTIONS = 256  # per session: every one costs a predicate per event

Notify = Callable[[str], Awaitable[None]]  # raises SessionGone once the session has ended
# position -> its Korg record (``korg://{ledger}/event/{n}``): for heads and sessions.
ReadRecord = Callable[[int], Awaitable[dict[str, Any]]]


class SessionGone(Exception):
    """The MCP session of a subscription has ended: its feeds end too."""


@dataclass
class _Ledger:
    """What one ledger's feed serves: URI -> target, and its task."""

    tenant: str | None
    subscriptions: dict[str, Target] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


class Subscriptions:
    def __init__(self, tail: TailClient, token: str | None, notify: Notify) -> None:
        self._tail = tail
        self._token = token
        self._notify = notify
        self._ledgers: dict[str, _Ledger] = {}

    def __len__(self) -> int:
        return sum(len(ledger.subscriptions) for ledger in self._ledgers.values())

    def has(self, uri: str) -> bool:
        return any(uri in ledger.subscriptions for ledger in self._ledgers.values())

    async def add(
        self, uri: str, target: Target, tenant: str | None, start_after: int, read: ReadRecord
    ) -> None:
        """Subscribe ``uri`` (its ledger's feed starting after ``start_after``
        if it is the ledger's first); a repeat is a no-op."""
        if self.has(uri):
            return
        ledger = self._ledgers.setdefault(target.ledger, _Ledger(tenant))
        ledger.subscriptions[uri] = target
        if ledger.task is None:
            ledger.task = asyncio.create_task(self._follow(ledger, start_after, read))

    def remove(self, uri: str) -> None:
        for name, ledger in list(self._ledgers.items()):
            ledger.subscriptions.pop(uri, None)
            if not ledger.subscriptions:
                if ledger.task is not None:
                    ledger.task.cancel()
                del self._ledgers[name]

    async def close(self) -> None:
        tasks = [ledger.task for ledger in self._ledgers.values() if ledger.task is not None]
        self._ledgers.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow(self, ledger: _Ledger, after: int, read: ReadRecord) -> None:
        while True:
            try:
                async for event in self._tail.committed(self._token, ledger.tenant, after):
                    after = int(event["position"])
                    await self._dispatch(ledger, event, read)
            except TailError as exc:  # keep the subscriptions; resume where the feed stopped
                log.debug("subscription feed: %s; retrying", exc)
            except SessionGone:
                self._ledgers.clear()
                return
            await asyncio.sleep(RETRY_S)

    async def _dispatch(self, ledger: _Ledger, event: dict[str, Any], read: ReadRecord) -> None:
        record: dict[str, Any] | None = None
        agent = source_agent_of(
            event.get("event_type", ""), event.get("payload") or {}, event.get("actor_id", "")
        )
        for uri, target in list(ledger.subscriptions.items()):
            try:
                if target.kind in ("heads", "summary") and record is None:
                    record = await read(int(event["position"]))
                if matches(target, agent, record):
                    await self._notify(uri)
            except SessionGone:
                raise
            except Exception:  # a broken predicate or read must not stop the feed (§8.5.1)
                log.exception("subscription %s: event %s", uri, event.get("position"))


def matches(target: Target, agent: str, record: dict[str, Any] | None) -> bool:
    """§8.5.2: whether a new event concerns a subscribed resource."""
    if target.kind == "recent":
        return True
    if target.kind == "agent":
        return agent == target.ids[0]
    if record is None:
        return False
    if target.kind == "heads":
        return bool(record["metadata"]["root_seq"] == record["seq_id"])
    if target.kind == "summary":
        return bool(record["metadata"]["root_seq"] == target.integer())
    return False
