"""The structure commands (spec/object-model.md): the actors, lanes, turns,
actions and attempts events are recorded against, each created once and
answered again when asked again with the same attributes (``EntityConflict``
when not). Each command's rows are one transaction of their own, on the
transaction log when there is one (store/txlogsync.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from laneledger.contract.chain import GENESIS_HASH
from laneledger.contract.clock import Clock
from laneledger.contract.errors import (
    EntityConflict,
    EntityNotFound,
    InvalidRequest,
    SubjectMismatch,
    TenantMismatch,
)
from laneledger.contract.ids import new_id
from laneledger.contract.model import (
    Action,
    Actor,
    Attempt,
    CreateAction,
    CreateAttempt,
    CreateLane,
    CreateTurn,
    EnsureActor,
    ForkOrigin,
    ForkPoint,
    Lane,
    Turn,
    decoder,
    encode,
)
from laneledger.contract.signing import load_public_key
from laneledger.contract.vocabulary import EFFECT_KINDS, IDEMPOTENCY_CLASSES
from laneledger.store.batch import LaneHead
from laneledger.store.lookups import LedgerLookups
from laneledger.store.reader import LedgerReader, lane_from_row
from laneledger.store.txlog import (
    INSERT_ACTION,
    INSERT_ACTOR,
    INSERT_ATTEMPT,
    INSERT_LANE,
    INSERT_SESSION,
    INSERT_TURN,
    Statement,
    Writes,
)
from laneledger.store.txlogsync import TxLogSync


class StructureCommands:
    def __init__(
        self,
        *,
        clock: Clock,
        reader: LedgerReader,
        lookups: LedgerLookups,
        log: TxLogSync,
        before_use: Callable[[], None],
    ) -> None:
        self._clock = clock
        self._reader = reader
        self._lookups = lookups  # a new actor or lane joins the writer's caches
        self._log = log
        self._before_use = before_use  # the writer's: refused while a batch is staged; catches up

    def ensure_actor(self, cmd: EnsureActor) -> Actor:
        rows = self._lookups.rows(
            "SELECT body FROM actors WHERE tenant = ? AND key = ?", (cmd.tenant, cmd.key)
        )
        if rows:
            actor: Actor = decoder(Actor).decode(rows[0][0])
            self._same_or_conflict(
                "actor", cmd.key, actor, cmd, ("kind", "display_name", "attributes", "public_key")
            )
            return actor
        if cmd.public_key is not None:
            load_public_key(cmd.public_key)  # a valid curve point, or InvalidRequest now
        actor = Actor(
            id=new_id(),
            tenant=cmd.tenant,
            key=cmd.key,
            kind=cmd.kind,
            display_name=cmd.display_name,
            attributes=cmd.attributes,
            public_key=cmd.public_key,
            created_at=self._clock(),
        )
        self._insert(
            INSERT_ACTOR,
            (actor.id, actor.tenant, actor.key, encode(actor)),
        )
        self._lookups.remember_actor(actor)
        return actor

    def create_lane(self, cmd: CreateLane) -> Lane:
        if cmd.fork_of is not None:  # a fork's parent is its origin lane
            if cmd.parent_lane_id not in (None, cmd.fork_of.lane_id):
                raise InvalidRequest(
                    "a fork's parent lane is the lane it forks",
                    path="$.parent_lane_id",
                    found=cmd.parent_lane_id,
                    expected=cmd.fork_of.lane_id,
                )
            cmd = msgspec.structs.replace(cmd, parent_lane_id=cmd.fork_of.lane_id)
        rows = self._lookups.rows(
            "SELECT body, last_seq, head_hash FROM lanes"
            " WHERE session_id = ? AND tenant = ? AND run_id = ? AND name = ?",
            (cmd.session_id, cmd.tenant, cmd.run_id, cmd.name),
        )
        if rows:
            lane = lane_from_row(*rows[0])
            fields = ("tenant", "kind", "parent_lane_id", "actor_id")
            self._same_or_conflict("lane", cmd.name, lane, cmd, fields + (("id",) if cmd.id else ()))
            stored_fork = lane.forked_from and ForkPoint(
                lane_id=lane.forked_from.lane_id, seq=lane.forked_from.seq
            )
            if stored_fork != cmd.fork_of:
                raise EntityConflict(
                    "lane exists with other attributes",
                    kind="lane",
                    key=cmd.name,
                    differing={
                        "fork_of": {
                            "stored": msgspec.to_builtins(stored_fork),
                            "requested": msgspec.to_builtins(cmd.fork_of),
                        }
                    },
                )
            return lane
        self._unused_id("lanes", "lane", cmd.id, cmd.tenant)
        if cmd.parent_lane_id is not None:
            parent = self._reader.get_lane(cmd.parent_lane_id, cmd.tenant)
            if parent.session_id != cmd.session_id:
                raise EntityConflict(
                    "parent lane is in another session",
                    kind="lane",
                    parent_lane_id=cmd.parent_lane_id,
                    parent_session_id=parent.session_id,
                )
        if cmd.actor_id is not None:
            self._lookups.load_actors({cmd.actor_id})
            tenant = self._lookups.actor_tenants.get(cmd.actor_id)
            if tenant is None:
                raise EntityNotFound("no such actor", kind="actor", id=cmd.actor_id)
            if tenant != cmd.tenant:
                raise TenantMismatch(
                    "actor belongs to another tenant",
                    what="actor",
                    actor_id=cmd.actor_id,
                    expected_tenant=cmd.tenant,
                    tenant=tenant,
                )
        origin = self._fork_origin(cmd.fork_of, cmd.tenant) if cmd.fork_of is not None else None
        now = self._clock()
        lane = Lane(
            id=cmd.id or new_id(),
            tenant=cmd.tenant,
            session_id=cmd.session_id,
            run_id=cmd.run_id,
            name=cmd.name,
            kind=cmd.kind,
            parent_lane_id=cmd.parent_lane_id,
            actor_id=cmd.actor_id,
            created_at=now,
            forked_from=origin,
        )
        self._insert_many(
            [
                (INSERT_SESSION, [(lane.session_id, lane.tenant, now)]),
                (
                    INSERT_LANE,
                    [
                        (
                            lane.id,
                            lane.tenant,
                            lane.session_id,
                            lane.run_id,
                            lane.name,
                            encode(lane),
                            GENESIS_HASH,
                        )
                    ],
                ),
            ]
        )
        self._lookups.add_lane(LaneHead(lane.id, lane.tenant, lane.session_id, lane.run_id, 0, GENESIS_HASH))
        return lane

    def _fork_origin(self, point: ForkPoint, tenant: str) -> ForkOrigin:
        """Resolve a fork point (its lane was checked as the parent: it exists,
        in this session) to the committed event the fork references."""
        rows = self._lookups.rows(
            "SELECT position, id, body FROM events WHERE lane_id = ? AND tenant = ? AND seq = ?",
            (point.lane_id, tenant, point.seq),
        )
        if not rows:
            raise EntityNotFound(
                "the origin lane has no event at this seq",
                kind="event",
                lane_id=point.lane_id,
                seq=point.seq,
                last_seq=self._reader.get_lane(point.lane_id, tenant).last_seq,
            )
        position, event_id, body = rows[0]
        return ForkOrigin(
            lane_id=point.lane_id,
            seq=point.seq,
            position=position,
            event_id=event_id,
            entry_hash=msgspec.json.decode(body)["entry_hash"],
        )

    def create_turn(self, cmd: CreateTurn) -> Turn:
        tenant = self._reader.get_lane(cmd.lane_id, cmd.tenant).tenant
        rows = self._lookups.rows(
            "SELECT body FROM turns WHERE lane_id = ? AND tenant = ? AND turn_no = ?",
            (cmd.lane_id, tenant, cmd.turn_no),
        )
        if rows:
            turn: Turn = decoder(Turn).decode(rows[0][0])
            self._same_or_conflict("turn", turn.id, turn, cmd, ("id",) if cmd.id else ())
            return turn
        self._unused_id("turns", "turn", cmd.id, tenant)
        turn = Turn(id=cmd.id or new_id(), lane_id=cmd.lane_id, turn_no=cmd.turn_no, created_at=self._clock())
        self._insert(
            INSERT_TURN,
            (turn.id, tenant, turn.lane_id, turn.turn_no, encode(turn)),
        )
        return turn

    def create_action(self, cmd: CreateAction) -> Action:
        if cmd.effect not in EFFECT_KINDS:
            raise InvalidRequest(f"effect must be one of {EFFECT_KINDS}", path="$.effect", found=cmd.effect)
        if cmd.idempotency not in IDEMPOTENCY_CLASSES:
            raise InvalidRequest(
                f"idempotency must be one of {IDEMPOTENCY_CLASSES}",
                path="$.idempotency",
                found=cmd.idempotency,
            )
        tenant = self._owned_by_lane("turns", "turn", cmd.turn_id, cmd.lane_id, cmd.tenant)
        if cmd.id is not None:
            rows = self._lookups.rows(
                "SELECT body FROM actions WHERE id = ? AND tenant = ?", (cmd.id, tenant)
            )
            if rows:
                action: Action = decoder(Action).decode(rows[0][0])
                fields = (
                    "lane_id",
                    "turn_id",
                    "action_type",
                    "name",
                    "effect",
                    "idempotency",
                    "idempotency_key",
                )
                self._same_or_conflict("action", cmd.id, action, cmd, fields)
                return action
        action = Action(
            id=cmd.id or new_id(),
            lane_id=cmd.lane_id,
            turn_id=cmd.turn_id,
            action_type=cmd.action_type,
            name=cmd.name,
            effect=cmd.effect,
            idempotency=cmd.idempotency,
            idempotency_key=cmd.idempotency_key,
            created_at=self._clock(),
        )
        self._insert(
            INSERT_ACTION,
            (action.id, tenant, action.lane_id, action.turn_id, encode(action)),
        )
        return action

    def create_attempt(self, cmd: CreateAttempt) -> Attempt:
        tenant = self._owned_by_lane("actions", "action", cmd.action_id, cmd.lane_id, cmd.tenant)
        rows = self._lookups.rows(
            "SELECT body FROM attempts WHERE action_id = ? AND tenant = ? AND attempt_no = ?",
            (cmd.action_id, tenant, cmd.attempt_no),
        )
        if rows:
            attempt: Attempt = decoder(Attempt).decode(rows[0][0])
            self._same_or_conflict("attempt", attempt.id, attempt, cmd, ("id",) if cmd.id else ())
            return attempt
        self._unused_id("attempts", "attempt", cmd.id, tenant)
        attempt = Attempt(
            id=cmd.id or new_id(),
            lane_id=cmd.lane_id,
            action_id=cmd.action_id,
            attempt_no=cmd.attempt_no,
            created_at=self._clock(),
        )
        self._insert(
            INSERT_ATTEMPT,
            (attempt.id, tenant, attempt.lane_id, attempt.action_id, attempt.attempt_no, encode(attempt)),
        )
        return attempt

    @staticmethod
    def _same_or_conflict(kind: str, key: str, stored: Any, cmd: Any, fields: tuple[str, ...]) -> None:
        differing = {
            name: {"stored": getattr(stored, name), "requested": getattr(cmd, name)}
            for name in fields
            if getattr(stored, name) != getattr(cmd, name)
        }
        if differing:
            raise EntityConflict(
                f"{kind} exists with other attributes", kind=kind, key=key, differing=differing
            )

    def _owned_by_lane(self, table: str, kind: str, entity_id: str, lane_id: str, tenant: str | None) -> str:
        """Check that ``entity_id`` is of the lane; return the lane's tenant."""
        tenant = self._reader.get_lane(lane_id, tenant).tenant
        rows = self._lookups.rows(
            f"SELECT lane_id FROM {table} WHERE id = ? AND tenant = ?", (entity_id, tenant)
        )
        if not rows:
            raise EntityNotFound(f"no such {kind}", kind=kind, id=entity_id)
        if rows[0][0] != lane_id:
            raise SubjectMismatch(
                f"{kind} belongs to another lane",
                kind=kind,
                id=entity_id,
                lane_id=lane_id,
                owner_lane_id=rows[0][0],
            )
        return tenant

    def _unused_id(self, table: str, kind: str, entity_id: str | None, tenant: str) -> None:
        """A new id must be free among the tenant's own (other tenants' are not looked at)."""
        if entity_id is not None and self._lookups.rows(
            f"SELECT 1 FROM {table} WHERE id = ? AND tenant = ?", (entity_id, tenant)
        ):
            raise EntityConflict(f"{kind} id already names another {kind}", kind=kind, id=entity_id)

    def _insert(self, statement: Statement, params: tuple[Any, ...]) -> None:
        self._insert_many([(statement, [params])])

    def write_rows(self, writes: Writes) -> None:
        """Rows that are no event, in one transaction of their own (on the
        log, as every write): a structure command's, or the ledger's own
        bookkeeping (the blobs an erasure deleted)."""
        self._insert_many(writes)

    def _insert_many(self, writes: Writes) -> None:
        """A structure command's rows, in one transaction of their own."""
        self._before_use()
        self._log.open_writes(writes, "ledger write failed")
        self._log.commit_writes(writes, self._log.last_position, self._log.last_position)
