"""laneledger: an execution ledger for AI-agent harnesses over NATS JetStream.

What this module exports (``__all__``) is the public API: the producer SDK,
the errors it raises and the records a harness reads back. Everything else
is reached through its subpackage, by audience:

* ``laneledger.contract``: the wire contract (``spec/``), no I/O
* ``laneledger.sdk``: the producer SDK, re-exported here
* ``laneledger.history``: a session's causal graph, rewind and fork
* ``laneledger.audit``: whole-ledger verification (``laneledger verify``)
* ``laneledger.compat``: Claude Code captures, Korg journals
* ``laneledger.store``, ``laneledger.runtime``, ``laneledger.services``:
  the services and their internals
* ``laneledger.devtools``: nats-server for tests, ``laneledger up``, the demo
* ``laneledger.cli``: the ``laneledger`` command

The packages form layers, each importing only those below it (contract →
sqlite → tlog → store | sdk → runtime | history → audit | compat | otel |
devtools → adapters → cli | the services), with no import cycle: the
contract is ``laneledger.devtools.layers``, which ``make lint`` checks.
"""

from laneledger.contract.errors import (
    AnchorMismatch,
    AnchorNotCommitted,
    ArtifactMismatch,
    ArtifactMissing,
    BlobMissing,
    CausationViolation,
    ChainFault,
    DuplicateEvent,
    EntityConflict,
    EntityNotFound,
    IdempotencyViolation,
    IntegrityError,
    InternalError,
    InvalidPayload,
    InvalidRequest,
    InvalidSignature,
    LaneConflict,
    LedgerError,
    LedgerTimeout,
    LedgerUnavailable,
    MalformedMessage,
    NotCanonicalizable,
    QuotaExceeded,
    RequestError,
    RequestTooLarge,
    RevisionConflict,
    SignatureRequired,
    StoreError,
    SubjectMismatch,
    TenantMismatch,
    TransportError,
    Unauthorized,
    UnknownEventType,
    error_from_wire,
)
from laneledger.contract.model import (
    Action,
    Actor,
    Anchor,
    AppendCommitted,
    AppendRejected,
    Attempt,
    Checkpoint,
    CheckpointInfo,
    CommittedEvent,
    ErrorBody,
    Lane,
    ProposedCheckpoint,
    ProposedEvent,
    Receipt,
    RecoveryPlan,
    RunInspection,
    RunView,
    SessionView,
    Turn,
)
from laneledger.sdk.checkpoints import (
    CheckpointClient,
    RunCompletion,
    complete_run,
    reconcile,
)
from laneledger.sdk.client import AppendHandle, LaneRecorder, LedgerClient, make_event
from laneledger.sdk.content import PreparedEvent
from laneledger.sdk.guarantees import AdapterGuarantees
from laneledger.sdk.guard import Guard

__version__ = "0.1.0"

__all__ = [
    "Action",
    "Actor",
    "AdapterGuarantees",
    "Anchor",
    "AnchorMismatch",
    "AnchorNotCommitted",
    "AppendCommitted",
    "AppendHandle",
    "AppendRejected",
    "ArtifactMismatch",
    "ArtifactMissing",
    "Attempt",
    "BlobMissing",
    "CausationViolation",
    "ChainFault",
    "Checkpoint",
    "CheckpointClient",
    "CheckpointInfo",
    "CommittedEvent",
    "DuplicateEvent",
    "EntityConflict",
    "EntityNotFound",
    "ErrorBody",
    "Guard",
    "IdempotencyViolation",
    "IntegrityError",
    "InternalError",
    "InvalidPayload",
    "InvalidRequest",
    "InvalidSignature",
    "Lane",
    "LaneConflict",
    "LaneRecorder",
    "LedgerClient",
    "LedgerError",
    "LedgerTimeout",
    "LedgerUnavailable",
    "MalformedMessage",
    "NotCanonicalizable",
    "PreparedEvent",
    "ProposedCheckpoint",
    "ProposedEvent",
    "QuotaExceeded",
    "Receipt",
    "RecoveryPlan",
    "RequestError",
    "RequestTooLarge",
    "RevisionConflict",
    "RunCompletion",
    "RunInspection",
    "RunView",
    "SessionView",
    "SignatureRequired",
    "StoreError",
    "SubjectMismatch",
    "TenantMismatch",
    "TransportError",
    "Turn",
    "Unauthorized",
    "UnknownEventType",
    "__version__",
    "complete_run",
    "error_from_wire",
    "make_event",
    "reconcile",
]
