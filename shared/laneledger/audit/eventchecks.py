"""Step 5 of the audit (``laneledger.audit.ledger``): what one committed
event says about the rest of the ledger — its actor, its signature, its
cause and its blobs — and the identity conventions as warnings."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.audit.erasures import is_erasure_event
from laneledger.audit.faults import integrity_fault, show
from laneledger.audit.identity import identity_findings
from laneledger.contract.chain import ERASED
from laneledger.contract.contentref import refs_in
from laneledger.contract.errors import IntegrityError, LedgerError
from laneledger.contract.model import Actor, decoder
from laneledger.contract.signing import Ed25519PublicKey, check_signature, load_public_key

MAX_WARNINGS = 1000  # findings kept in full; the rest are only counted

# (tenant, "sha256:<hex>", size_bytes) -> None when that blob is stored with
# those bytes, else (fault kind, message); called from the audit's thread.
BlobCheck = Callable[[str, str, int], "tuple[str, str] | None"]


@dataclass(frozen=True)
class Finding:
    """A warning: a convention broken, not an integrity fault."""

    kind: str
    position: int
    message: str
    actor_id: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "position": self.position,
            "message": self.message,
            "actor_id": self.actor_id,
        }


@dataclass(slots=True)
class _ActorFacts:
    tenant: str
    public_key: Ed25519PublicKey | None


class EventChecks:
    """Step 5 of the audit: one committed event against the rest of the ledger
    (actors, causes, blobs). Holds one entry per actor; looks causes up by id."""

    def __init__(self, db: sqlite3.Connection, blob_check: BlobCheck | None, strict_actors: bool) -> None:
        self._db = db
        self._blob_check = blob_check
        self._strict = strict_actors
        self.actors: dict[str, _ActorFacts | None] = {}
        self.signed = self.causal_links = self.blob_refs = self.warning_count = 0
        self.warnings: list[Finding] = []

    def check(self, record: dict[str, Any], position: int, lane_id: str, seq: int) -> None:
        def fault(kind: str, text: str, **details: Any) -> IntegrityError:
            return integrity_fault(kind, text, position, lane_id, seq, **details)

        actor_id = record.get("actor_id")
        actor = self._actor(actor_id, position) if isinstance(actor_id, str) else None
        if actor is None:
            raise fault(
                "unknown_actor",
                f"the event's actor {show(actor_id)} is not in the actors table",
                actor_id=actor_id,
            )
        if actor.tenant != record.get("tenant"):
            raise fault(
                "actor_tenant_mismatch",
                f"actor {actor_id} belongs to tenant "
                f"{show(actor.tenant)}, the event to {show(record.get('tenant'))}",
                actor_id=actor_id,
                expected=record.get("tenant"),
                found=actor.tenant,
            )

        signature = record.get("signature")
        if ERASED in record or is_erasure_event(record):
            # An erased event's signature went with its content; an erasure
            # event is the sequencer's, for its actor (spec/erasure.md).
            if signature is not None:
                raise fault("signature_unexpected", "an erased or erasure event carries a signature")
        elif actor.public_key is None:
            if signature is not None:
                raise fault(
                    "signature_unexpected",
                    f"signed, but actor {actor_id} has no public key",
                    actor_id=actor_id,
                )
        elif signature is None:
            raise fault(
                "signature_missing",
                f"actor {actor_id} signs its events; this one has no signature",
                actor_id=actor_id,
            )
        elif not check_signature(record, actor.public_key):
            raise fault(
                "signature_invalid",
                f"the signature does not verify under actor {actor_id}'s public key",
                actor_id=actor_id,
            )
        else:
            self.signed += 1

        cause = record.get("causation_id")
        if cause is not None:
            self.causal_links += 1
            found = (  # event ids are each tenant's own: the cause is one of the event's tenant
                self._db.execute(
                    "SELECT position, session_id FROM events WHERE id = ? AND tenant = ?",
                    (cause, record.get("tenant")),
                ).fetchone()
                if isinstance(cause, str)
                else None
            )
            if found is None:
                raise fault(
                    "causation_unknown", f"causation_id {show(cause)} names no event", causation_id=cause
                )
            if found[0] >= position:
                raise fault(
                    "causation_not_earlier",
                    f"causation_id {cause} is the event at position {found[0]}, not an earlier one",
                    causation_id=cause,
                    cause_position=found[0],
                )
            if found[1] != record.get("session_id"):
                raise fault(
                    "causation_other_session",
                    f"causation_id {cause} is in session "
                    f"{show(found[1])}, this event in {show(record.get('session_id'))}",
                    causation_id=cause,
                    cause_session_id=found[1],
                )

        if self._blob_check is not None:
            for ref, size in refs_in(record.get("payload")):
                self.blob_refs += 1
                problem = self._blob_check(record["tenant"], ref, size)
                if problem is not None:
                    raise fault(problem[0], problem[1], ref=ref, size_bytes=size)

    def _actor(self, actor_id: str, position: int) -> _ActorFacts | None:
        if actor_id in self.actors:
            return self.actors[actor_id]
        row = self._db.execute("SELECT body FROM actors WHERE id = ?", (actor_id,)).fetchone()
        facts = None
        if row is not None:
            try:
                actor = decoder(Actor).decode(row[0])
                key = load_public_key(actor.public_key) if actor.public_key else None
            except (msgspec.DecodeError, msgspec.ValidationError, LedgerError) as exc:
                raise integrity_fault(
                    "unknown_actor",
                    f"actor {actor_id}'s stored row is unreadable: {exc}",
                    position,
                    actor_id=actor_id,
                ) from None
            facts = _ActorFacts(actor.tenant, key)
            for kind, text in identity_findings(actor.key, actor.kind):
                if self._strict:
                    raise integrity_fault(kind, text, position, actor_id=actor_id, key=actor.key)
                self.warning_count += 1
                if len(self.warnings) < MAX_WARNINGS:
                    self.warnings.append(Finding(kind, position, text, actor_id))
        self.actors[actor_id] = facts
        return facts
