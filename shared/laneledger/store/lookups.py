"""What the writer looks up in its ledger file, and what it keeps of it.

Lookups by id run in chunks (a batch names up to thousands of ids); lane
heads, actors' tenants and actors' keys are cached, authoritative because
the writer is the file's only writer (store/writer.py) and dropped when it
takes transactions from the log (``forget_lanes``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from laneledger.contract.errors import EntityNotFound, InvalidRequest
from laneledger.contract.model import Actor, AppendCommitted, decoder
from laneledger.contract.signing import Ed25519PublicKey, load_public_key
from laneledger.contract.subjects import token
from laneledger.sqlite import fetch_all
from laneledger.store.batch import LaneHead


class LedgerLookups:
    def __init__(self, conn: sqlite3.Connection, *, before_use: Callable[[], None]) -> None:
        self._db = conn
        # Called before every read: the writer refuses while a batch is
        # staged, and first takes what the log holds beyond the file.
        self._before_use = before_use
        # Lane heads by id, then tenant (ids are each tenant's own): a lane
        # id is loaded for every tenant at once, and a lane created after
        # that is added here, so an id's entry always holds all its lanes.
        self.lanes: dict[str, dict[str, LaneHead]] = {}
        self.actor_tenants: dict[str, str] = {}
        # Actors registered with a public key. Keys never change, so the
        # sequencer may read this from its event loop to check signatures
        # before the batch reaches this thread (PreparedAppend.signatures).
        self.actor_keys: dict[str, Ed25519PublicKey] = {}

    def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        self._before_use()
        return fetch_all(self._db, sql, params, what="ledger read failed")

    def _in(self, sql: str, keys: set[str]) -> list[tuple[Any, ...]]:
        """Run ``sql`` (with one ``{marks}`` placeholder) over ``keys`` in chunks."""
        self._before_use()
        keys_list, rows = list(keys), []
        for start in range(0, len(keys_list), 500):
            chunk = keys_list[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows.extend(fetch_all(self._db, sql.format(marks=marks), chunk, what="ledger read failed"))
        return rows

    def stored_event(self, event_id: str, tenant: str) -> tuple[str, int] | None:
        """A committed event's (session, position), or None."""
        rows = self.rows(
            "SELECT session_id, position FROM events WHERE id = ? AND tenant = ?", (event_id, tenant)
        )
        return (rows[0][0], rows[0][1]) if rows else None

    def stored_receipts(self, append_ids: set[str]) -> dict[tuple[str, str], AppendCommitted]:
        """The receipts of these append ids, by (tenant, append id)."""
        rows = self._in(
            "SELECT tenant, append_id, body FROM receipts WHERE append_id IN ({marks})", append_ids
        )
        receipt = decoder(AppendCommitted)
        return {(tenant, append_id): receipt.decode(body) for tenant, append_id, body in rows}

    def known_events(self, ids: set[str]) -> dict[tuple[str, str], tuple[str, int]]:
        """Committed events by (tenant, id): (session, position)."""
        rows = self._in("SELECT id, session_id, position, tenant FROM events WHERE id IN ({marks})", ids)
        return {(tenant, event_id): (session, position) for event_id, session, position, tenant in rows}

    def load_lanes(self, ids: set[str]) -> None:
        missing = ids - self.lanes.keys()
        for lane_id in missing:
            self.lanes[lane_id] = {}
        for lane_id, tenant, session, run, last_seq, head in self._in(
            "SELECT id, tenant, session_id, run_id, last_seq, head_hash FROM lanes WHERE id IN ({marks})",
            missing,
        ):
            self.lanes[lane_id][tenant] = LaneHead(lane_id, tenant, session, run, last_seq, head)

    def append_lane(self, lane_id: str, tenant_token: str | None) -> LaneHead:
        """The lane an append names (loaded by ``load_lanes``): the one of
        the subject's tenant. Without a subject (a writer used directly) the
        only lane of this id, or ``invalid_request`` when several tenants
        have one."""
        lanes = self.lanes.get(lane_id, {})
        if tenant_token is not None:
            for lane in lanes.values():
                if token(lane.tenant) == tenant_token:
                    return lane
            raise EntityNotFound("no such lane", kind="lane", id=lane_id)
        if len(lanes) > 1:
            raise InvalidRequest(
                "several tenants have a lane with this id: append on the tenant's subject",
                path="$.lane_id",
                id=lane_id,
            )
        for lane in lanes.values():
            return lane
        raise EntityNotFound("no such lane", kind="lane", id=lane_id)

    def load_actors(self, ids: set[str]) -> None:
        missing = ids - self.actor_tenants.keys()
        for (body,) in self._in("SELECT body FROM actors WHERE id IN ({marks})", missing):
            self.remember_actor(decoder(Actor).decode(body))

    def remember_actor(self, actor: Actor) -> None:
        self.actor_tenants[actor.id] = actor.tenant
        if actor.public_key is not None:
            self.actor_keys[actor.id] = load_public_key(actor.public_key)

    def subject_lanes(self, ids: set[str]) -> dict[tuple[str, str], str]:
        """The lane of each turn, action and attempt among ``ids``, by (tenant, id)."""
        found: dict[tuple[str, str], str] = {}
        for table in ("turns", "actions", "attempts"):
            for entity_id, tenant, lane_id in self._in(
                f"SELECT id, tenant, lane_id FROM {table} WHERE id IN ({{marks}})", ids
            ):
                found[(tenant, entity_id)] = lane_id
        return found

    def add_lane(self, lane: LaneHead) -> None:
        """A lane just created: the id's other tenants' lanes are loaded
        first, so the id's entry holds all its lanes."""
        self.load_lanes({lane.id})
        self.lanes[lane.id][lane.tenant] = lane

    def move_heads(self, heads: dict[tuple[str, str], tuple[int, str]]) -> None:
        """Committed heads, by (tenant, lane id): (last seq, head hash)."""
        for (tenant, lane_id), (seq, head) in heads.items():
            lane = self.lanes[lane_id][tenant]
            lane.last_seq, lane.head_hash = seq, head

    def forget_lanes(self) -> None:
        """Lane heads moved in the file (transactions taken from the log):
        they are loaded again. Actors only appear and never change, so
        their cache stays (a new one is loaded when first named)."""
        self.lanes.clear()
