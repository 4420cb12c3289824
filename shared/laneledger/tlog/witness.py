"""A witness: cosigns a log's checkpoints, each only once it has checked
that the log's tree grew from the last checkpoint it cosigned (the
consistency proof), so a log cannot show two histories to two readers that
both require the witness's cosignature.

It remembers the last checkpoint in memory only; a witness that must survive
a restart keeps it on disk (not here yet).
"""

from __future__ import annotations

from collections.abc import Sequence

from laneledger.tlog import merkle
from laneledger.tlog.checkpoint import Checkpoint, open_checkpoint
from laneledger.tlog.cosignature import Cosigner
from laneledger.tlog.note import NoteVerifier, sign_note


class Witness:
    def __init__(self, cosigner: Cosigner, log: NoteVerifier, *, origin: str) -> None:
        self.cosigner = cosigner
        self.log = log
        self.origin = origin
        self.latest: Checkpoint | None = None  # the last checkpoint cosigned

    def cosign(self, signed_checkpoint: str | bytes, proof: Sequence[bytes] = ()) -> str:
        """The checkpoint with this witness's cosignature added. ``proof``:
        the consistency proof from the last cosigned checkpoint's size (none
        for the first). Refused (``ProofInvalid``) when the tree shrank or
        the proof does not join the two roots; the log's signature and the
        body are checked as ``open_checkpoint`` does."""
        checkpoint, note = open_checkpoint(signed_checkpoint, [self.log], origin=self.origin)
        if self.latest is not None:
            merkle.verify_consistency(
                self.latest.size, checkpoint.size, self.latest.root, checkpoint.root, proof
            )
        self.latest = checkpoint
        return sign_note(note.text, [self.cosigner], keep=[*note.verified, *note.unverified])
