"""Erasure's fixed names (spec/erasure.md): where a tenant's erasure events
are committed, their type, and what an erased append's receipt says."""

from __future__ import annotations

# The tenant's ledger lane: session "laneledger", run "erasures", lane
# "main". Its session cannot itself be erased.
LEDGER_SESSION = "laneledger"
ERASURE_RUN = "erasures"
ERASURE_LANE = "main"
# In the reserved "laneledger" namespace: no producer can append one
# (spec/vocabulary.md); the sequencer writes it, unsigned.
ERASURE_EVENT = "ext.laneledger.erased"
# A receipt's digest once the content it was computed over is erased.
ERASED_DIGEST = "0" * 64
