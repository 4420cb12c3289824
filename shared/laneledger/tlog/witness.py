"""A witness: cosigns a log's checkpoints, each only once it has checked
that the log's tree grew from the last checkpoint it cosigned (the
consistency proof), so a log cannot show two histories to two readers that
both require the witness's cosignature.

The last cosigned checkpoint is the witness's whole state. With a ``state``
file it survives restarts: the checkpoint is written there (atomically, and
synced) *before* its cosignature is returned, so a witness never forgets a
tree it vouched for and can never be led to cosign a shorter or forked one
after a crash.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from laneledger.contract.errors import InternalError, LedgerError
from laneledger.tlog import merkle
from laneledger.tlog.checkpoint import TreeHead, open_checkpoint
from laneledger.tlog.cosignature import Cosigner
from laneledger.tlog.note import NoteVerifier, sign_note


class Witness:
    def __init__(
        self, cosigner: Cosigner, log: NoteVerifier, *, origin: str, state: str | Path | None = None
    ) -> None:
        self.cosigner = cosigner
        self.log = log
        self.origin = origin
        self.state = Path(state) if state is not None else None
        self.latest: TreeHead | None = None  # the last checkpoint cosigned
        if self.state is not None and self.state.exists():
            self.latest = self._load(self.state)

    def _load(self, path: Path) -> TreeHead:
        """The stored checkpoint, opened as any other: the log's signature and
        the origin are checked again (a file edited by hand is refused)."""
        try:
            text = path.read_text(encoding="utf-8")
            checkpoint, _ = open_checkpoint(text, [self.log], origin=self.origin)
        except (OSError, UnicodeDecodeError, LedgerError) as exc:
            raise InternalError(
                "the witness's state file does not hold a checkpoint of this log", path=str(path)
            ) from exc
        return checkpoint

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
        cosigned = sign_note(note.text, [self.cosigner], keep=[*note.verified, *note.unverified])
        if self.state is not None:
            _write_synced(self.state, cosigned)
        self.latest = checkpoint
        return cosigned


def _write_synced(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old file or
    the new one, never a part: a synced temporary file renamed over it, and
    the directory synced so the rename itself is on disk."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
