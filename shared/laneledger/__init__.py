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

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
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

# The SDK's names are imported when first asked for, not with the package:
# every ``import laneledger.<anything>`` runs this module, and the SDK brings
# nats-py and aiohttp (0.2 s of CPU), which the CLI's file commands, the
# contract and the store do not need.
_SDK_NAMES = {
    "CheckpointClient": "laneledger.sdk.checkpoints",
    "RunCompletion": "laneledger.sdk.checkpoints",
    "complete_run": "laneledger.sdk.checkpoints",
    "reconcile": "laneledger.sdk.checkpoints",
    "AppendHandle": "laneledger.sdk.client",
    "LaneRecorder": "laneledger.sdk.client",
    "LedgerClient": "laneledger.sdk.client",
    "make_event": "laneledger.sdk.client",
    "PreparedEvent": "laneledger.sdk.content",
    "AdapterGuarantees": "laneledger.sdk.guarantees",
    "Guard": "laneledger.sdk.guard",
}


def __getattr__(name: str) -> Any:
    module = _SDK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'laneledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
