"""A witness at work against a tail service (spec/tlog.md, "Witnessing a
ledger"): fetch the newest checkpoint, have the tail prove that its tree
extends the last one this witness cosigned, cosign, and hand the
cosignature back to the tail, which serves it with the checkpoint.

Nothing the tail says is trusted: the checkpoint must carry the log's
signature, and the consistency proof must join the two roots, or
``Witness.cosign`` refuses (``ProofInvalid``) and the witness's state stays
at the tree it last vouched for.
"""

from __future__ import annotations

from dataclasses import dataclass

from laneledger.contract.errors import ProofInvalid
from laneledger.tlog.checkpoint import TreeHead, open_checkpoint
from laneledger.tlog.client import LogClient
from laneledger.tlog.note import split_note
from laneledger.tlog.witness import Witness


@dataclass(frozen=True)
class WitnessRound:
    checkpoint: TreeHead  # the checkpoint the tail served
    cosigned: bool  # False: refused, or the tree already cosigned and the tail holds the cosignature
    refused: ProofInvalid | None = None  # why a tree that shrank or forked was not cosigned


def carries_cosignature(signed: str, witness: Witness) -> bool:
    """Whether a checkpoint as served already carries this witness's line."""
    _, signatures = split_note(signed)
    me = witness.cosigner
    return any(s.name == me.name and s.key_id == me.key_id for s in signatures)


async def witness_once(witness: Witness, tail: LogClient) -> WitnessRound:
    """One round: cosign the tail's newest checkpoint if it is a tree this
    witness has not vouched for yet (or the tail lost the cosignature), once
    the tree is proved to extend the last one cosigned. A checkpoint the log
    did not sign is raised (``IntegrityError``), a tree that does not extend
    the last one cosigned is returned refused."""
    signed = await tail.checkpoint()
    checkpoint, _ = open_checkpoint(signed, [witness.log], origin=witness.origin)
    latest = witness.latest
    if latest == checkpoint and carries_cosignature(signed, witness):
        return WitnessRound(checkpoint, cosigned=False)
    proof: list[bytes] = []
    if latest is not None and 0 < latest.size < checkpoint.size:
        proof = await tail.consistency_proof(latest.size, checkpoint.size)
    try:
        cosigned = witness.cosign(signed, proof)
    except ProofInvalid as refusal:  # the tree shrank or forked: the state stays where it was
        return WitnessRound(checkpoint, cosigned=False, refused=refusal)
    await tail.add_cosignature(cosigned)
    return WitnessRound(checkpoint, cosigned=True)


__all__ = ["WitnessRound", "carries_cosignature", "witness_once"]
