"""Signed producers (spec/object-model.md): an event of an actor registered
with a public key must carry a signature that verifies under it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import UNSET

from laneledger.contract.errors import InvalidSignature, SignatureRequired
from laneledger.contract.signing import Ed25519PublicKey
from laneledger.contract.signing import check_signature as signature_verifies
from laneledger.store.append import PreparedAppend


def check_actor_signature(
    append: PreparedAppend, index: int, actor_keys: Mapping[str, Ed25519PublicKey]
) -> None:
    """A keyed actor's event must carry its valid signature; an unkeyed
    actor's event must carry none (spec/object-model.md, "Signed producers")."""
    event = append.request.events[index]
    key = actor_keys.get(event.actor_id)
    if key is None and event.signature is UNSET:
        return
    where: dict[str, Any] = dict(
        event_id=event.id, actor_id=event.actor_id, path=f"$.events[{index}].signature"
    )
    if key is None:
        raise InvalidSignature(
            "signed by an actor registered without a public key", reason="unregistered_key", **where
        )
    if event.signature is UNSET:
        raise SignatureRequired("the actor is registered with a public key; the event is not signed", **where)
    ok = append.signatures[index] if append.signatures else None
    if ok is None:  # not checked before the batch (key not cached then)
        ok = signature_verifies(append.sent[index], key)
    if not ok:
        if append.redactions:  # it verifies over what is stored, which lost its secrets
            where["redacted"] = True
        raise InvalidSignature(
            "the signature does not verify under the actor's key", reason="forged", **where
        )
