"""What one batch of appends is made of on its way through the writer: the
lane heads it moves, what it has done so far, what it stages and what it
commits (store/writer.py), and the rejection receipt of a refused request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from laneledger.contract.errors import LedgerError
from laneledger.contract.model import AppendCommitted, AppendRejected, ErrorBody, Receipt
from laneledger.store.append import PreparedAppend
from laneledger.store.txlog import Writes


@dataclass(slots=True)
class LaneHead:
    id: str
    tenant: str
    session_id: str
    run_id: str
    last_seq: int
    head_hash: str


class CommittedRecord(NamedTuple):
    """One committed event, ready for the committed stream. A named tuple:
    one is made per committed event, and a frozen dataclass costs a
    ``object.__setattr__`` per field to make."""

    position: int
    event_id: str
    event_type: str
    tenant: str
    session_id: str
    run_id: str
    lane_id: str
    body: bytes


@dataclass(slots=True)
class BatchResult:
    receipts: list[Receipt]  # one per request, in request order
    committed: list[CommittedRecord]  # in position order


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """A batch written in an open transaction (``LedgerWriter.stage_batch``):
    only ``commit_staged`` (or ``roll_back_staged``) of the writer that
    staged it ends it, and nothing else may use that writer until then."""

    receipts: list[Receipt]
    state: BatchState
    position: int  # the last position it takes
    position_before: int
    writes: Writes  # what its transaction ran (empty: nothing to commit)


def rejection(err: LedgerError, append: PreparedAppend | None = None, **ids: Any) -> AppendRejected:
    if append is not None:
        ids = {
            "append_id": append.request.append_id,
            "lane_id": append.request.lane_id,
            "digest": append.digest,
        }
    return AppendRejected(
        error=ErrorBody(code=err.code, message=err.message, retryable=err.retryable, details=err.details),
        **ids,
    )


@dataclass(slots=True)
class BatchState:
    """What the requests of one batch have done so far, not yet committed."""

    receipts: dict[tuple[str, str], AppendCommitted] = field(default_factory=dict)  # (tenant, append id)
    events: dict[tuple[str, str], tuple[str, int]] = field(
        default_factory=dict
    )  # (tenant, id) -> (session, position)
    heads: dict[tuple[str, str], tuple[int, str]] = field(
        default_factory=dict
    )  # (tenant, lane) -> (seq, hash)
    event_rows: list[tuple[Any, ...]] = field(default_factory=list)
    subject_rows: list[tuple[str, str, int]] = field(default_factory=list)  # (tenant, data subject, position)
    ref_rows: list[tuple[str, str, int]] = field(default_factory=list)  # (tenant, blob sha256 hex, position)
    receipt_rows: list[tuple[str, str, str, str, bytes]] = field(default_factory=list)
    committed: list[CommittedRecord] = field(default_factory=list)
    leaves: list[bytes] = field(default_factory=list)  # the Merkle leaf of each event row
    inline_bytes: dict[str, int] = field(default_factory=dict)  # stored event bytes, by tenant
